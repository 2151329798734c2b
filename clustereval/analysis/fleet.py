"""The run's per-unit figures -> fleet judgements (``fleetstats``), one per kind of figure. Pure.

What is judged, and what makes two units peers:

| kind | unit | repeats | peers |
| --- | --- | --- | --- |
| ``msmf`` | GPU | its MSMF passes | GPUs of the same model and driver (``gpu_peers``) |
| ``lemon`` | GPU | its lemon GEMM passes | as ``msmf`` |
| ``hbm-copy`` | GPU | its device-local copies, one rate each (GPU memory and links pass) | as ``msmf``, and the same GPU name |
| ``pcie-h2d``, ``pcie-d2h`` | GPU | its pinned copies alone, one rate each | as ``hbm-copy`` |
| ``pairwise`` | node | per sample, the fastest of its pairs | every node of the hunt but the failing ones |
| ``busbw-intra`` | node | one figure, at the largest payload every node ran | every node |
| ``concurrent-write`` | node | one write | nodes writing to the same mount |

A node's pairwise repeat is the fastest of its pairs at that sample because a healthy node paired
with a slow one is slowed by its partner, and its pairs with healthy nodes show its own speed.
Units with one figure each (so also the GPUs of a GPU memory and links record written before each
copy's rate was kept) take the fleet's spread as their noise, and their figures are allowed heavier
tails than a normal's (``fleetstats.ONE_FIGURE_TAIL_DF``): one figure cannot tell a pass that
hiccuped from a slow unit. That pass's CPU stand-in GPUs time host memory on a shared machine and
are not judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clustereval.analysis.fleetstats import GroupJudgement, UnitSamples, VerdictPolicy, judge_fleet
from clustereval.analysis.gpus import gpu_label

# the words of each kind of figure: (the Findings subsystem, the figure in the report's words, its unit,
# what a unit is); ``new_kind`` reads them, so the report and the tests that render its sentences agree
KIND_WORDS: dict[str, tuple[str, str, str, str]] = {
    "msmf": ("GPUs", "MSMF", "TFLOPS", "GPU"),
    "lemon": ("GPUs", "lemon GEMM", "TFLOPS", "GPU"),
    "hbm-copy": ("GPUs", "HBM copy", "GB/s", "GPU"),
    "pcie-h2d": ("GPUs", "PCIe H2D", "GB/s", "GPU"),
    "pcie-d2h": ("GPUs", "PCIe D2H", "GB/s", "GPU"),
    "pairwise": ("fabric", "pairwise all-reduce busbw", "GB/s", "node"),
    "busbw-intra": ("fabric", "intra-node all-reduce busbw", "GB/s", "node"),
    "concurrent-write": ("shared network FS", "concurrent write", "MiB/s", "node"),
}


@dataclass
class FleetKind:
    """One kind of figure judged over the fleet."""

    kind: str  # msmf | lemon | hbm-copy | pcie-h2d | pcie-d2h | pairwise | busbw-intra | concurrent-write
    subsystem: str  # the Findings label: GPUs | fabric | shared network FS
    what: str  # the figure in the report's words: "MSMF", "pairwise all-reduce busbw"
    unit: str  # TFLOPS | GB/s | MiB/s
    noun: str  # what a unit is: GPU | node
    units: list[UnitSamples] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # unit label -> summary.json figure id
    names: dict[str, str] = field(default_factory=dict)  # unit label -> configured node name
    groups: list[GroupJudgement] = field(default_factory=list)
    policy: VerdictPolicy = field(default_factory=VerdictPolicy)

    @property
    def slow(self) -> list[Any]:
        return [u for g in self.groups for u in g.slow]


def new_kind(kind: str, policy: VerdictPolicy) -> FleetKind:
    """An empty ``FleetKind`` of ``kind`` (a key of ``KIND_WORDS``), in its words."""
    subsystem, what, unit, noun = KIND_WORDS[kind]
    return FleetKind(kind=kind, subsystem=subsystem, what=what, unit=unit, noun=noun, policy=policy)


def policy_from(verdicts: Any) -> VerdictPolicy:
    """``[verdicts]`` of cluster.toml (``config.Verdicts``; None: the defaults) -> the policy."""
    if verdicts is None:
        return VerdictPolicy()
    return VerdictPolicy(confidence=verdicts.confidence_pct / 100, threshold_frac=verdicts.threshold_pct / 100,
                         group_by=tuple(verdicts.gpu_peers))


def _gpu_groups(records: dict[str, Any], policy: VerdictPolicy, labels: dict[str, str]) -> dict[str, str]:
    """Configured node name -> its GPUs' peer group, in words ("NVIDIA H200, driver 570.86")."""
    env = records.get("environment")
    out: dict[str, str] = {}
    models: dict[str, str] = {}
    for phase in ("matmul", "lemon"):
        for n in getattr(records.get(phase), "nodes", None) or []:
            models.setdefault(n.node, getattr(n, "gpu_name", "") or "")
    drivers: dict[str, str] = {}
    for n in getattr(env, "nodes", None) or []:
        if n.gpus:
            models[n.node] = models.get(n.node) or n.gpus[0].name
            drivers[n.node] = n.gpus[0].driver_version or getattr(n.software, "driver", "") or ""
    for name in set(models) | set(drivers):
        parts = []
        if "model" in policy.group_by:
            parts.append(models.get(name, "") or "unknown model")
        if "driver" in policy.group_by:
            parts.append(f"driver {drivers[name]}" if drivers.get(name) else "unknown driver")
        if "node" in policy.group_by:
            parts.append(f"node {labels.get(name, name)}")
        out[name] = ", ".join(parts)
    return out


def _gpu_kind(records: dict[str, Any], phase: str, kind: str, policy: VerdictPolicy,
              groups: dict[str, str]) -> FleetKind | None:
    rec = records.get(phase)
    if rec is None:
        return None
    out = new_kind(kind, policy)
    for n in getattr(rec, "nodes", None) or []:  # a record read by attribute only may have none
        for g in n.gpus:
            if g.gpu in n.dead or bool(getattr(g, "error", "")):
                continue  # a dead GPU is its own finding, not a slow one
            passes = tuple(v for v in g.tflops if v is not None)
            if passes:
                label = gpu_label(n.hostname or n.node, n.index, g.gpu)
                out.units.append(UnitSamples(label, passes, groups.get(n.node, "")))
                out.ids[label] = f"{kind}/node{n.index}/gpu{g.gpu}"
    return out if out.units else None


# the GPU memory and links pass's per-GPU figures: kind, the report's words, (figure, its repeats) of a GPU
GPUPASS_KINDS: tuple[tuple[str, str, Callable[[Any], tuple[float | None, list[float]]]], ...] = (
    ("hbm-copy", KIND_WORDS["hbm-copy"][1], lambda g: (g.copy_gb_s, g.copy_samples_gb_s)),
    ("pcie-h2d", KIND_WORDS["pcie-h2d"][1], lambda g: (g.pcie_solo.h2d_gb_s, g.pcie_solo.h2d_samples_gb_s)
     if g.pcie_solo else (None, [])),
    ("pcie-d2h", KIND_WORDS["pcie-d2h"][1], lambda g: (g.pcie_solo.d2h_gb_s, g.pcie_solo.d2h_samples_gb_s)
     if g.pcie_solo else (None, [])),
)


def _gpupass_kinds(records: dict[str, Any], policy: VerdictPolicy, groups: dict[str, str]) -> list[FleetKind]:
    rec = records.get("gpupass")
    out = []
    for kind, _, get in GPUPASS_KINDS:
        k = new_kind(kind, policy)
        for n in getattr(rec, "nodes", None) or []:
            if n.device == "cpu":
                continue
            for g in n.gpus:
                value, samples = get(g)
                if value is None:
                    continue
                label = gpu_label(n.hostname or n.node, n.index, g.gpu)
                # GPUs of another type are never peers, whatever the policy groups by
                group = groups.get(n.node) or g.name
                k.units.append(UnitSamples(label, tuple(samples) or (value,), group))
                k.ids[label] = f"{kind}/node{n.index}/gpu{g.gpu}"
        if k.units:
            out.append(k)
    return out


def _pairwise_kind(records: dict[str, Any], policy: VerdictPolicy, labels: dict[str, str],
                   keys: dict[str, str]) -> FleetKind | None:
    pw = records.get("pairwise")
    if pw is None or not pw.pairs:
        return None
    out = new_kind("pairwise", policy)
    # a failing node (``analysis.stragglers.failing_nodes``) has no figure of its own: its pairs stopped
    # completing, and summary.json lists it as did not complete
    failing = {f.node for f in getattr(pw, "failing", None) or []}
    nodes = sorted({x for p in pw.pairs for x in (p.a, p.b)} - failing, key=lambda x: (keys.get(x, x), x))
    for name in nodes:
        # an ungated pair's samples are no evidence of speed (analysis.stragglers)
        mine = [p.samples_gb_s or ([p.busbw_gb_s] if p.busbw_gb_s is not None else [])
                for p in pw.pairs if name in (p.a, p.b) and not p.ungated]
        mine = [s for s in mine if s]
        if not mine:
            continue
        depth = min(len(s) for s in mine)
        best = tuple(max(s[j] for s in mine) for j in range(depth))
        label = labels.get(name, name)
        out.units.append(UnitSamples(label, best))  # one fabric: every node of the hunt is a peer
        out.ids[label] = f"pairwise-node/{keys.get(name, name)}"
        out.names[label] = name
    return out if out.units else None


def _intra_kind(records: dict[str, Any], policy: VerdictPolicy, labels: dict[str, str],
                keys: dict[str, str]) -> FleetKind | None:
    ar = records.get("allreduce")
    sweeps = [s for s in getattr(ar, "intra", None) or [] if s.rows and s.nodes]
    if len(sweeps) < 2:
        return None
    common = set.intersection(*({r.payload_bytes for r in s.rows if r.check_ok} for s in sweeps))
    if not common:
        return None
    payload = max(common)
    out = new_kind("busbw-intra", policy)
    for s in sweeps:
        row = s.row_at(payload)
        if row is not None:
            label = labels.get(s.nodes[0], s.nodes[0])
            out.units.append(UnitSamples(label, (row.busbw_gb_s,)))
            out.ids[label] = f"busbw-intra/{keys.get(s.nodes[0], s.nodes[0])}/{payload}"
    return out


def _write_kind(records: dict[str, Any], policy: VerdictPolicy, labels: dict[str, str],
                keys: dict[str, str]) -> FleetKind | None:
    cw = getattr(records.get("storage"), "concurrent", None)
    if cw is None:
        return None
    out = new_kind("concurrent-write", policy)
    for w in cw.nodes:
        if not w.error and w.mib_s > 0:
            label = labels.get(w.node, w.node)
            out.units.append(UnitSamples(label, (w.mib_s,), f"writing to `{cw.mount}`"))
            out.ids[label] = f"concurrent/{keys.get(w.node, w.node)}{cw.mount}"
            out.names[label] = w.node
    return out if out.units else None


def node_names(records: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(configured name -> ``hostname(nodeN)``, configured name -> ``nodeN``), from whichever record knows."""
    labels: dict[str, str] = {}
    keys: dict[str, str] = {}
    for phase in ("preflight", "environment", "matmul", "lemon", "health"):
        for n in getattr(records.get(phase), "nodes", None) or []:
            name = getattr(n, "name", None) or getattr(n, "node", "")
            if not name or name in labels or not hasattr(n, "index"):
                continue
            labels[name] = f"{getattr(n, 'hostname', '') or name}(node{n.index})"
            keys[name] = f"node{n.index}"
    return labels, keys


def fleet_judgements(records: dict[str, Any], policy: VerdictPolicy | None = None) -> list[FleetKind]:
    """Every kind of per-unit figure the records hold, judged against its peers."""
    policy = policy or VerdictPolicy()
    labels, keys = node_names(records)
    groups = _gpu_groups(records, policy, labels)
    kinds = [_gpu_kind(records, "matmul", "msmf", policy, groups),
             _gpu_kind(records, "lemon", "lemon", policy, groups),
             *_gpupass_kinds(records, policy, groups),
             _pairwise_kind(records, policy, labels, keys),
             _intra_kind(records, policy, labels, keys),
             _write_kind(records, policy, labels, keys)]
    out = [k for k in kinds if k is not None]
    for k in out:
        k.groups = judge_fleet(k.units, policy)
    return out
