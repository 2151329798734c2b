"""The eval Python: an isolated venv on the newest released torch, never the node's own Python.

The venv goes on the shared FS when there is one (every node sees it), else on each node's
local scratch. The PyTorch index is the highest ``cuNNN`` the driver supports, falling back
downwards. With no route to the index, or an interpreter named in cluster.toml, that interpreter
is used and a Gap says its torch could not be verified as the newest.
"""

from __future__ import annotations

import json
import re

from clustereval.errors import ScratchError
from clustereval.phases.base import RunContext
from clustereval.phases.pernode import each_node
from clustereval.phases.remote import node_scratch
from clustereval.phases.scratch import scratch_for
from clustereval.records import Gap
from clustereval.records.run import EvalPythonRecord
from clustereval.transport.base import Node

# PyTorch's CUDA wheel indexes, newest first; a driver supports every one up to its own CUDA version.
CUDA_TAGS = ("cu130", "cu129", "cu128", "cu126", "cu124", "cu121", "cu118")
# --isolated: ask exactly the index named, not whatever find-links or mirrors the node's pip config adds
PIP_NET = ["--isolated", "--timeout", "15", "--retries", "0", "--disable-pip-version-check"]
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


def parse_versions(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {}


class EvalPythonPhase:
    name = "evalpython"
    title = "Eval Python"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def restore(self, ctx: RunContext, record: EvalPythonRecord) -> None:
        if record.interpreter:
            ctx.eval_python = record.interpreter

    def run(self, ctx: RunContext) -> EvalPythonRecord:
        rec = EvalPythonRecord()
        if ctx.config.eval_python:
            rec.mode = "configured"
            self._adopt(ctx, rec, ctx.config.eval_python)
            rec.gaps.append(Gap(phase=self.name,
                                text=f"cluster.toml names the interpreter the benchmarks ran with (torch {rec.torch or 'unknown'}), "
                                     "so torch could not be verified as the newest release.",
                                plan="remove `eval_python` from cluster.toml to let clustereval build a venv on the newest "
                                     "torch, or accept as-is"))
        else:
            self._build_venv(ctx, rec)
        self.restore(ctx, rec)
        return rec

    # -- the configured or node interpreter -------------------------------------------------
    def _adopt(self, ctx: RunContext, rec: EvalPythonRecord, python: str) -> None:
        steps = each_node(ctx, self.name, "the eval Python check", ctx.nodes,
                          lambda n: self._versions(ctx, n, python), what=f"`{python}` (torch's version)")
        infos = [s.value if s.value is not None else {"error": s.error.message if s.error else "no answer"}
                 for s in steps]
        first = next((i for s, i in zip(steps, infos, strict=True) if s.ok), {})
        rec.interpreter = python
        rec.executables = {n.name: i.get("executable", "") for n, i in zip(ctx.nodes, infos, strict=True)}
        rec.python, rec.torch, rec.nccl = first.get("python", ""), first.get("torch", ""), first.get("nccl", "")
        rec.gaps += [s.gap for s in steps if s.gap is not None]
        if any(not s.ok for s in steps):
            rec.status = "partial" if any(s.ok for s in steps) else "failed"
        broken = [(s.node.name, i.get("error", "did not run")) for s, i in zip(steps, infos, strict=True)
                  if s.ok and "torch" not in i]
        for node, why in broken:
            rec.status = "failed"
            rec.gaps.append(Gap(phase=self.name, node=node,
                                text=f"`{python}` on {node} cannot import torch ({why}), so the GPU and network "
                                     "benchmarks cannot run there.",
                                plan=f"install torch for `{python}` on {node}, or give the nodes a route to the "
                                     "PyTorch wheel index so clustereval can build its own venv"))

    def _versions(self, ctx: RunContext, node: Node, python: str) -> dict:
        res = ctx.transport.run(node, [python, "-c", _VERSION_SNIPPET], timeout_s=120)
        info = parse_versions(res.stdout)
        if not res.ok and "error" not in info:
            info["error"] = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
        return info

    # -- the isolated venv -----------------------------------------------------------------
    def _venv_dir(self, ctx: RunContext) -> tuple[str, bool]:
        if ctx.config.shared_paths:
            return f"{scratch_for(ctx).path_for(ctx.config.shared_paths[0])}/venv", True
        return f"{node_scratch(ctx)}/venv", False

    def _build_venv(self, ctx: RunContext, rec: EvalPythonRecord) -> None:
        venv, shared = self._venv_dir(ctx)
        rec.venv_shared = shared
        builders = ctx.nodes[:1] if shared else ctx.nodes
        first = ctx.nodes[0]
        smi = ctx.transport.run(first, ["sh", "-c", "nvidia-smi 2>/dev/null | sed -n -E "
                                        "'s/.*CUDA Version: ([0-9]+[.][0-9]+).*/\\1/p'"], timeout_s=30)
        tags = cuda_tags_for(smi.stdout.strip())
        ctx.progress(self.name, first.name, f"looking up the newest torch ({', '.join(tags)})", None)
        # Ask the index before building anything: with no route to it there is nothing to build.
        chosen = ""
        for tag in tags:
            url = f"{ctx.config.torch_index.rstrip('/')}/{tag}"
            res = ctx.transport.run(first, ["python3", "-m", "pip", "index", "versions", "torch",
                                            "--index-url", url, *PIP_NET], timeout_s=90)
            latest = parse_index_versions(res.stdout)
            if latest:
                rec.index_url, rec.newest_on_index, chosen = url, latest, tag
                break
            rec.tried.append(f"{tag}: " + _last(res.stderr or res.stdout))
        pip = f"{venv}/bin/pip"
        if not chosen:
            self._fallback(ctx, rec)
            return
        pkgs = [f"torch=={rec.newest_on_index}", *EXTRA_PACKAGES]
        mount = ctx.config.shared_paths[0] if shared else ctx.config.local_scratch
        for node in builders:
            try:
                scratch_for(ctx).ensure(node, mount)  # recorded, so the run's end moves it to trash
            except ScratchError as exc:
                rec.tried.append(f"venv on {node.name}: {exc.message}")
                self._fallback(ctx, rec)
                return
            made = ctx.transport.run(node, ["python3", "-m", "venv", venv], timeout_s=300)
            if not made.ok:
                rec.tried.append(f"venv on {node.name}: " + _last(made.stderr))
                self._fallback(ctx, rec)
                return
            ctx.progress(self.name, node.name, f"installing torch {rec.newest_on_index} from {rec.index_url}", None)
            res = ctx.transport.run(node, [pip, "install", "-q", *PIP_NET, "--index-url", rec.index_url,
                                           "--extra-index-url", "https://pypi.org/simple", *pkgs], timeout_s=3600)
            if not res.ok:
                rec.tried.append(f"install on {node.name}: " + _last(res.stderr))
                self._fallback(ctx, rec)
                return
        rec.mode = "venv"
        self._adopt(ctx, rec, f"{venv}/bin/python")
        rec.verified_newest = rec.torch.split("+")[0] == rec.newest_on_index.split("+")[0]

    def _fallback(self, ctx: RunContext, rec: EvalPythonRecord) -> None:
        rec.mode = "node-python"
        self._adopt(ctx, rec, "python3")
        why = "; ".join(rec.tried) or "no index answered"
        rec.gaps.append(Gap(phase=self.name,
                            text=f"The nodes could not reach the PyTorch wheel index, so the benchmarks ran on the "
                                 f"node's own `python3` (torch {rec.torch or 'unknown'}), whose torch could not be "
                                 "verified as the newest release.",
                            plan="give the nodes a route to the PyTorch index (or a mirror) and re-run, or name an "
                                 f"interpreter with the newest torch as `eval_python` in cluster.toml ({why})"))


def _last(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"
