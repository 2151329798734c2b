"""Verdicts of the GPU memory and links pass, from its record alone: targets (the spec table or the
operator's), fleet outliers, memory errors, the correctness vote. Pure.

The vote: GPUs of one group (same name, SM count, torch and CUDA toolkit) must produce bit-identical
products of the same seeded matmul (cuBLAS documents bit-wise reproducibility for one problem on one
architecture, SM count and toolkit). For each matmul case the hash most GPUs of the group produced is
the majority; a GPU with another hash is a dissenter. Without a strict majority (two GPUs that differ)
every GPU of that case is named, since the vote cannot tell which is wrong. Every GPU's own repeats
must agree, and each checked product must be within its tolerance of the CPU fp64 reference.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from clustereval.analysis.gpus import gpu_label
from clustereval.analysis.rules import Judged, rule
from clustereval.analysis.rules import judge as judge_figure
from clustereval.analysis.specs import GpuSpec, lookup_gpu
from clustereval.records.gpupass import GpuPassRecord, NodePass, PassGpu, PcieRates

# the fractions of the rules table (analysis/rules.py) this pass is judged by
HBM_TARGET_FRACTION = rule("gpupass.hbm-copy").fraction  # device-local copy vs half the spec's HBM TB/s
PCIE_TARGET_FRACTION = rule("gpupass.pcie").fraction  # pinned copies vs gen × width (Azure's H200 check: 48 of 63.0)
PCIE_BIDIR_FRACTION = rule("gpupass.pcie-bidir").fraction  # each direction of both at once, vs gen × width
PCIE_ALL_FRACTION = rule("gpupass.pcie-all").fraction  # every GPU of the node at once, vs the GPU's own copy alone
P2P_TARGET_FRACTION = rule("gpupass.p2p-write").fraction  # a GPU pair's copy vs the NVLink unidirectional figure
OUTLIER_BELOW = 0.05  # a GPU more than 5% below the fleet median of its GPU type is named


def pcie_gb_s(gen: int | None, lanes: int | None) -> float | None:
    """One direction's payload rate of a PCIe link, GB/s: transfer rate × lanes × encoding / 8."""
    if not gen or not lanes:
        return None
    rate_gt_s = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}.get(gen)
    if rate_gt_s is None:
        return None
    encoding = 0.8 if gen <= 2 else (128 / 130 if gen <= 5 else 242 / 256)
    return round(rate_gt_s * lanes * encoding / 8, 1)


@dataclass
class Problem:
    """One thing wrong with one GPU (or a node, for its kernel log): its kind and facts; the report
    words it."""

    label: str  # <hostname>(node<N>):gpu<i>, or <hostname>(node<N>) for a node's kernel log
    kind: str  # hbm-slow | pcie-slow | pcie-bidir-slow | pcie-shared | pcie-link | p2p-slow | outlier | memory | ecc
    # | vote | repeat | reference | xid | error
    facts: dict = field(default_factory=dict)


@dataclass
class VoteGroup:
    name: str
    sm_count: int
    torch: str
    cuda: str
    members: list[str] = field(default_factory=list)
    num_cases: int = 0


@dataclass
class Verdict:
    spec: GpuSpec | None = None
    hbm_target_gb_s: float | None = None
    hbm_target_source: str = ""  # "operator" | "spec"
    pcie_target_gb_s: dict[str, float] = field(default_factory=dict)  # label -> target
    pcie_target_source: str = ""  # "operator" | "link" | "spec"
    pcie_bidir_target_gb_s: dict[str, float] = field(default_factory=dict)  # label -> each direction's bar
    p2p_target_gb_s: float | None = None
    nvlink_uni_gb_s: float | None = None  # the figure the pair copies are judged against
    nvlink_source: str = ""  # "operator" | "spec"
    judged: list[Judged] = field(default_factory=list)  # every figure this pass judged, met or not
    groups: list[VoteGroup] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    num_gpus: int = 0

    def of(self, *kinds: str) -> list[Problem]:
        return [p for p in self.problems if p.kind in kinds]


def _all(rec: GpuPassRecord) -> list[tuple[NodePass, PassGpu, str]]:
    return [(n, g, gpu_label(n.hostname or n.node, n.index, g.gpu)) for n in rec.nodes for g in n.gpus]


def judge(rec: GpuPassRecord, *, hbm_target_gb_s: float | None = None, pcie_target_gb_s: float | None = None,
          nvlink_uni_gb_s: float | None = None) -> Verdict:
    """Every verdict of the pass; operator targets, when given, replace the spec's."""
    gpus = _all(rec)
    v = Verdict(num_gpus=sum(1 for _, g, _ in gpus if g.copy_gb_s is not None or g.vote))
    names = [g.name for _, g, _ in gpus if g.name]
    v.spec = lookup_gpu(names[0]) if names else None
    if hbm_target_gb_s:
        v.hbm_target_gb_s, v.hbm_target_source = hbm_target_gb_s, "operator"
    elif v.spec and v.spec.hbm_tb_s:
        v.hbm_target_gb_s, v.hbm_target_source = round(v.spec.hbm_tb_s * 1000 / 2 * HBM_TARGET_FRACTION, 1), "spec"
    nvlink = nvlink_uni_gb_s or (v.spec.nvlink_uni_gb_s if v.spec else None)
    v.p2p_target_gb_s = round(nvlink * P2P_TARGET_FRACTION, 1) if nvlink else None
    v.nvlink_uni_gb_s, v.nvlink_source = nvlink or None, ("operator" if nvlink_uni_gb_s else "spec")
    for n, g, label in gpus:
        _gpu(v, n, g, label, pcie_target_gb_s)
    # CPU stand-ins time host memory on a shared machine: their rates prove the logic, not hardware
    _outliers(v, [x for x in gpus if x[0].device != "cpu"])
    for n in rec.nodes:
        node = f"{n.hostname or n.node}(node{n.index})"
        if n.new_xids:
            v.problems.append(Problem(node, "xid", {"lines": list(n.new_xids)}))
        _p2p(v, n)
    _vote(v, gpus)
    return v


def _gpu(v: Verdict, n: NodePass, g: PassGpu, label: str, pcie_target: float | None) -> None:
    if g.copy_gb_s is not None and v.hbm_target_gb_s:
        hbm_ref = v.hbm_target_gb_s / (HBM_TARGET_FRACTION if v.hbm_target_source == "spec" else 1.0)
        j = judge_figure("gpupass.hbm-copy", label, g.copy_gb_s, hbm_ref, v.hbm_target_source)
        v.judged.append(j)
        if not j.met:
            v.problems.append(Problem(label, "hbm-slow", {"copy_gb_s": g.copy_gb_s, "target_gb_s": v.hbm_target_gb_s}))
    link = g.link
    gen_max = link.gen_gpu_max if link.gen_gpu_max and link.gen_max and link.gen_gpu_max < link.gen_max else link.gen_max
    target = pcie_target
    source = "operator" if pcie_target else ""
    limit: float | None = None
    if target:
        v.pcie_target_source = "operator"
    else:
        limit = pcie_gb_s(gen_max, link.width_max) or (pcie_gb_s(v.spec.pcie_gen, v.spec.pcie_lanes) if v.spec else None)
        target = round(limit * PCIE_TARGET_FRACTION, 1) if limit else None
        if target:
            source = "link" if link.width_max else "spec"
            v.pcie_target_source = v.pcie_target_source or source
    ref = pcie_target or limit
    if target:
        v.pcie_target_gb_s[label] = target
    gen_now = link.gen_under_load
    width_now = link.width_under_load or link.width_current
    if (gen_now and gen_max and gen_now < gen_max) or (width_now and link.width_max and width_now < link.width_max):
        v.problems.append(Problem(label, "pcie-link", {"gen": gen_now, "width": width_now, "gen_max": gen_max,
                                                       "width_max": link.width_max}))
    solo = g.pcie_solo
    if solo and ref:
        slow = _directions(v, "gpupass.pcie", label, solo, ("h2d_gb_s", "d2h_gb_s"), "", ref, source)
        if slow:
            v.problems.append(Problem(label, "pcie-slow", {**slow, "target_gb_s": target}))
        bar = round(rule("gpupass.pcie-bidir").bar(ref, source), 1)
        v.pcie_bidir_target_gb_s[label] = bar
        slow = _directions(v, "gpupass.pcie-bidir", label, solo, ("bidir_h2d_gb_s", "bidir_d2h_gb_s"), " both ways",
                           ref, source)
        if slow:
            v.problems.append(Problem(label, "pcie-bidir-slow", {**slow, "target_gb_s": bar}))
    alone = g.pcie_all
    if solo and alone and len(n.gpus) > 1 and n.device != "cpu":  # CPU stand-ins have no PCIe link to share
        shared = {}
        for k in ("h2d_gb_s", "d2h_gb_s"):
            own, together = getattr(solo, k), getattr(alone, k)
            if own and together is not None:
                j = judge_figure("gpupass.pcie-all", f"{label} {k[:3].upper()} all GPUs at once", together, own, "solo")
                v.judged.append(j)
                if not j.met:
                    shared[k] = (together, own)
        if shared:
            v.problems.append(Problem(label, "pcie-shared", {"copies": shared, "fraction": PCIE_ALL_FRACTION}))
    for m in g.mem_mismatches:
        v.problems.append(Problem(label, "memory", {"pattern": m.pattern, "num_words": m.num_words,
                                                    "offset_bytes": m.first_offset_bytes,
                                                    "bytes_tested": g.mem_bytes_tested}))
    b, a = g.health_before, g.health_after
    if b and a:
        grew = {k: (getattr(b, k), getattr(a, k)) for k in ("ecc_uncorrected_volatile", "remapped_uncorrected",
                                                              "retired_dbe")
                if getattr(a, k) is not None and getattr(b, k) is not None and getattr(a, k) > getattr(b, k)}
        flags = [k for k in ("remap_failed", "remap_pending", "retired_pending") if getattr(a, k)]
        if grew or flags:
            v.problems.append(Problem(label, "ecc", {"grew": grew, "flags": flags}))
    for err in g.errors:
        v.problems.append(Problem(label, "error", {"error": err}))


def _directions(v: Verdict, rule_id: str, label: str, rates: PcieRates, keys: tuple[str, str], what: str,
                target: float, source: str) -> dict[str, float]:
    """Each direction of ``rates`` judged by ``rule_id`` (subject "<label> H2D<what>"); the ones that missed."""
    slow = {}
    for k in keys:
        if (val := getattr(rates, k)) is not None:
            j = judge_figure(rule_id, f"{label} {k.removeprefix('bidir_')[:3].upper()}{what}", val, target, source)
            v.judged.append(j)
            if not j.met:
                slow[k] = val
    return slow


def _outliers(v: Verdict, gpus: list[tuple[NodePass, PassGpu, str]]) -> None:
    """GPUs more than OUTLIER_BELOW below the fleet median of their type, with their node's median."""
    measures = (("copy_gb_s", lambda g: g.copy_gb_s), ("h2d_gb_s", lambda g: g.pcie_solo.h2d_gb_s if g.pcie_solo else None),
                ("d2h_gb_s", lambda g: g.pcie_solo.d2h_gb_s if g.pcie_solo else None))
    for key, get in measures:
        by_type: dict[str, list[float]] = {}
        for _, g, _ in gpus:
            if (x := get(g)) is not None:
                by_type.setdefault(g.name, []).append(x)
        medians = {name: statistics.median(vals) for name, vals in by_type.items()}  # once per type, not per GPU
        for n, g, label in gpus:
            x = get(g)
            fleet = by_type.get(g.name, [])
            if x is None or len(fleet) < 3:  # two GPUs cannot say which of them is the outlier
                continue
            med = medians[g.name]
            if any(p.label == label and (key in p.facts or (key == "copy_gb_s" and p.kind == "hbm-slow"))
                   for p in v.problems if p.kind in ("pcie-slow", "hbm-slow")):
                continue  # below its target already: the same figure is not named twice
            if med and x < (1 - OUTLIER_BELOW) * med:
                node_vals = [y for h in n.gpus if (y := get(h)) is not None]
                v.problems.append(Problem(label, "outlier", {"measure": key, "value": x, "fleet_median": round(med, 2),
                                                             "node_median": round(statistics.median(node_vals), 2),
                                                             "below": round(1 - x / med, 4)}))


def _p2p(v: Verdict, n: NodePass) -> None:
    nvlink = v.nvlink_uni_gb_s
    for c in n.p2p:
        src = gpu_label(n.hostname or n.node, n.index, c.src)
        if not c.peer:
            v.problems.append(Problem(src, "p2p-slow", {"dst": c.dst, "peer": False,
                                                        "dst_label": gpu_label(n.hostname or n.node, n.index, c.dst)}))
            continue
        if not nvlink:
            continue
        slow = {}
        for rule_id, key, value, target in (("gpupass.p2p-write", "write_gb_s", c.write_gb_s, nvlink),
                                            ("gpupass.p2p-read", "read_gb_s", c.read_gb_s, nvlink),
                                            ("gpupass.p2p-bidir", "bidir_gb_s", c.bidir_gb_s, 2 * nvlink)):
            if value is None:
                continue
            j = judge_figure(rule_id, f"{src} to gpu{c.dst} {key.split('_')[0]}", value, target, v.nvlink_source)
            v.judged.append(j)
            if not j.met:
                slow[key] = (value, round(j.bar, 1))
        if slow:
            v.problems.append(Problem(src, "p2p-slow", {"dst": c.dst, "peer": True, "copies": slow,
                                                        "dst_label": gpu_label(n.hostname or n.node, n.index, c.dst)}))


def _vote(v: Verdict, gpus: list[tuple[NodePass, PassGpu, str]]) -> None:
    groups: dict[tuple[str, int, str, str], list[tuple[PassGpu, str]]] = {}
    for n, g, label in gpus:
        if g.vote:
            groups.setdefault((g.name, g.sm_count, n.torch, n.cuda), []).append((g, label))
    for (name, sms, torch, cuda), members in groups.items():
        group = VoteGroup(name, sms, torch, cuda, [label for _, label in members],
                          num_cases=max(len(g.vote) for g, _ in members))
        v.groups.append(group)
        for g, label in members:
            for case in g.vote:
                if len(set(case.hashes)) > 1:
                    v.problems.append(Problem(label, "repeat", {"dtype": case.dtype, "shape": case.shape,
                                                                "num_rounds": len(case.hashes),
                                                                "num_distinct": len(set(case.hashes))}))
                if case.ref_rel_err is not None and case.ref_rel_err > case.tolerance:
                    v.problems.append(Problem(label, "reference", {"dtype": case.dtype, "shape": case.shape,
                                                                   "rel_err": case.ref_rel_err,
                                                                   "tolerance": case.tolerance}))
        if len(members) < 2:
            continue
        dissent: dict[str, list[str]] = {}
        for i in range(group.num_cases):
            votes = [(label, g.vote[i].hashes[0]) for g, label in members if i < len(g.vote) and g.vote[i].hashes]
            counts = Counter(h for _, h in votes)
            top, num_top = counts.most_common(1)[0]
            case = next(g.vote[i] for g, _ in members if i < len(g.vote))
            what = f"{case.dtype} {'×'.join(map(str, case.shape))}"
            if num_top * 2 > len(votes):
                for label, h in votes:
                    if h != top:
                        dissent.setdefault(label, []).append(what)
            elif len(counts) > 1:
                for label, _ in votes:
                    dissent.setdefault(label, []).append(what + " (no majority)")
        for label, cases in dissent.items():
            v.problems.append(Problem(label, "vote", {"cases": cases, "group_size": len(members)}))


def stood_in(rec: GpuPassRecord | None) -> list[str]:
    """Configured names of the nodes where the pass completed its memory pattern test, its PCIe
    copies and its correctness vote on every GPU: there it is GPU health evidence on its own."""
    if rec is None or rec.status in ("failed", "skipped"):
        return []
    return [n.node for n in rec.nodes
            if not n.error and n.device == "cuda" and n.gpus
            and all(g.mem_bytes_tested and g.pcie_solo is not None and g.vote for g in n.gpus)]


def with_stand_in(records: dict[str, Any]) -> dict[str, Any]:
    """The records with the first unworded ``health.dcgm-missing`` Gap of a node where the pass
    stood in carrying ``num_gpupass_nodes`` (how many of the nodes without DCGM the pass stood in
    for), so the Gap says it once; the stored records are left as they are."""
    health = records.get("health")
    gaps = list(getattr(health, "gaps", None) or [])
    nodes = set(stood_in(records.get("gpupass")))
    missing = [i for i, g in enumerate(gaps) if g.kind == "health.dcgm-missing" and not g.text]
    covered = [i for i in missing if gaps[i].node in nodes]
    if health is None or not covered:
        return records
    first = covered[0]
    gaps[first] = dataclasses.replace(gaps[first], facts={**gaps[first].facts, "num_gpupass_nodes": len(covered)})
    return {**records, "health": dataclasses.replace(health, gaps=gaps)}
