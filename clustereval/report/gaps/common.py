"""Wordings every phase shares: a node lost or failing, a phase that stopped, no GPU at all."""

from __future__ import annotations

import re

from clustereval.analysis.quoting import quoted_line
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording

RESUME_PLAN = "check the node answers (`ssh NODE true`), then `clustereval run --resume RUN_DIR`"
NO_GPU_PLAN = ("run the eval on nodes with NVIDIA GPUs and their driver installed, or accept that this cluster has "
               "no GPU results")
# a node's "no GPU" reason as the phases record it, in the words of a machine without NVIDIA hardware
NO_DRIVER = {"nvidia-smi is not installed": "no NVIDIA driver installed"}
# each tool's own documentation: a Gap links a tool where it names it, since its Gap may be the
# report's first mention (the pass that would have introduced it did not run)
TOOL_URLS = {
    "fio": "https://github.com/axboe/fio",
    "dd": "https://man7.org/linux/man-pages/man1/dd.1.html",
    "df": "https://man7.org/linux/man-pages/man1/df.1.html",
    "dcgmi": "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",
    "ibstat": "https://manpages.debian.org/bookworm/infiniband-diags/ibstat.8.en.html",
    "rdma": "https://man7.org/linux/man-pages/man8/rdma.8.html",
    "nvidia-smi": "https://docs.nvidia.com/deploy/nvidia-smi/index.html",
    "torchrun": "https://docs.pytorch.org/docs/stable/elastic/run.html",
    "lfs": "https://doc.lustre.org/lustre_manual.xhtml#userutilities.lfs",
    "lscpu": "https://man7.org/linux/man-pages/man1/lscpu.1.html",
    "findmnt": "https://man7.org/linux/man-pages/man8/findmnt.8.html",
    "lsblk": "https://man7.org/linux/man-pages/man8/lsblk.8.html",
}
MSMF = "MSMF (Maximum Sustainable Matmul FLOPS)"
LEMON = "lemon GEMM (general matrix multiply)"
_SPAN = re.compile(r"(?<!\[)`([^`]+)`(?!\]\()")


def link_tools(text: str) -> str:
    """Every code span of ``text`` that starts with a tool's name, linked to that tool's documentation."""
    def link(m: re.Match) -> str:
        first = m.group(1).split(" ")[0].rsplit("/", 1)[-1]
        return f"[{m.group()}]({TOOL_URLS[first]})" if first in TOOL_URLS else m.group()
    return _SPAN.sub(link, text)


def no_gpu_reason(error: str) -> str:
    """Why a node shows no GPU: our words for a node without the driver, else the tool's line quoted."""
    return NO_DRIVER.get(error) or raw_output(error, "no GPU listed")


def no_paths(text: str) -> str:
    """An error line without the file paths it may carry (the report never shows an interpreter's path)."""
    return re.sub(r"(?<![\w:/])/[^\s'\"`:,)]+", "a path on the node", text)


# the words for an interpreter's environment a tool's line may use (pip: "User site-packages are not
# visible in this virtualenv.", the venv module's "python3 -m venv"), each in the words the report
# uses for it: how the eval ran is not a report field (lint's ``venv-path``)
_ENV_WORDS = re.compile(r"((?<=[\s`/])\.?venv\b|\bsite-packages\b|\bvirtualenv\b)")
_ENV_SAID = {"venv": "virtual environment", ".venv": "virtual environment", "virtualenv": "virtual environment",
             "site-packages": "site packages"}


def raw_output(line: str, fallback: str) -> str:
    """A tool's own closing line as the report quotes it: a code span (its words, numbers and paths
    are the tool's, not prose held to the report's rules), or ``fallback`` when it printed nothing.
    A path into an interpreter's environment is left out, and its words for that environment are
    said plainly: how the eval ran is not a report field."""
    if not line:
        return fallback
    quoted = quoted_line(line)
    return link_tools(_ENV_WORDS.sub(lambda m: _ENV_SAID[m.group(1)], quoted))


def status_words(rc: object) -> str:
    """A command's exit status as the report says it: the code is the command's, quoted, so it is not
    read as a figure without its unit."""
    return f"status `{rc}`"


def resume_plan(address: str) -> str:
    return RESUME_PLAN.replace("NODE", address or "NODE")


@wording("node.lost")
def _node_lost(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"`{f['label']}` was left out of {f['title']}: it stopped answering earlier in the run "
            f"({raw_output(f.get('why', ''), 'lost')}).", resume_plan(f.get("address", "")))


@wording("node.error")
def _node_error(g: Gap) -> tuple[str, str]:
    f = g.facts
    verb = "stopped answering" if f.get("lost") else "failed"
    error = raw_output(f"error[{f['error_id']}]: {f['message']}", "")
    return (f"`{f['label']}` {verb} in {f['title']} while {link_tools(f['during'])} ran ({error}), so {f['title']} "
            "has no result from it.",
            f.get("hint") or resume_plan(f.get("address", "")))


@wording("phase.error")
def _phase_error(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"{f['title']} did not complete: {raw_output(f['message'], 'no error was printed')}.",
            f.get("hint") or "fix the error above and run `clustereval run --resume RUN_DIR`")


@wording("phase.defect")
def _phase_defect(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"{f['title']} stopped on an error in clustereval itself ({raw_output(f['error'], 'no message')}).",
            f"report it with {f['log']}; the other phases' results stand")


@wording("gpu.none")
def _no_gpu(g: Gap) -> tuple[str, str]:
    why = "; ".join(f"{node}: {no_gpu_reason(error)}" for node, error in g.facts["nodes"])
    return f"No NVIDIA GPU answered on any node ({why}), so the compute passes did not run.", NO_GPU_PLAN
