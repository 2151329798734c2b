"""Records -> ``summary.json``: the run's cluster, every headline figure, every verdict and Gap,
and each phase's outcome, in one schema-versioned document a pipeline can read without the markdown.

Pure: records, findings and gaps in, a plain dict out. The schema is documented in docs/summary.md;
``clustereval diff`` compares two of these documents.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from clustereval.analysis.fleet import GPUPASS_KINDS, FleetKind, fleet_judgements
from clustereval.analysis.fleetstats import DETECTION_PROBABILITY, VerdictPolicy
from clustereval.analysis.gpupass import judge
from clustereval.analysis.gpus import gpu_label
from clustereval.analysis.network import intra_spec
from clustereval.analysis.specs import lookup_gpu
from clustereval.analysis.storage import cell_key, target_for
from clustereval.records import Finding, Gap, to_dict
from clustereval.report.units import iec_whole

SUMMARY_SCHEMA_VERSION = 2  # 2: figures carry their repeats and fleet statistics; noise is repeat noise only
SUMMARY_KIND = "clustereval-summary"
SUMMARY_FILE = "summary.json"

VERDICT_WORDS = {"healthy": "Healthy", "underperforming": "Underperforming", "needs_input": "Needs operator input"}

# what a GPU memory and links figure's ``value`` is, beside its ``samples`` (each repeat's own rate)
GPUPASS_STATISTIC = "the bytes of all its timed repeats over their summed time"

NO_REPEATS = "one value: no repeat of its own and no peers to take its noise from"

SOFTWARE_FIELDS = ("driver", "cuda_driver", "torch", "torch_cuda", "nccl", "python")
HOST_FIELDS = ("os", "kernel")


class _Nodes:
    """Configured node name -> (hostfile index, hostname), from whichever record knows."""

    def __init__(self, records: dict[str, Any]) -> None:
        self.index: dict[str, int] = {}
        self.hostname: dict[str, str] = {}
        sources = [getattr(records.get("preflight"), "nodes", None) or [],
                   getattr(records.get("environment"), "nodes", None) or [],
                   getattr(records.get("matmul"), "nodes", None) or [],
                   getattr(records.get("lemon"), "nodes", None) or [],
                   getattr(records.get("health"), "nodes", None) or [],
                   getattr(records.get("gpupass"), "nodes", None) or []]
        for nodes in sources:
            for n in nodes:
                name = getattr(n, "name", "") or getattr(n, "node", "")
                self.index.setdefault(name, getattr(n, "index", 0))
                if getattr(n, "hostname", ""):
                    self.hostname.setdefault(name, n.hostname)

    def idx(self, name: str) -> int | None:
        return self.index.get(name)

    def label(self, name: str) -> str:
        i = self.index.get(name)
        host = self.hostname.get(name, name)
        return f"{host}(node{i})" if i is not None else host

    def key(self, name: str) -> str:
        i = self.index.get(name)
        return f"node{i}" if i is not None else name


def _own_noise(values: list[float]) -> tuple[float | None, int]:
    """(standard deviation / mean of repeated measurements, degrees of freedom); None with one."""
    if len(values) < 2:
        return None, 0
    mean = statistics.fmean(values)
    return (statistics.stdev(values) / mean if mean else None), len(values) - 1


class _Fleet:
    """Figure id -> the fleet statistics behind it (``analysis.fleet``)."""

    def __init__(self, kinds: list[FleetKind]) -> None:
        self.kinds = kinds
        self.by_id: dict[str, tuple[FleetKind, Any, Any]] = {}
        for k in kinds:
            for g in k.groups:
                for u in g.units:
                    self.by_id[k.ids[u.unit]] = (k, g, u)

    def noise(self, fid: str, samples: list[float]) -> dict[str, Any]:
        """The figure's repeats and repeat noise: its peers' pooled noise where the fleet judged it
        (its own when it is clearly noisier), else its own repeats, else none."""
        hit = self.by_id.get(fid)
        own, own_df = _own_noise(samples)
        out: dict[str, Any] = {"samples": [round(v, 4) for v in samples]}
        if hit is not None and hit[1].noise_df > 0 and hit[1].noise_frac > 0:
            k, g, u = hit
            if u.own_noise:
                noise, df, basis = u.noise_frac, u.num_repeats - 1, f"its own {len(samples)} repeats"
            elif g.noise_basis == "repeats":
                noise, df, basis = g.noise_frac, g.noise_df, f"the repeats of its {g.num_units} peers, pooled"
            else:
                noise, df, basis = g.noise_frac, g.noise_df, f"the spread of its {g.num_units} peers"
            out.update(noise_frac=round(noise, 6), noise_df=df, noise_basis=basis, fleet={
                "group": g.group, "num_peers": g.num_units, "median": round(g.median, 4),
                "mad": round(g.mad, 4), "shortfall_frac": round(u.shortfall_frac, 6),
                "se_frac": round(u.se_frac, 6), "p_value": u.p_value, "slow": u.slow,
                "judged": g.judged, "confidence": k.policy.confidence, "threshold_frac": k.policy.threshold_frac})
        elif own:  # identical repeats say nothing about how much the figure moves
            out.update(noise_frac=round(own, 6), noise_df=own_df, noise_basis=f"its own {len(samples)} repeats")
        else:
            out.update(noise_frac=None, noise_df=0, noise_basis=NO_REPEATS)
        return out


def _passes_figure(kind: str, node: Any, gpu: int, passes: list[float | None], dead: bool,
                   provenance: dict[str, Any], fleet: _Fleet) -> dict[str, Any]:
    alive = [v for v in passes if v is not None]
    fid = f"{kind}/node{node.index}/gpu{gpu}"
    return {
        "id": fid,
        "kind": kind,
        "subject": gpu_label(node.hostname or node.node, node.index, gpu),
        "node": node.index,
        "gpu": gpu,
        "value": None if dead or not alive else round(statistics.median(alive), 3),
        "unit": "TFLOPS",
        "state": "dead" if dead else ("ok" if alive else "no result"),
        "passes": [round(v, 3) if v is not None else None for v in passes],
        **fleet.noise(fid, [] if dead else alive),
        "provenance": provenance,
    }


def _timing_provenance(t: Any) -> dict[str, Any]:
    if t is None:
        return {}
    return {"shape": [t.m, t.n, t.k], "power_w": t.power_w, "sm_mhz": t.sm_mhz, "iterations": t.iterations,
            "label": t.label}


def _compute_figures(records: dict[str, Any], fleet: _Fleet) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    mm: Any = records.get("matmul")  # a record or None; read only for its nodes
    for n in getattr(mm, "nodes", None) or []:
        search = n.search
        if search is not None and search.mamf is not None:
            t = search.mamf
            out.append({"id": f"mamf/node{n.index}", "kind": "mamf",
                        "subject": f"{gpu_label(n.hostname or n.node, n.index, 0)}", "node": n.index, "gpu": 0,
                        "value": round(t.mean_tflops, 3), "unit": "TFLOPS", "state": "ok",
                        **fleet.noise(f"mamf/node{n.index}", [t.mean_tflops]),
                        "provenance": {"phase": "matmul", "record": "matmul.record.json", "dtype": mm.dtype,
                                       **_timing_provenance(t)}})
        for g in n.gpus:
            first = next((t for t in g.timings if t is not None), None)
            prov = {"phase": "matmul", "record": "matmul.record.json", "dtype": mm.dtype,
                    "shape": list(n.msmf_shape) if n.msmf_shape else None,
                    "power_w": first.power_w if first else None, "sm_mhz": first.sm_mhz if first else None,
                    "underperforming": g.gpu in n.underperforming}
            out.append(_passes_figure("msmf", n, g.gpu, list(g.tflops), g.gpu in n.dead, prov, fleet))
    lemon: Any = records.get("lemon")  # a record or None; read only for its nodes
    for n in getattr(lemon, "nodes", None) or []:
        for g in n.gpus:
            prov = {"phase": "lemon", "record": "lemon.record.json", "dtype": lemon.dtype,
                    "shape": [lemon.size, lemon.size, lemon.size], "power_w": g.power_w, "sm_mhz": g.sm_mhz,
                    "sm_count": g.sm_count, "underperforming": g.gpu in n.underperforming}
            out.append(_passes_figure("lemon", n, g.gpu, list(g.tflops), bool(g.error) or g.gpu in n.dead, prov,
                                      fleet))
    return out


def _gpupass_figures(records: dict[str, Any], fleet: _Fleet) -> list[dict[str, Any]]:
    """Per GPU: HBM copy, pinned H2D and D2H; per GPU pair: the copy; each with its repeats' rates as
    ``samples``. A GPU whose memory test or vote failed carries that as its state."""
    rec = records.get("gpupass")
    out: list[dict[str, Any]] = []
    if rec is None or not getattr(rec, "nodes", None):
        return out
    verdict = judge(rec, hbm_target_gb_s=rec.target_hbm_copy_gb_s, pcie_target_gb_s=rec.target_pcie_gb_s,
                    nvlink_uni_gb_s=rec.target_nvlink_uni_gb_s)
    worst = {}
    for p in verdict.problems:
        if p.kind in ("memory", "ecc"):
            worst[p.label] = "memory errors"
        elif p.kind in ("vote", "repeat", "reference") and worst.get(p.label) != "memory errors":
            worst[p.label] = "wrong result"
    for n in rec.nodes:
        for g in n.gpus:
            label = gpu_label(n.hostname or n.node, n.index, g.gpu)
            for kind, _, get in GPUPASS_KINDS:
                value, samples = get(g)
                if value is None:
                    continue
                fid = f"{kind}/node{n.index}/gpu{g.gpu}"
                # a record written before each copy's rate was kept holds the figure alone
                out.append({"id": fid, "kind": kind, "subject": label, "node": n.index,
                            "gpu": g.gpu, "value": round(value, 3), "unit": "GB/s", "state": worst.get(label, "ok"),
                            **fleet.noise(fid, list(samples) or [value]),
                            "provenance": {"phase": "gpupass", "record": "gpupass.record.json", "quick": rec.quick,
                                           "statistic": GPUPASS_STATISTIC, "device": n.device,
                                           "pcie_gen": g.link.gen_under_load, "pcie_width": g.link.width_under_load,
                                           "mem_bytes_tested": g.mem_bytes_tested}})
        for c in n.p2p:
            if c.write_gb_s is None:
                continue
            fid = f"p2p-write/node{n.index}/gpu{c.src}-gpu{c.dst}"
            out.append({"id": fid, "kind": "p2p-write",
                        "subject": f"{gpu_label(n.hostname or n.node, n.index, c.src)} to gpu{c.dst}",
                        "node": n.index, "value": round(c.write_gb_s, 3), "unit": "GB/s", "state": "ok",
                        **fleet.noise(fid, list(c.write_samples_gb_s) or [c.write_gb_s]),
                        "provenance": {"phase": "gpupass", "record": "gpupass.record.json",
                                       "statistic": GPUPASS_STATISTIC, "bidir_gb_s": c.bidir_gb_s}})
    return out


def _sweep_figures(sweep: Any, kind: str, where: str, subject: str, node: int | None,
                   fleet: _Fleet) -> list[dict[str, Any]]:
    out = []
    blocking = {r.payload_bytes: r for r in sweep.blocking_rows}
    for r in sweep.rows:
        b = blocking.get(r.payload_bytes)
        # one timing per payload: its noise comes from its peers where the fleet judged it, else there is none
        fid = f"{kind}/{where}/{r.payload_bytes}"
        out.append({
            "id": fid,
            "kind": kind,
            "subject": f"{subject} at {iec_whole(r.payload_bytes)}",
            **({"node": node} if node is not None else {}),
            "payload_bytes": r.payload_bytes,
            "value": round(r.busbw_gb_s, 4),
            "unit": "GB/s",
            "state": "ok" if r.check_ok else "wrong result",
            **fleet.noise(fid, [r.busbw_gb_s]),
            "provenance": {"phase": "allreduce", "record": "allreduce.record.json", "scope": sweep.scope,
                           "num_ranks": sweep.num_ranks, "backend": sweep.backend, "algbw_gb_s": round(r.algbw_gb_s, 4),
                           "time_s": r.time_s, "iterations": r.iterations, "method": r.method,
                           "blocking_busbw_gb_s": round(b.busbw_gb_s, 4) if b else None},
        })
    return out


def _network_figures(records: dict[str, Any], nodes: _Nodes, fleet: _Fleet) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ar = records.get("allreduce")
    for s in getattr(ar, "intra", None) or []:
        if s.nodes:
            out += _sweep_figures(s, "busbw-intra", nodes.key(s.nodes[0]),
                                  f"intra-node all-reduce on {nodes.label(s.nodes[0])}", nodes.idx(s.nodes[0]), fleet)
    if ar is not None and ar.inter is not None and len(ar.inter.nodes) >= 2:
        # the node count is part of the name: busbw over 2 nodes and over 4 nodes are different figures
        num = len(ar.inter.nodes)
        out += _sweep_figures(ar.inter, "busbw-inter", f"{num}-nodes", f"inter-node all-reduce over {num} nodes", None,
                              fleet)
    pw: Any = records.get("pairwise")  # a record or None; read only for its pairs
    for p in getattr(pw, "pairs", None) or []:
        a, b = sorted((p.a, p.b), key=lambda x: (nodes.idx(x) is None, nodes.idx(x) or 0, x))
        out.append({"id": f"pairwise/{nodes.key(a)}+{nodes.key(b)}", "kind": "pairwise",
                    "subject": f"pair {nodes.label(a)} + {nodes.label(b)}",
                    "nodes": [nodes.idx(a), nodes.idx(b)], "payload_bytes": pw.payload_bytes,
                    "value": round(p.busbw_gb_s, 4) if p.busbw_gb_s is not None else None, "unit": "GB/s",
                    "state": "ok" if p.busbw_gb_s is not None else "did not complete",
                    # an older record's pair holds its median alone
                    **fleet.noise("", list(p.samples_gb_s or [p.busbw_gb_s]) if p.busbw_gb_s is not None else []),
                    "provenance": {"phase": "pairwise", "record": "pairwise.record.json", "round": p.round,
                                   "slow": p.slow, "ungated": p.ungated, "backend": pw.backend, "error": p.error}})
    for f in getattr(pw, "failing", None) or []:  # completed no pair, or none from a round on: failing, not slow
        out.append({"id": f"pairwise-node/{nodes.key(f.node)}", "kind": "pairwise-node", "subject": nodes.label(f.node),
                    "node": nodes.idx(f.node), "payload_bytes": pw.payload_bytes, "value": None, "unit": "GB/s",
                    "state": "did not complete", **fleet.noise("", []),
                    "provenance": {"phase": "pairwise", "record": "pairwise.record.json", "backend": pw.backend,
                                   "error": f.error, "partners": [nodes.label(x) for x in f.partners],
                                   "carries": f.carries, "completed_pairs": f.completed_pairs,
                                   "from_round": f.from_round}})
    for k in fleet.kinds:
        if k.kind != "pairwise" or pw is None:
            continue
        for u in k.units:  # each node: per sample, the fastest of its pairs (analysis/fleet.py)
            fid = k.ids[u.unit]
            out.append({"id": fid, "kind": "pairwise-node", "subject": u.unit,
                        "node": nodes.idx(k.names[u.unit]),
                        "payload_bytes": pw.payload_bytes, "value": round(statistics.fmean(u.samples), 4),
                        "unit": "GB/s", "state": "ok", **fleet.noise(fid, list(u.samples)),
                        "provenance": {"phase": "pairwise", "record": "pairwise.record.json", "backend": pw.backend,
                                       "named": k.names[u.unit] in pw.stragglers}})
    return out


def _storage_figures(records: dict[str, Any], nodes: _Nodes, fleet: _Fleet) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    st = records.get("storage")
    if st is None:
        return out
    for scan in ([st.local] if st.local else []) + list(st.shared):
        for c in scan.cells:
            if c.error:
                continue
            key = cell_key(c.file_size_bytes, c.rw)
            out.append({"id": f"fio/{nodes.key(scan.node)}{scan.mount}/{key}", "kind": "fio",
                        "subject": f"`{scan.mount}` on {nodes.label(scan.node)}, {iec_whole(c.file_size_bytes)} {c.rw}",
                        "node": nodes.idx(scan.node), "mount": scan.mount, "cell": key,
                        "value": round(c.bw_mib_s, 3), "unit": "MiB/s", "state": "ok",
                        "noise_frac": None, "noise_basis": "the fio tolerance",
                        "provenance": {"phase": "storage", "record": "storage.record.json", "tool": "fio",
                                       "iops": c.iops, "latency_msec": c.latency_msec, "runtime_ms": c.runtime_ms,
                                       "fstype": scan.fstype, "shared": scan.shared, "raw_json": c.raw_json}})
    cw = st.concurrent
    if cw is not None:
        for w in cw.nodes:
            out.append({"id": f"concurrent/{nodes.key(w.node)}{cw.mount}", "kind": "concurrent-write",
                        "subject": f"concurrent write to `{cw.mount}` from {nodes.label(w.node)}",
                        "node": nodes.idx(w.node), "mount": cw.mount,
                        "value": round(w.mib_s, 3) if not w.error else None, "unit": "MiB/s",
                        "state": "ok" if not w.error else "failed",
                        "noise_frac": None, "noise_basis": "the fio tolerance",
                        **{k: v for k, v in fleet.noise(f"concurrent/{nodes.key(w.node)}{cw.mount}",
                                                         [w.mib_s]).items() if k == "fleet"},
                        "provenance": {"phase": "storage", "record": "storage.record.json", "tool": cw.tool,
                                       "bytes_written": w.bytes_written, "seconds": w.seconds, "error": w.error}})
    return out


def _node_entries(records: dict[str, Any], nodes: _Nodes) -> list[dict[str, Any]]:
    env = records.get("environment")
    ev = records.get("evalpython")
    pre = records.get("preflight")
    env_by_name = {n.node: n for n in getattr(env, "nodes", None) or []}
    names = sorted(nodes.index, key=lambda x: nodes.index[x])
    out = []
    for name in names:
        e = env_by_name.get(name)
        sw = e.software if e is not None else None
        software = {f: (getattr(sw, f, "") if sw is not None else "") for f in SOFTWARE_FIELDS}
        for f in ("torch", "nccl", "python"):  # what the eval Python reported, where the inventory did not
            software[f] = software[f] or (getattr(ev, f, "") if ev is not None else "")
        if e is not None and sw is not None and not software["driver"]:
            software["driver"] = next((g.driver_version for g in e.gpus if g.driver_version), "")
        gpus = list(getattr(e, "gpus", None) or [])
        models = Counter(g.name for g in gpus)
        count = len(gpus) or (getattr(pre, "gpus_by_node", {}) or {}).get(name, 0)
        out.append({
            "index": nodes.index[name], "name": name, "hostname": nodes.hostname.get(name, ""),
            "label": nodes.label(name), "num_gpus": count,
            "gpu_model": models.most_common(1)[0][0] if models else "",
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "serial": g.serial,
                      "memory_total_mib": g.memory_total_mib, "power_limit_w": g.power_limit_w} for g in gpus],
            "software": software,
            "host": {"os": getattr(e, "os_pretty", "") if e else "", "kernel": getattr(e, "kernel", "") if e else ""},
        })
    return out


def _mounts(records: dict[str, Any], nodes: _Nodes) -> list[dict[str, Any]]:
    st = records.get("storage")
    env = records.get("environment")
    parts = list(getattr(st, "partitions", None) or [])
    if not parts and env is not None and env.nodes:
        parts = list(env.nodes[0].filesystems)
    layouts: dict[str, Any] = {}
    if st is not None:
        for scan in ([st.local] if st.local else []) + list(st.shared):
            layouts[scan.mount] = scan
    out: list[dict[str, Any]] = []
    for p in parts:
        out.append({"mount": p.mount, "fstype": p.fstype, "size_bytes": p.size_bytes, "source": p.source,
                    "shared": p.shared})
    known = {e["mount"] for e in out}
    for mount, scan in layouts.items():
        entry = next((e for e in out if e["mount"] == mount), None)
        if entry is None:
            entry = {"mount": mount, "fstype": scan.fstype, "size_bytes": scan.size_bytes, "source": scan.source,
                     "shared": scan.shared}
            out.append(entry)
            known.add(mount)
        entry["scanned_on"] = nodes.label(scan.node)
        if scan.layout is not None:
            entry["layout"] = {"tool": scan.layout.tool, "stripe_count": scan.layout.stripe_count,
                               "stripe_size_bytes": scan.layout.stripe_size_bytes,
                               "num_targets": scan.layout.num_targets, "options": scan.layout.options,
                               "summary": scan.layout.summary}
    return out


def _nccl_env(records: dict[str, Any]) -> dict[str, str]:
    for phase in ("allreduce", "connectivity"):
        env = getattr(getattr(records.get(phase), "nccl_env", None), "final_env", None)
        if env:
            return dict(env)
    return dict(getattr(records.get("preflight"), "final_env", None) or {})


def _nccl_logged(records: dict[str, Any]) -> str:
    ar = records.get("allreduce")
    sweeps = list(getattr(ar, "intra", None) or []) + ([ar.inter] if ar is not None and ar.inter else [])
    return next((s.nccl.version for s in sweeps if s.nccl is not None and s.nccl.version), "")


def _verdict_target(f: Finding, records: dict[str, Any], storage_targets: Any) -> dict[str, Any] | None:
    env = records.get("environment")
    env0 = env.nodes[0] if env is not None and env.nodes else None
    ar = records.get("allreduce")
    gpu_target = getattr(records.get("preflight"), "gpu_bf16_target_tflops", None)
    if f.subsystem == "GPUs" and gpu_target:
        return {"value": gpu_target, "unit": "TFLOPS", "what": "dense BF16", "source": "cluster.toml"}
    if f.subsystem == "GPUs" and env0 is not None and env0.gpus:
        spec = lookup_gpu(env0.gpus[0].name, power_limit_w=env0.gpus[0].power_limit_w or None)
        if spec is not None and spec.bf16_dense_tflops:
            return {"value": spec.bf16_dense_tflops, "unit": "TFLOPS", "what": "dense BF16", "source": "spec database"}
    if f.subsystem == "fabric" and ar is not None:
        if "inter-node" in f.text and ar.internode_target_gb_s:
            return {"value": ar.internode_target_gb_s, "unit": "GB/s", "what": "inter-node all-reduce busbw",
                    "source": "cluster.toml"}
        if "intra-node" in f.text:
            wire = intra_spec(env0, ar.nvlink_target_gb_s)
            if wire.spec_uni_gb_s:
                return {"value": wire.spec_uni_gb_s, "unit": "GB/s", "what": f"{wire.kind or 'intra-node'} unidirectional",
                        "source": wire.source}
    st = records.get("storage")
    if f.subsystem in ("local disk", "shared network FS") and st is not None:
        targets = list(storage_targets if storage_targets is not None else st.targets)
        for scan in ([st.local] if st.local else []) + list(st.shared):
            if f"`{scan.mount}`" in f.text:
                t = target_for(targets, scan)
                if t is not None:
                    return {"mount": t.mount, "bw_mib_s": dict(t.bw_mib_s), "iops": dict(t.iops), "source": t.source,
                            "unit": "MiB/s"}
    return None


def phase_outcomes(records: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """``ok`` / ``partial`` / ``failed`` / ``skipped`` per phase planned or recorded, as the records say."""
    planned = list(getattr(state, "phases_planned", None) or [])
    order = planned + [p for p in records if p not in planned]
    finished = set(getattr(state, "phases_finished", None) or [])
    out = []
    for phase in order:
        rec = records.get(phase)
        if rec is not None:
            outcome = getattr(rec, "status", "ok") or "ok"
        else:
            outcome = "not run" if phase not in finished else "skipped"
        out.append({"phase": phase, "outcome": outcome, "seconds": getattr(rec, "seconds", 0.0) if rec else 0.0})
    return out


def fleet_summary(kinds: list[FleetKind]) -> list[dict[str, Any]]:
    """One entry per kind of figure and peer group: the fleet's centre, spread, noise and verdicts."""
    out = []
    for k in kinds:
        for g in k.groups:
            out.append({"kind": k.kind, "subsystem": k.subsystem, "unit": k.unit, "group": g.group,
                        "num_units": g.num_units, "median": round(g.median, 4), "mad": round(g.mad, 4),
                        "spread_frac": round(g.spread_frac, 6), "noise_frac": round(g.noise_frac, 6),
                        "noise_basis": g.noise_basis, "noise_df": g.noise_df, "typical_repeats": g.typical_repeats,
                        "judged": g.judged, "why_not": g.why_not,
                        "detectable_frac": round(g.detectable_frac, 6) if g.detectable_frac is not None else None,
                        "slow": [{"subject": u.unit, "id": k.ids[u.unit], "shortfall_frac": round(u.shortfall_frac, 6),
                                  "p_value": u.p_value} for u in g.slow]})
    return out


def _gpu_passes(records: dict[str, Any]) -> int:
    """The passes every GPU's MSMF and lemon GEMM were to be measured in (``[verdicts] gpu_passes``), as the
    records say; 1 for a run without either pass or recorded before the key."""
    asked = [getattr(records.get(p), "num_gpu_passes", 1) for p in ("matmul", "lemon") if records.get(p) is not None]
    return max(asked, default=1)


def build_summary(state: Any, records: dict[str, Any], findings: list[Finding], gaps: list[Gap], *,
                  access: str = "", storage_targets: Any = None, report_name: str = "",
                  version: str = "", policy: VerdictPolicy | None = None) -> dict[str, Any]:
    """``state``: the run's ``RunState``; ``findings`` / ``gaps``: what the report rendered from ``records``;
    ``policy``: the fleet verdicts' (``[verdicts]``; None: the defaults), as the report used it."""
    policy = policy or VerdictPolicy()
    kinds = fleet_judgements(records, policy)
    fleet = _Fleet(kinds)
    nodes = _Nodes(records)
    entries = _node_entries(records, nodes)
    models = Counter(e["gpu_model"] for e in entries if e["gpu_model"])
    counts = Counter(e["num_gpus"] for e in entries)
    figures = (_compute_figures(records, fleet) + _gpupass_figures(records, fleet)
               + _network_figures(records, nodes, fleet) + _storage_figures(records, nodes, fleet))
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "kind": SUMMARY_KIND,
        "clustereval_version": version,
        "run": {"name": state.name, "stamp": state.stamp, "id": f"{state.name}-{state.stamp}" if not report_name
                else report_name.removesuffix(".md"), "report": report_name, "profile": state.profile,
                "started_utc": state.started_utc, "finished_utc": state.finished_utc,
                "interrupted": bool(state.interrupted)},
        "cluster": {
            "access": access,
            "num_nodes": len(entries),
            "gpu_model": models.most_common(1)[0][0] if models else "",
            "gpus_per_node": counts.most_common(1)[0][0] if counts else 0,
            "nodes": entries,
            "nccl_env": _nccl_env(records),
            "nccl_logged": _nccl_logged(records),
            "mounts": _mounts(records, nodes),
        },
        "verdict_policy": {"confidence": policy.confidence, "threshold_frac": policy.threshold_frac,
                           "gpu_peers": list(policy.group_by), "min_units": policy.min_units,
                           "detection_probability": DETECTION_PROBABILITY, "gpu_passes": _gpu_passes(records)},
        "fleet": fleet_summary(kinds),
        "figures": figures,
        "verdicts": [{"category": f.category, "verdict": VERDICT_WORDS.get(f.category, f.category),
                      "subsystem": f.subsystem, "text": f.text,
                      "target": _verdict_target(f, records, storage_targets),
                      # each figure behind the bullet with the row of the rules table that judged it
                      "judged": list(f.judged)} for f in findings],
        "gaps": [to_dict(g) for g in gaps],
        "phases": phase_outcomes(records, state),
    }
