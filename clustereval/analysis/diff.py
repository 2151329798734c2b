"""Two ``summary.json`` documents -> what changed between the runs. Pure.

Each figure both runs hold is judged against the repeat noise both runs show (``noise_frac`` per
repeat and its degrees of freedom, over the figure's repeats: its own, or its peers' pooled, see
``analysis.fleet``): Welch's t on the two means, Holm-corrected over every figure judged, at the
later run's stated confidence. A change whose "no change" is rejected is "changed beyond noise",
anything else "within noise"; a figure one run holds as a single value with nothing to take its
noise from is "not judged" (no made-up percentage stands in). fio and the concurrent write run once
per cell, so they are judged against a stated tolerance the user may override. Runs of different
hosts are compared by node order and GPU index, and the record says so.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from clustereval.analysis.fleetstats import holm, t_sf
from clustereval.analysis.storage import EQUIVALENCE_TOLERANCE
from clustereval.errors import UsageError
from clustereval.records.diff import (
    BEYOND,
    NOT_JUDGED,
    WITHIN,
    DiffRecord,
    Drift,
    FigureChange,
    NodePairing,
    OneSided,
    PhaseChange,
    RunRef,
    VerdictChange,
)

FIO_TOLERANCE = EQUIVALENCE_TOLERANCE  # the runbook's 5% rule for two fio scans being the same
TOLERANCE_KINDS = ("fio", "concurrent-write")  # judged against the stated tolerance, not a run's own repeats

SOFTWARE_WORDS = {"driver": "NVIDIA driver", "cuda_driver": "CUDA (driver)", "torch": "torch",
                  "torch_cuda": "CUDA (torch build)", "nccl": "NCCL", "python": "Python"}
HOST_WORDS = {"os": "OS", "kernel": "kernel"}
MOUNT_FIELDS = ("fstype", "size_bytes", "source", "shared")
LAYOUT_FIELDS = ("stripe_count", "stripe_size_bytes", "num_targets", "options")


def check_summary(doc: Any, where: str) -> dict[str, Any]:
    """A summary document this version can compare, or a ``UsageError`` saying why not."""
    from clustereval.analysis.summary import SUMMARY_KIND, SUMMARY_SCHEMA_VERSION

    if not isinstance(doc, dict) or doc.get("kind") != SUMMARY_KIND:
        raise UsageError(f"{where}: not a clustereval summary.json",
                         "pass a run folder (reports/raw-<name>-<stamp>/), its report .md or its summary.json")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > SUMMARY_SCHEMA_VERSION:
        raise UsageError(f"{where}: summary schema version {version!r}; this clustereval reads up to "
                         f"{SUMMARY_SCHEMA_VERSION}", "compare with the clustereval version that wrote it, or "
                         "re-render the run with `clustereval report RUN_DIR`")
    return doc


def _ref(doc: dict[str, Any]) -> RunRef:
    run, cl = doc.get("run", {}), doc.get("cluster", {})
    return RunRef(id=run.get("id", ""), stamp=run.get("stamp", ""), report=run.get("report", ""),
                  profile=run.get("profile", ""), access=cl.get("access", ""), num_nodes=cl.get("num_nodes", 0),
                  gpu_model=cl.get("gpu_model", ""), gpus_per_node=cl.get("gpus_per_node", 0),
                  hostnames=[n.get("hostname") or n.get("name", "") for n in cl.get("nodes", [])])


def _nodes(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {n["index"]: n for n in doc.get("cluster", {}).get("nodes", [])}


def _repeat_test(old: dict[str, Any], new: dict[str, Any], change: float) -> tuple[float, float] | None:
    """(standard error of the change, two-sided p) from both runs' repeat noise; None when a run has none."""
    ns: list[tuple[float, int]] = []
    for f in (old, new):
        noise, df = f.get("noise_frac"), int(f.get("noise_df") or 0)
        if noise is None or df < 1:
            return None
        ns.append((float(noise) ** 2 / max(1, len(f.get("samples") or [0])), df))
    var = ns[0][0] + ns[1][0]
    if var <= 0:
        return 0.0, (0.0 if change else 1.0)
    # Welch-Satterthwaite degrees of freedom for the two variances
    welch_df = var ** 2 / sum(v ** 2 / d for v, d in ns if v > 0)
    se = math.sqrt(var)
    return se, min(1.0, 2 * t_sf(abs(change) / se, welch_df))


def _judge(old: dict[str, Any], new: dict[str, Any], fio_tolerance: float) -> FigureChange:
    """One figure's change; a repeat-judged change is WITHIN until Holm's correction (``diff_summaries``)."""
    ov, nv = old.get("value"), new.get("value")
    p_value = None
    if old["kind"] in TOLERANCE_KINDS:
        noise: float | None = fio_tolerance
        basis = f"the stated storage tolerance of {fio_tolerance * 100:g}%"
    else:
        noise, basis = None, "a run holds one value of it: no repeat noise to judge by"
    change: float | None = None
    if ov is not None and nv is not None and ov:
        moved = (nv - ov) / ov
        change = moved
        if old.get("state", "ok") != new.get("state", "ok"):
            # a figure whose state changed (a GPU that now fails its memory test) changed, whatever its value
            judgement = BEYOND
        elif old["kind"] in TOLERANCE_KINDS:
            judgement = BEYOND if abs(moved) > fio_tolerance else WITHIN
        elif (test := _repeat_test(old, new, moved)) is not None:
            noise, p_value = test
            basis = f"the repeat noise of both runs ({old.get('noise_basis', '')}; {new.get('noise_basis', '')})"
            judgement = WITHIN
        else:
            judgement = NOT_JUDGED
    else:
        # a figure that vanished (a dead GPU, a failed pair) or appeared is a change of state
        judgement = WITHIN if (ov is None and nv is None and old.get("state") == new.get("state")) else BEYOND
    return FigureChange(id=new["id"], kind=new["kind"], subject=new.get("subject", new["id"]),
                        unit=new.get("unit", ""), old_value=ov, new_value=nv, change_frac=change,
                        noise_frac=noise, noise_basis=basis, judgement=judgement,
                        old_state=old.get("state", "ok"), new_state=new.get("state", "ok"),
                        old_subject=old.get("subject", "") if old.get("subject") != new.get("subject") else "",
                        p_value=p_value)


def _one_sided(old: dict[str, Any], new: dict[str, Any], old_figs: dict[str, Any],
               new_figs: dict[str, Any]) -> list[OneSided]:
    out: list[OneSided] = []
    on, nn = _nodes(old), _nodes(new)
    gone_nodes = {i for i in on if i not in nn}
    new_nodes = {i for i in nn if i not in on}
    out += [OneSided("old", "node", on[i]["label"]) for i in sorted(gone_nodes)]
    out += [OneSided("new", "node", nn[i]["label"]) for i in sorted(new_nodes)]
    gone_gpus: set[tuple[int, int]] = set()
    new_gpus: set[tuple[int, int]] = set()
    for i in sorted(set(on) & set(nn)):
        og = {g["index"] for g in on[i].get("gpus", [])}
        ng = {g["index"] for g in nn[i].get("gpus", [])}
        for g in sorted(og - ng):
            gone_gpus.add((i, g))
            out.append(OneSided("old", "gpu", f"{on[i]['label']}:gpu{g}"))
        for g in sorted(ng - og):
            new_gpus.add((i, g))
            out.append(OneSided("new", "gpu", f"{nn[i]['label']}:gpu{g}"))

    def covered(f: dict[str, Any], nodes: set[int], gpus: set[tuple[int, int]]) -> bool:
        # a figure of a node or GPU already listed as one-sided is not listed again
        return f.get("node") in nodes or (f.get("node"), f.get("gpu")) in gpus or \
            any(x in nodes for x in f.get("nodes") or [])

    for fid, f in old_figs.items():
        if fid not in new_figs and not covered(f, gone_nodes, gone_gpus):
            out.append(OneSided("old", "figure", f.get("subject", fid), f["kind"]))
    for fid, f in new_figs.items():
        if fid not in old_figs and not covered(f, new_nodes, new_gpus):
            out.append(OneSided("new", "figure", f.get("subject", fid), f["kind"]))
    return out


def _grouped(items: list[tuple[str, str, str, str, str]]) -> list[Drift]:
    """(item, category, old, new, where) rows -> one Drift per (item, old, new) with every node it holds for."""
    out: dict[tuple[str, str, str, str], Drift] = {}
    for item, cat, o, n, where in items:
        d = out.setdefault((item, cat, o, n), Drift(item, cat, o, n))
        if where:
            d.where.append(where)
    return list(out.values())


def _drift(old: dict[str, Any], new: dict[str, Any]) -> list[Drift]:
    rows: list[tuple[str, str, str, str, str]] = []
    on, nn = _nodes(old), _nodes(new)
    for i in sorted(set(on) & set(nn)):
        a, b = on[i], nn[i]
        label = b["label"]
        for f, word in SOFTWARE_WORDS.items():
            o, n = str(a.get("software", {}).get(f, "")), str(b.get("software", {}).get(f, ""))
            if o != n and (o or n):
                rows.append((word, "software", o, n, label))
        for f, word in HOST_WORDS.items():
            o, n = str(a.get("host", {}).get(f, "")), str(b.get("host", {}).get(f, ""))
            if o != n and (o or n):
                rows.append((word, "host", o, n, label))
        if a.get("gpu_model") != b.get("gpu_model") and (a.get("gpu_model") or b.get("gpu_model")):
            rows.append(("GPU model", "gpu", a.get("gpu_model", ""), b.get("gpu_model", ""), label))
    oc, nc = old.get("cluster", {}), new.get("cluster", {})
    oe, ne = oc.get("nccl_env", {}) or {}, nc.get("nccl_env", {}) or {}
    for var in sorted(set(oe) | set(ne)):
        if oe.get(var) != ne.get(var):
            rows.append((var, "nccl-env", oe.get(var, ""), ne.get(var, ""), ""))
    if oc.get("access") != nc.get("access"):
        rows.append(("access", "run", oc.get("access", ""), nc.get("access", ""), ""))
    op, np_ = old.get("run", {}).get("profile", ""), new.get("run", {}).get("profile", "")
    if op != np_:
        rows.append(("profile", "run", op, np_, ""))
    om = {m["mount"]: m for m in oc.get("mounts", [])}
    nm = {m["mount"]: m for m in nc.get("mounts", [])}
    for mount in sorted(set(om) | set(nm)):
        ma, mb = om.get(mount), nm.get(mount)
        if ma is None or mb is None:
            rows.append((f"mount {mount}", "mount", "present" if ma else "absent", "present" if mb else "absent", ""))
            continue
        for f in MOUNT_FIELDS:
            if ma.get(f) != mb.get(f):
                rows.append((f"mount {mount} {f}", "mount", str(ma.get(f, "")), str(mb.get(f, "")), ""))
        la, lb = ma.get("layout") or {}, mb.get("layout") or {}
        for f in LAYOUT_FIELDS:
            if la and lb and la.get(f) != lb.get(f):
                rows.append((f"mount {mount} layout {f}", "mount", str(la.get(f, "")), str(lb.get(f, "")), ""))
    return _grouped(rows)


def _verdicts(old: dict[str, Any], new: dict[str, Any]) -> list[VerdictChange]:
    def by_subsystem(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for v in doc.get("verdicts", []):
            out.setdefault(v.get("subsystem", ""), []).append(v)
        return out

    ov, nv = by_subsystem(old), by_subsystem(new)
    out = []
    for sub in list(ov) + [s for s in nv if s not in ov]:
        a = sorted(v["verdict"] for v in ov.get(sub, []))
        b = sorted(v["verdict"] for v in nv.get(sub, []))
        if Counter(a) != Counter(b):
            out.append(VerdictChange(sub, a, b, [v["text"] for v in nv.get(sub, [])]))
    return out


def _phases(old: dict[str, Any], new: dict[str, Any]) -> list[PhaseChange]:
    op = {p["phase"]: p["outcome"] for p in old.get("phases", [])}
    np_ = {p["phase"]: p["outcome"] for p in new.get("phases", [])}
    return [PhaseChange(ph, op.get(ph, "not run"), np_.get(ph, "not run"))
            for ph in list(op) + [p for p in np_ if p not in op] if op.get(ph, "not run") != np_.get(ph, "not run")]


def diff_summaries(old: dict[str, Any], new: dict[str, Any], *, fio_tolerance: float = FIO_TOLERANCE) -> DiffRecord:
    """What changed from ``old`` to ``new`` (both ``summary.json`` documents)."""
    ref_old, ref_new = _ref(old), _ref(new)
    same = ref_old.hostnames == ref_new.hostnames and bool(ref_new.hostnames)
    rec = DiffRecord(old=ref_old, new=ref_new, same_cluster=same,
                     matched_by="hostname" if same else "node order and GPU index", fio_tolerance=fio_tolerance)
    if not same:
        on, nn = _nodes(old), _nodes(new)
        rec.pairing = [NodePairing(i, on[i]["label"] if i in on else "", nn[i]["label"] if i in nn else "")
                       for i in sorted(set(on) | set(nn))]
    old_figs = {f["id"]: f for f in old.get("figures", [])}
    new_figs = {f["id"]: f for f in new.get("figures", [])}
    rec.changes = [_judge(old_figs[fid], new_figs[fid], fio_tolerance) for fid in new_figs if fid in old_figs]
    rec.confidence = float(new.get("verdict_policy", {}).get("confidence", rec.confidence))
    tested = [c for c in rec.changes if c.p_value is not None]
    for c, rejected in zip(tested, holm([c.p_value or 0.0 for c in tested], 1 - rec.confidence), strict=True):
        c.judgement = BEYOND if rejected else WITHIN
    rec.one_sided = _one_sided(old, new, old_figs, new_figs)
    rec.drift = _drift(old, new)
    rec.verdicts = _verdicts(old, new)
    rec.phases = _phases(old, new)
    og = [g["text"] for g in old.get("gaps", [])]
    ng = [g["text"] for g in new.get("gaps", [])]
    rec.gaps_new = [t for t in ng if t not in og]
    rec.gaps_resolved = [t for t in og if t not in ng]
    return rec
