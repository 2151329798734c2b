"""Helpers for the storage tests: a run folder, a context on this machine, real small mounts."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.settings import StorageSettings
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport

# on each test that runs fio itself: a test of a missing fio, a refusal or a usage error runs without it
needs_fio = pytest.mark.skipif(not any(os.access(os.path.join(d, "fio"), os.X_OK)
                                       for d in os.environ.get("PATH", "").split(os.pathsep)),
                               reason="fio is not installed (apt-get install fio)")

SMALL_SIZES = (16 * 2**10, 64 * 2**10, 256 * 2**10)  # tests scale the files down; production argv is the seed's
TEST_STORAGE = StorageSettings(fio_runtime_s=1, fio_ramp_s=0)  # 1 s of timed IO per run, no ramp


def small_storage(**changes) -> StorageSettings:
    """The storage settings the tests run with, changed where a test says so."""
    return dataclasses.replace(TEST_STORAGE, **changes)


def make_ctx(tmp_path: Path, *, local: Path, shared: tuple[Path, ...] = (), nodes: list[Node] | None = None,
             **config) -> RunContext:
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="2026-11-30-1900Z"))
    local.mkdir(parents=True, exist_ok=True)  # the node's local disk is there; clustereval never creates a mount
    nodes = nodes or [Node("here", "here")]
    cfg = Config(nodes=tuple(n.name for n in nodes), local_scratch=str(local),
                 shared_paths=tuple(str(s) for s in shared), scratch_user="evaluser", **config)
    return RunContext(config=cfg, transport=LocalTransport(), nodes=nodes, store=store)


def files_outside_trash(*roots: Path) -> list[str]:
    """Every regular file under ``roots`` that is not inside a ``trash`` folder."""
    out = []
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            if "trash" in Path(dirpath).relative_to(root).parts:
                continue
            out += [os.path.join(dirpath, f) for f in files]
    return out


def du_bytes(path: Path) -> int:
    res = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(res.stdout.split()[0])


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "8m", readonly: bool = False):
    """A real tmpfs mount at ``path`` (needs root; the test is skipped without it)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def processes_naming(path: Path) -> list[tuple[str, str]]:
    """(name, command line) of the processes still running whose arguments name ``path``: a test's
    own fio and run, never another test's (their folders differ), never this process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if str(path) in cmdline and int(entry.name) != os.getpid():
            found.append((name, cmdline.strip()))
    return found
