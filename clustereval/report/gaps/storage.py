"""Wordings of the storage phases' Gaps: the storage phase (``storage.*``) and `clustereval debug fs`
(``debugfs.*``)."""

from __future__ import annotations

from clustereval.probes.fio import FIO_URL
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import raw_output, status_words
from clustereval.report.units import iec_whole

FIO_PACKAGE = "fio"
INSTALL_FIO = "(`apt-get install -y fio` or `dnf install -y fio`)"
RERUN_STORAGE = "`clustereval run --resume RUN_DIR --phases storage`"
RERUN_DEBUG_FS = "`clustereval debug fs`"


def _refused(g: Gap, what: str, plan: str) -> tuple[str, str]:
    """A step the scratch refused (or could not reach): its message, and its own plan (the
    ScratchError's hint) when it has one."""
    return (f"{what} `{g.facts['path']}` did not run: {g.facts['message']}.", g.facts.get("hint") or plan)


# ---- the storage phase ------------------------------------------------------------------------


@wording("storage.fio-missing")
def _fio_missing(g: Gap) -> tuple[str, str]:
    return (f"`fio` is not installed on {g.node}, so the local and shared IO benchmarks did not run.",
            f"install the `{FIO_PACKAGE}` package on {g.node} {INSTALL_FIO}, then {RERUN_STORAGE}")


@wording("storage.path-unreadable")
def _path_unreadable(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"`{f['path']}` is not readable on {g.node} ({raw_output(f.get('output', ''), 'df printed nothing')}), "
            "so it was not measured.",
            "check the path in cluster.toml exists on the nodes")


@wording("storage.local-in-memory")
def _local_in_memory(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"`{f['path']}` is a {f['fstype']} (memory, not a disk), so the local disk IO benchmark did not run "
            "there.", f"set local_scratch in cluster.toml to a folder on the node's local disk, then {RERUN_STORAGE}")


@wording("storage.layout-unreadable")
def _layout_unreadable(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"The layout of `{f['path']}` could not be read ({'; '.join(f['errors'])}), so the findings cannot say "
            "how many storage targets one file is spread over.",
            f"install the {f['tool']} client tools on {g.node}, or run them there by hand and add the output to "
            "the raw folder")


@wording("storage.scan-refused")
def _scan_refused(g: Gap) -> tuple[str, str]:
    return _refused(g, "The IO benchmark of", "fix the path and re-run the storage phase")


@wording("storage.fio-run-failed")
def _fio_run_failed(g: Gap) -> tuple[str, str]:
    """One fio run without figures; the storage phase and `debug fs` record it alike (``fio_cell_gaps``)."""
    f = g.facts
    plan = ("read the raw fio output in the run folder" if g.phase == "debug-fs"
            else "read the raw fio output, fix the cause, re-run the storage phase")
    return f"`fio` has no {iec_whole(f['size'])} {f['rw']} figures for `{f['path']}`: {f['error']}.", plan


@wording("storage.concurrent-refused")
def _concurrent_refused(g: Gap) -> tuple[str, str]:
    return _refused(g, "The concurrent write to", "fix the path and re-run the storage phase")


@wording("storage.concurrent-node-failed")
def _concurrent_node_failed(g: Gap) -> tuple[str, str]:
    f = g.facts
    why = f"`dd` exited with {status_words(f['rc'])} ({raw_output(f['output'], 'and printed nothing')})" if "rc" in f else f["error"]
    return (f"{g.node} did not finish the concurrent write to `{f['path']}`: {why}.",
            "check the node and the mount, then re-run the storage phase")


@wording("storage.no-shared")
def _no_shared(g: Gap) -> tuple[str, str]:
    """Said by the report (``no_shared_gap``) when the run named no shared filesystem."""
    concurrent = ", and the concurrent write from every node" if g.facts.get("num_nodes", 0) >= 2 else ""
    return (f"No shared filesystem was named, so the shared `fio` scan{concurrent} did not run: the figures "
            "above describe the local disk only.",
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
    return (f"[`fio`]({FIO_URL}) is not installed on {g.node}, so {g.facts['path']} and the local disk were not "
            "measured.", f"install the `{FIO_PACKAGE}` package {INSTALL_FIO} and run {RERUN_DEBUG_FS} again")


@wording("debugfs.scan-refused")
def _debug_scan_refused(g: Gap) -> tuple[str, str]:
    return _refused(g, "The quick scan of", "free space or pick another folder, then run it again")
