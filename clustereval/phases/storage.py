"""Storage: the partitions inventory, a six-run ``fio`` scan of the local disk and of every
distinct shared mount, the layout of each parallel FS, and a concurrent write from every node.

The scans run on the first node (one client). Shared mounts are grouped by (backing type,
size) first, so one scan stands for every mount of the same type and size. Every byte goes
into the run's scratch folder on that mount (``phases/scratch.py``), after a free-space check
for what the largest run holds at once (16 jobs x 1 GiB); the run's end moves it to trash.
"""

from __future__ import annotations

import posixpath
import threading
import time

from clustereval.analysis.storage import Candidate, plan_scans, same_volume
from clustereval.errors import ClusterEvalError, ScratchError, TransportError
from clustereval.names import slug
from clustereval.phases.base import RunContext
from clustereval.phases.pernode import each_node, error_gap, is_lost, live, note_error, note_failure
from clustereval.phases.scratch import Scratch, check_declared, normalize, scratch_for
from clustereval.phases.settings import StorageSettings
from clustereval.phases.tools import publish_tools
from clustereval.probes import fio as fio_probe
from clustereval.probes import storage as probe
from clustereval.probes._text import last_line
from clustereval.probes.mounts import is_network
from clustereval.records import CommandResult, Gap
from clustereval.records.environment import EnvironmentRecord, FilesystemInfo
from clustereval.records.scratch import ScratchArea
from clustereval.records.storage import (
    ConcurrentWrite,
    FioCell,
    Layout,
    MountScan,
    NodeWrite,
    StorageRecord,
)
from clustereval.report.units import iec_whole
from clustereval.transport.base import Node

MEMORY_FSTYPES = {"tmpfs", "ramfs"}  # a /tmp there measures RAM, not the local disk
# the code that ran fio and read its output, for the report to link (``publish_tools``)
STORAGE_TOOLS = ("clustereval.phases.storage", "clustereval.probes.fio")

# fio forks one process per job and each job starts a session of its own, so neither fio's pid nor a
# process group reaches them; every one of them carries the run's own `--directory=<workdir>`. The stop
# finds the processes of that command line and that name ("$0": the folder, "$2": the process name),
# sends SIGINT (fio ends its jobs), then SIGKILL once "$1" hundredths of a second have passed by the
# node's clock (/proc/uptime: a loaded node slows the polling, not the grace), and returns only when none
# is left.
_STOP_RUN = r"""
dir=$0 grace=$1 name=$2
find_run() {
  pids=""
  for f in $(grep -lzxF -e "--directory=$dir" /proc/[0-9]*/cmdline 2>/dev/null); do
    p=${f#/proc/}; p=${p%/cmdline}; c=""
    { IFS= read -r c < "/proc/$p/comm"; } 2>/dev/null
    [ "$c" = "$name" ] && pids="$pids $p"
  done
}
centis() { read -r up _ < /proc/uptime; c=${up%.*}${up#*.}; }
find_run
[ -n "$pids" ] || exit 0
kill -INT $pids 2>/dev/null
centis; until=$((c + grace))
while :; do
  sleep 0.1; find_run
  [ -n "$pids" ] || exit 0
  centis; [ "$c" -ge "$until" ] && kill -KILL $pids 2>/dev/null
done
"""
RESTOP_EVERY_S = 2.0  # a stop that came before fio started found nothing: it is sent again this often


class StoragePhase:
    name = "storage"
    title = "Storage"

    def __init__(self, settings: StorageSettings | None = None) -> None:
        self.settings = settings or StorageSettings()
        self._kept: dict[tuple[str, int, str], FioCell] = {}  # --resume: the runs that finished before
        self.file_sizes = self.settings.file_sizes
        self.fio = self.settings.fio
        self.concurrent_bytes = self.settings.concurrent_bytes
        self._layout_seen_s: dict[tuple[str, int], float] = {}  # (mount, size) -> layout the first run took
        self._write_bytes_s = 0.0  # last write rate measured: estimates how long laying out read files takes

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> StorageRecord:
        rec = StorageRecord(runtime_s=self.settings.fio_runtime_s, ramp_s=self.settings.fio_ramp_s,
                            published_runtime_s=fio_probe.PUBLISHED_RUNTIME_S, num_nodes=len(ctx.nodes),
                            targets=list(ctx.config.targets.storage), shared_paths=list(ctx.config.shared_paths))
        node = (live(ctx, ctx.nodes) or ctx.nodes)[0]  # a node lost earlier does not scan
        scratch = scratch_for(ctx)
        self._kept = _finished_cells(ctx.records.get("storage"), self.file_sizes, runtime_s=rec.runtime_s)
        rec.tool_files = publish_tools(ctx, *STORAGE_TOOLS)

        volumes = self._volumes(ctx, node, rec)
        rec.partitions = inventory(ctx, volumes)
        version = ctx.transport.run(node, [self.fio, "--version"], timeout_s=self.settings.command_timeout_s)
        rec.fio_version = version.stdout.strip() if version.ok else ""
        if not version.ok:
            rec.gaps.append(Gap(phase=self.name, node=node.name, kind="storage.fio-missing",
                                facts={"tool": self.fio,
                                       "error": last_line(version.stderr, f"exit {version.rc}")[:300]}))
        jobs = self._plan(ctx, volumes, rec)
        total_runs = len(jobs) * len(self.file_sizes) * len(fio_probe.OPS) if rec.fio_version else 0
        done = 0
        for path, shared, planned in jobs:
            if not rec.fio_version or ctx.stop.is_set() or is_lost(ctx, node):
                break
            scan = self._new_scan(node, path, shared, volumes.get(path), planned)
            try:
                area = self._prepare(ctx, scratch, node, path)
                self.scan(ctx, node, area, scan, first_run=done, total_runs=total_runs)
                if shared:
                    scan.layout = capture_layout(ctx, node, scan, area,
                                                 timeout_s=self.settings.layout_timeout_s)
                    if scan.layout and scan.layout.errors and not scan.layout.summary:
                        rec.gaps.append(Gap(phase=self.name, node=node.name, kind="storage.layout-unreadable",
                                            facts={"path": path, "tool": scan.layout.tool,
                                                   "errors": list(scan.layout.errors)}))
            except ScratchError as exc:
                rec.gaps.append(Gap(phase=self.name, node=node.name, kind="storage.scan-refused",
                                    facts={"path": path, "message": exc.message, "hint": exc.hint or ""}))
            except TransportError as exc:
                note_error(ctx, self.name, node, exc, f"the fio scan of {path}")
                rec.gaps.append(error_gap(ctx, self.name, f"the IO benchmark of `{path}`", node, exc,
                                          "`fio`"))
            done += len(self.file_sizes) * len(fio_probe.OPS)
            for cell, gap in fio_cell_gaps(self.name, node.name, path, scan.cells):
                note_failure(ctx, self.name, node, f"fio {cell.file_size_bytes} {cell.rw} on {path}")
                rec.gaps.append(gap)
            if shared:
                rec.shared.append(scan)
            else:
                rec.local = scan
        if len(ctx.nodes) >= 2 and ctx.config.shared_paths and not ctx.stop.is_set():
            rec.concurrent = _kept_write(ctx.records.get("storage"), len(ctx.nodes), self.concurrent_bytes)
        if rec.concurrent is None and len(ctx.nodes) >= 2 and ctx.config.shared_paths and not ctx.stop.is_set():
            rec.concurrent = self._concurrent_write(ctx, scratch, normalize(ctx.config.shared_paths[0]),
                                                    volumes.get(normalize(ctx.config.shared_paths[0])), rec)
        if ctx.stop.is_set():
            rec.status = "partial"
        elif rec.gaps and all(g.kind == "storage.fio-missing" for g in rec.gaps) and rec.concurrent is None:
            rec.status = "not-run"  # nothing failed: fio is not installed (its Gap says how to install it)
        elif rec.gaps:
            rec.status = "partial"
        return rec

    # -- which mounts ------------------------------------------------------------------------
    def _volumes(self, ctx: RunContext, node: Node, rec: StorageRecord) -> dict[str, probe.DfRow]:
        """``df`` of ``/`` and every declared path (each one's volume: source, type, size)."""
        paths = ["/", *(normalize(p) for p in (ctx.config.local_scratch, *ctx.config.shared_paths))]
        out: dict[str, probe.DfRow] = {}
        for path in dict.fromkeys(paths):
            res = ctx.transport.run(node, [*probe.DF_ARGV, path], timeout_s=self.settings.command_timeout_s)
            rows = probe.parse_df(res.stdout)
            if rows:
                out[path] = rows[-1]
            elif path != "/":
                rec.gaps.append(Gap(phase=self.name, node=node.name, kind="storage.path-unreadable",
                                    facts={"path": path, "output": last_line(res.stderr)[:300]}))
        ctx.raw("storage/df.txt", "\n".join(f"{p}\t{r.source}\t{r.fstype}\t{r.size_bytes}\t{r.target}"
                                            for p, r in out.items()) + "\n")
        return out

    def _plan(self, ctx: RunContext, volumes: dict[str, probe.DfRow],
              rec: StorageRecord) -> list[tuple[str, bool, object]]:
        jobs: list[tuple[str, bool, object]] = []
        local = normalize(ctx.config.local_scratch)
        if local in volumes and volumes[local].fstype in MEMORY_FSTYPES:
            rec.gaps.append(Gap(phase=self.name, node=ctx.nodes[0].name, kind="storage.local-in-memory",
                                facts={"path": local, "fstype": volumes[local].fstype}))
        elif local in volumes:
            jobs.append((local, False, None))
        candidates = []
        for path in dict.fromkeys(normalize(p) for p in ctx.config.shared_paths):
            row = volumes.get(path)
            if row is None:
                continue
            fstype = backing_type(ctx, row)
            candidates.append(Candidate(path, fstype, row.size_bytes, row.source, row.target))
        for planned in plan_scans(candidates):
            jobs.append((planned.scan.path, True, planned))
        return jobs

    def _new_scan(self, node: Node, path: str, shared: bool, row: probe.DfRow | None, planned) -> MountScan:
        scan = MountScan(mount=path, shared=shared, node=node.name)
        if row is not None:
            scan.size_bytes, scan.fstype, scan.source, scan.volume_mount = (row.size_bytes, row.fstype,
                                                                            row.source, row.target)
        if planned is not None:
            scan.fstype = planned.scan.fstype
            scan.stands_for = list(planned.stands_for)
            scan.same_volume = list(planned.same_volume)
        return scan

    def _prepare(self, ctx: RunContext, scratch: Scratch, node: Node, path: str) -> ScratchArea:
        """Refuse before writing anything: outside the declared mounts, or short of space."""
        check_declared(ctx.config, path)
        need = fio_probe.bytes_written_at_once(max(self.file_sizes)) + self.settings.space_margin_bytes
        scratch.require_space(node, path, need,
                              f"the scan's largest run ({fio_probe.NUM_JOBS} jobs x "
                              f"{iec_whole(max(self.file_sizes))})")
        return scratch.ensure(node, path)

    # -- one scan: six fio runs ----------------------------------------------------------------
    def scan(self, ctx: RunContext, node: Node, area: ScratchArea, scan: MountScan, *, first_run: int = 0,
             total_runs: int = 0) -> MountScan:
        """Six runs (three file sizes x read / write) in ``<area>/fio-test``; stops early on ``ctx.stop``."""
        workdir = posixpath.join(area.path, "fio-test")
        ctx.transport.run(node, ["mkdir", "-p", "--", workdir], timeout_s=self.settings.command_timeout_s)
        scan.scratch_path = area.path
        runtime, ramp = self.settings.fio_runtime_s, self.settings.fio_ramp_s
        total_runs = total_runs or len(self.file_sizes) * len(fio_probe.OPS)
        n = first_run
        t0 = time.monotonic()
        plan = [(size, rw) for size in self.file_sizes for rw in fio_probe.OPS]
        for i, (size, rw) in enumerate(plan):
            if ctx.stop.is_set():
                return scan
            n += 1
            kept = self._kept.get((scan.mount, size, rw))
            if kept is not None:  # --resume: this run finished before; its figures stand
                ctx.progress(self.name, node.name, f"fio {iec_whole(size)} {rw} on {scan.mount}: "
                                                   f"kept from the earlier attempt (run {n} of {total_runs})", None)
                scan.cells.append(kept)
                continue
            left = self._time_left(plan[i:], total_runs - n + 1, runtime + ramp)
            after = self._time_left(plan[i + 1:], total_runs - n, runtime + ramp)
            ctx.progress(self.name, node.name, f"fio {iec_whole(size)} {rw} on {scan.mount} "
                                               f"(run {n} of {total_runs})", left)
            cell = self._one_run(ctx, node, area, workdir, scan.mount, size, rw, left, after)
            scan.cells.append(cell)
            if rw == "write" and not cell.error and cell.bw_mib_s > 0:
                self._write_bytes_s = cell.bw_mib_s * 2**20
            if cell.error == "interrupted":
                return scan
            if scan.leftover_bytes_after_first_run < 0:
                # fio's --unlink=1 should leave nothing; check after the first run, not after the sweep
                scan.leftover_bytes_after_first_run = scratch_for(ctx).file_bytes(node, workdir)
                if scan.leftover_bytes_after_first_run > 0:
                    ctx.progress(self.name, node.name,
                                 f"{workdir} holds {scan.leftover_bytes_after_first_run} bytes of files after "
                                 "the first run; they go to trash with the rest", None)
        scan.seconds = round(time.monotonic() - t0, 1)
        scan.complete = all(not c.error for c in scan.cells) and len(scan.cells) == len(self.file_sizes) * 2
        return scan

    def _time_left(self, this_scan: list[tuple[int, str]], runs_left: int, per_run_s: float) -> float:
        """Timed IO of every run left, plus laying out the files of this scan's read runs (16 files of
        the run's size each) at the last write rate measured, when there is one."""
        layout = 0.0
        if self._write_bytes_s > 0:
            layout = sum(fio_probe.bytes_written_at_once(size) for size, rw in this_scan if rw == "read")
            layout /= self._write_bytes_s
        return runs_left * per_run_s + layout

    def _one_run(self, ctx: RunContext, node: Node, area: ScratchArea, workdir: str, mount: str, size: int,
                 rw: str, left_s: float, after_s: float = 0.0) -> FioCell:
        runtime, ramp = self.settings.fio_runtime_s, self.settings.fio_ramp_s
        argv = fio_probe.fio_argv(workdir, size, rw, runtime, fio=self.fio, ramp_s=ramp)
        cell = FioCell(file_size_bytes=size, rw=rw, argv=argv)
        result: dict[str, CommandResult | BaseException] = {}
        # bounded by the work: a 16 KiB run on a hung mount is given up in minutes, not hours
        limit_s = fio_probe.run_timeout_s(size, runtime, ramp, write_bytes_s=self._write_bytes_s,
                                          layout_seen_s=self._layout_seen_s.get((mount, size)))

        def target() -> None:
            try:
                result["res"] = ctx.transport.run(node, argv, timeout_s=limit_s)
            except BaseException as exc:  # noqa: BLE001 - handed to the phase's thread below
                result["exc"] = exc

        t0 = time.monotonic()
        worker = threading.Thread(target=target, name=f"fio-{rw}-{size}", daemon=True)
        worker.start()
        last_stop = 0.0
        last_note = t0
        try:
            while worker.is_alive():
                worker.join(0.2)
                if ctx.stop.is_set() and worker.is_alive() and time.monotonic() - last_stop >= RESTOP_EVERY_S:
                    self._stop_fio(ctx, node, workdir)
                    last_stop = time.monotonic()
                if time.monotonic() - last_note >= self.settings.progress_every_s and worker.is_alive():
                    last_note = time.monotonic()
                    spent = last_note - t0
                    ctx.progress(self.name, node.name, f"fio {iec_whole(size)} {rw} on {mount}: "
                                                       f"{spent:.0f} s in", max(left_s - spent, after_s))
        except KeyboardInterrupt:  # the second Ctrl-C: stop fio and go, within seconds
            self._stop_until_done(ctx, node, workdir, worker)
            raise
        cell.seconds = round(time.monotonic() - t0, 1)
        res_seen = result.get("res")
        if ctx.stop.is_set() or (isinstance(res_seen, CommandResult) and res_seen.timed_out):
            # a run stopped or past its time leaves nothing behind: jobs that outlived their parent (a
            # timeout kills only the parent) go now, before the run's folder goes to trash
            self._stop_fio(ctx, node, workdir)
        if "exc" in result:
            exc = result["exc"]
            if isinstance(exc, ClusterEvalError):
                raise exc
            cell.error = f"{type(exc).__name__}: {exc}"
            return cell
        res = result["res"]
        assert isinstance(res, CommandResult)
        if ctx.stop.is_set():  # the event is never cleared: set once, it stays set
            # Ctrl-C stopped this run part-way: its output is discarded and the run repeats on --resume
            cell.error = "interrupted"
            ctx.progress(self.name, node.name, f"interrupt: stopped fio {iec_whole(size)} {rw} on {mount}; "
                                               "that run is discarded and runs again on --resume", None)
            return cell
        label = "local" if mount == normalize(ctx.config.local_scratch) else _mount_slug(mount)
        raw = f"storage/fio-{label}-{fio_probe.fio_size_arg(size)}-{rw}.json"
        ctx.raw(raw, res.stdout if res.stdout.strip() else res.stderr)
        cell.raw_json = raw
        if res.timed_out:
            cell.error = (f"fio did not finish within {limit_s:.0f} s on {mount} (the mount may be hung; "
                          f"{iec_whole(size)} files, {runtime + ramp:.0f} s timed)")
            return cell
        if not res.ok:
            cell.error = last_line(res.stderr, f"fio exited {res.rc}")[:300]
            return cell
        self._layout_seen_s.setdefault((mount, size), max(0.0, cell.seconds - runtime - ramp))
        try:
            summary = fio_probe.parse_fio_json(res.stdout)
        except fio_probe.FioOutputError as exc:
            cell.error = str(exc)
            return cell
        if summary.error:
            cell.error = f"fio reported error {summary.error}"
            return cell
        cell.latency_msec, cell.bw_mib_s, cell.iops = summary.latency_msec, summary.bw_mib_s, summary.iops
        cell.runtime_ms = summary.runtime_ms
        return cell

    def _stop_fio(self, ctx: RunContext, node: Node, workdir: str) -> None:
        """Stop the fio run in ``workdir``, its parent and every job, and wait until none of it is left."""
        centis = str(max(1, round(self.settings.stop_grace_s * 100)))
        name = posixpath.basename(self.fio)[:15]  # the kernel's process name: at most 15 characters
        try:
            ctx.transport.run(node, ["sh", "-c", _STOP_RUN, workdir, centis, name],
                              timeout_s=self.settings.stop_timeout_s)
        except TransportError:
            pass  # the node is gone; fio goes with it

    def _stop_until_done(self, ctx: RunContext, node: Node, workdir: str, worker: threading.Thread) -> None:
        """Stop fio until the command that runs it has ended: a stop that came before fio started found
        nothing to stop, and the next one finds it."""
        deadline = time.monotonic() + self.settings.stop_timeout_s
        while True:
            self._stop_fio(ctx, node, workdir)
            worker.join(1.0)
            if not worker.is_alive() or time.monotonic() >= deadline:
                return

    # -- concurrent write ----------------------------------------------------------------------
    def _concurrent_write(self, ctx: RunContext, scratch: Scratch, mount: str, row: probe.DfRow | None,
                          rec: StorageRecord) -> ConcurrentWrite | None:
        cw = ConcurrentWrite(mount=mount, bytes_per_node=self.concurrent_bytes)
        if row is not None:
            cw.size_bytes, cw.fstype = row.size_bytes, backing_type(ctx, row)
        first = (live(ctx, ctx.nodes) or ctx.nodes)[0]
        try:
            check_declared(ctx.config, mount)
            scratch.require_space(first, mount, len(ctx.nodes) * self.concurrent_bytes + self.settings.space_margin_bytes,
                                  f"the concurrent write ({len(ctx.nodes)} nodes x "
                                  f"{iec_whole(self.concurrent_bytes)})")
            area = scratch.ensure(first, mount)
        except (ScratchError, TransportError) as exc:
            rec.gaps.append(Gap(phase=self.name, kind="storage.concurrent-refused",
                                facts={"path": mount, "message": exc.message, "hint": getattr(exc, "hint", "") or ""}))
            return None
        folder = posixpath.join(area.path, "concurrent-write")
        ctx.transport.run(first, ["mkdir", "-p", "--", folder], timeout_s=self.settings.command_timeout_s)
        count = self.concurrent_bytes // 2**20

        def argv_for(node: Node) -> list[str]:
            return ["dd", "if=/dev/zero", f"of={folder}/node{node.index}.bin", "bs=1M", f"count={count}",
                    "oflag=direct"]

        cw.argv = argv_for(Node("<node>", "<node>", index=0))
        cw.argv[2] = f"of={folder}/node<N>.bin"
        ctx.progress(self.name, first.name, f"{len(ctx.nodes)} nodes write "
                                            f"{iec_whole(self.concurrent_bytes)} each to {mount} at once", None)
        t0 = time.monotonic()

        failed: dict[str, dict] = {}  # node -> dd's exit and closing line, for its Gap

        def one(node: Node) -> NodeWrite:
            res = ctx.transport.run(node, argv_for(node), timeout_s=self.settings.concurrent_timeout_s)
            parsed = probe.parse_dd(res.stderr)
            if not res.ok or parsed is None:
                failed[node.name] = {"rc": res.rc, "output": last_line(res.stderr)[:300]}
                return NodeWrite(node.name, error=last_line(res.stderr, f"dd exited {res.rc}")[:300])
            written, seconds = parsed
            return NodeWrite(node.name, written, seconds, written / 2**20 / seconds if seconds > 0 else 0.0)

        steps = each_node(ctx, self.name, "the concurrent write", ctx.nodes, one, what="`dd`")
        cw.nodes = [s.value if s.value is not None else
                    NodeWrite(s.node.name, error=s.error.message if s.error else "no answer") for s in steps]
        step_gaps = {s.node.name: s.gap for s in steps if s.gap is not None}
        cw.wall_s = round(time.monotonic() - t0, 2)
        ok = [w for w in cw.nodes if not w.error]
        if ok:
            cw.aggregate_mib_s = sum(w.bytes_written for w in ok) / 2**20 / max(w.seconds for w in ok)
        for w in cw.nodes:
            if w.node in step_gaps:
                rec.gaps.append(step_gaps[w.node])
            elif w.error:
                note_failure(ctx, self.name, next(n for n in ctx.nodes if n.name == w.node), w.error)
                rec.gaps.append(Gap(phase=self.name, node=w.node, kind="storage.concurrent-node-failed",
                                    facts={"path": mount, "error": w.error, **failed.get(w.node, {})}))
        ctx.raw("storage/concurrent-write.txt",
                "\n".join(f"{w.node}\t{w.bytes_written}\t{w.seconds}\t{w.mib_s:.1f}\t{w.error}" for w in cw.nodes) + "\n")
        return cw


# ---- --resume: what an earlier attempt finished ---------------------------------------------


def _finished_cells(previous: object, file_sizes: tuple[int, ...], *,
                    runtime_s: int) -> dict[tuple[str, int, str], FioCell]:
    """The fio runs an earlier attempt of this phase finished, by (mount, size, direction): kept
    on --resume when they ran with the same timed IO, so only the missing runs repeat."""
    if not isinstance(previous, StorageRecord) or previous.runtime_s != runtime_s:
        return {}
    kept: dict[tuple[str, int, str], FioCell] = {}
    for scan in [previous.local, *previous.shared]:
        if scan is None:
            continue
        for cell in scan.cells:
            if not cell.error and cell.file_size_bytes in file_sizes:
                kept[(scan.mount, cell.file_size_bytes, cell.rw)] = cell
    return kept


def _kept_write(previous: object, num_nodes: int, bytes_per_node: int) -> ConcurrentWrite | None:
    """An earlier attempt's concurrent write, when every node finished it at this size."""
    if not isinstance(previous, StorageRecord) or previous.concurrent is None:
        return None
    cw = previous.concurrent
    if cw.bytes_per_node != bytes_per_node or len(cw.nodes) != num_nodes or any(w.error for w in cw.nodes):
        return None
    return cw


# ---- the inventory and the backing type ------------------------------------------------------


def _env_filesystems(ctx: RunContext) -> list[FilesystemInfo]:
    env = ctx.records.get("environment")
    if isinstance(env, EnvironmentRecord) and env.nodes:
        return list(env.nodes[0].filesystems)
    return []


def backing_type(ctx: RunContext, row: probe.DfRow) -> str:
    """The inventory's backing type for this volume (overlay looked through); else what df says."""
    for fs in _env_filesystems(ctx):
        if fs.mount == row.target or row.target in fs.aliases:
            return fs.fstype
    return row.fstype


def inventory(ctx: RunContext, volumes: dict[str, probe.DfRow]) -> list[FilesystemInfo]:
    """``/`` first, then one row per distinct volume the eval uses (the environment's inventory
    when it ran; otherwise ``df`` of the declared paths)."""
    rows: list[FilesystemInfo] = []
    env = _env_filesystems(ctx)
    if env:
        rows = [fs for fs in env if fs.mount == "/"] + [fs for fs in env if fs.mount != "/"]
    mounts = {fs.mount for fs in rows} | {a for fs in rows for a in fs.aliases}
    for path, row in volumes.items():
        if row.target in mounts or any(fs.fstype == row.fstype and same_volume(fs.source, fs.mount, row.source,
                                                                               row.target) for fs in rows):
            continue
        shared = path != "/" and path != normalize(ctx.config.local_scratch)
        fs = FilesystemInfo(mount=row.target, size_bytes=row.size_bytes, fstype=backing_type(ctx, row),
                            source=row.source, shared=shared or is_network(row.fstype))
        rows.append(fs)
        mounts.add(row.target)
    rows.sort(key=lambda fs: fs.mount != "/")
    return rows


# ---- layout capture ----------------------------------------------------------------------------


def capture_layout(ctx: RunContext, node: Node, scan: MountScan, area: ScratchArea, *,
                   timeout_s: float = StorageSettings.layout_timeout_s) -> Layout | None:
    """The parallel FS's layout for the scanned folder, raw into the raw folder and summarised."""
    fstype = scan.fstype.lower()
    mount_part = _mount_slug(scan.mount)
    workdir = posixpath.join(area.path, "fio-test")
    layout = Layout()

    def grab(name: str, argv: list[str]) -> str:
        res = ctx.transport.run(node, argv, timeout_s=timeout_s)
        rel = f"storage/layout-{mount_part}-{name}.txt"
        ctx.raw(rel, f"$ {' '.join(argv)}\n{res.stdout}{res.stderr}")
        layout.raw_files.append(rel)
        if not res.ok:
            layout.errors.append(f"`{' '.join(argv[:2])}`: {last_line(res.stderr, f'exit {res.rc}')[:300]}")
            return ""
        return res.stdout

    if fstype == "lustre":
        layout.tool = "lfs"
        df = probe.parse_lfs_df(grab("lfs-df", ["lfs", "df", "-h", scan.mount]))
        comps = probe.parse_lfs_getstripe(grab("lfs-getstripe", ["lfs", "getstripe", "-d", workdir]))
        layout.num_targets = df.num_osts or None
        if comps:
            layout.stripe_count, layout.stripe_size_bytes = comps[0].stripe_count, comps[0].stripe_size_bytes
        layout.summary = lustre_summary(df, comps)
    elif fstype == "gpfs":
        layout.tool = "mmlsfs"
        device = scan.source.split("/")[-1] or scan.source
        flags = probe.parse_mmlsfs(grab("mmlsfs", ["mmlsfs", device]))
        disks = probe.parse_mmlsdisk(grab("mmlsdisk", ["mmlsdisk", device]))
        layout.block_size_bytes = probe.parse_size(flags.get("-B", "")) if flags.get("-B") else None
        layout.num_targets = disks.num_data_disks or None
        parts = []
        if layout.block_size_bytes:
            parts.append(f"block size {iec_whole(layout.block_size_bytes)} (`mmlsfs`)")
        if disks.num_disks:
            parts.append(f"{disks.num_data_disks} data disks of {disks.num_disks} (`mmlsdisk`)")
        layout.summary = ", ".join(parts)
    elif fstype == "beegfs":
        layout.tool = "beegfs-ctl"
        entry = probe.parse_beegfs_entryinfo(grab("beegfs-entryinfo", ["beegfs-ctl", "--getentryinfo", workdir]))
        layout.num_targets = entry.num_targets
        layout.stripe_size_bytes = probe.parse_size(entry.chunk_size) if entry.chunk_size else None
        parts = []
        if entry.num_targets is not None:
            parts.append(f"{entry.num_targets} storage targets per file")
        if layout.stripe_size_bytes:
            parts.append(f"chunk size {iec_whole(layout.stripe_size_bytes)}")
        layout.summary = ", ".join(parts) + (" (`beegfs-ctl --getentryinfo`)" if parts else "")
    elif fstype in ("nfs", "nfs4"):
        layout.tool = "nfsstat"
        mount = probe.nfs_mount_for(probe.parse_nfsstat_m(grab("nfsstat-m", ["nfsstat", "-m"])), scan.mount)
        if mount:
            layout.options = ",".join(f"{k}={mount.flags[k]}" if mount.flags[k] else k
                                      for k in probe.NFS_THROUGHPUT_OPTIONS if k in mount.flags)
            layout.summary = f"mount options `{layout.options}` (`nfsstat -m`)" if layout.options else ""
    else:
        return None
    return layout


def lustre_summary(df: probe.LustreDf, comps: list[probe.StripeComponent]) -> str:
    """The layout in one sentence; OST is expanded where it first appears, every stripe count labelled."""
    expanded = False

    def every_ost() -> str:
        nonlocal expanded
        first, expanded = not expanded, True
        return "every OST (object storage target)" if first else "every OST"

    def count(c: probe.StripeComponent) -> str:
        return every_ost() if c.stripe_count == -1 else str(c.stripe_count)

    parts = []
    if comps and len(comps) == 1:
        c = comps[0]
        parts.append(f"default stripe count {count(c)}, stripe size {iec_whole(c.stripe_size_bytes)} "
                     "(`lfs getstripe -d`)")
    elif comps:
        steps = []
        for c in comps:
            end = c.extent_end
            limit = "beyond" if end in ("EOF", "-1", "") else f"up to {iec_whole(int(end))}" \
                if end.isdigit() else f"up to {end}"
            steps.append(f"stripe count {count(c)} {limit}")
        parts.append("progressive default layout, " + ", ".join(steps) + " (`lfs getstripe -d`)")
    if df.num_osts:
        parts.append(f"{df.num_osts} OSTs (`lfs df -h`)" if expanded
                     else f"{df.num_osts} OSTs (object storage targets, `lfs df -h`)")
    return "; ".join(parts)


def fio_cell_gaps(phase: str, node: str, path: str, cells: list[FioCell]) -> list[tuple[FioCell, Gap]]:
    """A Gap for each fio run of a scan that has no figures, beside the run it is about. An
    interrupted run is not one: it is discarded and runs again on --resume. The storage phase and
    `debug fs` (phase ``debug-fs``) share it; the plan is worded for the phase."""
    return [(c, Gap(phase=phase, node=node, kind="storage.fio-run-failed",
                    facts={"path": path, "size": c.file_size_bytes, "rw": c.rw, "error": c.error}))
            for c in cells if c.error and c.error != "interrupted"]


def _mount_slug(path: str) -> str:
    """``/mnt/shared`` -> ``mnt-shared``, ``/`` -> ``root``: a mount point in a raw file's name."""
    return slug(path.strip("/").replace("/", "-"), default="root")


