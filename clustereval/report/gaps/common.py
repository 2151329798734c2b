"""Wordings every phase shares: a node lost or failing, a phase that stopped, no GPU at all."""

from __future__ import annotations

from clustereval.records import Gap
from clustereval.report.gaps._registry import wording

RESUME_PLAN = "check the node answers (`ssh NODE true`), then `clustereval run --resume RUN_DIR`"
NO_GPU_PLAN = ("run the eval on nodes with NVIDIA GPUs whose driver answers `nvidia-smi`, or accept that this "
               "cluster has no GPU results")


def raw_output(line: str, fallback: str) -> str:
    """A tool's own closing line as the report quotes it: a code span (its words, numbers and paths
    are the tool's, not prose held to the report's rules), or ``fallback`` when it printed nothing."""
    return f"`{line.replace('`', chr(39))}`" if line else fallback


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
            f"({f.get('why') or 'lost'}).", resume_plan(f.get("address", "")))


@wording("node.error")
def _node_error(g: Gap) -> tuple[str, str]:
    f = g.facts
    verb = "stopped answering" if f.get("lost") else "failed"
    return (f"`{f['label']}` {verb} in {f['title']} while {f['during']} ran "
            f"(error[{f['error_id']}]: {f['message']}), so {f['title']} has no result from it.",
            f.get("hint") or resume_plan(f.get("address", "")))


@wording("phase.error")
def _phase_error(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"{f['title']} did not complete: {f['message']}",
            f.get("hint") or "fix the error above and run `clustereval run --resume RUN_DIR`")


@wording("phase.defect")
def _phase_defect(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"{f['title']} stopped on an error in clustereval itself ({f['error']}).",
            f"report it with {f['log']}; the other phases' results stand")


@wording("gpu.none")
def _no_gpu(g: Gap) -> tuple[str, str]:
    why = "; ".join(f"{node}: {error}" for node, error in g.facts["nodes"])
    return f"No NVIDIA GPU answered on any node ({why}), so the compute passes did not run.", NO_GPU_PLAN
