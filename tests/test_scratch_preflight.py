"""A configured path that is missing or not writable stops preflight (exit 2), naming the node and the
path; clustereval never creates it. Preflight's own package folder goes through the same cleanup."""

import socket

import pytest

from tests.conftest import run_cli
from tests.storagehelpers import tmpfs


def _cfg(tmp_path, local, shared=()):
    cfg = tmp_path / "cluster.toml"
    paths = ", ".join(f'"{s}"' for s in shared)
    cfg.write_text(f'name = "t"\naccess = "local"\nlocal_scratch = "{local}"\ninstall_packages = false\n'
                   + (f"shared_paths = [{paths}]\n" if shared else ""))
    return cfg


def test_a_missing_local_scratch_fails_preflight_and_is_never_created(tmp_path):
    missing = tmp_path / "nonexistent" / "dir"
    host = socket.gethostname().split(".")[0]
    res = run_cli("preflight", "--config", str(_cfg(tmp_path, missing)), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert f"On {host}, `{missing}` (local_scratch in cluster.toml) does not exist" in out
    assert "preflight passed" not in out
    assert not (tmp_path / "nonexistent").exists()
    run = run_cli("run", "--config", str(_cfg(tmp_path, missing)), "--profile", "smoke", cwd=tmp_path, timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    assert not (tmp_path / "nonexistent").exists()  # the run did not create or scan it either


def test_a_read_only_shared_path_fails_preflight(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    ro = tmp_path / "ro"
    with tmpfs(ro, readonly=True):
        res = run_cli("preflight", "--config", str(_cfg(tmp_path, local, (ro,))), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert f"`{ro}` (shared_paths in cluster.toml) is not writable by the eval user" in out


@pytest.mark.timeout(900)
def test_preflights_package_folder_goes_through_the_scratch_cleanup(cluster3, tmp_path):
    """The gloo check ships the package to every node; preflight then clears it with the same checks as
    a run: the node-local scratch here is its own mount (not /tmp's filesystem), so it is moved."""
    res = run_cli("preflight", "--config", str(cluster3.config_path), cwd=tmp_path, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "REFUSED" not in out and "NOT cleared" not in out
    for i in range(3):
        node_dir = cluster3.node_scratch_dir(i)
        left = [str(p) for p in node_dir.rglob("cluster-eval-*") if "trash" not in p.relative_to(node_dir).parts]
        assert left == []
        assert any(node_dir.rglob("trash/*/cluster-eval-*/pkg")), f"node{i}: the package folder was not moved to trash"
    assert out.count("scratch: moved") == 3
    assert not (tmp_path / "reports").exists()  # its run folder goes to the config's reports_dir, no report
    (raw,) = (cluster3.workdir / "reports").glob("raw-*-preflight-*")
    assert (raw / "preflight.record.json").exists() and not list(raw.parent.glob("*.md"))
