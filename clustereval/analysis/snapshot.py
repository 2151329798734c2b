"""Judge one node's snapshot readings: ``[OK]`` / ``[CONCERN]`` / ``[INFO]`` lines. Pure.

Every threshold is in ``snapshot_rules.THRESHOLDS`` (docs/snapshot.md shows the same table, built
by ``threshold_table``). Every CONCERN names the threshold it crossed and points at the next step.
A reading whose tool is missing or failed gives an INFO (or a CONCERN when the failure itself is
a symptom, such as ``nvidia-smi`` hanging), never an OK. GPU checks are in ``snapshot_gpu``; the
kernel log, fabric ports, CPU and storage checks are here.
"""

from __future__ import annotations

from clustereval.analysis.snapshot_gpu import check_gpus
from clustereval.analysis.snapshot_rules import (  # noqa: F401 - the rules, re-exported for callers
    POINT_EFA,
    POINT_FABRIC,
    POINT_GOVERNOR,
    POINT_HARDWARE,
    POINT_IOWAIT,
    POINT_NVLINK,
    POINT_ROOT,
    POINT_SHM,
    POINT_VERSIONS,
    POINT_XID_APP,
    THRESHOLDS,
    Collector,
    Thresholds,
    format_signal,
    plural,
    threshold_table,
    unavailable,
    value_range,
)
from clustereval.analysis.xid import xid_meaning, xid_origin
from clustereval.records.snapshot import NodeReadings, Signal
from clustereval.report.units import iec_tenths


def evaluate(r: NodeReadings, t: Thresholds = THRESHOLDS) -> list[Signal]:
    """Every signal for one node, in a stable order: host, GPUs, fabric, CPU, storage, versions."""
    out = Collector(r.node)
    if r.hostname or r.kernel:
        out.info("host.identity", f"host {r.hostname or '?'}, kernel {r.kernel or '?'}"
                 + (f", {r.os}" if r.os else ""))
    check_gpus(r, out, t)
    _xids(r, out)
    _rdma(r, out, t)
    _governor(r, out, t)
    _iowait(r, out, t)
    _storage(r, out, t)
    found = {k: v for k, v in r.versions.items() if v}
    if found:
        out.info("versions", "versions: " + "; ".join(f"{k} {v}" for k, v in found.items()))
    return out.signals


def _xids(r: NodeReadings, out: Collector) -> None:
    st = r.tool("xid")
    if st.missing or not st.ok:
        sig = unavailable(r.node, "xid", "Xid lines (kernel log)", st)
        if not st.missing and "not permitted" in (st.error or "").lower():
            sig.text += "; reading the kernel log needs root or kernel.dmesg_restrict=0"
        out.add(sig)
        return
    if not r.xids:
        out.ok("xid", "no Xid lines in the kernel log")
        return
    gpu_of = {g.pci_bus_id: f"gpu{g.index}" for g in r.gpus}
    groups: dict[tuple[bool, int, str], list] = {}
    for ev in r.xids:
        groups.setdefault((ev.nvswitch, ev.xid, ev.bus_id), []).append(ev)
    for (nvswitch, xid, bus), events in groups.items():
        last = events[-1]
        kind = "SXid" if nvswitch else "Xid"
        subject = gpu_of.get(bus, bus)
        origin = xid_origin(last)
        pointer = {"application": POINT_XID_APP, "nvlink": POINT_NVLINK}.get(origin, POINT_HARDWARE)
        count = f" ×{len(events)}" if len(events) > 1 else ""
        detail = last.detail if len(last.detail) <= 120 else last.detail[:117] + "…"
        out.concern("xid", f"{kind} {xid}{count} ({bus}): {xid_meaning(last)}; last: {detail}",
                    "any Xid line in the kernel log", pointer, subject=subject)


def _rdma(r: NodeReadings, out: Collector, t: Thresholds) -> None:
    if not r.rdma_ports:
        out.info("rdma", "no RDMA adapters (InfiniBand / RoCE / EFA) under /sys/class/infiniband")
        return
    by_kind: dict[str, list] = {}
    for p in r.rdma_ports:
        by_kind.setdefault(p.kind, []).append(p)
    labels = {"efa": "EFA", "roce": "RoCE", "infiniband": "InfiniBand", "rdma": "RDMA"}
    for kind, ports in by_kind.items():
        rates = [p.rate_gb_s for p in ports if p.rate_gb_s is not None]
        fastest = max(rates) if rates else 0.0
        floor = fastest * (1 - t.sibling_slower_pct / 100)
        good = []
        for p in ports:
            if p.state.upper() != "ACTIVE":
                out.concern("rdma.state", f"{labels[kind]} port state {p.state or '?'}"
                            + (f", physical {p.phys_state}" if p.phys_state else ""), "not ACTIVE",
                            POINT_FABRIC + "; check the cable / switch port, `ibstat` / `rdma link`",
                            subject=p.name)
            elif p.rate_gb_s is not None and p.rate_gb_s < floor:
                out.concern("rdma.rate", f"{labels[kind]} port at {p.rate_gb_s:g} Gb/s where its siblings run "
                            f"{fastest:g} Gb/s", f"more than {t.sibling_slower_pct:g}% below the fastest "
                            f"{labels[kind]} port", POINT_FABRIC + "; check the cable and the switch port "
                            "speed", subject=p.name)
            else:
                good.append(p)
        if good:
            rate = value_range([p.rate_gb_s for p in good if p.rate_gb_s is not None], " Gb/s") if any(
                p.rate_gb_s is not None for p in good) else "unknown rate"
            out.ok("rdma", f"{plural(len(good), labels[kind] + ' port')} ACTIVE at {rate}")
    if "efa" in by_kind:
        st = r.tool("fi_efa")
        if r.efa_provider_visible is True:
            out.ok("rdma.efa_provider", "`fi_info -p efa` lists the efa provider")
        elif r.efa_provider_visible is False:
            out.concern("rdma.efa_provider", "EFA adapters present but `fi_info -p efa` lists no efa provider"
                        + (f" ({st.error})" if st.error else ""), "EFA present, provider missing", POINT_EFA)
        else:
            out.add(unavailable(r.node, "rdma.efa_provider", "EFA provider check", st))


def _governor(r: NodeReadings, out: Collector, t: Thresholds) -> None:
    if not r.governors:
        out.info("cpu.governor", "no CPU frequency governor exposed (no cpufreq driver; usual in a virtual "
                 "machine, where the host sets CPU clocks)")
        return
    total = sum(r.governors.values())
    others = {g: n for g, n in r.governors.items() if g != t.governor}
    if others:
        out.concern("cpu.governor", "CPU frequency governor " + ", ".join(
            f"{g} on {n} of {total} CPUs" for g, n in sorted(others.items())),
            f"anything but {t.governor}", POINT_GOVERNOR)
    else:
        out.ok("cpu.governor", f"CPU frequency governor {t.governor} on all {total} CPUs")


def _iowait(r: NodeReadings, out: Collector, t: Thresholds) -> None:
    if len(r.cpu_samples) < 2:
        out.info("cpu.iowait", "host iowait not available: /proc/stat was not sampled twice")
        return
    a, b = r.cpu_samples[0], r.cpu_samples[-1]
    total = b.total - a.total
    if total <= 0:
        out.info("cpu.iowait", "host iowait not available: no CPU time passed between the samples")
        return
    pct = 100.0 * (b.iowait - a.iowait) / total
    over = f" over {r.sample_s:g} s" if r.sample_s else ""
    if pct > t.iowait_pct:
        out.concern("cpu.iowait", f"host iowait {pct:.1f}%{over}", f"> {t.iowait_pct:g}%",
                    POINT_IOWAIT + "; `iostat -x 1` names the busy device")
    else:
        out.ok("cpu.iowait", f"host iowait {pct:.1f}%{over} (at most {t.iowait_pct:g}%)")


def _storage(r: NodeReadings, out: Collector, t: Thresholds) -> None:
    # /dev/shm
    st = r.tool("shm")
    if r.shm is None:
        if "no such file" in st.error.lower():
            out.concern("storage.shm", "no /dev/shm", "/dev/shm must exist", POINT_SHM)
        else:
            out.add(unavailable(r.node, "storage.shm", "/dev/shm size", st))
    elif r.shm.size_bytes < t.shm_min_bytes:
        out.concern("storage.shm", f"/dev/shm is {iec_tenths(r.shm.size_bytes)}",
                    f"smaller than {iec_tenths(t.shm_min_bytes)}", POINT_SHM)
    elif r.shm.use_pct >= t.fullness_pct:
        out.concern("storage.shm", f"/dev/shm {r.shm.use_pct:g}% full of {iec_tenths(r.shm.size_bytes)}",
                    f">= {t.fullness_pct:g}% full", POINT_SHM + "; stale files of finished jobs fill it")
    else:
        out.ok("storage.shm", f"/dev/shm {iec_tenths(r.shm.size_bytes)}, {r.shm.use_pct:g}% used")
    # root volume
    if r.root is None:
        out.add(unavailable(r.node, "storage.root", "root volume fullness", r.tool("root")))
    elif r.root.use_pct >= t.fullness_pct:
        out.concern("storage.root", f"root volume {r.root.use_pct:g}% full ({iec_tenths(r.root.avail_bytes)} "
                    f"free of {iec_tenths(r.root.size_bytes)})", f">= {t.fullness_pct:g}% full", POINT_ROOT)
    else:
        out.ok("storage.root", f"root volume {r.root.use_pct:g}% full ({iec_tenths(r.root.avail_bytes)} free "
               f"of {iec_tenths(r.root.size_bytes)})")
    # shared mounts
    df_sections = {name[3:]: st for name, st in r.status.items() if name.startswith("df ")}
    if not df_sections:
        out.info("storage.shared", "no shared (network or parallel) filesystem mounted or configured")
    for path, st in df_sections.items():
        if st.timed_out:
            out.concern("storage.shared", f"`df {path}` did not answer within 10 s (a hung network mount)",
                        "df must answer", f"storage: check the mount and its server; `clustereval debug fs {path}`",
                        subject=path)
        elif not st.ok:
            out.concern("storage.shared", f"`df {path}` failed: {st.error or f'exit {st.rc}'}",
                        "df must answer", f"storage: is {path} mounted on this node?", subject=path)
    for row in r.shared:
        kind = f", {row.fstype}" if row.fstype else ""
        label = (f"{row.path} (on {row.target}{kind})" if row.path and row.path != row.target
                 else f"{row.target}" + (f" ({row.fstype})" if row.fstype else ""))
        if row.use_pct >= t.fullness_pct:
            out.concern("storage.shared", f"{label} {row.use_pct:g}% full ({iec_tenths(row.avail_bytes)} free of "
                        f"{iec_tenths(row.size_bytes)})", f">= {t.fullness_pct:g}% full",
                        f"storage: free space; a nearly full filesystem slows writes; `clustereval debug fs "
                        f"{row.path or row.target}`", subject=row.target)
        else:
            out.ok("storage.shared", f"{label} {row.use_pct:g}% full ({iec_tenths(row.avail_bytes)} free of "
                   f"{iec_tenths(row.size_bytes)})", subject=row.target)
    for lm in r.lustre:
        st = r.tool(f"lfs_df {lm.mount}")
        if not st.ok:
            out.add(unavailable(r.node, "storage.lustre", f"OST balance of {lm.mount}", st))
            continue
        osts = [x for x in lm.targets if x.kind == "OST"]
        if not osts:
            out.info("storage.lustre", f"`lfs df {lm.mount}` lists no OSTs", subject=lm.mount)
            continue
        pointer = f"storage: ask the filesystem's operator to rebalance or add capacity; `clustereval debug fs {lm.mount}`"
        inactive = [x for x in osts if x.inactive]
        if inactive:
            out.concern("storage.lustre", f"{plural(len(inactive), 'OST')} inactive: "
                        + ", ".join(_ost(x) for x in inactive[:8]), "an inactive OST", pointer, subject=lm.mount)
        active = [x for x in osts if not x.inactive]
        full = [x for x in active if x.use_pct >= t.fullness_pct]
        if full:
            out.concern("storage.lustre", f"{plural(len(full), 'OST')} nearly full: "
                        + ", ".join(f"{_ost(x)} {x.use_pct:g}%" for x in full[:8]),
                        f"an OST >= {t.fullness_pct:g}% full", pointer + " (files striped over a full OST "
                        "fail or slow down)", subject=lm.mount)
        if active:
            lo = min(active, key=lambda x: x.use_pct)
            hi = max(active, key=lambda x: x.use_pct)
            spread = hi.use_pct - lo.use_pct
            if spread >= t.ost_spread_pct_points:
                out.concern("storage.lustre", f"OSTs unevenly filled: {_ost(hi)} {hi.use_pct:g}% vs "
                            f"{_ost(lo)} {lo.use_pct:g}% ({spread:g} points apart)",
                            f"fullest minus emptiest >= {t.ost_spread_pct_points:g} points", pointer,
                            subject=lm.mount)
            elif not full:
                out.ok("storage.lustre", f"{plural(len(active), 'OST')} {value_range([x.use_pct for x in active], '%')} "
                       "full", subject=lm.mount)


def _ost(x) -> str:  # noqa: ANN001
    return f"OST{x.index:04x}"
