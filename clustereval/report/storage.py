"""The Storage section: Existing Partitions, Introduction, the local and shared IO benchmark
tables, the concurrent write, and the storage Findings. Pure: records (and targets) in, markdown out.

Every number the prose quotes comes from the same formatter as its table cell, so prose and
table agree by construction.
"""

from __future__ import annotations

import dataclasses
import re

from clustereval.analysis.storage import (
    EQUIVALENCE_TOLERANCE,
    TARGET_TOLERANCE,
    Judgement,
    group_by_measurement,
    judge,
    same_volume,
    target_for,
)
from clustereval.config import StorageTarget
from clustereval.probes.fio import FIO_URL
from clustereval.records import Finding, Gap
from clustereval.records.environment import FilesystemInfo
from clustereval.records.storage import (
    BLOCK_SIZE,
    IODEPTH,
    NUM_JOBS,
    OPS,
    ConcurrentWrite,
    MountScan,
    StorageRecord,
)
from clustereval.report.fold import (
    Measure,
    Unit,
    fleet_facts,
    folds,
    left_out_sentence,
    run_files,
    summary_sentences,
)
from clustereval.report.gaps import say
from clustereval.report.markdown import Document
from clustereval.report.render import RunView, SectionResult, render_gaps, setup_gaps
from clustereval.report.units import (
    fmt_bw,
    fmt_iops_m,
    fmt_latency,
    fmt_ratio,
    fmt_target,
    iec_df,
    iec_whole,
    joined,
)

DD_URL = "https://www.gnu.org/software/coreutils/manual/html_node/dd-invocation.html"
# the layout tools, linked where the report first names them
TOOL_URLS = {
    "lfs": "https://doc.lustre.org/lustre_manual.xhtml#userutilities.lfs",
    "mmlsfs": "https://www.ibm.com/docs/en/storage-scale?topic=reference-mmlsfs-command",
    "mmlsdisk": "https://www.ibm.com/docs/en/storage-scale?topic=reference-mmlsdisk-command",
    "beegfs-ctl": "https://doc.beegfs.io/latest/advanced_topics/striping.html",
    "nfsstat": "https://man7.org/linux/man-pages/man8/nfsstat.8.html",
}
TABLE_HEADERS = ["size", "rw", "latency (msec)", "bw (MiBps)", "IOPS (M)"]
RATIO_HEADER = "local/shared ×"
PARALLEL_TYPES = {"lustre": "Lustre", "gpfs": "GPFS (IBM Storage Scale)", "beegfs": "BeeGFS", "nfs": "NFS",
                  "nfs4": "NFS", "cephfs": "CephFS", "wekafs": "WekaFS", "glusterfs": "GlusterFS"}
TYPE_LABELS = {"lustre": "Lustre", "gpfs": "GPFS", "beegfs": "BeeGFS", "nfs": "NFS", "nfs4": "NFS",
               "cephfs": "CephFS", "ceph": "CephFS", "wekafs": "WekaFS", "glusterfs": "GlusterFS",
               "fuse.glusterfs": "GlusterFS"}
STRIPED_TYPES = {"lustre", "beegfs", "gpfs"}
CONDITIONS = "from one client with 16 jobs, 4 KiB blocks and `O_DIRECT`"
CONCURRENT_CRITERIA = "a node whose write failed or that the fleet-relative verdict named slow against its peers"


# ---- the fio link and labels --------------------------------------------------------------


def _fio_linked(doc: Document, gaps: list[Gap]) -> list[Gap]:
    """The Gaps, with `fio` linked at its first mention when no Introduction item introduced it (a
    node without `fio` has no fio item; records written before the Gap linked it say it plainly)."""
    if f"[`fio`]({FIO_URL})" in doc.render():
        return gaps
    out = list(gaps)
    for i, g in enumerate(out):
        if "`fio`" in g.text and "[`fio`]" not in g.text:
            out[i] = dataclasses.replace(g, text=g.text.replace("`fio`", f"[`fio`]({FIO_URL})", 1))
            break
        if "[`fio`]" in g.text:
            break
    return out


def _key_words(key: str) -> str:
    """``16KiB-read`` -> ``16 KiB read``."""
    size, _, rw = key.partition("-")
    for unit in ("KiB", "MiB", "GiB"):
        size = size.replace(unit, f" {unit}")
    return f"{size} {rw}"


def type_label(fstype: str) -> str:
    return TYPE_LABELS.get(fstype.lower(), fstype)


def _code(path: str) -> str:
    return f"`{path}`"


def _scans(rec: StorageRecord) -> list[MountScan]:
    return ([rec.local] if rec.local else []) + list(rec.shared)


def _has_figures(scan: MountScan | None) -> bool:
    return scan is not None and any(not c.error for c in scan.cells)


# ---- the section ------------------------------------------------------------------------------


def render_storage(view: RunView, doc: Document) -> SectionResult:
    rec: StorageRecord | None = view.get("storage")
    if rec is None:
        return SectionResult()
    targets = list(view.targets) if getattr(view, "targets", None) is not None else list(rec.targets)
    doc.heading(2, "Storage")
    write_partitions(doc, rec)
    write_introduction(doc, view, rec)
    local = rec.local if _has_figures(rec.local) else None
    if local:
        write_local(doc, local)
    shared_groups = group_by_measurement([s for s in rec.shared if _has_figures(s)])
    headings = shared_headings(shared_groups)
    for heading, group in zip(headings, shared_groups, strict=True):
        write_shared(doc, heading, group, local, first=group is shared_groups[0])
    if rec.concurrent and rec.num_nodes >= 2 and any(not w.error for w in rec.concurrent.nodes):
        write_concurrent(doc, rec.concurrent, view)
    gaps = _fio_linked(doc, list(rec.gaps) + [say(g) for g in no_shared_gap(rec)]
                       + setup_gaps(view, "storage", rec.gaps))
    render_gaps(doc, gaps)
    findings = storage_findings(rec, targets)
    return SectionResult(findings=findings, gaps=gaps)


def no_shared_gap(rec: StorageRecord) -> list[Gap]:
    """The runbook scans a shared filesystem too; with none named that scan did not run (said once)."""
    if rec.shared_paths or rec.shared:
        return []
    if rec.shared_paths is None and (any(p.shared for p in rec.partitions)
                                     or any("shared" in say(g).text.lower() for g in rec.gaps)):
        return []  # a record from before shared_paths was kept: only a run with no shared mount at all counts
    local_figures = _has_figures(rec.local)
    return [Gap(phase="storage", kind="storage.no-shared",
                facts={"num_nodes": rec.num_nodes, "local_figures": local_figures})]


# ---- Existing Partitions ----------------------------------------------------------------------


def _source_cell(fs: FilesystemInfo) -> str:
    if fs.shared or ":" in fs.source or "@" in fs.source:
        return _code(fs.source)
    return fs.source


def write_partitions(doc: Document, rec: StorageRecord) -> None:
    doc.heading(3, "Existing Partitions", note="mount inventory")
    rows = dedupe_partitions(rec.partitions)
    doc.table(["mount", "size", "type", "device / server"],
              [[_code(fs.mount), iec_df(fs.size_bytes), type_label(fs.fstype), _source_cell(fs)] for fs in rows],
              align="lrll")
    facts = partition_facts(rows)
    if facts:
        doc.para(" ".join(facts))


def dedupe_partitions(partitions: list[FilesystemInfo]) -> list[FilesystemInfo]:
    """One row per backing volume, ``/`` first (a ``/tmp`` on ``/`` is not a second disk)."""
    out: list[FilesystemInfo] = []
    for fs in sorted(partitions, key=lambda f: f.mount != "/"):
        if any(o.fstype == fs.fstype and same_volume(o.source, o.mount, fs.source, fs.mount) for o in out):
            continue
        out.append(fs)
    return out


def _server(source: str) -> str:
    if "@" in source:  # lustre: 10.4.138.63@tcp:/fsname
        return source.split(":/")[0]
    if ":" in source:  # nfs: server:/export
        return source.split(":", 1)[0]
    return ""


def partition_facts(rows: list[FilesystemInfo]) -> list[str]:
    """Facts that hold for several rows, said once after the table."""
    facts = []
    shared = [fs for fs in rows if fs.shared]
    by_type: dict[str, list[FilesystemInfo]] = {}
    for fs in shared:
        by_type.setdefault(type_label(fs.fstype), []).append(fs)
    for label, group in by_type.items():
        if len(group) < 2:
            continue
        names = joined([_code(fs.mount) for fs in group])
        servers = {_server(fs.source) for fs in group}
        if len(servers) == 1 and "" not in servers:
            facts.append(f"{names} are separate {label} filesystems served from {_code(servers.pop())}.")
        elif "" not in servers:
            facts.append(f"{names} are separate {label} filesystems on separate servers.")
    for fs in shared:
        if fs.product and fs.product.lower() != fs.fstype.lower():
            facts.append(f"{_code(fs.mount)} is mounted as {fs.fstype}, a share protocol; the product behind it "
                         f"is {fs.product}.")
    return facts


# ---- Introduction -----------------------------------------------------------------------------


def _volume_words(scan: MountScan) -> str:
    """``/tmp`` on ``/`` (252 GiB ext4)."""
    where = f"{_code(scan.mount)}"
    if scan.volume_mount and scan.volume_mount != scan.mount:
        where += f" on {_code(scan.volume_mount)}"
    return f"{where} ({iec_df(scan.size_bytes)} {type_label(scan.fstype)})"


def measured_words(scan: MountScan) -> str:
    """What one scan measured, exactly: ``file sizes 16 KiB, 1 MiB and 1 GiB (…), each read and write``
    when every size has both, else the cells one by one (``16 KiB read and write and 1 MiB read``)."""
    sizes = _sizes_of(scan)
    both = all(scan.cell(size, rw) for size in sizes for rw in OPS)
    if both:
        labels = joined([iec_whole(s) for s in sizes])
        if len(sizes) == 3:
            return f"file sizes {labels} (correspondingly small, medium and large), each read and write"
        return f"file size{'s' if len(sizes) > 1 else ''} {labels}, {'each ' if len(sizes) > 1 else ''}read and write"
    parts = []
    for size in sizes:
        ops = [rw for rw in OPS if scan.cell(size, rw)]
        parts.append(f"{iec_whole(size)} {' and '.join(ops)}")
    return joined(parts)


def _num_runs(scan: MountScan) -> int:
    return sum(1 for size in _sizes_of(scan) for rw in OPS if scan.cell(size, rw))


def fio_description(view: RunView, rec: StorageRecord, scan: MountScan) -> str:
    """The runs this scan measured (only those with figures), then how every run works."""
    timed = (f"{rec.published_runtime_s // 60} min" if rec.runtime_s == rec.published_runtime_s
             else f"{rec.runtime_s} s")
    n = _num_runs(scan)
    text = (f"{n} run{'s' if n != 1 else ''} against one folder: {measured_words(scan)}. Every run starts {NUM_JOBS} "
            f"parallel jobs; each job reads "
            f"or writes its own file of that size sequentially in {iec_whole(int(BLOCK_SIZE[:-1]) * 1024)} blocks "
            f"through Linux asynchronous IO (`libaio`) with {IODEPTH} requests in flight and `O_DIRECT`, which "
            "bypasses the page cache so the numbers are the filesystem's, not RAM's. After "
            f"{rec.ramp_s} s of ramp-up each run does {timed} of timed IO, looping over its file, and then deletes "
            "the files (`--unlink=1`)")
    if rec.runtime_s != rec.published_runtime_s:
        text += (f"; the published recipe times {rec.published_runtime_s // 60} min per run, and this run's "
                 f"{view.profile} profile shortened it to {rec.runtime_s} s")
    return text + "."


def not_run_words(rec: StorageRecord) -> str:
    """What a storage section without a figure says in its Introduction: the scans did not run, and where to read why."""
    missing = [g.node for g in rec.gaps if g.kind == "storage.fio-missing"
               or (not g.kind and "`fio` is not installed" in g.text)]  # an older run's worded Gap
    why = f"`fio` is not installed on {joined(missing)}" if missing else "no run produced figures"
    return f"the local and shared scans did not run: {why} (the Gaps below say what to do)."


def _tool_links(view: RunView, rec: StorageRecord) -> str:
    links = [f"[`{f.split('/')[-1]}`]({view.raw_rel}/{f})" for f in rec.tool_files]
    return f" ({', '.join(links)})" if links else ""


def write_introduction(doc: Document, view: RunView, rec: StorageRecord) -> None:
    items: list[str] = []
    described: MountScan | None = None
    fio = (f"[`fio`]({FIO_URL}) (the Flexible I/O Tester, a third-party tool), started by our runner"
           f"{_tool_links(view, rec)}")
    if _has_figures(rec.local):
        assert rec.local is not None
        items.append(f"{fio} — local disk scan on {_volume_words(rec.local)}, the baseline the shared tables compare "
                     "against: " + fio_description(view, rec, rec.local))
        described = rec.local
    for scan in [s for s in rec.shared if _has_figures(s)]:
        text = (f"{fio} — " if described is None else "`fio` — ") + f"shared scan on {_volume_words(scan)}"
        if described is None or measured_words(described) != measured_words(scan):
            text += ": " + (fio_description(view, rec, scan) if described is None else
                            f"{_num_runs(scan)} run{'s' if _num_runs(scan) != 1 else ''}, {measured_words(scan)}.")
        else:
            text += f": the same {_num_runs(scan)} run{'s' if _num_runs(scan) != 1 else ''}."
        described = described or scan
        if scan.stands_for:
            others = joined([_code(p) for p in scan.stands_for])
            verb = "is" if len(scan.stands_for) == 1 else "are"
            text += (f" {others} {verb} the same type and size ({iec_df(scan.size_bytes)} "
                     f"{type_label(scan.fstype)}), so these figures stand for {'it' if len(scan.stands_for) == 1 else 'them'} too.")
        if scan.same_volume:
            others = joined([_code(p) for p in scan.same_volume])
            text += f" {others} {'is' if len(scan.same_volume) == 1 else 'are'} on the same volume."
        items.append(text)
    cw = rec.concurrent
    if cw and rec.num_nodes >= 2 and any(not w.error for w in cw.nodes):
        done = [w for w in cw.nodes if not w.error]
        items.append(f"[`dd`]({DD_URL}) — concurrent write on {_code(cw.mount)}: each of the {len(done)} nodes writes "
                     f"one {iec_whole(cw.bytes_per_node)} file there with `O_DIRECT` (`oflag=direct`, 1 MiB blocks), "
                     "all started at the same moment.")
    if not items:  # nothing measured: the Introduction still says which pass did not run, and why
        doc.heading(3, "Introduction", toc=False)
        doc.numbered([f"[`fio`]({FIO_URL}) (the Flexible I/O Tester, a third-party tool) — {not_run_words(rec)}"])
        return
    doc.heading(3, "Introduction", toc=False)
    doc.numbered(items)
    notes = ["In the tables, `latency (msec)` is the mean time one 4 KiB request took from submission to completion "
             f"(with {IODEPTH} requests in flight per job), `bw (MiBps)` is MiB (2²⁰ bytes) per second, and `IOPS (M)` is "
             "millions of 4 KiB requests per second."]
    if any(_has_figures(s) for s in rec.shared) and _has_figures(rec.local):
        notes.append(f"Each shared table ends with `{RATIO_HEADER}`: the local disk's bandwidth divided by the shared "
                     "mount's bandwidth in the same row, that is how many times slower the shared mount is; 1× would "
                     "mean as fast as the local disk.")
    measured = [s for s in rec.shared if _has_figures(s)]
    if len(measured) >= 2:
        groups = group_by_measurement(measured)
        rule = (f"Shared mounts share one table only if every bandwidth and IOPS cell differs by at most "
                f"{EQUIVALENCE_TOLERANCE:.0%} (`abs(a - b) / min(a, b)`); ")
        together = [g for g in groups if len(g) > 1]
        if together:
            rule += "; ".join(joined([_code(s.mount) for s in g]) + " met it" for g in together) + "."
        else:
            rule += "no two scanned mounts met it, so each has its own table."
        notes.append(rule)
    doc.para(" ".join(notes))


# ---- tables -----------------------------------------------------------------------------------


def fio_rows(scan: MountScan, grouped: bool, local: MountScan | None = None) -> list[list[str]]:
    rows = []
    for size in _sizes_of(scan):
        for rw in OPS:
            cell = scan.cell(size, rw)
            if cell is None:
                continue
            row = [iec_whole(size), rw, fmt_latency(cell.latency_msec), fmt_bw(cell.bw_mib_s, grouped),
                   fmt_iops_m(cell.iops)]
            if local is not None:
                base = local.cell(size, rw)
                row.append(fmt_ratio(base.bw_mib_s, cell.bw_mib_s) if base else "")
            rows.append(row)
    return rows


def _sizes_of(scan: MountScan) -> list[int]:
    """The file sizes this scan has figures for (a run that failed or was stopped measured nothing)."""
    return sorted({c.file_size_bytes for c in scan.cells if not c.error})


def write_local(doc: Document, scan: MountScan) -> None:
    doc.heading(3, "Local disk IO benchmark", note=f"`fio` on {_code(scan.mount)}")
    doc.para(f"{_volume_words(scan)[:-1]}, {scan.source}).")
    doc.table(TABLE_HEADERS, fio_rows(scan, grouped=True), align="rlrrr")
    doc.para(range_sentence(scan, grouped=True))


def range_sentence(scan: MountScan, grouped: bool) -> str:
    parts = []
    for rw, word in (("read", "Reads"), ("write", "Writes")):
        vals = [c.bw_mib_s for c in scan.cells if c.rw == rw and not c.error]
        if not vals:
            continue
        lo, hi = fmt_bw(min(vals), grouped), fmt_bw(max(vals), grouped)
        parts.append(f"{word} ran at {lo} MiB/s" if lo == hi else f"{word} ran at {lo}–{hi} MiB/s")
    n = len(_sizes_of(scan))
    across = f" across the {n} file sizes." if n > 1 else f" at {iec_whole(_sizes_of(scan)[0])}."
    return " and ".join(parts).replace(" and Writes", " and writes") + across


def shared_headings(groups: list[list[MountScan]]) -> list[str]:
    """``Shared <type> IO benchmark``; the volume size is added where one type has several tables."""
    labels = [type_label(g[0].fstype) for g in groups]
    out = []
    for label, group in zip(labels, groups, strict=True):
        title = f"Shared {label} IO benchmark"
        if labels.count(label) > 1:
            title = f"Shared {label} {iec_df(group[0].size_bytes)} IO benchmark"
        n = 2
        base = title
        while title in out:
            title = base.replace(" IO benchmark", f" ({n}) IO benchmark")
            n += 1
        out.append(title)
    return out


def write_shared(doc: Document, heading: str, group: list[MountScan], local: MountScan | None, first: bool) -> None:
    lead = group[0]
    doc.heading(3, heading, note=f"`fio` on {joined([_code(s.mount) for s in group])}")
    sentence = f"{_volume_words(lead)[:-1]}, {_code(lead.source)})"
    if len(group) > 1:
        others = joined([f"{_code(s.mount)} ({iec_df(s.size_bytes)})" for s in group[1:]])
        sentence += (f"; {others} measured within {EQUIVALENCE_TOLERANCE:.0%} of these figures in every bandwidth and "
                     "IOPS cell, so this table stands for "
                     f"{'it' if len(group) == 2 else 'them'} too (each mount's own figures are in the raw folder)")
    doc.para(sentence + ".")
    if lead.layout and lead.layout.summary:
        doc.para(f"Layout of {_code(lead.mount)}: {link_tools(lead.layout.summary)}.")
    headers = TABLE_HEADERS + ([RATIO_HEADER] if local else [])
    doc.table(headers, fio_rows(lead, grouped=False, local=local), align="rlrrr" + ("r" if local else ""))
    text = range_sentence(lead, grouped=False)
    if local:
        text += ratio_sentence(lead, local, " Per row, {mount} is {span} slower than the local disk table above.")
    doc.para(text)


def ratio_sentence(scan: MountScan, local: MountScan, slower: str) -> str:
    """The ``local/shared ×`` span in words, quoting the column's cells; a value under 1 is a row
    where the shared mount was faster, so a mixed span is not called "slower"."""
    ratios = [r[-1] for r in fio_rows(scan, grouped=False, local=local) if r[-1]]
    if not ratios:
        return ""
    lo, hi = min(ratios, key=float), max(ratios, key=float)
    span = f"{lo}×" if lo == hi else f"{lo}× to {hi}×"
    if float(lo) >= 1:
        return slower.format(mount=_code(scan.mount), span=span)
    return (f" Per row, `{RATIO_HEADER}` runs from {span}; in the rows under 1× {_code(scan.mount)} was faster than "
            "the local disk table above.")


def link_tools(text: str) -> str:
    """Each backticked layout command becomes a link to its tool's documentation."""
    def repl(m: re.Match) -> str:
        url = TOOL_URLS.get(m.group(1).split(" ")[0])
        return f"[`{m.group(1)}`]({url})" if url else m.group(0)
    return re.sub(r"(?<!\[)`([^`]+)`", repl, text)


def write_concurrent(doc: Document, cw: ConcurrentWrite, view: RunView) -> None:
    ok = [w for w in cw.nodes if not w.error]
    doc.heading(3, "Concurrent write shared fs benchmark",
                note=f"{len(cw.nodes)}-node {iec_whole(cw.bytes_per_node)} `O_DIRECT` `dd`")
    doc.para(f"Every node wrote {iec_whole(cw.bytes_per_node)} to {_code(cw.mount)} "
             f"({iec_df(cw.size_bytes)} {type_label(cw.fstype)}) at the same moment; the aggregate is every byte "
             "written divided by the slowest node's time.")
    names = _node_labels(view)
    listed = ok
    if folds(len(cw.nodes)):  # at fleet size: the writers' figures over the fleet, and only the nodes to act on
        facts = fleet_facts(view)
        listed = [w for w in cw.nodes if w.error or facts.named("concurrent-write", names.get(w.node, w.node).strip("`"))]
        units = [Unit(names.get(w.node, f"`{w.node}`"), (w.mib_s,), f"writing to {_code(cw.mount)}") for w in ok]
        doc.para(" ".join(summary_sentences(units, [Measure("write rate", "MiB/s", lambda v: fmt_bw(v, grouped=True))],
                                            "node")
                          + [left_out_sentence(len(listed), len(cw.nodes), "node", CONCURRENT_CRITERIA,
                                               run_files(view.raw_rel, "storage"),
                                               lists="the table below lists, before its aggregate row, only")]))
    rows = [[names.get(w.node, w.node)] + (["failed", "failed"] if w.error else
                                           [f"{w.seconds:.2f}", fmt_bw(w.mib_s, grouped=True)]) for w in listed]
    rows.append(["aggregate", f"{max(w.seconds for w in ok):.2f}", fmt_bw(cw.aggregate_mib_s, grouped=True)])
    doc.table(["node", "time (s)", "write rate (MiBps)"], rows, align="lrr")


def _node_labels(view: RunView) -> dict[str, str]:
    """``hostname(nodeN)`` when the preflight recorded hostnames."""
    pre = view.get("preflight")
    out: dict[str, str] = {}
    for n in getattr(pre, "nodes", []) or []:
        host = n.hostname or n.name
        out[n.name] = f"`{host}(node{n.index})`"
    return out


# ---- Findings ---------------------------------------------------------------------------------


def measurement_line(scan: MountScan, grouped: bool) -> str:
    """``read / write: 16 KiB **a MiB/s / b MiB/s**, 1 MiB **c MiB/s / d MiB/s**, 1 GiB **e MiB/s / f MiB/s**``."""
    parts = []
    sizes = _sizes_of(scan)
    if all(scan.cell(size, rw) for size in sizes for rw in OPS):
        for size in sizes:
            r, w = scan.cell(size, "read"), scan.cell(size, "write")
            assert r is not None and w is not None
            parts.append(f"{iec_whole(size)} **{fmt_bw(r.bw_mib_s, grouped)} MiB/s / {fmt_bw(w.bw_mib_s, grouped)} MiB/s**")
        return "read / write: " + ", ".join(parts)
    # a partial scan: only the cells that were measured, each named
    for size in sizes:
        for rw in OPS:
            cell = scan.cell(size, rw)
            if cell:
                parts.append(f"{iec_whole(size)} {rw} **{fmt_bw(cell.bw_mib_s, grouped)} MiB/s**")
    return ", ".join(parts)


def _ask(scan: MountScan) -> str:
    sizes = _sizes_of(scan)
    cells = (f"{joined([iec_whole(s) for s in sizes])}, read and write"
             if all(scan.cell(size, rw) for size in sizes for rw in OPS) else measured_words(scan))
    ask = f"one expected value per measured cell — MiB/s or IOPS at {cells}, {CONDITIONS}"
    if scan.shared:
        ask += " — saying whether they are per client or per filesystem and which stripe count they assume"
    return ask


def _why_unpublished(scan: MountScan) -> str:
    fstype = scan.fstype.lower()
    product = PARALLEL_TYPES.get(fstype)
    if not scan.shared:
        return ("a local or cloud volume's rates are set by the device or volume type behind it, and no figures are "
                "published for this one")
    if product:
        tier = " (managed Lustre commonly 125–1000 MB/s per TiB)" if fstype == "lustre" else ""
        return (f"{product} is filesystem software and publishes no performance figures — throughput is a property "
                "of the deployment (the count of storage servers and targets, their backing devices, the network to "
                "them, the per-file stripe count), so the figures that exist are those of the service tier the "
                f"operator purchased, typically sold per TiB of capacity{tier}")
    return ("the throughput of a shared mount is a property of the deployment behind it (servers, their backing "
            "devices, the network to them), so the figures that exist are those of the service the operator "
            "purchased")


def _slowdown(scan: MountScan, local: MountScan | None) -> str:
    if local is None or not scan.shared:
        return ""
    return ratio_sentence(scan, local, " Per row it is {span} slower than the local disk (the `"
                          + RATIO_HEADER + "` column).")


def _siblings(scan: MountScan, partitions: list[FilesystemInfo], scanned: set[str]) -> str:
    """Shared volumes of another size that were not scanned: each has its own figures."""
    others = [fs for fs in dedupe_partitions(partitions)
              if fs.shared and fs.mount not in scanned and fs.mount != scan.volume_mount
              and iec_df(fs.size_bytes) != iec_df(scan.size_bytes)]
    if not others:
        return ""
    names = joined([f"{_code(fs.mount)} ({iec_df(fs.size_bytes)})" for fs in others])
    verb = "differs" if len(others) == 1 else "differ"
    return (f" {names} {verb} in size from {_code(scan.mount)}, so each has its own figures and needs its own scan; "
            "scan the one the workload writes to hardest first.")


def _operations(scan: MountScan, cells, grouped: bool) -> str:
    """Who is slowed, literally: the operation and its measured rate."""
    words = {(16 * 2**10, "read"): "reading small files (a `git clone`, a `pip install`)",
             (16 * 2**10, "write"): "writing small files",
             (2**30, "write"): "writing large files such as a checkpoint",
             (2**30, "read"): "reading large files such as a checkpoint"}
    out = []
    for c in cells:
        what = words.get((c.file_size_bytes, c.rw))
        cell = scan.cell(c.file_size_bytes, c.rw)
        if what and cell:
            out.append(f"{what} on {_code(scan.mount)} runs at the {iec_whole(c.file_size_bytes)} {c.rw} rate of "
                       f"{fmt_bw(cell.bw_mib_s, grouped)} MiB/s")
    return (" " + "; ".join(out)[0].upper() + "; ".join(out)[1:] + ".") if out else ""


def scan_finding(scan: MountScan, judgement: Judgement, local: MountScan | None,
                 partitions: list[FilesystemInfo], scanned: set[str]) -> Finding:
    grouped = not scan.shared
    subsystem = "shared network FS" if scan.shared else "local disk"
    where = _volume_words(scan)
    measured = f"{where}, one client, {NUM_JOBS} jobs, 4 KiB blocks, `O_DIRECT`, {measurement_line(scan, grouped)}."
    source = f" ({judgement.target.source})" if judgement.target and judgement.target.source else ""
    if judgement.verdict == "needs_input":
        text = measured + _slowdown(scan, local)
        kind = "provisioned figures are" if not scan.shared else "provisioned throughput is"
        text += (f" Its {kind} unknown, so there is no target to compare against: {_why_unpublished(scan)}.")
        if scan.layout and scan.layout.summary:
            text += f" Layout: {scan.layout.summary}."
        volume = scan.volume_mount if (not scan.shared and scan.volume_mount) else scan.mount
        if scan.shared and scan.fstype.lower() in PARALLEL_TYPES:
            text += (f" Obtain from the operator the service tier of {_code(volume)} ({iec_df(scan.size_bytes)}) "
                     f"and the figures it is supposed to hit: {_ask(scan)}; and the default stripe layout, since a "
                     "single-stripe file is served by one storage target regardless of filesystem size.")
        else:
            text += (f" Obtain from the operator the figures {_code(volume)} ({iec_df(scan.size_bytes)}) is "
                     f"supposed to hit: {_ask(scan)}.")
        if judgement.unjudged and judgement.target is not None:
            text += f" The figures given{source} have no entry for any measured cell."
        return Finding("needs_input", subsystem, text + (_siblings(scan, partitions, scanned) if scan.shared else ""))
    pairs = []
    for size in _sizes_of(scan):
        for c in judgement.cells:
            if c.file_size_bytes == size:
                pairs.append(f"{iec_whole(size)} {c.rw} {fmt_target(c.measured, c.unit, grouped)} against "
                             f"{fmt_target(c.target, c.unit, grouped)}")
    unjudged = ""
    if judgement.unjudged:
        unjudged = f" The operator's figures have no entry for {joined([_key_words(k) for k in judgement.unjudged])}."
    if judgement.verdict == "healthy":
        text = (f"{measured} Every cell with a target{source} is at or above it, or within "
                f"{TARGET_TOLERANCE:.0%} below: " + "; ".join(pairs) + "." + unjudged)
        return Finding("healthy", subsystem, text)
    short = judgement.short
    shortfalls = "; ".join(f"{iec_whole(c.file_size_bytes)} {c.rw} {fmt_target(c.measured, c.unit, grouped)} against "
                           f"{fmt_target(c.target, c.unit, grouped)} ({c.shortfall:.1%} below)" for c in short)
    text = (f"{measured} Below the operator's figures{source} by more than {TARGET_TOLERANCE:.0%}: {shortfalls}."
            + _operations(scan, short, grouped) + unjudged)
    return Finding("underperforming", subsystem, text)


def storage_findings(rec: StorageRecord, targets: list[StorageTarget]) -> list[Finding]:
    findings = []
    local = rec.local if _has_figures(rec.local) else None
    scanned = ({s.mount for s in _scans(rec)} | {s.volume_mount for s in _scans(rec)}
               | {p for s in _scans(rec) for p in (*s.stands_for, *s.same_volume)})
    for scan in ([local] if local else []) + [s for s in rec.shared if _has_figures(s)]:
        judgement = judge(scan, target_for(targets, scan))
        findings.append(scan_finding(scan, judgement, local, rec.partitions, scanned))
    return findings
