"""Evidence bundles: per suspect node, one folder (and a .tar.gz of it) holding the raw outputs
behind the verdict, ready to attach to a support ticket.

A bundle folder holds ``README.txt`` (node, time, the verdict and its CONCERN lines), the snapshot
(``snapshot.txt`` / ``snapshot.json``), the raw tool outputs it was judged from (``nvidia-smi -q``,
the Xid lines, RDMA ports, ``df`` / ``lfs df`` ...) and whatever the workflow adds (pair results,
fio results). Nothing is overwritten: every call makes a new time-stamped folder.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from clustereval.analysis.snapshot import format_signal
from clustereval.names import slug
from clustereval.records import to_dict
from clustereval.records.snapshot import NodeSnapshot, Signal, SnapshotRecord
from clustereval.redact import mount_table
from clustereval.store import atomic_write, utc_now_iso, utc_stamp

# snapshot section -> file name in the bundle (the tool's own output, unchanged)
RAW_FILES = {
    "nvsmi_query": "nvidia-smi-query-gpu.csv",
    "nvsmi_q": "nvidia-smi-q.txt",
    "nvsmi_topo": "nvidia-smi-topo-m.txt",
    "nvsmi_nvlink": "nvidia-smi-nvlink-s.txt",
    "nvsmi_apps": "nvidia-smi-compute-apps.csv",
    "xid": "dmesg-xid.txt",
    "ib": "rdma-ports.tsv",
    "fi_efa": "fi_info-efa.txt",
    "fabricmanager": "fabricmanager.txt",
    "governor": "cpu-governors.txt",
    "stat": "proc-stat-samples.txt",
    "shm": "df-dev-shm.txt",
    "root": "df-root.txt",
    "mounts": "proc-mounts.txt",
}


def new_bundle_root(parent: Path, label: str) -> Path:
    """``parent/<label>-<stamp>/``, never an existing folder."""
    base = parent / f"{slug(label, default='node')}-{utc_stamp()}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = Path(f"{base}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def raw_file_name(section: str) -> str:
    if section in RAW_FILES:
        return RAW_FILES[section]
    if section.startswith("df "):
        return f"df-{slug(section[3:], default='node')}.txt"
    if section.startswith("lfs_df "):
        return f"lfs-df-{slug(section[7:], default='node')}.txt"
    return f"{slug(section, default='node')}.txt"


def write_node_bundle(root: Path, snap: NodeSnapshot, *, verdict: list[str] | None = None,
                      extra: dict[str, str] | None = None, drift: list[Signal] | None = None) -> Path:
    """One node's folder under ``root`` plus ``<folder>.tar.gz``; returns the archive path."""
    folder = root / slug(snap.node, default="node")
    concerns = [format_signal(s) for s in snap.signals if s.concern]
    drift_lines = [format_signal(s) for s in (drift or []) if s.concern]
    readme = [f"node: {snap.node}" + (f" (host {snap.hostname})" if snap.hostname else ""),
              f"collected: {utc_now_iso()}", ""]
    if verdict:
        readme += ["verdict:"] + [f"  {v}" for v in verdict] + [""]
    readme += ["CONCERN lines from the read-only snapshot of this node:"]
    readme += [f"  {c}" for c in concerns] or ["  (none)"]
    if drift_lines:
        readme += ["", "version drift across the nodes snapshotted together:"] + [f"  {d}" for d in drift_lines]
    readme += ["", "files: the raw output of each tool the verdict was judged from, unchanged."]
    files: dict[str, str] = {
        "README.txt": "\n".join(readme) + "\n",
        "snapshot.txt": "\n".join(format_signal(s) for s in snap.signals) + "\n",
        "snapshot.json": json.dumps({"node": snap.node, "hostname": snap.hostname,
                                     "signals": [to_dict(s) for s in snap.signals],
                                     "versions": snap.versions,
                                     "readings": to_dict(snap.readings) if snap.readings else None},
                                    indent=2, ensure_ascii=False) + "\n",
    }
    if snap.versions:
        files["versions.txt"] = "".join(f"{k}: {v or 'not found'}\n" for k, v in snap.versions.items())
    for section, text in snap.raw.items():
        if section in ("hostname", "kernel", "os", "efa_versions", "nccl_versions", "cuda_toolkit",
                       "python_packages", "fi_version"):
            continue  # folded into versions.txt
        files[raw_file_name(section)] = (mount_table(text) if section == "mounts" else text) + "\n"
    for name, text in (extra or {}).items():
        files[slug(name, default="node")] = text if text.endswith("\n") else text + "\n"
    for name, text in files.items():
        atomic_write(folder / name, text)
    archive = root / f"{folder.name}.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    atomic_write(archive, buf.getvalue())
    return archive


def write_snapshot_evidence(parent: Path, record: SnapshotRecord) -> list[Path]:
    """A bundle for every reachable node with a CONCERN; [] when there is none."""
    suspects = [n for n in record.nodes if n.reachable and n.concerns]
    if not suspects:
        return []
    root = new_bundle_root(parent, "snapshot-evidence")
    return [write_node_bundle(root, n, drift=record.drift) for n in suspects]
