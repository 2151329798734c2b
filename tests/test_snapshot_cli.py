"""`clustereval snapshot` for real on this machine: tagged lines, JSON with the same content, and
nothing written outside its own output."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from clustereval.config import default_local_config
from clustereval.debug.snapshot import collect, snapshot_json, snapshot_lines
from clustereval.transport.factory import make_transport, nodes_of
from tests.conftest import REPO, run_cli

TAG = re.compile(r"^\[(OK|CONCERN|INFO)\] \S+")


def tree_state(root: Path) -> dict[str, tuple[int, int, str]]:
    """path -> (mtime_ns, size, sha256) for every file and folder under root."""
    state: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".pytest_cache", ".ruff_cache", ".mypy_cache")]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
            state[str(p.relative_to(root))] = (st.st_mtime_ns, st.st_size, digest)
    return state


def sandbox_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    cwd, home, tmp = tmp_path / "cwd", tmp_path / "home", tmp_path / "tmp"
    for d in (cwd, home, tmp):
        d.mkdir()
    (cwd / "notes.txt").write_text("the user's file\n")
    env = {"HOME": str(home), "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}
    return cwd, env


def test_snapshot_all_prints_tagged_lines_and_writes_nothing(tmp_path):
    cwd, env = sandbox_env(tmp_path)
    before_sandbox, before_repo = tree_state(tmp_path), tree_state(REPO)
    proc = run_cli("snapshot", "--all", "--sample-seconds", "1", cwd=cwd, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) >= 8
    assert all(TAG.match(ln) for ln in lines), [ln for ln in lines if not TAG.match(ln)]
    assert any("host iowait" in ln for ln in lines) and any("root volume" in ln for ln in lines)
    for ln in lines:
        if ln.startswith("[CONCERN]"):
            assert "(threshold: " in ln and " → " in ln, ln
    if not any(Path(p).exists() for p in ("/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi")):
        assert any(ln.startswith("[INFO]") and "`nvidia-smi` is not installed" in ln for ln in lines)
    assert "CONCERN" in proc.stderr  # the per-node summary
    assert tree_state(tmp_path) == before_sandbox
    assert tree_state(REPO) == before_repo


def test_snapshot_json_has_the_same_content(tmp_path):
    cwd, env = sandbox_env(tmp_path)
    before = tree_state(tmp_path)
    proc = run_cli("snapshot", "--json", "--sample-seconds", "1", cwd=cwd, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (node,) = data["nodes"]
    assert node["reachable"] and node["signals"]
    for sig in node["signals"]:
        assert sig["level"] in ("OK", "CONCERN", "INFO")
        assert sig["line"].startswith(f"[{sig['level']}] {sig['node']}")
        assert sig["text"] in sig["line"]
    text = run_cli("snapshot", "--sample-seconds", "1", cwd=cwd, env=env, timeout=120)
    # two runs differ only in sampled numbers (iowait, free space)
    def shape(line: str) -> str:
        return re.sub(r"\d+(\.\d+)?", "N", line)
    assert [shape(s["line"]) for s in node["signals"]] == [shape(ln) for ln in text.stdout.splitlines()]
    assert tree_state(tmp_path) == before


def test_json_and_lines_come_from_one_record():
    config = default_local_config()
    record = collect(config, make_transport(config), nodes_of(config), sample_s=0.2)
    data = json.loads(snapshot_json(record))
    assert [s["line"] for n in data["nodes"] for s in n["signals"]] + [s["line"] for s in data["drift"]] \
        == snapshot_lines(record)
    assert data["nodes"][0]["versions"] == record.nodes[0].versions


def test_unknown_node_is_a_usage_error(tmp_path):
    cwd, env = sandbox_env(tmp_path)
    proc = run_cli("snapshot", "--node", "nosuchnode", cwd=cwd, env=env, timeout=60)
    assert proc.returncode == 2
    assert "error[bad-input]: no node named 'nosuchnode'" in proc.stderr and "choose from:" in proc.stderr


def test_evidence_is_written_only_where_asked(tmp_path):
    from clustereval.debug.evidence import write_snapshot_evidence
    from clustereval.records.snapshot import Signal

    config = default_local_config()
    record = collect(config, make_transport(config), nodes_of(config), sample_s=0.2)
    node = record.nodes[0]
    node.signals.append(Signal(node=node.node, key="gpu.temperature", level="CONCERN", text="temperature 91 °C",
                               subject="gpu0", threshold=">= 88 °C", pointer="hardware: test"))
    (archive,) = write_snapshot_evidence(tmp_path / "ev", record)
    folder = archive.with_suffix("").with_suffix("")
    assert archive.exists() and folder.is_dir()
    names = {p.name for p in folder.iterdir()}
    assert {"README.txt", "snapshot.txt", "snapshot.json", "dmesg-xid.txt", "proc-stat-samples.txt",
            "df-root.txt", "versions.txt"} <= names
    readme = (folder / "README.txt").read_text()
    assert "gpu0: temperature 91 °C (threshold: >= 88 °C) → hardware: test" in readme
    assert json.loads((folder / "snapshot.json").read_text())["readings"]["node"] == node.node
    import tarfile
    with tarfile.open(archive) as tar:
        assert f"{folder.name}/README.txt" in tar.getnames()
    # a second call never overwrites the first
    (again,) = write_snapshot_evidence(tmp_path / "ev", record)
    assert again != archive and archive.exists()


def test_a_hostile_shared_path_is_data_not_shell(tmp_path):
    """Paths reach the collection script as arguments: spaces, quotes and $(...) stay literal."""
    from clustereval.debug.snapshot import snapshot_node
    from clustereval.transport.base import Node
    from clustereval.transport.local import LocalTransport

    evil = tmp_path / "a b;'\"$(touch PWNED)`touch PWNED2`"
    evil.mkdir()
    before = tree_state(tmp_path)
    snap = snapshot_node(LocalTransport(), Node("here", "here"), shared_paths=(str(evil),), sample_s=0.2)
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists() and not Path("PWNED2").exists()
    assert tree_state(tmp_path) == before
    assert snap.readings is not None and f"df {evil}" in snap.readings.status
    (row,) = [r for r in snap.readings.shared if r.path == str(evil)]
    assert row.size_bytes > 0
