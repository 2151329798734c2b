"""The snapshot's GPU checks: temperature, clocks and clock event reasons, PCIe, ECC and row
remapping, NVLink links, topology, fabric state and Fabric Manager, compute processes. Pure."""

from __future__ import annotations

from clustereval.analysis.snapshot_rules import (
    CLOCK_EVENT_BITS,
    POINT_HARDWARE,
    POINT_NCCL,
    POINT_NVLINK,
    POINT_PROCESSES,
    Q_EVENT_NAMES,
    Collector,
    Thresholds,
    plural,
    unavailable,
    value_range,
)
from clustereval.records.environment import GpuQuery
from clustereval.records.snapshot import GpuDetail, NodeReadings


def _gpu_name(g: GpuQuery) -> str:
    return f"gpu{g.index}"


def check_gpus(r: NodeReadings, out: Collector, t: Thresholds) -> None:
    st = r.tool("nvsmi_query")
    if st.timed_out:
        out.concern("gpu.nvidia-smi", "`nvidia-smi` did not answer within its timeout", "no answer in 20 s",
                    "hardware: a GPU or the driver is hung (check the kernel log for Xid 79 / 119); "
                    + POINT_HARDWARE)
        return
    if st.missing:
        out.add(unavailable(r.node, "gpu", "GPU signals (temperature, clocks, PCIe, ECC, NVLink, topology)", st))
        return
    if not st.ok:
        out.concern("gpu.nvidia-smi", f"`nvidia-smi` failed: {st.error or f'exit {st.rc}'}",
                    "nvidia-smi must answer", "hardware: the driver cannot talk to a GPU; " + POINT_HARDWARE)
        return
    if not r.gpus:
        out.info("gpu", "`nvidia-smi` lists no GPUs on this node")
        return
    details = {d.bus_id: d for d in r.gpu_details}
    pairs = [(g, details.get(g.pci_bus_id)) for g in r.gpus]
    _temperature(r, pairs, out, t)
    _clocks(r, pairs, out, t)
    _pcie(pairs, out)
    _ecc(r, pairs, out)
    _nvlink(r, out, t)
    _topology(r, out)
    _fabric(r, pairs, out)
    _processes(r, out)


def _temperature(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: Collector,
                 t: Thresholds) -> None:
    temps = {}
    for g, d in pairs:
        temp = g.temperature_c if g.temperature_c is not None else (d.temperature_c if d else None)
        if temp is not None:
            temps[g.index] = temp
    for idx, temp in temps.items():
        if temp >= t.gpu_temp_c:
            out.concern("gpu.temperature", f"temperature {temp:g} °C", f">= {t.gpu_temp_c:g} °C",
                        "hardware: check cooling (fans, airflow, inlet temperature); a hot GPU slows its "
                        "clocks; " + POINT_HARDWARE, subject=f"gpu{idx}")
    cool = [v for i, v in temps.items() if v < t.gpu_temp_c]
    if cool:
        out.ok("gpu.temperature", f"temperature {value_range(cool, ' °C')} on {plural(len(cool), 'GPU')} "
               f"(below {t.gpu_temp_c:g} °C)")
    missing = [g.index for g, _ in pairs if g.index not in temps]
    if missing:
        out.info("gpu.temperature", "temperature not reported for " + ", ".join(f"gpu{i}" for i in missing))


def _active_events(g: GpuQuery, d: GpuDetail | None) -> list[str] | None:
    if g.clock_event_mask is not None:
        return [name for bit, name in CLOCK_EVENT_BITS.items() if g.clock_event_mask & bit]
    if d is not None:
        return [Q_EVENT_NAMES.get(n, n) for n in d.clock_events_active]
    return None


def _clocks(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: Collector,
            t: Thresholds) -> None:
    sm = [(g.clocks_sm_mhz, g.clocks_max_sm_mhz) for g, _ in pairs if g.clocks_sm_mhz is not None]
    idle = 0
    held_back = 0
    unknown = []
    for g, d in pairs:
        events = _active_events(g, d)
        if events is None:
            unknown.append(g.index)
            continue
        idle += "idle" in events
        bad = [e for e in events if e in t.clock_events]
        if bad:
            held_back += 1
            out.concern("gpu.clock_events", f"clock event reasons active: {', '.join(bad)} "
                        f"(SM clock {g.clocks_sm_mhz or 0:g} of {g.clocks_max_sm_mhz or 0:g} MHz)",
                        "any of: " + ", ".join(t.clock_events), POINT_HARDWARE, subject=_gpu_name(g))
        elif "SW power cap" in events:
            out.info("gpu.clock_events", "clocks held at the power limit (SW power cap): normal for a GPU "
                     "running dense work at its power limit", subject=_gpu_name(g))
        if d is not None:
            for reason in ("HW Thermal Slowdown", "HW Power Braking"):
                us = d.clock_event_counters_us.get(reason, 0)
                if us:
                    out.info("gpu.clock_events", f"{reason.lower().replace('hw', 'HW')} was active for "
                             f"{us / 1e6:.1f} s in total since the driver loaded", subject=_gpu_name(g))
    checked = len(pairs) - len(unknown)
    if sm:
        maxes = {m for _, m in sm if m}
        out.info("gpu.clocks", f"SM clock {value_range([c for c, _ in sm], ' MHz')}"
                 + (f" of max {value_range(maxes, ' MHz')}" if maxes else "")
                 + (f" ({idle} of {plural(len(pairs), 'GPU')} idle)" if idle else ""))
    if checked and not held_back:
        out.ok("gpu.clock_events", f"no thermal, HW slowdown or power brake clock events active on "
               f"{plural(checked, 'GPU')}")
    if unknown:
        out.info("gpu.clock_events", "clock event reasons not reported for "
                 + ", ".join(f"gpu{i}" for i in unknown))


def _pcie(pairs: list[tuple[GpuQuery, GpuDetail | None]], out: Collector) -> None:
    good: list[str] = []
    unknown = []
    for g, d in pairs:
        gen_cur = g.pcie_gen_current if g.pcie_gen_current is not None else (d.pcie_gen_current if d else None)
        gen_max = g.pcie_gen_max if g.pcie_gen_max is not None else (d.pcie_gen_max if d else None)
        w_cur = g.pcie_width_current if g.pcie_width_current is not None else (d.pcie_width_current if d else None)
        w_max = g.pcie_width_max if g.pcie_width_max is not None else (d.pcie_width_max if d else None)
        if None in (gen_cur, gen_max, w_cur, w_max):
            unknown.append(g.index)
            continue
        assert gen_cur is not None and gen_max is not None and w_cur is not None and w_max is not None
        idle = g.clock_event_mask is not None and bool(g.clock_event_mask & 0x1)
        if w_cur < w_max:
            out.concern("gpu.pcie", f"PCIe link x{w_cur} of max x{w_max} (Gen{gen_cur})",
                        "width below the maximum", "hardware: reseat or replace the GPU or riser; "
                        + POINT_HARDWARE, subject=_gpu_name(g))
        elif gen_cur < gen_max and not idle:
            out.concern("gpu.pcie", f"PCIe Gen{gen_cur} of max Gen{gen_max} (x{w_cur}) while not idle",
                        "generation below the maximum under load",
                        "hardware: check BIOS PCIe settings and the slot; " + POINT_HARDWARE,
                        subject=_gpu_name(g))
        elif gen_cur < gen_max:
            out.info("gpu.pcie", f"PCIe Gen{gen_cur} of max Gen{gen_max} (x{w_cur}) while idle: links "
                     "downshift at idle to save power; re-run the snapshot under load", subject=_gpu_name(g))
        else:
            good.append(f"Gen{gen_cur} x{w_cur}")
    if good:
        kinds = sorted(set(good))
        out.ok("gpu.pcie", f"PCIe {' / '.join(kinds)} on {plural(len(good), 'GPU')} (at the maximum)")
    if unknown:
        out.info("gpu.pcie", "PCIe link not reported for " + ", ".join(f"gpu{i}" for i in unknown))


def _ecc(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: Collector) -> None:
    clean = 0
    unknown = []
    for g, d in pairs:
        vol = g.ecc_uncorrected_volatile
        if vol is None and d is not None:
            vol = d.ecc_volatile_uncorrectable
        if vol is None and d is None:
            unknown.append(g.index)
            continue
        problems = False
        if vol:
            problems = True
            out.concern("gpu.ecc", f"{vol} uncorrectable ECC errors since the last driver load",
                        "> 0 uncorrectable (volatile)", POINT_HARDWARE, subject=_gpu_name(g))
        if d is not None:
            if d.remap_pending:
                problems = True
                out.concern("gpu.ecc", "row remap pending (takes effect at the next GPU reset)",
                            "a pending remap", "hardware: reset the GPU (drain the node first), then "
                            "re-check; " + POINT_HARDWARE, subject=_gpu_name(g))
            if d.remap_failure:
                problems = True
                out.concern("gpu.ecc", "row remapping failure occurred", "a remapping failure",
                            "hardware: the GPU has run out of spare rows; drain the node and ask for "
                            "the GPU to be replaced", subject=_gpu_name(g))
            for flag in d.repair_flags:
                problems = True
                out.concern("gpu.ecc", f"{flag}: Yes", "a repair pending", POINT_HARDWARE, subject=_gpu_name(g))
            if d.ecc_aggregate_uncorrectable:
                out.info("gpu.ecc", f"{d.ecc_aggregate_uncorrectable} uncorrectable ECC errors over the GPU's "
                         "lifetime (aggregate)" + (f", {d.remapped_uncorrectable} rows remapped for them"
                                                   if d.remapped_uncorrectable else ""), subject=_gpu_name(g))
        if not problems:
            clean += 1
    if clean:
        out.ok("gpu.ecc", f"no uncorrectable ECC errors and no pending row remaps on {plural(clean, 'GPU')}")
    if unknown:
        out.info("gpu.ecc", "ECC not reported (disabled or not supported) for "
                 + ", ".join(f"gpu{i}" for i in unknown))


def _nvlink(r: NodeReadings, out: Collector, t: Thresholds) -> None:
    st = r.tool("nvsmi_nvlink")
    if not st.ok:
        out.add(unavailable(r.node, "gpu.nvlink", "NVLink link state", st))
        return
    with_links = [g for g in r.nvlinks if g.links]
    if not with_links:
        out.info("gpu.nvlink", "no NVLink links reported (PCIe-only GPUs, or NVLink not supported)")
        return
    speeds = [ln.gb_s for g in with_links for ln in g.links if ln.gb_s is not None]
    fastest = max(speeds) if speeds else 0.0
    most = max(len(g.links) for g in with_links)
    floor = fastest * (1 - t.sibling_slower_pct / 100)
    healthy = 0
    for g in with_links:
        down = [ln.link for ln in g.links if ln.gb_s is None]
        slow = [ln for ln in g.links if ln.gb_s is not None and ln.gb_s < floor]
        bad = False
        if down:
            bad = True
            out.concern("gpu.nvlink", f"NVLink {plural(len(down), 'link')} inactive: "
                        f"{', '.join(map(str, down))} ({len(down)} of {len(g.links)})", "a link inactive",
                        POINT_NVLINK, subject=f"gpu{g.gpu}")
        if slow:
            bad = True
            out.concern("gpu.nvlink", "NVLink links slower than their siblings: "
                        + ", ".join(f"link {ln.link} {ln.gb_s:g} GB/s" for ln in slow)
                        + f" (fastest {fastest:g} GB/s)", f"more than {t.sibling_slower_pct:g}% below "
                        "the fastest link", POINT_NVLINK, subject=f"gpu{g.gpu}")
        if len(g.links) < most:
            bad = True
            out.concern("gpu.nvlink", f"{len(g.links)} NVLink links where its siblings have {most}",
                        "fewer links than a sibling GPU", POINT_NVLINK, subject=f"gpu{g.gpu}")
        healthy += not bad
    if healthy:
        out.ok("gpu.nvlink", f"{most} NVLink links per GPU at {fastest:g} GB/s each on "
               f"{plural(healthy, 'GPU')}, all active")


def _topology(r: NodeReadings, out: Collector) -> None:
    st = r.tool("nvsmi_topo")
    if not st.ok:
        out.add(unavailable(r.node, "gpu.topology", "`nvidia-smi topo -m`", st))
        return
    pairs = r.topology.gpu_pairs()
    if not pairs:
        out.info("gpu.topology", "`nvidia-smi topo -m` shows a single GPU")
        return
    kinds: dict[str, list[str]] = {}
    for p in pairs:
        kinds.setdefault(p.kind, []).append(f"{p.a}-{p.b}")
    summary = ", ".join(f"{k} ({plural(len(v), 'pair')})" for k, v in sorted(kinds.items()))
    nv = {k for k in kinds if k.startswith("NV")}
    if len(nv) > 1 or (nv and len(kinds) > len(nv)):
        common = max(kinds, key=lambda k: len(kinds[k]))
        odd = [f"{k}: {', '.join(v[:6])}{' …' if len(v) > 6 else ''}" for k, v in kinds.items() if k != common]
        out.concern("gpu.topology", f"GPU pairs are linked unevenly: {summary}; odd ones {'; '.join(odd)}",
                    "NVLink pairs with different link counts",
                    "hardware (NVLink) if the platform should be uniform; " + POINT_NCCL)
    else:
        out.info("gpu.topology", f"`nvidia-smi topo -m` GPU pairs: {summary}")
    if r.topology.nics:
        out.info("gpu.topology", f"`nvidia-smi topo -m` lists {plural(len(r.topology.nics), 'NIC')}: "
                 + ", ".join(r.topology.nics[:8]) + (" …" if len(r.topology.nics) > 8 else ""))


def _fabric(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: Collector) -> None:
    states = [(g, d) for g, d in pairs if d is not None and d.fabric_state and d.fabric_state != "N/A"]
    bad = [(g, d) for g, d in states if d is not None
           and (d.fabric_state != "Completed" or d.fabric_status not in ("Success", ""))]
    for g, d in bad:
        assert d is not None
        out.concern("gpu.fabric", f"NVLink fabric state {d.fabric_state} / {d.fabric_status or '?'}",
                    "not Completed / Success", "hardware (NVSwitch): check nvidia-fabricmanager "
                    "(`systemctl status nvidia-fabricmanager`, its log); " + POINT_NVLINK, subject=_gpu_name(g))
    if states and not bad:
        out.ok("gpu.fabric", f"NVLink fabric state Completed / Success on {plural(len(states), 'GPU')}")
    if r.nvswitch_devices:
        if r.fabricmanager_service == "active":
            out.ok("gpu.fabricmanager", f"nvidia-fabricmanager active ({plural(r.nvswitch_devices, 'NVSwitch device')})")
        elif r.fabricmanager_service:
            out.concern("gpu.fabricmanager", f"{plural(r.nvswitch_devices, 'NVSwitch device')} present but "
                        f"nvidia-fabricmanager is {r.fabricmanager_service}",
                        "NVSwitch present and the service not active",
                        "hardware (NVSwitch): `systemctl status nvidia-fabricmanager`; its version must match "
                        "the driver; without it the GPUs cannot use NVLink")
        else:
            out.info("gpu.fabricmanager", f"{plural(r.nvswitch_devices, 'NVSwitch device')} present; the "
                     "nvidia-fabricmanager service state cannot be read here (no systemd)")


def _processes(r: NodeReadings, out: Collector) -> None:
    st = r.tool("nvsmi_apps")
    if not st.ok:
        out.add(unavailable(r.node, "gpu.processes", "GPU compute processes", st))
        return
    if not r.processes:
        out.ok("gpu.processes", "no compute processes on the GPUs")
        return
    by_uuid = {g.uuid: g.index for g in r.gpus}
    listed = []
    for p in r.processes[:8]:
        where = f"gpu{by_uuid[p.gpu_uuid]} " if p.gpu_uuid in by_uuid else ""
        mem = f" {p.used_mib:g} MiB" if p.used_mib is not None else ""
        listed.append(f"{where}pid {p.pid} {p.name}{mem}")
    more = f", and {len(r.processes) - 8} more" if len(r.processes) > 8 else ""
    out.concern("gpu.processes", f"{plural(len(r.processes), 'compute process')} on the GPUs: "
                + "; ".join(listed) + more, "any process on a GPU", POINT_PROCESSES)
