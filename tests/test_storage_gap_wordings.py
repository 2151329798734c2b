"""The storage phase's and `debug fs`'s Gaps hold facts; report/gaps/storage.py words them as the
phases used to (the same words, punctuation and links)."""

from __future__ import annotations

from clustereval.debug.fs import pick_local
from clustereval.phases.storage import fio_cell_gaps
from clustereval.probes.mounts import Mount
from clustereval.records import Gap, dumps, loads
from clustereval.records.storage import FioCell, MountScan, StorageRecord
from clustereval.report.gaps import kinds, said, say
from clustereval.report.lint import lint_text
from clustereval.report.markdown import Document
from clustereval.report.render import RunView
from clustereval.report.storage import no_shared_gap, render_storage

NODE = "gpu-a(node0)"
STORAGE_KINDS = {"storage.fio-missing", "storage.path-unreadable", "storage.local-in-memory",
                 "storage.layout-unreadable", "storage.scan-refused", "storage.fio-run-failed",
                 "storage.concurrent-refused", "storage.concurrent-node-failed", "storage.no-shared",
                 "debugfs.no-local", "debugfs.fio-missing", "debugfs.scan-refused"}


def worded(kind: str, facts: dict, *, phase: str = "storage", node: str = NODE) -> tuple[str, str]:
    g = say(Gap(phase, node=node, kind=kind, facts=facts))
    return g.text, g.plan


def test_every_storage_kind_is_worded():
    assert STORAGE_KINDS <= kinds()


def test_the_storage_phase_wordings():
    assert worded("storage.fio-missing", {"tool": "fio", "error": "exit 127"}) == (
        f"[`fio`](https://github.com/axboe/fio) is not installed on {NODE}, so the local and shared IO benchmarks did "
        "not run there.",
        f"install the `fio` package on {NODE} (`apt-get install -y fio` or `dnf install -y fio`), then "
        "`clustereval run --resume RUN_DIR --phases storage`")
    # a tool's own closing line is quoted as code: its numbers and paths are not the report's prose
    assert worded("storage.path-unreadable", {"path": "/fsx", "output": "df: /fsx: No such file or directory"}) == (
        f"`/fsx` is not readable on {NODE} (`df: /fsx: No such file or directory`), so no IO benchmark ran on it.",
        "check the path in cluster.toml exists on the nodes")
    assert worded("storage.path-unreadable", {"path": "/fsx", "output": ""})[0] == (
        f"`/fsx` is not readable on {NODE} (df printed nothing), so no IO benchmark ran on it.")
    assert worded("storage.local-in-memory", {"path": "/tmp", "fstype": "tmpfs"}) == (
        "`/tmp` is a tmpfs (memory, not a disk), so the local disk IO benchmark did not run there.",
        "set local_scratch in cluster.toml to a folder on the node's local disk, then "
        "`clustereval run --resume RUN_DIR --phases storage`")
    assert worded("storage.layout-unreadable", {"path": "/lustre", "tool": "lfs",
                                                "errors": ["`lfs df`: not found", "`lfs getstripe`: exit 2"]}) == (
        "The layout of `/lustre` could not be read ([`lfs df`](https://doc.lustre.org/lustre_manual.xhtml"
        "#userutilities.lfs): `not found`; [`lfs getstripe`](https://doc.lustre.org/lustre_manual.xhtml"
        "#userutilities.lfs): `exit 2`), so the findings "
        "cannot say how many storage targets one file is spread over.",
        f"install the lfs client tools on {NODE}, or run them there by hand and add the output to the raw folder")
    assert worded("storage.scan-refused", {"path": "/fsx", "message": "no room", "hint": ""}) == (
        "The IO benchmark of `/fsx` did not run: no room.",
        "fix the path, then run `clustereval run --resume RUN_DIR` so the scan runs")
    assert worded("storage.scan-refused", {"path": "/fsx", "message": "no room", "hint": "free 1 GiB"})[1] == (
        "free 1 GiB")
    assert worded("storage.concurrent-refused", {"path": "/fsx", "message": "read-only", "hint": ""},
                  node="") == ("The concurrent write to `/fsx` did not run: read-only.",
                               "fix the path, then run `clustereval run --resume RUN_DIR` so the write runs")
    assert worded("storage.concurrent-node-failed", {"path": "/fsx", "error": "no answer"}, node="gpu-b") == (
        "gpu-b did not finish the concurrent write to `/fsx`: [`dd`](https://man7.org/linux/man-pages/man1/dd.1.html) "
        "failed (`no answer`).",
        "check the node and the mount, then run `clustereval run --resume RUN_DIR`")
    # kubectl's own log line once stood in dd's place: quoted, its bare numbers are not prose
    klog = "E1201 21:27:43.219209   15774 websocket.go:296] Unknown stream id 2, discarding message."
    text = worded("storage.concurrent-node-failed", {"path": "/fsx", "error": klog, "rc": 0, "output": klog},
                  node="gpu-b")[0]
    dd = "[`dd`](https://man7.org/linux/man-pages/man1/dd.1.html)"
    assert text == f"gpu-b did not finish the concurrent write to `/fsx`: {dd} exited with status `0` (`{klog}`)."
    def unitless(line: str) -> list[str]:
        return [p.message for p in lint_text(f"# Cluster eval: t\n\n## Storage\n\n### Gaps\n\n- {line}\n")
                if p.rule == "number-unit"]

    assert unitless(text) == [] and unitless(text.replace(f"`{klog}`", klog))  # unquoted it fails the report
    assert worded("storage.concurrent-node-failed", {"path": "/fsx", "error": "dd exited 1", "rc": 1, "output": ""},
                  node="gpu-b")[0] == f"gpu-b did not finish the concurrent write to `/fsx`: {dd} exited with status `1` (and printed nothing)."


def test_a_fio_run_without_figures_is_worded_for_the_phase_that_ran_it():
    cells = [FioCell(file_size_bytes=2**20, rw="read", error="fio exited 1"),
             FioCell(file_size_bytes=2**30, rw="write", error="interrupted"),  # runs again on --resume
             FioCell(file_size_bytes=16 * 2**10, rw="write")]
    (pair,) = fio_cell_gaps("storage", NODE, "/fsx", cells)
    assert pair[0] is cells[0] and pair[1].kind == "storage.fio-run-failed" and not pair[1].text
    gap = say(pair[1])
    # the quoted line starts with a tool's name, so it is linked like any first mention of a tool
    assert (gap.text, gap.plan) == ("[`fio`](https://github.com/axboe/fio) has no 1 MiB read figures for `/fsx`: "
                                    "[`fio exited 1`](https://github.com/axboe/fio).",
                                    "read the raw fio output, fix the cause, then run "
                                    "`clustereval run --resume RUN_DIR`")
    (pair,) = fio_cell_gaps("debug-fs", NODE, "/fsx", cells)
    assert say(pair[1]).text == gap.text and say(pair[1]).plan == "read the raw fio output in the run folder"


def test_the_debug_fs_wordings():
    note = pick_local("/fsx", "/fsx", [Mount("/", "/dev/sda1", "xfs")], NODE)[1]
    assert worded("debugfs.no-local", {"note": note}, phase="debug-fs") == (
        f"No local comparison: {NODE} has no local filesystem other than the one /fsx is on (xfs on /dev/sda1, "
        "mounted at /), so there is no local disk to compare it with.",
        "set local_scratch in cluster.toml to a folder on a node-local disk, then run `clustereval debug fs` again")
    assert worded("debugfs.fio-missing", {"path": "/fsx", "tool": "fio", "error": ""}, phase="debug-fs") == (
        f"[`fio`](https://github.com/axboe/fio) is not installed on {NODE}, so no quick scan ran on `/fsx` or on the "
        "local disk.", "install the `fio` package (`apt-get install -y fio` or `dnf install -y fio`) and run "
                     "`clustereval debug fs` again")
    assert worded("debugfs.scan-refused", {"path": "/fsx", "message": "no room", "hint": ""}, phase="debug-fs") == (
        "The quick scan of `/fsx` did not run: no room.",
        "make room on that mount or pick another folder, then run `clustereval debug fs` again")


def test_no_shared_filesystem_is_a_kind_the_section_words_and_links():
    one = StorageRecord(num_nodes=1, shared_paths=[])
    (gap,) = no_shared_gap(one)
    assert gap.kind == "storage.no-shared" and not gap.text
    # no local figures either: nothing above to qualify
    assert say(gap).text == "No shared filesystem was named, so the shared [`fio`](https://github.com/axboe/fio) scan did not run."
    (with_local,) = no_shared_gap(StorageRecord(num_nodes=1, shared_paths=[], local=MountScan(
        mount="/tmp", cells=[FioCell(file_size_bytes=2**20, rw="read", bw_mib_s=900.0)])))
    assert say(with_local).text.endswith("scan did not run: the figures above describe the local disk only.")
    assert say(gap).plan.startswith("name the shared filesystem every node mounts (the one checkpoints and "
                                    "datasets go to) as `shared_paths` in cluster.toml")
    (gap,) = no_shared_gap(StorageRecord(num_nodes=2, shared_paths=[]))
    assert "scan and the concurrent write from every node did not run" in say(gap).text
    doc = Document()
    result = render_storage(RunView("t", "s", "raw-t", "ssh", {"storage": one}), doc)
    (gap,) = result.gaps
    assert gap.text.startswith("No shared filesystem was named, so the shared [`fio`](https://github.com/axboe/fio)")


def test_a_storage_record_keeps_facts_and_the_section_says_them():
    rec = StorageRecord(num_nodes=1, shared_paths=["/fsx"],
                        gaps=[Gap("storage", node=NODE, kind="storage.fio-missing", facts={"tool": "fio"})])
    back = loads(StorageRecord, dumps(rec))
    assert back.gaps[0].kind == "storage.fio-missing" and not back.gaps[0].text
    assert said(back).gaps[0].text.startswith("[`fio`](https://github.com/axboe/fio) is not installed")
    doc = Document()
    result = render_storage(RunView("t", "s", "raw-t", "ssh", {"storage": back}), doc)
    (gap,) = result.gaps
    # no fio item introduced the tool, so the gap links it at its first mention
    assert gap.text == (f"[`fio`](https://github.com/axboe/fio) is not installed on {NODE}, so the local and shared "
                        "IO benchmarks did not run there.")
    assert gap.text in doc.render()
