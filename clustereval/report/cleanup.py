"""What cleanup did, as the lines the close-out prints: paths, sizes, and the one purge command."""

from __future__ import annotations

import shlex

from clustereval.records.scratch import ScratchMove
from clustereval.report.units import iec_one_decimal


def cleanup_lines(moves: list[ScratchMove], run_dir: str) -> list[str]:
    """One line per folder handled, then what frees the space, then what is still left."""
    lines: list[str] = []
    moved = [m for m in moves if m.action == "moved"]
    for m in moves:
        if m.action == "moved":
            lines.append(f"scratch: moved {m.path} ({iec_one_decimal(m.size_bytes)}) on {m.node} to {m.moved_to}")
        elif m.action == "deleted":
            lines.append(f"scratch: deleted {m.path} ({iec_one_decimal(m.size_bytes)}) on {m.node} "
                         "(the eval's own folder on node-local /tmp)")
    if moved:
        total = sum(m.size_bytes for m in moved)
        dirs = sorted({m.trash_dir for m in moved})
        command = "rm -rf -- " + " ".join(shlex.quote(d) for d in dirs)
        local_nodes = sorted({m.node for m in moved if not m.shared})
        where = f" on {', '.join(local_nodes)}" if local_nodes and len(local_nodes) > 1 else ""
        lines.append(f"scratch: {iec_one_decimal(total)} moved to trash on the same filesystem{'s' if len(dirs) > 1 else ''}; "
                     "a move does not free the space. To free it (it destroys the files, so it is yours to run)"
                     f"{where}: {command}")
    for m in moves:
        if m.action == "refused":
            lines.append(f"scratch: REFUSED to clear {m.path} on {m.node}: {m.error}; it was left untouched")
    for m in moves:
        if m.action == "failed":
            if run_dir:
                lines.append(f"scratch: NOT cleared: {m.path} on {m.node} ({m.error}); run "
                             f"`clustereval cleanup {run_dir}` once the node answers")
            else:  # preflight keeps no run folder to hand to `clustereval cleanup`
                lines.append(f"scratch: NOT cleared: {m.path} on {m.node} ({m.error}); it holds only "
                             f"clustereval's package copy: move it to trash on that mount by hand")
    return lines
