"""The eval Python: an isolated venv on the newest released torch, never the node's own Python.

The interpreter is found or built in this order, each step tried only when the one before it
could not give torch, and the record says which step won and why the earlier ones did not:

1. a venv from the PyTorch wheel index for the driver's CUDA (``cuNNN``, highest the driver
   supports first; ``cpu`` on a node without a GPU);
2. a venv from the index pip on the node is configured with (a PyPI mirror is what many sites
   have);
3. the interpreter ``fallback_python`` names in cluster.toml;
4. the node's own ``python3``, with a Gap.

``eval_python`` in cluster.toml skips the chain: that interpreter is used as it is. The venv is
cached (``phases/venvcache.py``) in the user's own folder on the shared FS when there is one (every
node sees it, the first node builds it), else on each node's local scratch mount, every node
building its own at once; a later run with the same torch build and node Python finds it and builds
nothing, and it stays until ``clustereval cleanup --venvs`` moves it to trash. A cache that another
user owns or can write is refused on every node it is found on (a Gap each, ``evalpython.cache-refused``)
and never run: the builders then build this run's own venv in its scratch folder, the same path on
every node, so one interpreter still serves them all.
The report never shows an interpreter or venv path: they stay in the raw record.
"""

from __future__ import annotations

import posixpath
import re

from clustereval.errors import ClusterEvalError, TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.pernode import NodeStep, each_node, live, node_label
from clustereval.phases.venvcache import (
    CacheLook,
    CachePlace,
    VenvKey,
    VenvOnNode,
    cache_place,
    find_or_build,
    look,
    node_python,
    own_home,
)
from clustereval.probes._text import last_json, last_line
from clustereval.records import Gap
from clustereval.records.run import EvalPythonRecord
from clustereval.transport.base import Node

# PyTorch's CUDA wheel indexes, newest first; a driver supports every one up to its own CUDA version.
CUDA_TAGS = ("cu130", "cu129", "cu128", "cu126", "cu124", "cu121", "cu118")
PIP_QUIET = ["--timeout", "15", "--disable-pip-version-check"]
# --isolated: ask exactly the index named, not whatever find-links or mirrors the node's pip config adds
PIP_NET = ["--isolated", "--retries", "0", *PIP_QUIET]
# the second step wants exactly that config: the node's own index, mirrors and find-links
PIP_DEFAULT = ["--retries", "1", *PIP_QUIET]
EXTRA_PACKAGES = ("numpy", "nvidia-ml-py", "matplotlib")

_VERSION_SNIPPET = ("import json, sys, platform\n"
                    "out = {'executable': sys.executable, 'python': platform.python_version()}\n"
                    "try:\n"
                    "    import torch\n"
                    "    out['torch'] = torch.__version__\n"
                    "    try:\n"
                    "        out['nccl'] = '.'.join(map(str, torch.cuda.nccl.version()))\n"
                    "    except Exception:\n"
                    "        out['nccl'] = ''\n"
                    "except Exception as exc:\n"
                    "    out['error'] = f'{type(exc).__name__}: {exc}'\n"
                    "print(json.dumps(out))\n")


def cuda_tags_for(driver_cuda: str) -> list[str]:
    """Index tags the driver supports, newest first; ['cpu'] without a driver."""
    m = re.match(r"(\d+)\.(\d+)", driver_cuda or "")
    if not m:
        return ["cpu"]
    have = int(m.group(1)) * 10 + int(m.group(2))
    return [t for t in CUDA_TAGS if int(t[2:]) <= have]


def parse_index_versions(text: str) -> str:
    """The newest version from `pip index versions torch` output ('' when none)."""
    m = re.search(r"LATEST:\s*(\S+)", text) or re.search(r"^torch \(([^)]+)\)", text, re.MULTILINE)
    return m.group(1) if m else ""


def parse_available_versions(text: str) -> list[str]:
    """Every version `pip index versions torch` listed, newest first as pip prints them."""
    m = re.search(r"^Available versions:\s*(.+)$", text, re.MULTILINE)
    return [v.strip() for v in m.group(1).split(",") if v.strip()] if m else []


def pick_default_index_version(listed: list[str], tag: str) -> str:
    """The build to ask pip's configured index for: on a node without a GPU the newest ``+cpu`` build
    when the index has one (the plain Linux wheel carries gigabytes of CUDA libraries), else the newest."""
    if tag == "cpu":
        cpu = [v for v in listed if v.endswith("+cpu")]
        if cpu:
            return cpu[0]
    plain = [v for v in listed if not v.endswith("+cpu")]
    return (plain or listed or [""])[0]


def base_version(version: str) -> str:
    return version.split("+")[0]


class EvalPythonPhase:
    name = "evalpython"
    title = "Eval Python"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def restore(self, ctx: RunContext, record: EvalPythonRecord) -> None:
        """Use the recorded interpreter; on a resumed run whose venv is gone (``cleanup --venvs``),
        find or build it again (the record is updated in place and saved)."""
        if not record.interpreter:
            return
        if record.mode == "venv" and ctx.nodes and not self._still_there(ctx, record.interpreter):
            fresh = self.run(ctx)
            record.__dict__.update(fresh.__dict__)
            ctx.store.save_record(self.name, record)
        ctx.eval_python = record.interpreter

    def _still_there(self, ctx: RunContext, python: str) -> bool:
        """Whether the recorded venv interpreter ``python`` (``<user folder>/<home>/<digest>/bin/python``)
        still passes the ownership rule (``venvcache.look``, before it is run) and imports torch."""
        venv = posixpath.dirname(posixpath.dirname(python))
        home = posixpath.dirname(venv)
        try:
            if look(ctx, ctx.nodes[0], posixpath.dirname(home), home, posixpath.basename(venv)).state != "present":
                return False  # gone, or refused: found or built again, and a refusal said there
            res = ctx.transport.run(ctx.nodes[0], [python, "-c", "import torch"], timeout_s=120)
        except TransportError:
            return True  # the node is gone: the phases that need it say so themselves
        except ClusterEvalError:
            return False
        return res.ok

    def run(self, ctx: RunContext) -> EvalPythonRecord:
        rec = EvalPythonRecord()
        if ctx.config.eval_python:
            rec.mode, rec.source = "configured", "configured"
            self._adopt(ctx, rec, ctx.config.eval_python)
            if rec.status != "failed":
                rec.gaps.append(Gap(phase=self.name, kind="evalpython.configured", facts={"torch": rec.torch}))
        else:
            self._chain(ctx, rec)
        self.restore(ctx, rec)
        return rec

    # -- the chain -------------------------------------------------------------------------
    def _chain(self, ctx: RunContext, rec: EvalPythonRecord) -> None:
        first = ctx.nodes[0]
        smi = ctx.transport.run(first, ["sh", "-c", "nvidia-smi 2>/dev/null | sed -n -E "
                                        "'s/.*CUDA Version: ([0-9]+[.][0-9]+).*/\\1/p'"], timeout_s=30)
        tags = cuda_tags_for(smi.stdout.strip())
        rec.index_tag = tags[0]
        if self._from_pytorch_index(ctx, rec, tags):
            return
        if self._from_default_index(ctx, rec, tags[0]):
            return
        if ctx.config.fallback_python and self._from_fallback(ctx, rec, ctx.config.fallback_python):
            return
        self._node_python(ctx, rec)

    def _from_pytorch_index(self, ctx: RunContext, rec: EvalPythonRecord, tags: list[str]) -> bool:
        first = ctx.nodes[0]
        ctx.progress(self.name, first.name, f"looking up the newest torch on the PyTorch index ({', '.join(tags)})", None)
        # Ask the index before building anything: with no route to it there is nothing to build.
        for tag in tags:
            url = f"{ctx.config.torch_index.rstrip('/')}/{tag}"
            res = ctx.repeatable.run(first, ["python3", "-m", "pip", "index", "versions", "torch",
                                            "--index-url", url, *PIP_NET], timeout_s=90)
            latest = parse_index_versions(res.stdout)
            if latest:
                rec.index_url, rec.newest_on_index, rec.index_tag, rec.index_kind = url, latest, tag, "pytorch"
                pip_args = ["--index-url", url, "--extra-index-url", "https://pypi.org/simple", *PIP_NET]
                if self._build_venv(ctx, rec, pip_args, [f"torch=={latest}"]):
                    rec.source = "pytorch-index"
                    return True
                note_refused(rec, latest, url)
                return False
            rec.tried.append(f"PyTorch index {tag}: " + last_line(res.stderr or res.stdout, "no output")[:200])
        return False

    def _from_default_index(self, ctx: RunContext, rec: EvalPythonRecord, tag: str) -> bool:
        first = ctx.nodes[0]
        ctx.progress(self.name, first.name, "looking up torch on the index pip is configured with", None)
        res = ctx.repeatable.run(first, ["python3", "-m", "pip", "index", "versions", "torch", *PIP_DEFAULT],
                                timeout_s=120)
        listed = parse_available_versions(res.stdout)
        latest = parse_index_versions(res.stdout) or (listed[0] if listed else "")
        if not latest:
            rec.tried.append("pip's configured index: " + last_line(res.stderr or res.stdout, "no output")[:200])
            return False
        want = pick_default_index_version(listed, tag) or latest
        rec.index_url, rec.newest_on_index, rec.index_kind = "", latest, "default"
        # the exact build first; if pip's own constraints refuse it, whatever torch pip will give
        for spec in ([f"torch=={want}"], ["torch"]):
            if self._build_venv(ctx, rec, PIP_DEFAULT, spec):
                rec.source = "default-index"
                return True
        return False

    def _from_fallback(self, ctx: RunContext, rec: EvalPythonRecord, python: str) -> bool:
        probe = EvalPythonRecord()
        self._adopt(ctx, probe, python)
        if probe.status == "failed":
            rec.tried.append("fallback_python: " + "; ".join(_why_not(g) for g in probe.gaps))
            return False
        probe.source, probe.mode, probe.tried, probe.index_tag = "fallback-python", "fallback", rec.tried, rec.index_tag
        probe.gaps.append(Gap(phase=self.name, kind="evalpython.fallback",
                              facts={"torch": probe.torch, "index_tag": rec.index_tag, **_refused_facts(rec)}))
        _copy_into(rec, probe)
        return True

    def _node_python(self, ctx: RunContext, rec: EvalPythonRecord) -> None:
        rec.mode, rec.source = "node-python", "node-python"
        self._adopt(ctx, rec, "python3")  # a node without torch here: its Gap's plan is the route or fallback_python
        if rec.status == "failed":
            return
        rec.gaps.append(Gap(phase=self.name, kind="evalpython.node-python",
                            facts={"torch": rec.torch, "index_tag": rec.index_tag, **_refused_facts(rec)}))

    # -- an interpreter that is already there ---------------------------------------------------
    def _adopt(self, ctx: RunContext, rec: EvalPythonRecord, python: str, nodes: list[Node] | None = None) -> None:
        # per node: a node that stops answering is that node's Gap (never with the interpreter's path)
        nodes = ctx.nodes if nodes is None else nodes
        steps = each_node(ctx, self.name, "the eval Python check", nodes,
                          lambda n: self._versions(ctx, n, python), what="the eval Python (torch's version)")
        infos = [s.value if s.value is not None else {"error": s.error.message if s.error else "no answer"}
                 for s in steps]
        first = next((i for s, i in zip(steps, infos, strict=True) if s.ok), {})
        rec.interpreter = python
        rec.executables = {n.name: i.get("executable", "") for n, i in zip(nodes, infos, strict=True)}
        rec.python, rec.torch, rec.nccl = first.get("python", ""), first.get("torch", ""), first.get("nccl", "")
        rec.gaps += [s.gap for s in steps if s.gap is not None]
        if any(not s.ok for s in steps):
            rec.status = "partial" if any(s.ok for s in steps) else "failed"
        broken = [(s.node.name, i.get("error", "did not run")) for s, i in zip(steps, infos, strict=True)
                  if s.ok and "torch" not in i]
        for node, why in broken:
            rec.status = "failed"
            rec.gaps.append(Gap(phase=self.name, node=node, kind="evalpython.no-torch",
                                facts={"mode": rec.mode, "why": why, "index_tag": rec.index_tag}))

    def _versions(self, ctx: RunContext, node: Node, python: str) -> dict:
        res = ctx.repeatable.run(node, [python, "-c", _VERSION_SNIPPET], timeout_s=120)
        info = last_json(res.stdout)
        if not res.ok and "error" not in info:
            info["error"] = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
        return info

    # -- the isolated venv -----------------------------------------------------------------
    def _build_venv(self, ctx: RunContext, rec: EvalPythonRecord, pip_args: list[str], torch_spec: list[str]) -> bool:
        """The cached venv with ``torch_spec`` (``phases/venvcache.py``), found or built on every builder
        node at once: the first node when the cache is on a shared path, else each node its own.

        A node whose build fails costs that node (its Gap; the others go on with the venv); when no
        node gets a venv, False and a line per node in ``tried``, and the chain goes on."""
        place = cache_place(ctx.config)
        shared = rec.venv_shared = place.shared
        builders = live(ctx, ctx.nodes)[:1] if shared else live(ctx, ctx.nodes)
        if not builders:
            rec.tried.append("venv: no node answers")
            return False
        where = "the PyTorch index" if rec.index_kind == "pytorch" else "pip's configured index"
        try:
            base = node_python(ctx, builders[0])
        except ClusterEvalError as exc:
            rec.tried.append(f"venv on {builders[0].name}: {exc.message}")
            return False
        key = VenvKey(index=rec.index_url or where, torch_spec=tuple(torch_spec), packages=EXTRA_PACKAGES,
                      python=str(base.get("python", "")), python_executable=str(base.get("executable", "")))
        doing = f"installing {' '.join(torch_spec)} from {where}"
        steps, refusals = self._find_or_build(ctx, rec, place, key, pip_args, builders, doing)
        built = [(s.node, s.value) for s in steps if s.ok and s.value is not None]
        if not built:
            rec.tried += [f"{where}, {' '.join(torch_spec)} on {s.node.name}: "
                          + (s.error.message if s.error else "no answer")[:200] for s in steps]
            for s in steps:  # the chain goes on: these nodes are not this phase's failures yet
                ctx.node_failures.get(self.name, {}).pop(s.node.name, None)
            return False
        rec.venv_reused = [node.name for node, venv in built if venv.reused]
        rec.venv_built = [node.name for node, venv in built if not venv.reused]
        rec.mode = "venv"
        probe = EvalPythonRecord(mode="venv")
        users = ctx.nodes if shared else [node for node, _ in built]
        self._adopt(ctx, probe, f"{built[0][1].path}/bin/python", users)
        if probe.status == "failed":
            rec.tried.append(f"{where}: the new eval Python cannot import torch")
            return False
        _copy_into(rec, probe, keep_gaps=True)
        rec.gaps += refusals
        failed = [s for s in steps if s.gap is not None]
        if failed:  # each failed builder's own Gap; the other nodes go on with the venv
            rec.gaps += [s.gap for s in failed if s.gap is not None]
            rec.status = "partial"
        rec.verified_newest = base_version(rec.torch) == base_version(rec.newest_on_index)
        if not rec.verified_newest:
            rec.gaps.append(not_newest_gap(rec, torch_spec))
        return True

    def _find_or_build(self, ctx: RunContext, rec: EvalPythonRecord, place: CachePlace, key: VenvKey,
                       pip_args: list[str], builders: list[Node], doing: str) -> tuple[list[NodeStep[VenvOnNode]],
                                                                                       list[Gap]]:
        """Every builder's step (in builders' order) and the refusal Gaps: the cache is checked on
        every builder first (``venvcache.look``: nothing there is run yet); when any builder's cache
        is refused, every builder builds in this run's own folder instead, so the interpreter's path
        is one for all nodes."""
        digest = key.digest()
        looks = each_node(ctx, self.name, self.title, builders,
                          lambda n: look(ctx, n, place.user_folder, place.root, digest, mount=place.mount),
                          what="the eval Python's cache check")
        refused = [(s.node, s.value) for s in looks if s.value is not None and s.value.state == "refused"]
        refusals = [self._refusal(ctx, rec, place, node, found) for node, found in refused]

        def build(node: Node) -> VenvOnNode:
            if not refused:
                return find_or_build(ctx, node, key, pip_args, progress=doing, user_folder=place.user_folder,
                                     home=place.root, mount=place.mount)
            home = own_home(ctx, node, place.mount)
            return find_or_build(ctx, node, key, pip_args, progress=doing, user_folder=home.rsplit("/", 1)[0],
                                 home=home)

        by_node: dict[str, NodeStep[VenvOnNode]] = {
            s.node.name: NodeStep(node=s.node, error=s.error, gap=s.gap) for s in looks if not s.ok}
        built = each_node(ctx, self.name, self.title, [s.node for s in looks if s.ok], build, what=doing)
        by_node.update({s.node.name: s for s in built})
        return [by_node[n.name] for n in builders], refusals

    def _refusal(self, ctx: RunContext, rec: EvalPythonRecord, place: CachePlace, node: Node,
                 found: CacheLook) -> Gap:
        """The refused cache named where the user reads it (the progress line, the raw record's
        ``tried``), and its Gap (facts without the path: the report never shows it)."""
        ctx.progress(self.name, node.name, f"refused the cached eval Python: {found.why}; building this run's own",
                     None)
        rec.tried.append(f"cache on {node.name} refused, not run: {found.why}")
        return Gap(phase=self.name, node=node.name, kind="evalpython.cache-refused",
                   facts={"label": node_label(ctx, node), "folder": place.user_folder,
                          **refusal_facts(found, place)})


def refusal_facts(found: CacheLook, place: CachePlace) -> dict[str, str]:
    """What a refusal names, as the Gap's facts: ``what`` (``user``: the user's folder, ``cache``:
    clustereval-venvs/, ``copy``: the venv folder, ``inside``: a file in it, ``interpreter``: the
    interpreter it runs) and ``problem`` ("owned by uid 65534, not by the eval user (uid 0)")."""
    rest = found.why[len(found.path):].lstrip(",").strip()
    what = {place.user_folder: "user", place.root: "cache"}.get(found.path, "")
    if rest.startswith("the interpreter it runs,"):
        what, rest = "interpreter", rest.removeprefix("the interpreter it runs,").strip()
    elif not what:
        what = "inside" if found.path.count("/") > place.root.count("/") + 1 else "copy"
    return {"what": what, "problem": rest.removeprefix("is ")}


def note_refused(rec: EvalPythonRecord, newest: str, url: str) -> None:
    """The PyTorch index's ``newest`` torch could not be built into a venv: the record keeps it, the
    index and why (the message of the last line ``_build_venv`` tried), for the Gap that names it."""
    rec.refused_newest, rec.refused_url = newest, url
    rec.refused_why = rec.tried[-1].split(": ", 1)[-1] if rec.tried else "no output"


def not_newest_gap(rec: EvalPythonRecord, torch_spec: list[str]) -> Gap:
    """The venv's torch is not the newest release on its index: the newest was refused, or pip gave an older one."""
    facts = {"torch": rec.torch, "index_kind": rec.index_kind, "index_tag": rec.index_tag}
    if rec.refused_newest and base_version(rec.torch) != base_version(rec.refused_newest):
        return Gap(phase="evalpython", kind="evalpython.newest-refused", facts={**facts, **_refused_facts(rec)})
    return Gap(phase="evalpython", kind="evalpython.not-newest",
               facts={**facts, "newest": rec.newest_on_index, "spec": list(torch_spec)})


def _why_not(gap: Gap) -> str:
    """``node: why`` of an interpreter that could not be used there (a ``tried`` line's part)."""
    why = gap.facts.get("why") or gap.facts.get("message") or gap.kind
    return f"{gap.node}: {why}" if gap.node else str(why)


def _refused_facts(rec: EvalPythonRecord) -> dict[str, str]:
    """The PyTorch index's newest torch that pip refused (where and why); nothing when none was."""
    if not rec.refused_newest:
        return {}
    return {"refused_newest": rec.refused_newest, "refused_url": rec.refused_url, "refused_why": rec.refused_why}


def _copy_into(rec: EvalPythonRecord, probe: EvalPythonRecord, keep_gaps: bool = False) -> None:
    rec.interpreter, rec.executables = probe.interpreter, probe.executables
    rec.python, rec.torch, rec.nccl = probe.python, probe.torch, probe.nccl
    if probe.mode:
        rec.mode = probe.mode
    if probe.source:
        rec.source = probe.source
    rec.gaps = (list(rec.gaps) if keep_gaps else []) + list(probe.gaps)
    rec.status = probe.status
