"""A ``DiffRecord`` -> the markdown of ``clustereval diff``: the same conventions as the report
(units on every number, ``<hostname>(node<N>):gpu<i>`` names, IEC sizes), lint-clean. Pure."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from clustereval.probes.fio import FIO_URL
from clustereval.records.diff import DiffRecord, Drift, FigureChange
from clustereval.report.environment import ACCESS_WORDS
from clustereval.report.environment import TOOL_URLS as ENV_TOOL_URLS
from clustereval.report.lint import code_spans
from clustereval.report.lint_rules import TOOLS
from clustereval.report.markdown import Document
from clustereval.report.storage import DD_URL
from clustereval.report.storage import TOOL_URLS as STORAGE_TOOL_URLS
from clustereval.report.units import plural

KIND_WORDS = {
    "msmf": "GPU MSMF",
    "mamf": "GPU MAMF",
    "lemon": "lemon GEMM per GPU",
    "hbm-copy": "HBM copy per GPU",
    "pcie-h2d": "PCIe host-to-device per GPU",
    "pcie-d2h": "PCIe device-to-host per GPU",
    "p2p-write": "GPU pair copy",
    "busbw-intra": "intra-node all-reduce busbw",
    "busbw-inter": "inter-node all-reduce busbw",
    "pairwise": "pairwise all-reduce busbw",
    "pairwise-node": "pairwise all-reduce busbw per node (its fastest pair)",
    "fio": "fio bandwidth per mount and cell",
    "concurrent-write": "concurrent write per node",
}
KIND_ORDER = list(KIND_WORDS)
UNIT_WORDS = {"GB/s": "GBps", "MiB/s": "MiBps", "TFLOPS": "TFLOPS"}
EXPANSIONS = ("MSMF is the maximum sustainable matmul FLOPS and MAMF the maximum achievable matmul FLOPS of a GPU; "
              "lemon GEMM is a fixed general matrix multiply on every GPU; HBM is a GPU's high-bandwidth memory; busbw is the all-reduce bus bandwidth; NCCL "
              "is the NVIDIA Collective Communications Library.")


TOOL_URLS = {**ENV_TOOL_URLS, **STORAGE_TOOL_URLS, "fio": FIO_URL, "dd": DD_URL,
             "dcgmi": "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",
             "torchrun": "https://docs.pytorch.org/docs/stable/elastic/run.html"}


def _tool(span: str) -> str:
    first = span.strip().split(" ")[0].rsplit("/", 1)[-1] if span.strip() else ""
    return first if first in TOOLS or re.fullmatch(r"[\w\-]+\.py", first) else ""


def link_tools(texts: Iterable[str], raw_rel: str) -> list[str]:
    """The report's sentences, each tool linked at its first mention (a diff has no Introduction)."""
    seen: set[str] = set()
    out = []
    for text in texts:
        for span, _ in code_spans(text):
            tool = _tool(span)
            if not tool or tool in seen:
                continue
            seen.add(tool)
            url = f"{raw_rel}/tools/{tool}" if tool.endswith(".py") else TOOL_URLS.get(tool)
            text = text.replace(f"`{span}`", f"[`{span}`]({url})" if url else span, 1)
        out.append(text)
    return out


def _stamp(stamp: str) -> str:
    parts = stamp.rstrip("Z").split("-")
    if len(parts) >= 4 and len(parts[3]) >= 4:
        return f"{parts[0]}-{parts[1]}-{parts[2]} {parts[3][:2]}:{parts[3][2:4]}"
    return stamp


def _num(value: float | None) -> str:
    if value is None:
        return "no result"
    return f"{value:,.0f}" if abs(value) >= 1000 else (f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}")


def _pct(frac: float | None) -> str:
    return "state changed" if frac is None else f"{frac * 100:+.1f}"


def _subject(c: FigureChange) -> str:
    return f"{c.subject} (earlier run: {c.old_subject})" if c.old_subject else c.subject


def _value(c: FigureChange, side: str) -> str:
    value = c.old_value if side == "old" else c.new_value
    state = c.old_state if side == "old" else c.new_state
    return _num(value) if value is not None else (state or "no result")


def _title(rec: DiffRecord) -> str:
    n = rec.new
    gpus = f" of {n.gpus_per_node}× {n.gpu_model}" if n.gpus_per_node and n.gpu_model else ""
    # the report's title form; the GPU part is where the comparison is said (the form allows text there only)
    if not gpus:
        return f"Cluster eval: {plural(max(n.num_nodes, 1), 'node')}"
    return f"Cluster eval: {plural(max(n.num_nodes, 1), 'node')}{gpus}, compared with an earlier run"


def _header(rec: DiffRecord, doc: Document, raw_rel: str) -> None:
    doc.para(f"# {_title(rec)}")
    hosts = ", ".join(f"`{h}`" for h in rec.new.hostnames)
    lines = [f"Datetime (UTC): {_stamp(rec.new.stamp)}, compared with the run of {_stamp(rec.old.stamp)}",
             f"Access: {ACCESS_WORDS.get(rec.new.access, rec.new.access or 'local execution')}",
             f"Nodes / GPUs: {plural(rec.new.num_nodes, 'node')}" + (f" ({hosts})" if hosts else "")
             + (f", {plural(rec.new.gpus_per_node, 'GPU')} each" if rec.new.gpus_per_node else "")]
    doc.bullets(lines)
    doc.para(f"Raw logs: [`{raw_rel}/`]({raw_rel}/).")
    doc.toc_here("Table of Contents")


def _runs(rec: DiffRecord, doc: Document) -> None:
    doc.heading(2, "Runs compared")
    o, n = rec.old, rec.new
    rows = [["report", f"`{o.id}`", f"`{n.id}`"],
            ["datetime (UTC)", _stamp(o.stamp), _stamp(n.stamp)],
            ["nodes", str(o.num_nodes), str(n.num_nodes)],
            ["GPUs per node", str(o.gpus_per_node), str(n.gpus_per_node)]]
    if o.gpu_model or n.gpu_model:
        rows.append(["GPU model", o.gpu_model or "not reported", n.gpu_model or "not reported"])
    if o.profile or n.profile:
        rows.append(["profile", o.profile or "not reported", n.profile or "not reported"])
    doc.table(["", "earlier run", "later run"], rows, "lll")
    if rec.same_cluster:
        doc.para(f"Both runs are of the same {plural(n.num_nodes, 'node')} in the same hostfile order, so each figure "
                 "is compared node by node and GPU by GPU.")
    else:
        doc.para("The two runs are of different clusters (or of the same hosts in another order): figures are compared "
                 "by node order and GPU index, so node N of one run stands against node N of the other.")
        doc.table(["node", "earlier run", "later run"],
                  [[f"node{p.index}", f"`{p.old}`" if p.old else "not in this run",
                    f"`{p.new}`" if p.new else "not in this run"] for p in rec.pairing], "lll")
    beyond, within = rec.beyond, rec.within
    tol = rec.fio_tolerance * 100
    unjudged = rec.not_judged
    doc.para(f"{EXPANSIONS} Each change is judged against the repeat noise both runs show: a figure's own repeats "
             "(a GPU's passes, a node pair's samples) or, for a figure measured once, the pooled repeats or the "
             "spread of its peers in the same run; the noise column is the change's standard error from both runs. "
             f"A change counts as beyond noise when the runs' repeats show it at {rec.confidence * 100:g}% confidence, "
             "corrected for the number of figures judged. fio and the concurrent write run once per cell and are "
             f"judged against a tolerance of {tol:g}% (`--fio-tolerance`). Of the "
             f"{plural(len(rec.changes), 'measurement')} both runs hold, {plural(len(beyond), 'measurement')} changed "
             f"beyond noise and {plural(len(within), 'measurement')} {'is' if len(within) == 1 else 'are'} within noise"
             + (f"; {plural(len(unjudged), 'measurement')} a run holds as one value with nothing to take its noise "
                "from, so the change is stated and not judged." if unjudged else "."))


def _beyond(rec: DiffRecord, doc: Document) -> None:
    beyond = rec.beyond
    if not beyond:
        return
    doc.heading(2, "Changes beyond noise")
    rows = [[KIND_WORDS.get(c.kind, c.kind), _subject(c), _value(c, "old"), _value(c, "new"),
             UNIT_WORDS.get(c.unit, c.unit), _pct(c.change_frac), _noise(c)]
            for c in sorted(beyond, key=lambda c: (KIND_ORDER.index(c.kind) if c.kind in KIND_ORDER else 99, c.id))]
    doc.table(["figure", "what", "earlier", "later", "unit", "change (%)", "noise (%)"], rows, "llrrlrr")
    for c in beyond:
        if c.change_frac is not None:
            continue
        doc.para(f"{_subject(c)}: {c.old_state} in the earlier run, {c.new_state} in the later run.")


def _within(rec: DiffRecord, doc: Document) -> None:
    within = rec.within
    if not within:
        return
    doc.heading(2, "Within noise")
    groups: dict[str, list[FigureChange]] = defaultdict(list)
    for c in within:
        groups[c.kind].append(c)
    rows = []
    for kind in sorted(groups, key=lambda k: KIND_ORDER.index(k) if k in KIND_ORDER else 99):
        items = groups[kind]
        moved = [c for c in items if c.change_frac is not None]
        big = max(moved, key=lambda c: abs(c.change_frac or 0.0)) if moved else None
        rows.append([KIND_WORDS.get(kind, kind), str(len(items)),
                     f"{_pct(big.change_frac)} ({_subject(big)})" if big else "no value in either run",
                     f"{max(c.noise_frac or 0.0 for c in items) * 100:.1f}"])
    doc.table(["figure", "figures", "largest change (%)", "noise (%)"], rows, "lrll")


def _noise(c: FigureChange) -> str:
    return f"{c.noise_frac * 100:.1f}" if c.noise_frac is not None else "no value"


def _not_judged(rec: DiffRecord, doc: Document) -> None:
    items = rec.not_judged
    if not items:
        return
    doc.heading(2, "Not judged")
    doc.para("These figures are one value in a run, with no repeat and no peers to take their noise from, so their "
             "change is stated and not judged.")
    rows = [[KIND_WORDS.get(c.kind, c.kind), _subject(c), _value(c, "old"), _value(c, "new"),
             UNIT_WORDS.get(c.unit, c.unit), _pct(c.change_frac)]
            for c in sorted(items, key=lambda c: (KIND_ORDER.index(c.kind) if c.kind in KIND_ORDER else 99, c.id))]
    doc.table(["figure", "what", "earlier", "later", "unit", "change (%)"], rows, "llrrlr")


def _one_sided(rec: DiffRecord, doc: Document) -> None:
    if not rec.one_sided:
        return
    doc.heading(2, "Present in one run only")
    rows = [["earlier run" if x.run == "old" else "later run", x.what if x.what != "figure" else
             KIND_WORDS.get(x.kind, x.kind), x.subject] for x in rec.one_sided]
    doc.table(["run", "what", "subject"], rows, "lll")


def _where(d: Drift) -> str:
    return ", ".join(f"`{w}`" for w in d.where) if d.where else "every node"


def _drift(rec: DiffRecord, doc: Document) -> None:
    if not rec.drift:
        return
    doc.heading(2, "Software and configuration drift")
    rows = [[d.item if d.category != "nccl-env" else f"`{d.item}`", f"`{d.old}`" if d.old else "not set",
             f"`{d.new}`" if d.new else "not set", _where(d)] for d in rec.drift]
    doc.table(["item", "earlier run", "later run", "where"], rows, "llll")


def _verdicts(rec: DiffRecord, doc: Document, raw_rel: str) -> None:
    if not rec.verdicts and not rec.phases and not rec.gaps_new and not rec.gaps_resolved:
        return
    doc.heading(2, "Verdicts, phases and gaps")
    if rec.verdicts:
        rows = [[v.subsystem or "run", ", ".join(v.old) or "no verdict", ", ".join(v.new) or "no verdict"]
                for v in rec.verdicts]
        doc.table(["subsystem", "earlier run", "later run"], rows, "lll")
        items = link_tools([f"**{v.subsystem}** — {t}" for v in rec.verdicts for t in v.new_texts], raw_rel)
        if items:
            doc.para("What the later report says of these subsystems:")
            doc.bullets(items)
    if rec.phases:
        doc.table(["phase", "earlier run", "later run"], [[p.phase, p.old, p.new] for p in rec.phases], "lll")
    if rec.gaps_new:
        doc.para("Gaps of the later run that the earlier run did not have:")
        doc.bullets(link_tools(rec.gaps_new, raw_rel))
    if rec.gaps_resolved:
        doc.para("Gaps of the earlier run that the later run no longer has:")
        doc.bullets(link_tools(rec.gaps_resolved, raw_rel))


def render_diff(rec: DiffRecord, raw_rel: str) -> str:
    """``raw_rel``: the later run's raw folder, as the diff report links it."""
    doc = Document()
    _header(rec, doc, raw_rel)
    _runs(rec, doc)
    _beyond(rec, doc)
    _within(rec, doc)
    _not_judged(rec, doc)
    _one_sided(rec, doc)
    _drift(rec, doc)
    _verdicts(rec, doc, raw_rel)
    return doc.render()
