"""The Compute section's GPU memory and links subsection, its Introduction item and its Findings
bullets, from the ``gpupass`` record and ``analysis/gpupass.judge``. Pure."""

from __future__ import annotations

from clustereval.analysis.gpupass import (
    HBM_TARGET_FRACTION,
    OUTLIER_BELOW,
    P2P_TARGET_FRACTION,
    PCIE_ALL_FRACTION,
    PCIE_BIDIR_FRACTION,
    PCIE_TARGET_FRACTION,
    Problem,
    Verdict,
    judge,
)
from clustereval.analysis.gpus import gpu_label
from clustereval.analysis.matmul import fmt_shape
from clustereval.probes.nvbandwidth import URL as NVBANDWIDTH_URL
from clustereval.records import Finding
from clustereval.records.gpupass import GpuPassRecord, NodePass, PassGpu
from clustereval.report.fold import (
    FleetFacts,
    Measure,
    Unit,
    folds,
    left_out_sentence,
    run_files,
    summary_sentences,
)
from clustereval.report.markdown import Document
from clustereval.report.render import RunView
from clustereval.report.units import iec

TITLE = "GPU memory and links"
SUBSYSTEM = "GPU memory and links"
# nvbandwidth's testcase -> the column of ours it stands beside
NVB_BESIDE = {"device_local_copy": ("HBM copy", lambda g: g.copy_gb_s),
              "host_to_device_memcpy_ce": ("H2D", lambda g: g.pcie_solo.h2d_gb_s if g.pcie_solo else None),
              "device_to_host_memcpy_ce": ("D2H", lambda g: g.pcie_solo.d2h_gb_s if g.pcie_solo else None),
              "host_to_device_bidirectional_memcpy_ce":
                  ("H2D, both ways", lambda g: g.pcie_solo.bidir_h2d_gb_s if g.pcie_solo else None),
              "device_to_host_bidirectional_memcpy_ce":
                  ("D2H, both ways", lambda g: g.pcie_solo.bidir_d2h_gb_s if g.pcie_solo else None)}


def verdict_of(rec: GpuPassRecord) -> Verdict:
    return judge(rec, hbm_target_gb_s=rec.target_hbm_copy_gb_s, pcie_target_gb_s=rec.target_pcie_gb_s,
                 nvlink_uni_gb_s=rec.target_nvlink_uni_gb_s)


def ran(rec: GpuPassRecord | None) -> bool:
    return bool(rec and any(g.copy_gb_s is not None or g.vote for n in rec.nodes for g in n.gpus))


def _gb(x: float | None) -> str:
    return f"{x:.1f}" if x is not None else ""


def intro_item(view: RunView, rec: GpuPassRecord) -> str:
    tool = f"[`gpu_pass.py`]({view.raw_rel}/{rec.tool_rel})" if rec.tool_rel else "`gpu_pass.py`"
    item = (f"{tool} — our GPU memory and links pass, on every GPU of every node: HBM (high-bandwidth memory) "
            "bandwidth as a device-local copy (bytes counted once) plus a read and a write kernel, every GPU at "
            "once; PCIe host↔device copies from pinned host memory, each direction alone and each while the other "
            "direction runs, one GPU at a time and then every GPU of a node at once, with the link's generation and "
            "width read back through NVML (NVIDIA Management Library); GPU-to-GPU copies for every pair where a node has several GPUs; a "
            "memory pattern test (zeros, ones, 0xAA, 0x55 and an address pattern, written over most of the free "
            "memory, then read back) with ECC (error-correcting code) counts, retired pages and remapped rows read "
            "before and after, and the kernel log's Xid (NVIDIA driver error) lines; and a correctness vote, the "
            "same seeded bf16 and fp32 matmuls in three rounds on every GPU, hashed, with the smallest checked "
            "against a CPU fp64 product.")
    if any(n.nvbandwidth and not n.nvbandwidth.startswith("error") for n in rec.nodes):
        item += (f" Where a node has NVIDIA's [`nvbandwidth`]({NVBANDWIDTH_URL}) installed, it ran too and its "
                 "figures stand beside ours.")
    return item


FLEET_KINDS = ("hbm-copy", "pcie-h2d", "pcie-d2h")  # the fleet-relative verdicts on this pass's figures
CRITERIA = (f"a GPU that missed a target, fell more than {OUTLIER_BELOW:.0%} below its type's median, failed a check "
            "or a copy, or was named slow against its peers by the fleet-relative verdict")


def render(doc: Document, view: RunView, rec: GpuPassRecord, findings: list[Finding],
           facts: FleetFacts | None = None) -> None:
    """``facts``: the fleet-relative verdicts, given when the section folds; this table folds above
    ``FOLD_NODES`` nodes (fold.py)."""
    v = verdict_of(rec)
    fold = facts if facts is not None and folds(len(rec.nodes)) else None
    doc.heading(3, TITLE, note="`gpu_pass.py`")
    bad = sorted({p.label for p in v.problems})
    gpus = [(n, g) for n in rec.nodes for g in n.gpus if g.copy_gb_s is not None or g.vote]
    if bad:
        doc.para(f"**Fail**: {', '.join(f'`{b}`' for b in bad)} (each named under Findings with its figures).")
    else:
        doc.para(f"**Pass**: {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} met every check of this pass.")
    doc.para(_targets_text(v, rec))
    headers = ["GPU", "HBM copy (GB/s)", "HBM read (GB/s)", "HBM write (GB/s)", "H2D (GB/s)", "D2H (GB/s)",
               "both ways H2D / D2H (GB/s)", "all GPUs at once H2D / D2H (GB/s)", "PCIe link", "memory test", "vote"]
    rows = []
    for n, g in gpus:
        label = gpu_label(n.hostname or n.node, n.index, g.gpu)
        solo, alone = g.pcie_solo, g.pcie_all
        miss = _missed(v, label)
        rows.append([f"`{label}`", _gb(g.copy_gb_s) + miss.get("copy", ""), _gb(g.read_gb_s), _gb(g.write_gb_s),
                     _gb(solo.h2d_gb_s) + miss.get("H2D", "") if solo else "",
                     _gb(solo.d2h_gb_s) + miss.get("D2H", "") if solo else "",
                     (f"{_gb(solo.bidir_h2d_gb_s)}{miss.get('H2D both ways', '')} / "
                      f"{_gb(solo.bidir_d2h_gb_s)}{miss.get('D2H both ways', '')}") if solo else "",
                     (f"{_gb(alone.h2d_gb_s)}{miss.get('H2D all GPUs at once', '')} / "
                      f"{_gb(alone.d2h_gb_s)}{miss.get('D2H all GPUs at once', '')}") if alone and len(n.gpus) > 1
                     else "",
                     _link(g), _memtest(g), _vote_cell(v, label)])
    keep = [i for i in range(len(headers)) if any(r[i] for r in rows)]  # a measure no GPU has is not a column
    listed = None
    if fold is not None:
        listed = _fold_rows(doc, view, fold, gpus, rows, keep, bad)
        rows = [r for r in rows if r[0].strip("`") in listed]
    if rows:
        doc.table([headers[i] for i in keep], [[r[i] or "failed" for i in keep] for r in rows],
                  "".join("l" if headers[i] in ("GPU", "memory test", "vote", "PCIe link") else "r" for i in keep))
    doc.para("H2D is host to device, D2H device to host; GB/s is 10⁹ bytes a second. Each copy is timed on its own, "
             "and a figure is the bytes of all its timed copies over their summed time; both ways is each direction "
             "while the other copies twice its bytes, as nvbandwidth's bidirectional testcases time it."
             + (" The PCIe link column is the generation × width NVML reported while the copies ran, against the most "
                "the GPU and its slot allow." if any(r[8] for r in rows) else ""))
    p2p_nodes = [n for n in rec.nodes if n.p2p]
    if fold is not None and p2p_nodes:
        p2p_nodes = _fold_p2p(doc, view, p2p_nodes, v)
    for n in p2p_nodes:
        _p2p(doc, n)
    _nvbandwidth(doc, rec, listed)
    _vote_text(doc, v)
    _health_text(doc, rec)
    findings += _findings(v, rec)


def _targets_text(v: Verdict, rec: GpuPassRecord) -> str:
    parts = []
    if v.hbm_target_gb_s:
        src = ("the operator's target" if v.hbm_target_source == "operator" else
               f"{HBM_TARGET_FRACTION:.0%} of the {v.spec.key if v.spec else 'GPU'}'s {v.spec.hbm_tb_s if v.spec else 0:g} "
               "TB/s HBM bandwidth, read and write traffic counted together")
        parts.append(f"HBM copy target {v.hbm_target_gb_s:.1f} GB/s ({src}; the HBM copy column)")
    targets = sorted(set(v.pcie_target_gb_s.values()))
    if targets:
        src = ("the operator's target" if v.pcie_target_source == "operator" else
               f"{PCIE_TARGET_FRACTION:.0%} of the link's maximum generation × width, per direction")
        parts.append(f"PCIe target {' / '.join(f'{t:.1f}' for t in targets)} GB/s ({src}; the H2D and D2H columns)")
    bidir = sorted(set(v.pcie_bidir_target_gb_s.values()))
    if bidir:
        src = ("of the operator's PCIe target" if v.pcie_target_source == "operator" else
               "of the link's maximum generation × width")
        parts.append(f"both ways {' / '.join(f'{t:.1f}' for t in bidir)} GB/s each direction "
                     f"({PCIE_BIDIR_FRACTION:.0%} {src}, since the two directions share the host's side of the link)")
    if any(len(n.gpus) > 1 and any(g.pcie_all for g in n.gpus) for n in rec.nodes):
        parts.append(f"all GPUs at once {PCIE_ALL_FRACTION:.0%} of the same GPU's copy alone (GPUs behind one PCIe "
                     "switch split its uplink)")
    if v.p2p_target_gb_s:
        parts.append(f"GPU pair copy target {v.p2p_target_gb_s:.1f} GB/s each way and "
                     f"{2 * v.p2p_target_gb_s:.1f} GB/s both directions summed ({P2P_TARGET_FRACTION:.0%} of the "
                     "NVLink unidirectional figure)")
    quick = " The quick profile's sizes ran (shorter copies)." if rec.quick else ""
    if not parts:
        return ("The spec table lists no HBM or PCIe figures for this GPU, so these bandwidths are judged against "
                f"the fleet alone (a GPU more than {OUTLIER_BELOW:.0%} below its type's median is named)." + quick)
    outliers = f" A GPU more than {OUTLIER_BELOW:.0%} below the fleet median of its type is named too." \
        if v.num_gpus > 2 else ""
    return "Targets: " + "; ".join(parts) + ". A figure under its target is marked in the table." + outliers + quick


def _missed(v: Verdict, label: str) -> dict[str, str]:
    """The marks of this GPU's cells under their target: what the judged figure's subject adds to the
    label ("H2D", "D2H both ways", ...; "copy" for the HBM copy) -> " (under X)"."""
    out = {}
    for j in v.judged:
        if not j.met and (j.subject == label or j.subject.startswith(label + " ")):
            what = j.subject[len(label):].strip() or "copy"
            out[what] = f" (under {j.bar:.1f})"
    return out


def _link(g: PassGpu) -> str:
    link = g.link
    gen = link.gen_under_load or link.gen_current
    width = link.width_under_load or link.width_current
    if not gen and not width:
        return ""
    return f"Gen{gen or '?'} x{width or '?'} of Gen{link.gen_max or '?'} x{link.width_max or '?'}"


def _memtest(g: PassGpu) -> str:
    if not g.mem_bytes_tested:
        return ""
    words = sum(m.num_words for m in g.mem_mismatches)
    return f"{iec(g.mem_bytes_tested)}: " + (f"{words} bad words" if words else "no error")


def _vote_cell(v: Verdict, label: str) -> str:
    kinds = {p.kind for p in v.problems if p.label == label}
    if "vote" in kinds:
        return "dissents"
    if "repeat" in kinds or "reference" in kinds:
        return "unstable" if "repeat" in kinds else "off the reference"
    return "agrees" if any(label in grp.members for grp in v.groups) else ""


def _p2p(doc: Document, n: NodePass) -> None:
    idx = sorted({c.src for c in n.p2p} | {c.dst for c in n.p2p})
    cells = {(c.src, c.dst): c for c in n.p2p}
    own = {g.gpu: g.copy_gb_s for g in n.gpus}
    rows = []
    for s in idx:
        row = [f"gpu{s}"]
        for d in idx:
            c = cells.get((s, d))
            if s == d:
                row.append(f"{_gb(own.get(s))} (own)" if own.get(s) is not None else "failed")
            else:
                row.append("failed" if c is None else ("no peer access" if not c.peer else
                                                       " / ".join(_gb(x) for x in (c.write_gb_s, c.read_gb_s,
                                                                                   c.bidir_gb_s) if x is not None)))
        rows.append(row)
    with_read = any(c.read_gb_s is not None for c in n.p2p)
    doc.para(f"GPU pairs of {n.hostname or n.node}(node{n.index}), GB/s: the row's GPU writing into the column's"
             + (", the row's GPU reading the column's memory" if with_read else "")
             + " and both directions at once (summed); the diagonal is the GPU's own HBM copy.")
    doc.table(["from \\ to", *[f"gpu{d}" for d in idx]], rows, "l" + "r" * len(idx))


def _nvbandwidth(doc: Document, rec: GpuPassRecord, listed: set[str] | None = None) -> None:
    """``listed``: at fleet size, the GPUs the table above lists; only their rows are written."""
    rows = []
    for n in rec.nodes:
        for f in n.nvb_figures:
            if f.testcase not in NVB_BESIDE or f.peer_gpu is not None:
                continue
            if listed is not None and gpu_label(n.hostname or n.node, n.index, f.gpu) not in listed:
                continue
            name, get = NVB_BESIDE[f.testcase]
            g = next((x for x in n.gpus if x.gpu == f.gpu), None)
            ours = get(g) if g else None
            ratio = f"{ours / f.gb_s:.3f}" if ours and f.gb_s else ""
            rows.append([f"`{gpu_label(n.hostname or n.node, n.index, f.gpu)}`", name, f"`{f.testcase}`",
                         _gb(ours), f"{f.gb_s:.1f}", ratio])
    if rows:
        versions = sorted({n.nvbandwidth for n in rec.nodes if n.nvbandwidth and not n.nvbandwidth.startswith("error")})
        doc.para(f"Beside `nvbandwidth` {', '.join(versions)} (its copy-engine testcases, the same directions):")
        doc.table(["GPU", "measure", "nvbandwidth testcase", "ours (GB/s)", "nvbandwidth (GB/s)", "ours / nvbandwidth"],
                  rows, "lllrrr")


def _fold_rows(doc: Document, view: RunView, facts: FleetFacts, gpus: list[tuple[NodePass, PassGpu]],
               rows: list[list[str]], keep: list[int], bad: list[str]) -> set[str]:
    """At fleet size: the fleet's figures per GPU type and the rule, before the table; returns the GPUs it lists."""
    units = []
    listed = set(bad)
    for (n, g), row in zip(gpus, rows, strict=True):
        label = gpu_label(n.hostname or n.node, n.index, g.gpu)
        solo = g.pcie_solo
        units.append(Unit(f"`{label}`", (g.copy_gb_s, g.read_gb_s, g.write_gb_s, solo.h2d_gb_s if solo else None,
                                         solo.d2h_gb_s if solo else None),
                          facts.group_of("hbm-copy", label) or g.name))
        if any(facts.named(k, label) for k in FLEET_KINDS) or any(not row[i] for i in keep):
            listed.add(label)
    gb = lambda x: f"{x:.1f}"  # noqa: E731 - the table's own format
    measures = [Measure(name, "GB/s", gb) for name in ("HBM copy", "HBM read", "HBM write", "H2D", "D2H")]
    doc.para(" ".join(summary_sentences(units, measures, "GPU")
                      + [left_out_sentence(len(listed), len(rows), "GPU", CRITERIA, run_files(view.raw_rel, "gpupass"))]))
    return listed


def _fold_p2p(doc: Document, view: RunView, nodes: list[NodePass], v: Verdict) -> list[NodePass]:
    """At fleet size: the GPU pair copies over the fleet, and only the nodes with a failed or slow pair."""
    slow = {p.label for p in v.problems if p.kind == "p2p-slow"}
    units = [Unit(f"`{gpu_label(n.hostname or n.node, n.index, c.src)}` to gpu{c.dst}", (c.write_gb_s,))
             for n in nodes for c in n.p2p if c.peer]
    listed = [n for n in nodes if any(c.write_gb_s is None or not c.peer for c in n.p2p)
              or any(gpu_label(n.hostname or n.node, n.index, g.gpu) in slow for g in n.gpus)]
    doc.para(" ".join(summary_sentences(units, [Measure("copy alone", "GB/s", lambda x: f"{x:.1f}")], "GPU pair")
                      + [left_out_sentence(len(listed), len(nodes), "node", "a pair that failed, had no peer access "
                                           "or missed its target", run_files(view.raw_rel, "gpupass"),
                                           lists="the GPU pair tables below cover only")]))
    return listed


def _vote_text(doc: Document, v: Verdict) -> None:
    if not v.groups:
        return
    parts = []
    for grp in v.groups:
        who = f"{len(grp.members)} {grp.name} GPU{'s' if len(grp.members) != 1 else ''}"
        facts = ([f"{grp.sm_count} SMs (streaming multiprocessors)"] if grp.sm_count else []) + [f"torch {grp.torch}"] \
            + ([f"CUDA {grp.cuda}"] if grp.cuda else [])
        parts.append(f"{who} ({', '.join(facts)}) voted on {grp.num_cases} matmuls")
    dissent = v.of("vote")
    doc.para("Correctness vote: " + "; ".join(parts) + ". GPUs of one type, SM (streaming multiprocessor) count "
             "and toolkit must return bit-identical products; " + (f"{len(dissent)} GPU{'s' if len(dissent) != 1 else ''} dissented "
                                           "(named under Findings)." if dissent else "every GPU agreed with its group.")
             + " Each GPU's three rounds must agree with each other, and the products small enough to check "
             "are within 1e-2 (bf16) or 1e-5 (fp32) relative error of the CPU fp64 product.")


def _health_text(doc: Document, rec: GpuPassRecord) -> None:
    read = [g for n in rec.nodes for g in n.gpus if g.health_before and g.health_after]
    if read:
        doc.para(f"NVML's memory-health counters were read before and after the pass on {len(read)} "
                 f"GPU{'s' if len(read) != 1 else ''}: uncorrectable ECC errors, retired pages and remapped rows.")
    unread = sorted({n.xid_unread for n in rec.nodes if n.xid_unread})
    if unread:
        doc.para("The kernel log could not be read for Xid lines: " + "; ".join(f"`{u}`" for u in unread) + ".")


def _words(p: Problem) -> str:
    f = p.facts
    if p.kind == "hbm-slow":
        return f"HBM copy {f['copy_gb_s']:.1f} GB/s, below its {f['target_gb_s']:.1f} GB/s target"
    if p.kind == "pcie-slow":
        got = " and ".join(f"{'H2D' if k == 'h2d_gb_s' else 'D2H'} {f[k]:.1f} GB/s" for k in ("h2d_gb_s", "d2h_gb_s")
                           if k in f)
        return f"PCIe {got}, below its {f['target_gb_s']:.1f} GB/s target"
    if p.kind == "pcie-bidir-slow":
        got = " and ".join(f"{'H2D' if k == 'bidir_h2d_gb_s' else 'D2H'} {f[k]:.1f} GB/s"
                           for k in ("bidir_h2d_gb_s", "bidir_d2h_gb_s") if k in f)
        return f"PCIe both ways {got}, below its {f['target_gb_s']:.1f} GB/s target each direction"
    if p.kind == "pcie-shared":
        got = " and ".join(f"{'H2D' if k == 'h2d_gb_s' else 'D2H'} {together:.1f} GB/s against {own:.1f} GB/s alone"
                           for k, (together, own) in f["copies"].items())
        return (f"PCIe with every GPU of its node copying at once {got}, under {f['fraction']:.0%} of its own copy "
                "(a PCIe switch shared with another GPU)")
    if p.kind == "pcie-link":
        return (f"PCIe link at Gen{f['gen'] or '?'} x{f['width'] or '?'} under load, of a possible "
                f"Gen{f['gen_max'] or '?'} x{f['width_max'] or '?'}")
    if p.kind == "p2p-slow":
        dst = f"`{f['dst_label']}`" if f.get("dst_label") else f"gpu{f['dst']}"
        if not f.get("peer", True):
            return f"no peer access to {dst}"
        names = {"write_gb_s": "copy to", "read_gb_s": "read from", "bidir_gb_s": "both directions with"}
        return "; ".join(f"{names[k]} {dst} at {value:.1f} GB/s, below its {bar:.1f} GB/s target"
                         for k, (value, bar) in f["copies"].items())
    if p.kind == "outlier":
        name = {"copy_gb_s": "HBM copy", "h2d_gb_s": "H2D", "d2h_gb_s": "D2H"}[f["measure"]]
        return (f"{name} {f['value']:.1f} GB/s, {f['below']:.1%} below the fleet median of {f['fleet_median']:.1f} GB/s "
                f"(its node's median {f['node_median']:.1f} GB/s)")
    if p.kind == "memory":
        return (f"memory pattern test: {f['num_words']} words of 8 bytes read back wrong under the {f['pattern']} "
                f"pattern, the first at offset `{f['offset_bytes']:#x}` of the {iec(f['bytes_tested'])} tested")
    if p.kind == "ecc":
        grew = "; ".join(f"{k.replace('_', ' ')} {a} → {b}" for k, (a, b) in f["grew"].items())
        flags = ", ".join(k.replace("_", " ") for k in f["flags"])
        return "NVML memory health: " + "; ".join(x for x in (grew, flags) if x) + " during the pass"
    if p.kind == "vote":
        return (f"computed other bits than the majority of its {f['group_size']} GPUs for "
                + ", ".join(f["cases"]) + " in the correctness vote")
    if p.kind == "repeat":
        return (f"its own {f['num_rounds']} rounds of the {f['dtype']} {fmt_shape(f['shape'])} matmul gave "
                f"{f['num_distinct']} distinct values")
    if p.kind == "reference":
        return (f"the {f['dtype']} {fmt_shape(f['shape'])} matmul is {f['rel_err']:.2e} off the CPU fp64 "
                f"product, past its {f['tolerance']:.0e} tolerance")
    if p.kind == "xid":
        return "new Xid lines in the kernel log during the pass: " + "; ".join(f"`{x}`" for x in f["lines"][:3])
    return f"a step failed: `{f.get('error', '')}`"


def span(xs: list[float]) -> str:
    low, high = f"{min(xs):.1f}", f"{max(xs):.1f}"
    return f"{low}–{high} GB/s" if low != high else f"{low} GB/s"


def _findings(v: Verdict, rec: GpuPassRecord) -> list[Finding]:
    by_label: dict[str, list[str]] = {}
    for p in v.problems:
        by_label.setdefault(p.label, []).append(_words(p))
    judged = [j.to_dict() for j in v.judged]
    out = [Finding("underperforming", SUBSYSTEM, f"`{label}` — " + "; ".join(parts) + ".",
                   [d for d in judged if d["subject"].startswith(label) and not d["met"]])
           for label, parts in by_label.items()]
    if out:
        return out
    gpus = [g for n in rec.nodes for g in n.gpus if g.copy_gb_s is not None]
    if not gpus:
        return out
    copies = [g.copy_gb_s for g in gpus if g.copy_gb_s is not None]
    h2d = [g.pcie_solo.h2d_gb_s for g in gpus if g.pcie_solo and g.pcie_solo.h2d_gb_s is not None]
    voted = [grp for grp in v.groups if len(grp.members) > 1]
    vote = ("every GPU agreed with its group in the correctness vote" if voted else
            "the one GPU's correctness-vote rounds agreed with each other and with the CPU fp64 product (a vote "
            "needs two GPUs of a type)")
    text = (f"HBM copy {span(copies)}" + (f", PCIe H2D {span(h2d)}" if h2d else "")
            + f" on {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}, every figure at or above its target; the memory "
            f"pattern test found no error and {vote}.")
    if v.hbm_target_gb_s and v.pcie_target_gb_s:
        return [Finding("healthy", SUBSYSTEM, text, judged)]
    return [Finding("needs_input", SUBSYSTEM, text.replace(", every figure at or above its target", "")
                    + " There are no HBM and PCIe figures for this GPU in the spec table to judge the bandwidths "
                    "against: obtain the vendor's HBM bandwidth and PCIe generation and width, or set "
                    "`hbm_copy_gb_s` and `pcie_gb_s` under `[targets]`.", judged)]
