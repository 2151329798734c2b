"""Wordings of the storage phases' Gaps: the storage phase (``storage.*``) and `clustereval debug fs`
(``debugfs.*``)."""

from __future__ import annotations

import re

from clustereval.probes.fio import FIO_URL
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import TOOL_URLS, link_tools, raw_output, status_words
from clustereval.report.units import iec_whole

FIO_PACKAGE = "fio"
INSTALL_FIO = "(`apt-get install -y fio` or `dnf install -y fio`)"
RERUN_STORAGE = "`clustereval run --resume RUN_DIR --phases storage`"
RERUN_DEBUG_FS = "`clustereval debug fs`"
FIO = f"[`fio`]({FIO_URL})"  # linked wherever a Gap names it: the scan that would introduce it may not have run
DD = f"[`dd`]({TOOL_URLS['dd']})"


def _refused(g: Gap, what: str, plan: str) -> tuple[str, str]:
    """A step the scratch refused (or could not reach): its message, and its own plan (the
    ScratchError's hint) when it has one."""
    return (f"{what} `{g.facts['path']}` did not run: {g.facts['message']}.", g.facts.get("hint") or plan)


# ---- the storage phase ------------------------------------------------------------------------


@wording("storage.fio-missing")
def _fio_missing(g: Gap) -> tuple[str, str]:
    return (f"{FIO} is not installed on {g.node}, so the local and shared IO benchmarks did not run there.",
            f"install the `{FIO_PACKAGE}` package on {g.node} {INSTALL_FIO}, then {RERUN_STORAGE}")


@wording("storage.path-unreadable")
def _path_unreadable(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"`{f['path']}` is not readable on {g.node} ({raw_output(f.get('output', ''), 'df printed nothing')}), "
            "so no IO benchmark ran on it.",
            "check the path in cluster.toml exists on the nodes")


@wording("storage.local-in-memory")
def _local_in_memory(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"`{f['path']}` is a {f['fstype']} (memory, not a disk), so the local disk IO benchmark did not run "
            "there.", f"set local_scratch in cluster.toml to a folder on the node's local disk, then {RERUN_STORAGE}")


def _layout_error(error: str) -> str:
    """```lfs df`: <its last line>`` (phases/storage.capture_layout): the command linked, its line quoted."""
    m = re.fullmatch(r"(`[^`]+`): (.*)", error)
    return f"{link_tools(m.group(1))}: {raw_output(m.group(2), 'no output')}" if m else raw_output(error, "no output")


@wording("storage.layout-unreadable")
def _layout_unreadable(g: Gap) -> tuple[str, str]:
    f = g.facts
    errors = "; ".join(_layout_error(e) for e in f["errors"] if e) or "no error was printed"
    return (f"The layout of `{f['path']}` could not be read ({errors}), so the findings cannot say "
            "how many storage targets one file is spread over.",
            f"install the {f['tool']} client tools on {g.node}, or run them there by hand and add the output to "
            "the raw folder")


@wording("storage.scan-refused")
def _scan_refused(g: Gap) -> tuple[str, str]:
    return _refused(g, "The IO benchmark of", "fix the path, then run `clustereval run --resume RUN_DIR` so the scan runs")


@wording("storage.fio-run-failed")
def _fio_run_failed(g: Gap) -> tuple[str, str]:
    """One fio run without figures; the storage phase and `debug fs` record it alike (``fio_cell_gaps``)."""
    f = g.facts
    plan = ("read the raw fio output in the run folder" if g.phase == "debug-fs"
            else "read the raw fio output, fix the cause, then run `clustereval run --resume RUN_DIR`")
    return (f"{FIO} has no {iec_whole(f['size'])} {f['rw']} figures for `{f['path']}`: "
            f"{raw_output(f['error'], 'no error was printed')}.", plan)


@wording("storage.concurrent-refused")
def _concurrent_refused(g: Gap) -> tuple[str, str]:
    return _refused(g, "The concurrent write to", "fix the path, then run `clustereval run --resume RUN_DIR` so the write runs")


@wording("storage.concurrent-node-failed")
def _concurrent_node_failed(g: Gap) -> tuple[str, str]:
    f = g.facts
    why = (f"{DD} exited with {status_words(f['rc'])} ({raw_output(f.get('output', ''), 'and printed nothing')})"
           if "rc" in f else f"{DD} failed ({raw_output(f['error'], 'no error was printed')})")
    return (f"{g.node} did not finish the concurrent write to `{f['path']}`: {why}.",
            "check the node and the mount, then run `clustereval run --resume RUN_DIR`")


@wording("storage.no-shared")
def _no_shared(g: Gap) -> tuple[str, str]:
    """Said by the report (``no_shared_gap``) when the run named no shared filesystem."""
    concurrent = " and the concurrent write from every node" if g.facts.get("num_nodes", 0) >= 2 else ""
    # only a report with local figures has figures above to qualify
    local = ": the figures above describe the local disk only" if g.facts.get("local_figures") else ""
    return (f"No shared filesystem was named, so the shared {FIO} scan{concurrent} did not run{local}.",
            "name the shared filesystem every node mounts (the one checkpoints and datasets go to) as "
            "`shared_paths` in cluster.toml, then run `clustereval run` again; or accept that this cluster "
            "has no shared filesystem")


# ---- clustereval debug fs ---------------------------------------------------------------------


@wording("debugfs.no-local")
def _no_local(g: Gap) -> tuple[str, str]:
    return (f"No local comparison: {g.facts['note']}.",
            f"set local_scratch in cluster.toml to a folder on a node-local disk, then run {RERUN_DEBUG_FS} again")


@wording("debugfs.fio-missing")
def _debug_fio_missing(g: Gap) -> tuple[str, str]:
    return (f"{FIO} is not installed on {g.node}, so no quick scan ran on `{g.facts['path']}` or on the local disk.", f"install the `{FIO_PACKAGE}` package {INSTALL_FIO} and run {RERUN_DEBUG_FS} again")


@wording("debugfs.scan-refused")
def _debug_scan_refused(g: Gap) -> tuple[str, str]:
    return _refused(g, "The quick scan of", f"make room on that mount or pick another folder, then run {RERUN_DEBUG_FS} again")
