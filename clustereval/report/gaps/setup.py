"""Wordings of the setup phases' Gaps: the preflight gate (``preflight.*``), the eval Python
(``evalpython.*``), the host packages (``packages.*``) and the environment inventory (``environment.*``)."""

from __future__ import annotations

import re

from clustereval.probes.dcgmi import DIAG_URL
from clustereval.probes.fio import FIO_URL
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import link_tools, no_paths, raw_output, status_words
from clustereval.report.gaps.network import applied_fix
from clustereval.report.units import short_list

# ---- the preflight gate -----------------------------------------------------------------------


@wording("preflight.missing")
def _checklist_missing(g: Gap) -> tuple[str, str]:
    return (f"Missing before the eval can start: {g.facts['need']}.",
            g.facts.get("hint") or "add it to cluster.toml, then run `clustereval preflight` again")


@wording("preflight.allocation")
def _allocation(g: Gap) -> tuple[str, str]:
    return (f"{g.facts['detail']}.", "start an allocation that holds every node (salloc) or set [slurm] nodes so "
                                     "clustereval asks for one")


def _node_message(node: str, message: str) -> str:
    """A transport's error as the preflight says it: the node (and the address the message gives), then
    what went wrong, quoted when it carries the tool's own numbers (an exit status, an errno)."""
    m = re.match(rf"{re.escape(node)}(?: \(([^)]*)\))?:? (.*)", message) if node else None
    where, why = (f"{node} ({m.group(1)})" if m.group(1) else node, m.group(2)) if m else (node or "a node", message)
    said = raw_output(why, "no error was printed") if re.search(r"\d", why) else why
    return f"{where}: {said}"


@wording("preflight.unreachable")
def _unreachable(g: Gap) -> tuple[str, str]:
    return f"{_node_message(g.node, g.facts['message'])}.", g.facts.get("hint") or "check the node is up"


@wording("preflight.probe-failed")
def _probe_failed(g: Gap) -> tuple[str, str]:
    return (f"{_node_message(g.node, g.facts['message'])}.",
            g.facts.get("hint") or "check the node answers (`ssh NODE true`), then run `clustereval preflight` again")


@wording("preflight.ssh-port-refused")
def _ssh_port_refused(g: Gap) -> tuple[str, str]:
    return (f"Every node refused SSH on port {g.facts['port']}: the port is probably wrong.",
            "set [ssh] port in cluster.toml to the nodes' sshd port (see `ss -ltnp | grep sshd` on a node)")


@wording("preflight.path-unusable")
def _path_unusable(g: Gap) -> tuple[str, str]:
    path, key = g.facts["path"], g.facts["key"]
    why = g.facts["problem"]  # the probe's words: "does not exist", "is not writable by the eval user"
    return (f"On {g.node}, `{path}` ({key} in cluster.toml) {why}; clustereval never creates or benchmarks a "
            "configured path that is not there.",
            f"create or mount `{path}` on {g.node} (writable by the eval user), or fix {key} in cluster.toml")


def _each_node(nodes: list[list[str]]) -> str:
    """``node: why; node: why`` from ``[[node, why], ...]``."""
    return "; ".join(f"{n}: {raw_output(no_paths(why), 'no error was printed')}" for n, why in nodes)


@wording("preflight.no-python")
def _no_python(g: Gap) -> tuple[str, str]:
    nodes = g.facts["nodes"]  # [[node, error], ...]
    return (f"`{g.facts['python']}` does not run on {short_list([n for n, _ in nodes])}, so the rendezvous port could "
            f"not be checked ({_each_node(nodes)}).", "install python3 on the nodes, or set eval_python in cluster.toml")


@wording("preflight.rdzv-port-unavailable")
def _rdzv_port(g: Gap) -> tuple[str, str]:
    return (f"Port {g.facts['port']}, one of the ports the run's jobs meet at, could not be opened on {g.node} "
            f"({raw_output(g.facts['why'].removeprefix('error: '), 'no error was printed')}).",
            "stop what holds it, or set rdzv_port in cluster.toml so that rdzv_port through rdzv_port plus the node "
            "count are free on every node")


@wording("preflight.tcp-blocked")
def _tcp_blocked(g: Gap) -> tuple[str, str]:
    return (f"{g.node} cannot open a TCP connection to every port the run's jobs meet at "
            f"({raw_output(g.facts['detail'], 'no error was printed')}).",
            f"allow TCP port {g.facts['port']} (and every other port named) from every node to {g.facts['endpoint']} "
            "(firewall, security group): the run uses rdzv_port through rdzv_port plus the node count on every node")


@wording("preflight.tcp-unreached")
def _tcp_unreached(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"Port {f['port']} on {g.node} ({f['address']}) could not be reached over TCP from "
            f"{short_list(f['sources'])} ({raw_output(f['detail'], 'no error was printed')}).",
            f"allow TCP into {g.node} on every port from port {f['first_port']} to port {f['last_port']} from every "
            "node (firewall, security group): the run's jobs meet there")


@wording("preflight.peer-ssh")
def _peer_ssh(g: Gap) -> tuple[str, str]:
    first = g.facts["first"]
    return (f"Passwordless SSH from {first} to {short_list(g.facts['nodes'])} does not work; clustereval does not need "
            "it, but pdsh and DeepSpeed launches do.",
            f"add {first}'s public key to those nodes' authorized_keys, or accept as-is")


@wording("preflight.gloo-no-torch")
def _gloo_no_torch(g: Gap) -> tuple[str, str]:
    nodes = g.facts["nodes"]  # [[node, why torch is not importable], ...]
    return (f"The CPU gloo check did not run: `{g.facts['python']}` cannot import torch on "
            f"{short_list(sorted(n for n, _ in nodes))} ({_each_node(nodes)}).",
            "set eval_python in cluster.toml to an interpreter with torch on every node; the GPU connectivity test "
            "still checks the rendezvous later")


@wording("preflight.gloo-failed")
def _gloo_failed(g: Gap) -> tuple[str, str]:
    f = g.facts
    why = f.get("diagnosis_text", "")
    return (f"The CPU gloo all-reduce across {f['nodes']} nodes failed on {g.node}: "
            f"{raw_output(f['detail'], 'no error was printed')}"
            + (f" ({why})" if why else "") + ".", f"{applied_fix(f.get('diagnosis', ''), f)}; the log is {f['log']}")


# ---- the eval Python --------------------------------------------------------------------------

PLAN_RUN_AGAIN = "then run `clustereval run` again"
UNVERIFIED = "could not be verified as the newest release"


def route_plan(tag: str) -> str:
    return (f"give the nodes a route to the PyTorch wheel index for `{tag or 'cpu'}` (or name a mirror of it as "
            "`torch_index` in cluster.toml) or point pip on the nodes at an index that has torch, "
            f"{PLAN_RUN_AGAIN}")


def _refused(f: dict) -> str:
    """'PyTorch wheel index for `cu130` (`URL`) lists torch X at eval time, which could not be installed (why)'."""
    return (f"PyTorch wheel index for `{f['index_tag']}` (`{f['refused_url']}`) lists torch {f['refused_newest']} at "
            f"eval time, which could not be installed ({raw_output(no_paths(f['refused_why']), 'pip gave no reason')})")


def _no_venv_why(f: dict, unreachable: str) -> str:
    """Why no venv was built: the PyTorch index's newest torch that pip refused, else ``unreachable``."""
    if f.get("refused_newest"):
        return f"The {_refused(f)}, and the index pip is configured with gave no torch"
    return unreachable


def _where(f: dict) -> str:
    return (f"the PyTorch wheel index for `{f['index_tag']}`" if f["index_kind"] == "pytorch"
            else "the index pip is configured with")


@wording("evalpython.configured")
def _configured(g: Gap) -> tuple[str, str]:
    return (f"cluster.toml names the interpreter the benchmarks ran with (torch {g.facts['torch'] or 'unknown'}), "
            "so torch could not be verified as the newest release.",
            "remove `eval_python` from cluster.toml to let clustereval install the newest torch, or accept as-is")


@wording("evalpython.fallback")
def _fallback(g: Gap) -> tuple[str, str]:
    f = g.facts
    why = _no_venv_why(f, "Neither the PyTorch wheel index nor the index pip is configured with gave torch to the "
                          "nodes")
    return (f"{why}, so the benchmarks ran with the interpreter `fallback_python` in cluster.toml names (torch "
            f"{f['torch']}), which {UNVERIFIED}.", route_plan(f["index_tag"]))


@wording("evalpython.node-python")
def _node_python(g: Gap) -> tuple[str, str]:
    f = g.facts
    why = _no_venv_why(f, "The nodes could not reach the PyTorch wheel index or get torch from the index pip is "
                          "configured with")
    return (f"{why}, so the benchmarks ran on the node's own `python3` (torch {f['torch'] or 'unknown'}), whose "
            f"torch {UNVERIFIED}.",
            route_plan(f["index_tag"]) + ", or name an interpreter with the newest torch as `fallback_python` in "
                                         "cluster.toml")


NO_TORCH_WHAT = {"configured": "The interpreter `eval_python` in cluster.toml names",
                 "node-python": "The node's own `python3`"}


@wording("evalpython.no-torch")
def _no_torch(g: Gap) -> tuple[str, str]:
    f = g.facts
    what = NO_TORCH_WHAT.get(f.get("mode", ""), "The eval Python")
    if f.get("mode") == "node-python":  # the last step of the chain: the way out is a route or a fallback_python
        plan = (route_plan(f.get("index_tag", "")) + ", or name an interpreter with torch as `fallback_python` in "
                "cluster.toml")
    else:
        plan = (f"install torch for that interpreter on {g.node}, or give the nodes a route to the PyTorch wheel "
                "index so clustereval can install its own torch")
    return (f"{what} cannot import torch on {g.node} ({raw_output(no_paths(f['why']), 'no error was printed')}), so the GPU "
            "and network benchmarks that "
            "need torch could not run there.", plan)


# what a refused cache of the eval Python names (``phases/evalpython.refusal_facts``)
REFUSED_WHAT = {"user": "the eval user's folder `{folder}` there", "cache": "the cache folder in `{folder}`",
                "copy": "its folder", "inside": "a file in it", "interpreter": "the interpreter it runs"}


@wording("evalpython.cache-refused")
def _cache_refused(g: Gap) -> tuple[str, str]:
    f = g.facts
    what = REFUSED_WHAT.get(f.get("what", ""), "a folder of it").format(folder=f["folder"])
    return (f"The copy of the eval Python an earlier run cached under `{f['folder']}` on `{f['label']}` was not "
            f"used, since {what} is not the eval user's alone ({raw_output(no_paths(f['problem']), 'refused')}): "
            "this run built its own copy in its scratch folder, cleared with that folder when the run ended.",
            f"find out who made what is under `{f['folder']}` on that node (the raw record's eval Python steps "
            "name the path), make it the eval user's alone or move it out of the way, then run again; until "
            "then every run builds its own copy")


@wording("evalpython.newest-refused")
def _newest_refused(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"Every benchmark ran on torch {f['torch']} from {_where(f)}: the {_refused(f)}.",
            f"make torch {f['refused_newest']} installable from that index on the nodes (the error above says why "
            f"it was not), {PLAN_RUN_AGAIN}; or accept torch {f['torch']} as the version settled for")


@wording("evalpython.not-newest")
def _not_newest(g: Gap) -> tuple[str, str]:
    f = g.facts
    if f["torch"].endswith("+cpu") and f["index_kind"] == "default":
        why = "it is the newest CPU build listed there; the newest release is a build with the CUDA libraries"
    elif f["spec"] == ["torch"]:
        why = "pip on the node refused the newest release and installed the newest one its own settings allow"
    else:
        why = "the newest release could not be installed"
    return (f"Every benchmark ran on torch {f['torch']}, which is not the newest release on {_where(f)} at eval time "
            f"({f['newest']}): {why}.", route_plan(f["index_tag"]) + "; or accept torch " + f["torch"]
            + " as the version settled for")


# ---- the host packages ------------------------------------------------------------------------

# each tool's own documentation: the report links a tool where it first names it
TOOL_URLS = {
    "fio": FIO_URL,
    "ibstat": "https://manpages.debian.org/bookworm/infiniband-diags/ibstat.8.en.html",
    "rdma": "https://man7.org/linux/man-pages/man8/rdma.8.html",
    "dcgmi": DIAG_URL,
}
# what the eval does without it
FALLBACKS = {
    "fio": "the storage section has no `fio` figures for that node",
    "ibstat": "adapter rates are read from /sys/class/infiniband",
    "rdma": "adapter rates are read from /sys/class/infiniband",
    "dcgmi": "the hardware health pass cannot run",
}
DCGM_PLAN = ("add NVIDIA's CUDA repository (the `cuda-keyring` package) on the node, then "
             "`apt-get install -y --install-recommends datacenter-gpu-manager-4-cuda<CUDA major>` "
             "(dnf: the same package name), then run `clustereval run --phases health`")


@wording("packages.missing")
def _package_missing(g: Gap) -> tuple[str, str]:
    f = g.facts
    binary = f["binary"]
    tool = f"[`{binary}`]({TOOL_URLS[binary]})" if binary in TOOL_URLS else f"`{binary}`"
    text = f"{tool} is missing on {g.node}, so {FALLBACKS.get(binary, 'the eval runs without it')}."
    if binary == "dcgmi":
        return text, DCGM_PLAN
    how = "" if f["enabled"] else " (package installs are off: install_packages = false in cluster.toml)"
    return text, f"install `{f['apt']}` (apt) or `{f['dnf']}` (dnf) on {g.node}{how}, or accept as-is"


# ---- the environment inventory ----------------------------------------------------------------


@wording("environment.driver-silent")
def _driver_silent(g: Gap) -> tuple[str, str]:
    f = g.facts
    error = raw_output(f["error"], "exit " + status_words(f["rc"]))
    return (f"The NVIDIA driver on `{f['label']}` did not answer ({error}), so its GPUs are not in the inventory.",
            link_tools("check the driver with `nvidia-smi` on that node (a reboot or a driver reinstall usually "
                       "fixes it), then run `clustereval run --resume RUN_DIR`; or drop the node"))


@wording("environment.required-missing")
def _required_missing(g: Gap) -> tuple[str, str]:
    return (f"`{g.facts['label']}` did not answer {', '.join(g.facts['tools'])}.",
            "see env/<node>/ in the raw folder for the command output")
