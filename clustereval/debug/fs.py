"""`clustereval debug fs MOUNT`: a slow filesystem.

1. the snapshot of one node with ``MOUNT`` among its shared paths: fullness, ``lfs df`` OST balance,
   a hanging mount, host iowait;
2. a quick ``fio`` scan (the storage phase's six runs, a few seconds each) of ``MOUNT`` and of the
   local disk, in scratch folders that are moved to trash at the end;
3. the layout of the scan folder (stripe count and size, OST count);
4. the verdict (capacity saturated vs I/O pattern) and the guidance, with an evidence bundle.
"""

from __future__ import annotations

import dataclasses
import posixpath
from pathlib import Path

from clustereval.analysis.fs_debug import diagnose, report_lines
from clustereval.config import Config
from clustereval.debug.evidence import write_node_bundle
from clustereval.debug.snapshot import DEFAULT_SAMPLE_S, select_nodes, snapshot_node
from clustereval.errors import ScratchError, TransportError, UsageError
from clustereval.phases.base import ProgressFn, RunContext
from clustereval.phases.scratch import check_declared, inside, normalize, scratch_for
from clustereval.phases.settings import StorageSettings
from clustereval.phases.storage import StoragePhase, capture_layout, fio_cell_gaps
from clustereval.probes import fio as fio_probe
from clustereval.probes._text import last_line
from clustereval.probes.filesystems import PSEUDO, volume_key
from clustereval.probes.mounts import Mount, findmnt_argv, is_network, parse_findmnt
from clustereval.records import Gap
from clustereval.records.debug import FsDebugRecord
from clustereval.records.storage import MountScan
from clustereval.report.units import iec_whole
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp
from clustereval.transport.base import Node, Transport
from clustereval.transport.factory import make_transport, nodes_of, with_nodes

DEFAULT_RUNTIME_S = 5

# Mount points that are never "the local disk": system trees, and temporary mounts under /tmp
# (a test's or another job's), which may vanish while the scan runs.
_NOT_LOCAL_DISK = ("/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/efi", "/snap", "/tmp/", "/var/lib/docker",
                   "/var/lib/kubelet", "/var/lib/containers", "/etc")


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path``: the longest mount point it is inside (the last one mounted wins)."""
    best: Mount | None = None
    for m in mounts:
        if m.target and inside(path, m.target) and (best is None or len(m.target) >= len(best.target)):
            best = m
    return best


def _describe(m: Mount) -> str:
    return f"{m.fstype} on {m.source}" if m.source else m.fstype


def _local_disk(m: Mount) -> bool:
    opts = m.options.split(",") if m.options else []
    return (not is_network(m.fstype) and m.fstype not in PSEUDO and m.source.startswith("/dev/")
            and "ro" not in opts and not any(inside(m.target, p.rstrip("/")) or m.target.startswith(p)
                                             for p in _NOT_LOCAL_DISK))


def pick_local(path: str, local_scratch: str, mounts: list[Mount], node: str) -> tuple[str | None, str]:
    """The local folder to compare ``path`` with, on a different filesystem, and why; (None, why) when
    the node has none. Tried in order: ``local_scratch``, ``/tmp`` and ``/var/tmp`` (when on a disk),
    then the node's other local-disk mount points."""
    measured = mount_of(path, mounts)
    if measured is None:
        return local_scratch, ""
    key = volume_key(measured)
    first = mount_of(local_scratch, mounts)
    tried: list[tuple[str, Mount | None]] = [(local_scratch, first), ("/tmp", mount_of("/tmp", mounts)),
                                             ("/var/tmp", mount_of("/var/tmp", mounts))]
    # another local disk: its own mount point, never a folder at the root of the system disk
    tried += [(m.target, m) for m in mounts if _local_disk(m) and m.target != "/"]
    for candidate, m in tried:
        if m is None or volume_key(m) == key:
            continue
        if candidate != local_scratch and (m.fstype in PSEUDO and m.fstype != "overlay"):
            continue  # a RAM filesystem is no local disk, unless the config names it
        if candidate != local_scratch and "ro" in m.options.split(","):
            continue
        if candidate == local_scratch:
            return candidate, f"the local side is local_scratch {candidate} ({_describe(m)})"
        return candidate, (f"local_scratch {local_scratch} is on the same filesystem as {path} "
                           f"({_describe(measured)}), so the local side is {candidate} ({_describe(m)})")
    return None, (f"{node} has no local filesystem other than the one {path} is on ({_describe(measured)}, "
                  f"mounted at {measured.target}), so there is no local disk to compare it with")


def _signals_for(snap, path: str, mount: str) -> list:  # noqa: ANN001
    """The snapshot lines about this mount, plus host iowait."""
    out = []
    for s in snap.signals:
        if s.key == "cpu.iowait":
            out.append(s)
        elif s.key.startswith(("storage.shared", "storage.lustre")) and s.subject in (path, mount):
            out.append(s)
    return out


def debug_fs(config: Config, path: str, *, node_name: str | None = None, runtime_s: int = DEFAULT_RUNTIME_S,
             reports_dir: Path | None = None, sample_s: float = DEFAULT_SAMPLE_S,
             progress: ProgressFn | None = None, file_sizes: tuple[int, ...] | None = None, ramp_s: int = 1,
             transport: Transport | None = None, nodes: list[Node] | None = None) -> tuple[FsDebugRecord, RunStore]:
    if not posixpath.isabs(path):
        raise UsageError(f"{path}: give the mount as an absolute path", "e.g. clustereval debug fs /fsx")
    path = normalize(path)
    def go(t: Transport) -> tuple[FsDebugRecord, RunStore]:
        return _debug_fs(config, path, t, node_name=node_name, runtime_s=runtime_s, reports_dir=reports_dir,
                         sample_s=sample_s, progress=progress, file_sizes=file_sizes, ramp_s=ramp_s, nodes=nodes)

    if transport is not None:
        return go(transport)
    own = make_transport(config)
    try:  # closing gives back a Slurm allocation this command asked for
        return go(own)
    finally:
        own.close()


def _debug_fs(config: Config, path: str, transport: Transport, *, node_name: str | None, runtime_s: int,
              reports_dir: Path | None, sample_s: float, progress: ProgressFn | None,
              file_sizes: tuple[int, ...] | None, ramp_s: int, nodes: list[Node] | None
              ) -> tuple[FsDebugRecord, RunStore]:
    every = list(nodes if nodes is not None else nodes_of(config, transport))
    config = with_nodes(config, every, transport)
    node = select_nodes(every, node_name, False)[0]
    settings = StorageSettings(fio_runtime_s=runtime_s, fio_ramp_s=ramp_s)
    if file_sizes:  # the quick scan's own sizes; else the published ones
        settings = dataclasses.replace(settings, file_sizes=file_sizes)
    _require_directory(transport, node, path, settings.command_timeout_s)  # before any run folder, snapshot or scan
    # the user named this mount: it is declared for this workflow's scratch
    cfg = dataclasses.replace(config, shared_paths=tuple(dict.fromkeys([*config.shared_paths, path])))
    name = f"{config.name}-debug-fs"
    store = RunStore.create(Path(reports_dir or config.reports_dir), name)
    store.save_state(RunState(name=name, stamp=utc_stamp(), profile="debug", phases_planned=["snapshot", "storage"],
                              started_utc=utc_now_iso(),
                              config_path=str(Path(config.source).resolve()) if config.source else ""))
    ctx = RunContext(config=cfg, transport=transport, nodes=[node], store=store)
    if progress is not None:
        ctx.progress = progress
    rec = FsDebugRecord(phase="debug-fs", node=node.name, path=path, runtime_s=runtime_s,
                        started_utc=utc_now_iso())

    # 1. the snapshot: storage signals of this mount
    ctx.progress("debug fs", node.name, f"snapshot with {path}", None)
    snap = snapshot_node(transport, node, python=ctx.eval_python, shared_paths=(path,), sample_s=sample_s)
    if not snap.reachable:
        raise TransportError(node.name, snap.error, "`clustereval preflight` checks how the node is reached")
    assert snap.readings is not None
    row = next((r for r in snap.readings.shared if r.path == path), None)
    if row is None:
        st = snap.readings.tool(f"df {path}")
        raise UsageError(f"{path} is not readable on {node.name} ({st.error or 'df printed nothing'})",
                         "check the path exists and is mounted on that node")
    rec.mount, rec.fstype = row.target, row.fstype
    rec.storage_signals = _signals_for(snap, path, row.target)

    # 2-3. the quick scans and the layout, against a local folder on another filesystem
    listed = transport.run(node, findmnt_argv(), timeout_s=settings.command_timeout_s)
    mounts = parse_findmnt(listed.stdout) if listed.ok else []
    local_path, rec.local_note = pick_local(path, normalize(cfg.local_scratch), mounts, node.name)
    if local_path is None:  # no local filesystem other than the one path is on: the note says which
        rec.gaps.append(Gap(phase=rec.phase, node=node.name, kind="debugfs.no-local", facts={"note": rec.local_note}))
    elif local_path != normalize(cfg.local_scratch):
        ctx.config = dataclasses.replace(cfg, local_scratch=local_path)  # declared for this workflow's scratch
    phase = StoragePhase(settings)
    version = transport.run(node, [phase.fio, "--version"], timeout_s=settings.command_timeout_s)
    if not version.ok:
        rec.gaps.append(Gap(phase=rec.phase, node=node.name, kind="debugfs.fio-missing",
                            facts={"path": path, "tool": phase.fio,
                                   "error": last_line(version.stderr, f"exit {version.rc}")[:300]}))
    else:
        _scans(ctx, phase, node, rec, path, row.fstype, local_path, mounts)

    # 4. verdict, guidance, evidence
    targets: dict[str, float] = {}
    for t in cfg.targets.storage:
        if normalize(t.mount) in (path, rec.mount):
            targets.update(t.bw_mib_s)
    local_label = "the local disk"
    if rec.local is not None:
        local_label = f"the local disk {rec.local.mount}" + (f" ({rec.local.fstype})" if rec.local.fstype else "")
    rec.verdict, rec.facts, rec.guidance = diagnose(
        path, rec.shared.cells if rec.shared else [], rec.local.cells if rec.local else [],
        rec.shared.layout if rec.shared else None, rec.storage_signals, targets, fstype=rec.fstype,
        local_label=local_label)
    extra: dict[str, str] = {}
    for scan in (rec.local, rec.shared):
        for cell in scan.cells if scan else []:
            if cell.raw_json and (store.raw_dir / cell.raw_json).exists():
                extra[Path(cell.raw_json).name] = (store.raw_dir / cell.raw_json).read_text()
        for rel in (scan.layout.raw_files if scan and scan.layout else []):
            if (store.raw_dir / rel).exists():
                extra[Path(rel).name] = (store.raw_dir / rel).read_text()
    rec.evidence = str(write_node_bundle(store.raw_dir / "evidence", snap,
                                         verdict=[rec.guidance[0] if rec.guidance else rec.verdict, *rec.facts],
                                         extra=extra))
    rec.finished_utc = utc_now_iso()
    if rec.gaps:
        rec.status = "partial"
    store.save_record("debug-fs", rec)
    store.write_raw("debug-fs.txt", "\n".join(report_lines(rec)) + "\n")
    return rec, store


def _require_directory(transport: Transport, node: Node, path: str, timeout_s: float) -> None:
    """Refuse a file or a missing path at once: the scan would otherwise run to its end first."""
    res = transport.run(node, ["sh", "-c", 'if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo other; '
                                           'else echo none; fi', "sh", path], timeout_s=timeout_s)
    kind = res.stdout.strip() if res.ok else ""
    if kind == "other":
        parent = posixpath.dirname(path.rstrip("/")) or "/"
        raise UsageError(f"{path} on {node.name} is a file, not a directory; `debug fs` measures a folder of a "
                         "mounted filesystem", f"give its folder or the mount point, e.g. clustereval debug fs "
                         f"{parent}", error_id="not-a-directory")
    if kind == "none":
        raise UsageError(f"{path} is not readable on {node.name}: there is no such directory",
                         "check the path exists and is mounted on that node", error_id="no-such-directory")


def _scans(ctx: RunContext, phase: StoragePhase, node: Node, rec: FsDebugRecord, path: str, fstype: str,
           local: str | None, mounts: list[Mount]) -> None:
    """The local folder (when there is one), then the mount; scratch goes to trash whatever happens.
    One count of runs and one time left cover both scans, so the estimate never starts over."""
    scratch = scratch_for(ctx)
    plan = ([(local, False)] if local is not None else []) + [(path, True)]
    per_scan = len(phase.file_sizes) * len(fio_probe.OPS)
    try:
        for number, (target, shared) in enumerate(plan):
            m = mount_of(target, mounts)
            scan = MountScan(mount=target, shared=shared, node=node.name,
                             fstype=fstype if shared else (m.fstype if m else ""),
                             source=m.source if m else "", volume_mount=m.target if m else "")
            if shared:
                rec.shared = scan
            else:
                rec.local = scan
            try:
                check_declared(ctx.config, target)
                scratch.require_space(node, target, fio_probe.bytes_written_at_once(max(phase.file_sizes))
                                      + phase.settings.space_margin_bytes,
                                      f"the quick scan's largest run ({fio_probe.NUM_JOBS} jobs x "
                                      f"{iec_whole(max(phase.file_sizes))})")
                area = scratch.ensure(node, target)
                phase.scan(ctx, node, area, scan, first_run=number * per_scan, total_runs=per_scan * len(plan))
                if shared:
                    scan.layout = capture_layout(ctx, node, scan, area, timeout_s=phase.settings.layout_timeout_s)
            except ScratchError as exc:
                rec.gaps.append(Gap(phase=rec.phase, node=node.name, kind="debugfs.scan-refused",
                                    facts={"path": target, "message": exc.message, "hint": exc.hint or ""}))
            rec.gaps += [gap for _, gap in fio_cell_gaps(rec.phase, node.name, target, scan.cells)]
    finally:
        for move in scratch.cleanup([node]):
            if move.action == "moved":
                rec.cleanup.append(f"moved {move.path} ({move.size_bytes} bytes) to {move.moved_to}; "
                                   "moving does not free the space: empty the trash folder when done")
            elif move.action == "deleted":
                rec.cleanup.append(f"deleted {move.path} on the node-local /tmp ({move.size_bytes} bytes)")
            elif move.action == "failed":
                rec.cleanup.append(f"could not clear {move.path}: {move.error}")
            elif move.action == "refused":
                rec.cleanup.append(f"refused to clear {move.path} (left untouched): {move.error}")
