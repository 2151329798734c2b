"""Run on this machine: the 1-node default and the test double for nothing (it is real)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from clustereval.errors import TransportError
from clustereval.records import CommandResult
from clustereval.transport.base import DEFAULT_TIMEOUT_S, Node, Transport, run_subprocess


class LocalTransport(Transport):
    method = "local"

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str] | None:
        if not env:
            return None
        merged = dict(os.environ)
        merged.update(env)
        return merged

    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        return run_subprocess(node.name, list(argv), timeout_s, stdin=stdin, cwd=cwd, env=self._env(env))

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=cwd, env=self._env(env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)

    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        self._copy(node, Path(local), Path(remote))

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        self._copy(node, Path(remote), Path(local))

    @staticmethod
    def _copy(node: Node, src: Path, dst: Path) -> None:
        try:
            if src.resolve() == dst.resolve():
                return
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        except OSError as exc:
            raise TransportError(node.name, f"copy {src} -> {dst} failed: {exc.strerror or exc}",
                                 "check the path exists and is writable", error_id="copy-failed") from exc
