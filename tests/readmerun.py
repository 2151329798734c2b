"""The README's first command, run once per test session as a new user runs it (the
``readme_first_command`` fixture in ``tests/conftest.py``): read by ``tests/test_readme.py`` (the
command as written works where pip's configured index is the only one) and ``tests/test_e2e.py``
(what its report says and leaves behind)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import fields
from pathlib import Path

from clustereval.config import Config
from tests.conftest import REPO

_DEFAULTS = {f.name: f for f in fields(Config)}


def default_scratch() -> str:
    """``local_scratch`` when no cluster.toml names it."""
    return str(_DEFAULTS["local_scratch"].default)


def scratch_user() -> str:
    """The user folder a run here makes under ``local_scratch`` (``Config.scratch_user``'s default)."""
    return str(_DEFAULTS["scratch_user"].default_factory())


def first_command(readme: str) -> str:
    """The README's first set-up command: the first ```bash block that runs `clustereval run`."""
    for block in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL):
        if "clustereval run" in block:
            lines = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            assert len(lines) == 1, "the fresh-machine command is one line a reader can paste"
            return lines[0].strip()
    raise AssertionError("the README has no set-up command that runs clustereval")


def python_with_pip(venv: Path) -> Path:
    """A new venv whose only package is this machine's pip: the ``python3`` that `apt-get install
    python3-pip python3-venv` leaves on a fresh machine (pip, neither torch nor clustereval). Its pip
    is this interpreter's own, copied with its byte code: `python -m venv` would install the pip
    wheel bundled with Python and byte-compile it, 5 CPU-s and 15 to 25 s on a loaded 2-core machine."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    spec = importlib.util.find_spec("pip")
    assert spec is not None and spec.origin, "this interpreter has no pip to give the fresh one"
    package = Path(spec.origin).parent
    dist_info = package.parent / f"pip-{importlib.metadata.version('pip')}.dist-info"
    for folder in (package, dist_info):
        shutil.copytree(folder, site / folder.name, symlinks=True)
    return venv / "bin" / "python3"


def checkout_copy(dest: Path) -> Path:
    """The tracked files of this checkout (what a clone has), so `pip install .` builds nothing here."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in filter(None, files.stdout.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def private_mounts_argv(binds: dict[str, Path]) -> list[str] | None:
    """argv prefix that runs a command in its own mount namespace with each key's folder replaced by
    its value (a bind mount no other process sees), or None when this machine cannot: as root
    ``unshare --mount``, else an unprivileged user namespace. The network stays this machine's: the
    run meets pip's configured index and the closed PyTorch index as the command on this machine does."""
    flags = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        flags = ["--user", "--map-root-user", *flags]
    mounts = " && ".join(f'mount --bind "${i + 1}" "{target}"' for i, target in enumerate(binds))
    argv = ["unshare", *flags, "sh", "-c", f'{mounts} && shift {len(binds)} && exec "$@"', "sh",
            *(str(v) for v in binds.values())]
    probe = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=60)
    return argv if probe.returncode == 0 else None


class ReadmeRun:
    """The README's first command after its apt-get step, in a fresh venv that has neither torch nor
    clustereval, from a copy of the checkout (``src``, also the working folder: the report lands in
    ``src/reports``). The run's scratch user folder under the default ``local_scratch``, where the
    eval venv cache lives too (``<mount>/<user>/clustereval-venvs``), is a fresh folder of this run
    (``scratch``), so the eval Python is really built and the scratch left behind is this run's
    alone. It meets at this machine's default rendezvous port, so its readers stay in the group of
    tests that use this machine's ports (``tests/conftest.py``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.src = root / "clustereval"
        self.venv = root / "env"
        self.scratch = root / "scratch"
        self.env: dict[str, str] = {}
        self.result: subprocess.CompletedProcess | None = None
        self.skip_reason = ""

    @property
    def work(self) -> Path:
        return self.src

    def clustereval(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / "clustereval"), *args], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, line: str, timeout: float) -> None:
        after_apt = line[line.index("PIP_BREAK_SYSTEM_PACKAGES=1 "):]
        python_with_pip(self.venv)
        checkout_copy(self.src)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}"
        # the PyTorch index is unreachable (every https request but PyPI's goes to a closed port), so
        # the eval Python is built from pip's configured index
        env.update({"https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
                    "no_proxy": "pypi.org,files.pythonhosted.org,localhost,127.0.0.1",
                    "NO_PROXY": "pypi.org,files.pythonhosted.org,localhost,127.0.0.1"})
        self.env = env
        user_scratch = f"{default_scratch().rstrip('/')}/{scratch_user()}"
        self.scratch.mkdir()
        Path(user_scratch).mkdir(exist_ok=True)  # a bind mount needs its mount point
        prefix = private_mounts_argv({user_scratch: self.scratch})
        if prefix is None:
            self.skip_reason = ("neither `unshare --mount` (root) nor a user namespace is available: the README "
                                "run needs a /tmp scratch and eval venv cache of its own")
            return
        assert subprocess.run([str(self.venv / "bin" / "python3"), "-c", "import torch"], capture_output=True,
                              env=env).returncode != 0
        self.result = subprocess.run([*prefix, "bash", "-c", after_apt], cwd=self.src, env=env, capture_output=True,
                                     text=True, timeout=timeout)

    @property
    def output(self) -> str:
        assert self.result is not None
        return self.result.stdout + self.result.stderr
