"""GPU memory and links: HBM bandwidth, PCIe host↔device, GPU pair copies, a memory pattern test
with NVML's memory-health counters before and after, and the correctness vote, on every GPU of
every node (``workers/gpu_pass.py``); nvbandwidth beside it where a node has it installed.

The phase records what each GPU did; the verdicts (targets, fleet outliers, the vote's dissenters,
memory errors) are ``analysis/gpupass.py``'s, from the record alone. Before the pass, foreign
compute processes stop it on that node, as they stop the other performance passes.
"""

from __future__ import annotations

import time
from typing import Any

from clustereval.phases.base import RunContext
from clustereval.phases.gpunode import Guard, NodeGpus, inventories, no_gpu_gap
from clustereval.phases.pernode import each_node
from clustereval.phases.remote import require_torch, worker_argv, worker_env
from clustereval.phases.settings import GpuPassSettings, GpuSettings
from clustereval.phases.tools import publish_tools
from clustereval.phases.workerproc import WorkerProc
from clustereval.probes import nvbandwidth, nvsmi_q
from clustereval.probes._text import integer
from clustereval.probes.xid import parse_xid_lines
from clustereval.records import Gap, from_dict
from clustereval.records.gpupass import (
    GpuPassRecord,
    MemMismatch,
    MemoryHealth,
    NodePass,
    NvbFigure,
    P2pCell,
    PassGpu,
    PcieLink,
    PcieRates,
    VoteCase,
)

TOOLS = ("clustereval.workers.gpu_pass", "clustereval.workers.gpu_pass_bench", "clustereval.workers.gpu_pass_nvml")
KERNEL_LOG_ARGV = ["dmesg"]


def _samples(e: dict[str, Any], name: str) -> list[float]:
    """Each repeat's rate of one figure from a worker line; [] from a worker that did not send them."""
    return [float(x) for x in e.get(f"{name}_samples_gb_s") or [] if x is not None]


class GpuPassPhase:
    name = "gpupass"
    title = "GPU memory, PCIe, GPU links and correctness"

    def __init__(self, settings: GpuPassSettings | None = None) -> None:
        self.settings = settings or GpuPassSettings()

    def applies(self, ctx: RunContext) -> bool:
        return True

    def _gpu_settings(self) -> GpuSettings:
        s = self.settings
        return GpuSettings(device=s.device, cpu_gpus=s.cpu_gpus, command_timeout_s=s.command_timeout_s,
                           busy_recheck_s=s.busy_recheck_s)

    def run(self, ctx: RunContext) -> GpuPassRecord:
        targets = ctx.config.targets
        rec = GpuPassRecord(quick=self.settings.quick, target_hbm_copy_gb_s=targets.hbm_copy_gb_s,
                            target_pcie_gb_s=targets.pcie_gb_s, target_nvlink_uni_gb_s=targets.nvlink_uni_gb_s)
        invs, lost = inventories(ctx, self._gpu_settings(), self.name, "the GPU memory and links pass")
        live = [i for i in invs if i.gpus]
        if not live:
            rec.status = "skipped"
            rec.gaps.append(no_gpu_gap(invs))
            return rec
        require_torch(ctx)
        rec.tool_rel = publish_tools(ctx, *TOOLS)[0]
        by_name = {i.node.name: i for i in live}
        steps = each_node(ctx, self.name, "the GPU memory and links pass", [i.node for i in live],
                          lambda n: self._node(ctx, by_name[n.name]), what="the GPU memory and links worker")
        for s in steps:
            inv = by_name[s.node.name]
            if s.value is not None:
                node, gaps = s.value
            else:
                node = NodePass(node=inv.node.name, index=inv.node.index, hostname=inv.hostname,
                                gpus=[PassGpu(gpu=g.index, name=g.name) for g in inv.gpus],
                                error=s.error.message if s.error else "no answer")
                gaps = [s.gap] if s.gap else []
            rec.nodes.append(node)
            rec.gaps += gaps
        rec.gaps += lost
        if rec.gaps or ctx.stop.is_set():
            rec.status = "partial"
        return rec

    def _node(self, ctx: RunContext, inv: NodeGpus) -> tuple[NodePass, list[Gap]]:
        node = inv.node
        out = NodePass(node=node.name, index=node.index, hostname=inv.hostname,
                       gpus=[PassGpu(gpu=g.index, name=g.name, uuid=g.uuid) for g in inv.gpus])
        found = Guard(ctx, inv, self._gpu_settings()).foreign()
        if found:
            out.error = "gpupass.busy"
            return out, [Gap(self.name, node=node.name, kind="gpupass.busy", facts={"processes": found})]
        gaps: list[Gap] = []
        before = self._kernel_log(ctx, inv, out)
        smi_before = self._smi(ctx, inv)
        gaps += self._worker(ctx, inv, out)
        after = self._kernel_log(ctx, inv, out)
        if not out.telemetry and smi_before is not None:
            # no NVML in the eval Python: the same counters from `nvidia-smi -q` around the worker
            from_smi(out, smi_before, self._smi(ctx, inv))
        if before is not None and after is not None:
            seen = set(before)
            out.new_xids = [line for line in after if line not in seen]
        if not self.settings.cpu and not ctx.stop.is_set():
            gaps += self._nvbandwidth(ctx, inv, out)
        return out, gaps

    def _smi(self, ctx: RunContext, inv: NodeGpus) -> nvsmi_q.QReport | None:
        if self.settings.cpu:
            return None
        res = ctx.repeatable.run(inv.node, nvsmi_q.build_argv(), timeout_s=self.settings.command_timeout_s)
        return nvsmi_q.parse(res.stdout) if res.ok else None

    def _kernel_log(self, ctx: RunContext, inv: NodeGpus, out: NodePass) -> list[str] | None:
        res = ctx.repeatable.run(inv.node, KERNEL_LOG_ARGV, timeout_s=self.settings.command_timeout_s)
        if not res.ok:
            lines = (res.stderr or res.stdout).strip().splitlines()
            out.xid_unread = (lines[-1] if lines else f"exit {res.rc}")[:200]
            return None
        return [e.line for e in parse_xid_lines(res.stdout)]

    def _worker(self, ctx: RunContext, inv: NodeGpus, out: NodePass) -> list[Gap]:
        s = self.settings
        args = ["--device", s.device]
        args += ["--cpu-gpus", str(max(1, s.cpu_gpus))] if s.cpu else ["--gpus", ",".join(map(str, inv.indices))]
        if s.quick:
            args.append("--quick")
        env = worker_env(ctx, inv.node, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        proc = WorkerProc(ctx, inv.node, worker_argv(ctx, "gpu_pass", *args), env, f"gpupass/{inv.node.name}.log")
        try:
            if proc.wait_event(lambda e: e.get("event") in ("hello", "fatal"), s.start_timeout_s) is None:
                if ctx.stop.is_set():
                    return []
                out.error = "gpupass.worker-failed"
                return [self._failed(inv, f"no first line within {s.start_timeout_s:.0f} s" if not proc.eof
                                     else proc.error_text())]
            shown = 0
            while True:
                done = proc.wait_event(lambda e: e.get("event") in ("done", "fatal"), 5.0)
                steps = proc.of("step")
                if len(steps) > shown:
                    shown = len(steps)
                    last = steps[-1]
                    left = max(0.0, s.expected_s - float(last.get("elapsed_s") or 0.0))
                    ctx.progress(self.name, inv.node.name, f"{last.get('step')} ({last.get('number')} of "
                                 f"{last.get('of')}) on {len(inv.gpus)} GPU(s)", left)
                if done is not None or proc.eof or ctx.stop.is_set():
                    break
                if _age(proc) > s.worker_timeout_s:
                    break
            finished = proc.last("done")
            fatal = proc.last("fatal")
        finally:
            proc.kill()
            proc.save_log()
        self._read(proc.events, out)
        gaps = [Gap(self.name, kind="gpupass.gpu-error", facts={"node": inv.node.name, "gpu": e.get("gpu"),
                                                                 "step": e.get("step"), "error": e.get("error")})
                for e in proc.events if e.get("event") == "error"]
        if ctx.stop.is_set() and finished is None:
            return gaps
        if fatal is not None or finished is None:
            out.error = "gpupass.worker-failed"
            why = str(fatal.get("error")) if fatal else (
                f"no result within {s.worker_timeout_s:.0f} s" if not proc.eof else proc.error_text())
            gaps.append(self._failed(inv, why))
        return gaps

    def _failed(self, inv: NodeGpus, why: str) -> Gap:
        return Gap(self.name, node=inv.node.name, kind="gpupass.worker-failed", facts={"error": why})

    @staticmethod
    def _read(events: list[dict[str, Any]], out: NodePass) -> None:
        """The worker's lines into the node's record."""
        gpus = {g.gpu: g for g in out.gpus}

        def gpu(e: dict[str, Any]) -> PassGpu:
            idx = int(e.get("gpu", -1))
            if idx not in gpus:
                gpus[idx] = PassGpu(gpu=idx)
                out.gpus.append(gpus[idx])
            return gpus[idx]

        for e in events:
            kind = e.get("event")
            if kind == "hello":
                out.torch, out.cuda, out.device = str(e.get("torch", "")), str(e.get("cuda", "")), str(e.get("device", ""))
                out.telemetry = bool(e.get("telemetry"))
            elif kind == "gpu":
                g = gpu(e)
                g.name, g.uuid = str(e.get("name") or g.name), str(e.get("uuid") or g.uuid)
                g.sm_count, g.memory_gib = int(e.get("sm_count") or 0), float(e.get("memory_gib") or 0.0)
                g.compute_capability = str(e.get("compute_capability", ""))
                g.link = from_dict(PcieLink, e.get("pcie") or {})
            elif kind == "health":
                health = from_dict(MemoryHealth, {k: v for k, v in e.items() if k not in ("event", "gpu", "stage")})
                if e.get("stage") == "before":
                    gpu(e).health_before = health
                else:
                    gpu(e).health_after = health
            elif kind == "hbm":
                g = gpu(e)
                g.copy_gb_s, g.read_gb_s, g.write_gb_s = e.get("copy_gb_s"), e.get("read_gb_s"), e.get("write_gb_s")
                g.copy_samples_gb_s, g.read_samples_gb_s, g.write_samples_gb_s = (
                    _samples(e, "copy"), _samples(e, "read"), _samples(e, "write"))
            elif kind == "pcie":
                g = gpu(e)
                names = ("h2d", "d2h", "bidir_h2d", "bidir_d2h")
                rates = from_dict(PcieRates, {**{f"{k}_gb_s": e.get(f"{k}_gb_s") for k in names},
                                              **{f"{k}_samples_gb_s": _samples(e, k) for k in names},
                                              "near_gpu_cpus": e.get("near_gpu_cpus")})
                if e.get("mode") == "solo":
                    g.pcie_solo = rates
                    g.link.gen_under_load, g.link.width_under_load = e.get("gen_under_load"), e.get("width_under_load")
                else:
                    g.pcie_all = rates
            elif kind == "p2p":
                out.p2p.append(P2pCell(src=int(e["src"]), dst=int(e["dst"]), peer=bool(e.get("peer", True)),
                                       write_gb_s=e.get("write_gb_s"), read_gb_s=e.get("read_gb_s"),
                                       bidir_gb_s=e.get("bidir_gb_s"), write_samples_gb_s=_samples(e, "write"),
                                       read_samples_gb_s=_samples(e, "read")))
            elif kind == "memtest":
                g = gpu(e)
                g.mem_bytes_tested, g.mem_patterns = int(e.get("bytes_tested") or 0), list(e.get("patterns") or [])
                g.mem_mismatches = [from_dict(MemMismatch, m) for m in e.get("mismatches") or []]
            elif kind == "vote":
                gpu(e).vote = [from_dict(VoteCase, c) for c in e.get("cases") or []]
            elif kind == "error":
                gpu(e).errors.append(f"{e.get('step')}: {e.get('error')}")
            elif kind == "done":
                out.seconds = float(e.get("seconds") or 0.0)

    def _nvbandwidth(self, ctx: RunContext, inv: NodeGpus, out: NodePass) -> list[Gap]:
        """nvbandwidth's figures when the node has it; nothing when it does not."""
        s = self.settings
        which = ctx.repeatable.run(inv.node, nvbandwidth.WHICH_ARGV, timeout_s=s.command_timeout_s)
        path = which.stdout.strip().splitlines()[-1] if which.ok and which.stdout.strip() else ""
        if not path:
            return []
        ctx.progress(self.name, inv.node.name, "nvbandwidth (installed on the node)", None)
        res = ctx.transport.run(inv.node, nvbandwidth.run_argv(path), timeout_s=s.nvbandwidth_timeout_s)
        ctx.raw(f"gpupass/{inv.node.name}-nvbandwidth.json", res.stdout + res.stderr)
        run = nvbandwidth.parse(res.stdout)
        if not res.ok or run.error or not run.testcases:
            why = run.error or (res.stderr or res.stdout).strip()[-200:] or f"exit {res.rc}"
            out.nvbandwidth = f"error: {why}"
            return [Gap(self.name, node=inv.node.name, kind="gpupass.nvbandwidth-failed",
                        facts={"rc": res.rc, "error": why})]
        out.nvbandwidth = run.version or "unknown version"
        out.nvb_figures = figures_of(run)
        return []


def smi_health(q: nvsmi_q.QGpu) -> MemoryHealth:
    """NVML's memory-health counters as `nvidia-smi -q` prints them (N/A: not offered, None)."""
    rows, pages = q.remapped_rows(), q.retired_pages()

    def flag(text: str) -> bool | None:
        return {"yes": True, "no": False}.get(text.strip().lower())

    mode = q.ecc_mode().strip().lower()
    return MemoryHealth(
        ecc_enabled={"enabled": True, "disabled": False}.get(mode),
        ecc_uncorrected_volatile=q.ecc_uncorrectable("Volatile") if q.fields.get("ECC Errors") else None,
        ecc_uncorrected_aggregate=q.ecc_uncorrectable("Aggregate") if q.fields.get("ECC Errors") else None,
        retired_sbe=integer(pages.get("Single Bit ECC", "")), retired_dbe=integer(pages.get("Double Bit ECC", "")),
        retired_pending=flag(pages.get("Pending Page Blacklist", pages.get("Pending Page Retirement", ""))),
        remapped_corrected=integer(rows.get("Correctable Error", "")),
        remapped_uncorrected=integer(rows.get("Uncorrectable Error", "")),
        remap_pending=flag(rows.get("Pending", "")), remap_failed=flag(rows.get("Remapping Failure Occurred", "")))


def from_smi(out: NodePass, before: nvsmi_q.QReport, after: nvsmi_q.QReport | None) -> None:
    """The link and the memory-health counters of each GPU (nvidia-smi's order is its index order)."""
    for i, q in enumerate(before.gpus):
        g = next((x for x in out.gpus if x.gpu == i), None)
        if g is None:
            continue
        link = q.pcie()
        device_max = link["gen_device_max"] or None
        g.link.gen_current, g.link.gen_max = link["gen_current"] or None, link["gen_max"] or None
        g.link.gen_gpu_max = device_max
        g.link.width_current, g.link.width_max = link["width_current"] or None, link["width_max"] or None
        g.health_before = smi_health(q)
        if after is not None and i < len(after.gpus):
            g.health_after = smi_health(after.gpus[i])


def figures_of(run: nvbandwidth.NvbRun) -> list[NvbFigure]:
    """Every passed testcase's figures: per GPU for one-row testcases, per pair for matrices."""
    figures: list[NvbFigure] = []
    for tc in run.testcases:
        if tc.status != "Passed":
            continue
        if len(tc.matrix_gb_s) == 1:
            figures += [NvbFigure(tc.name, gpu, value) for gpu, value in tc.per_gpu_gb_s().items()]
            continue
        for src, row in enumerate(tc.matrix_gb_s):
            figures += [NvbFigure(tc.name, src, v, peer_gpu=dst) for dst, v in enumerate(row) if v is not None]
    return figures


def _age(proc: WorkerProc) -> float:
    return time.monotonic() - proc.started
