"""The Storage section and its Findings, rendered from hand-built records with the real fio figures."""

import os
import re
from pathlib import Path

import pytest

from clustereval.config import StorageTarget
from clustereval.probes.fio import parse_fio_json
from clustereval.records.environment import FilesystemInfo
from clustereval.records.storage import (
    FILE_SIZES,
    ConcurrentWrite,
    FioCell,
    Layout,
    MountScan,
    NodeWrite,
    StorageRecord,
)
from clustereval.report.markdown import Document
from clustereval.report.render import RunView, render_report
from clustereval.report.storage import render_storage

FIO = Path(__file__).parent / "fixtures" / "h200x2" / "fio"
GOLDEN = Path(__file__).parent / "fixtures" / "report" / "storage-section.md"
TIB = 2**40


def real_cells(slower: float = 1.0, tweak: dict | None = None) -> list[FioCell]:
    """The six captured runs; ``slower`` divides bandwidth and IOPS (a slower filesystem)."""
    cells = []
    for spelled, size, _ in FILE_SIZES:
        for rw in ("read", "write"):
            s = parse_fio_json((FIO / f"fio-{rw}-{spelled}.json").read_text())
            f = slower * (tweak or {}).get((size, rw), 1.0)
            cells.append(FioCell(size, rw, s.latency_msec * f, s.bw_mib_s / f, s.iops / f))
    return cells


def lustre(mount, size_tib, server, slower, **kw):
    return MountScan(mount, int(size_tib * TIB), "lustre", server, mount, True, "node0",
                     cells=real_cells(slower, kw.pop("tweak", None)), complete=True, **kw)


def record(shared, nodes=1, concurrent=None, targets=()):
    local = MountScan("/tmp", 270553174016, "ext4", "/dev/vda", "/", False, "node0", cells=real_cells(), complete=True)
    parts = [FilesystemInfo("/", 270553174016, "ext4", "/dev/vda")] + [
        FilesystemInfo(s.mount, s.size_bytes, s.fstype, s.source, shared=True) for s in shared]
    return StorageRecord(partitions=parts, local=local, shared=shared, concurrent=concurrent, runtime_s=180,
                         num_nodes=nodes, tool_files=["tools/storage.py", "tools/fio.py"], fio_version="fio-3.33",
                         targets=list(targets))


def view(rec, targets=None, profile="standard"):
    return RunView(name="h200", stamp="2026-11-30-1900Z", raw_rel="raw-h200-2026-11-30-1900Z", access="ssh",
                   records={"storage": rec}, profile=profile, targets=targets)


def section(rec, targets=None):
    doc = Document()
    result = render_storage(view(rec, targets), doc)
    return doc.render(), result


def tables(md: str) -> list[list[str]]:
    blocks, cur = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    return blocks + ([cur] if cur else [])


def two_groups():
    code = lustre("/code", 2.3, "10.4.138.63@tcp:/xmym3bev", 5.3, stands_for=["/home"],
                  layout=Layout(tool="lfs", stripe_count=1, num_targets=8,
                                summary="default stripe count 1, stripe size 1 MiB (`lfs getstripe -d`); "
                                        "8 OSTs (object storage targets, `lfs df -h`)"))
    data = lustre("/data", 25, "10.4.138.64@tcp:/k2ld9dma", 2.0)
    return record([code, data])


def test_golden_section():
    md, _ = section(two_groups())
    if os.environ.get("CLUSTEREVAL_UPDATE_GOLDEN"):  # rewrite after a deliberate change, then review the diff
        GOLDEN.write_text(md)
    assert md == GOLDEN.read_text()


def test_partitions_first_with_slash_and_no_usage():
    md, _ = section(two_groups())
    assert md.index("### Existing Partitions") < md.index("### Introduction") < md.index("### Local disk IO")
    part = tables(md)[0]
    assert part[0] == "| mount | size | type | device / server |" and part[1] == "| --- | ---: | --- | --- |"
    assert part[2].startswith("| `/` | 252 GiB | ext4 |")
    assert not re.search(r"Use%|% full|\bfree\b|\bused\b", md)


def test_tables_headers_alignment_units_and_formats():
    md, _ = section(two_groups())
    local, code, data = tables(md)[1:4]
    assert local[0] == "| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |"
    assert local[1] == "| ---: | --- | ---: | ---: | ---: |"
    assert code[0] == "| size | rw | latency (msec) | bw (MiBps) | IOPS (M) | local/shared × |"
    assert code[1] == "| ---: | --- | ---: | ---: | ---: | ---: |"
    assert local[2] == "| 16 KiB | read | 3.7 | 1_095.4 | 0.280 |"
    assert [r.split(" | ")[0] for r in local[2:]] == ["| 16 KiB", "| 16 KiB", "| 1 MiB", "| 1 MiB", "| 1 GiB", "| 1 GiB"]
    assert not re.search(r"\b(16k|1m|1g)\b", md)
    assert "_" not in "".join(code[2:])  # the slow table is ungrouped
    for row in code[2:] + data[2:]:
        iops = row.split(" | ")[4]
        assert re.fullmatch(r"0\.\d+", iops)  # millions in every table
        assert re.fullmatch(r"\d+\.\d", row.split(" | ")[5].rstrip(" |"))  # one decimal


def test_prose_quotes_table_cells_verbatim():
    md, result = section(two_groups())
    code = tables(md)[2]
    ratios = {row.split(" | ")[5].rstrip(" |") for row in code[2:]}
    m = re.search(r"Per row, `/code` is ([\d.]+)×(?: to ([\d.]+)×)? slower than the local disk table above", md)
    assert m and {g for g in m.groups() if g} <= ratios
    bws = {row.split(" | ")[3] for row in tables(md)[1][2:]}
    needs = next(f.text for f in result.findings if f.subsystem == "local disk")
    quoted = re.findall(r"([\d_]+\.\d) MiB/s", needs)
    assert len(quoted) == 6 and set(quoted) == bws


def test_needs_operator_input_wording():
    _, result = section(two_groups())
    assert [f.category for f in result.findings] == ["needs_input"] * 3
    code = next(f.text for f in result.findings if "`/code`" in f.text.split(",")[0])
    assert re.search(r"read / write: 16 KiB \*\*[\d.]+ MiB/s / [\d.]+ MiB/s\*\*, 1 MiB \*\*[\d.]+ MiB/s / [\d.]+ MiB/s\*\*, "
                     r"1 GiB \*\*[\d.]+ MiB/s / [\d.]+ MiB/s\*\*", code)
    for phrase in ("provisioned throughput is unknown, so there is no target to compare against",
                   "Lustre is filesystem software and publishes no performance figures",
                   "service tier", "per TiB", "the figures it is supposed to hit",
                   "one expected value per measured cell", "MiB/s or IOPS at 16 KiB, 1 MiB and 1 GiB, read and write",
                   "from one client with 16 jobs, 4 KiB blocks and `O_DIRECT`", "per client or per filesystem",
                   "stripe count", "`/code` (2.3 TiB)", "default stripe count 1"):
        assert phrase in code, phrase
    assert "the figure " not in code and "the target " not in code  # targets in the plural
    assert "`/data`" not in code  # scoped to the mount measured
    assert not re.search(r"\b(feel|suffer|struggle|painful|punish)", code)


def test_mounts_within_five_percent_share_one_table():
    a = lustre("/code", 2.3, "10.0.0.1@tcp:/a", 5.0)
    b = lustre("/data", 25, "10.0.0.2@tcp:/b", 5.0, tweak={(2**30, "write"): 1.04})
    md, _ = section(record([a, b]))
    assert md.count("### Shared Lustre IO benchmark") == 1 and len(tables(md)) == 3
    assert "`/data` (25 TiB) measured within 5% of these figures in every bandwidth and IOPS cell" in md
    assert "`/code` and `/data` met it" in md
    c = lustre("/data", 25, "10.0.0.2@tcp:/b", 5.0, tweak={(2**30, "write"): 1.06})  # one cell 6% off
    md, _ = section(record([a, c]))
    assert "### Shared Lustre 2.3 TiB IO benchmark" in md and "### Shared Lustre 25 TiB IO benchmark" in md
    assert "no two scanned mounts met it, so each has its own table" in md


def test_targets_move_the_bullets_on_re_render():
    rec = two_groups()
    before = render_report(view(rec)).markdown
    assert "### Needs operator input" in before and "### Healthy subsystems" not in before
    targets = [StorageTarget("/", iops={"16KiB-read": 250000, "16KiB-write": 300000, "1MiB-read": 200000,
                                        "1MiB-write": 300000, "1GiB-read": 200000, "1GiB-write": 300000}),
               StorageTarget("/code", bw_mib_s={"16KiB-read": 400.0, "1GiB-write": 200.0}, source="tier 250")]
    after = render_report(view(rec, targets)).markdown
    healthy = after[after.index("### Healthy subsystems"):after.index("### Underperforming subsystems")]
    under = after[after.index("### Underperforming subsystems"):after.index("### Needs operator input")]
    needs = after[after.index("### Needs operator input"):]
    assert "**local disk**" in healthy and "0.280 million IOPS against 0.250 million IOPS" in healthy
    assert "`/code`" in under and "against 400.0 MiB/s" in under and "(tier 250)" in under
    assert "runs at the 16 KiB read rate of 206.7 MiB/s" in under
    assert "`/data`" in needs and "`/code`" not in needs
    # the targets recorded with the scan are used when the render is given none
    rec.targets = targets
    assert render_report(view(rec)).markdown == after


def test_concurrent_write_only_with_two_or_more_nodes():
    cw = ConcurrentWrite("/code", int(2.3 * TIB), "lustre",
                         nodes=[NodeWrite("n0", 2**30, 2.5, 409.6), NodeWrite("n1", 2**30, 2.7, 379.3)],
                         aggregate_mib_s=758.5)
    rec = record([lustre("/code", 2.3, "10.0.0.1@tcp:/a", 5.0)], nodes=2, concurrent=cw)
    md, _ = section(rec)
    assert "### Concurrent write shared fs benchmark" in md and "| aggregate | 2.70 | 758.5 |" in md
    assert "| node | time (s) | write rate (MiBps) |" in md
    assert "(https://www.gnu.org/software/coreutils/manual/html_node/dd-invocation.html) — concurrent write on `/code`: each of the 2 nodes " \
           "writes one 1 GiB file" in md
    toc = render_report(view(rec)).markdown
    assert "[Concurrent write shared fs benchmark](#concurrent-write-shared-fs-benchmark) — 2-node 1 GiB `O_DIRECT` `dd`" in toc
    rec.num_nodes = 1
    assert "Concurrent write" not in section(rec)[0]


def test_toc_labels_and_quick_profile_shortening():
    rec = two_groups()
    rec.runtime_s = 10
    md = render_report(view(rec, profile="quick")).markdown
    assert "[Local disk IO benchmark](#local-disk-io-benchmark) — `fio` on `/tmp`" in md
    assert "[Shared Lustre 2.3 TiB IO benchmark](#shared-lustre-23-tib-io-benchmark) — `fio` on `/code`" in md
    assert "does 10 s of timed IO" in md and "quick profile shortened it to 10 s" in md
    assert "3 min of timed IO" in render_report(view(two_groups())).markdown


@pytest.mark.parametrize("variant", ["no-targets", "targets", "grouped", "two-nodes"])
def test_rendered_storage_passes_lint(tmp_path, variant):
    from clustereval.records.run import NodeInfo, PreflightRecord
    from clustereval.report.lint import lint_file

    rec = two_groups()
    targets = [StorageTarget("/code", bw_mib_s={"16KiB-read": 400.0}),
               StorageTarget("/", iops={"16KiB-read": 100000.0})] if variant == "targets" else None
    if variant == "grouped":
        rec = record([lustre("/code", 2.3, "10.0.0.1@tcp:/a", 5.6), lustre("/data", 25, "10.0.0.2@tcp:/b", 5.0),
                      lustre("/home", 25, "10.0.0.3@tcp:/c", 5.0)])
    v = view(rec, targets)
    if variant == "two-nodes":
        cw = ConcurrentWrite("/code", int(2.3 * TIB), "lustre",
                             nodes=[NodeWrite("n0", 2**30, 2.5, 409.6), NodeWrite("n1", 2**30, 2.7, 379.3)],
                             aggregate_mib_s=758.5)
        rec = record([lustre("/code", 2.3, "10.0.0.1@tcp:/a", 5.0)], nodes=2, concurrent=cw)
        v = view(rec)
        v.records["preflight"] = PreflightRecord(nodes=[NodeInfo("n0", "10.0.0.1", 0, "gpu-a"),
                                                         NodeInfo("n1", "10.0.0.2", 1, "gpu-b")], passed=True)
    path = tmp_path / "r.md"
    md = render_report(v).markdown
    path.write_text(md)
    assert lint_file(path) == [], md
    if variant == "two-nodes":
        assert "| `gpu-a(node0)` | 2.50 | 409.6 |" in md
    if variant == "grouped":
        assert md.count("### Shared Lustre") == 2  # /data and /home share a table, /code has its own
