"""The README stays true: its command table lists exactly the commands the CLI has, and the CI
entry point runs the README's test command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import click
import pytest

from clustereval.cli import cli
from tests.conftest import REPO


def _cli_commands() -> set[str]:
    names = set()
    for name, cmd in cli.commands.items():
        if isinstance(cmd, click.Group):
            names |= {f"{name} {sub}" for sub in cmd.commands}
        else:
            names.add(name)
    return names


def test_readme_command_table_matches_the_cli():
    readme = (REPO / "README.md").read_text()
    table = re.findall(r"^\| `clustereval ([a-z]+(?: [a-z]+)?)(?: [^`]*)?` \|", readme, re.MULTILINE)
    assert sorted(table) == sorted(_cli_commands()), "add or remove the README's command table rows"


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    assert "bash scripts/test.sh" in readme
    ci = REPO / ".ci" / "run"
    assert ci.stat().st_mode & 0o111 and "bash scripts/test.sh" in ci.read_text()
    script = (REPO / "scripts" / "test.sh").read_text()
    assert "torch==2.13.0" in script and "pytest" in script and "ruff check" in script


def first_command(readme: str) -> str:
    """The README's first set-up command: the first ```bash block that runs `clustereval run`."""
    for block in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL):
        if "clustereval run" in block:
            lines = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            assert len(lines) == 1, "the fresh-machine command is one line a reader can paste"
            return lines[0].strip()
    raise AssertionError("the README has no set-up command that runs clustereval")


def test_readme_has_exactly_two_fresh_machine_commands():
    readme = (REPO / "README.md").read_text()
    line = first_command(readme)
    assert line.startswith("apt-get update && apt-get install -y ")
    assert " python3 -m pip install " in line and line.endswith("clustereval run --profile quick")
    setup = readme[readme.index("## Quick start"):]
    setup = setup[:setup.index("\n## ", 5)]
    assert re.findall(r"```bash\n(.*?)```", setup, re.DOTALL) == [line + "\n", "bash scripts/test.sh\n"]


def _checkout_copy(dest):
    """The tracked files of this checkout (what a clone has), so `pip install .` builds nothing here."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in filter(None, files.stdout.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_readme_first_command_on_a_python_without_torch(tmp_path):
    """The first command as written, after its apt-get step (which gives the system Python pip and
    venv): run in a fresh environment that has neither torch nor clustereval, from a copy of the
    checkout. The eval Python is then built from pip's configured index, with the PyTorch index made
    unreachable (every https request but PyPI's goes to a closed port), so that step really runs."""
    line = first_command((REPO / "README.md").read_text())
    after_apt = line[line.index("PIP_BREAK_SYSTEM_PACKAGES=1 "):]
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    src = _checkout_copy(tmp_path / "clustereval")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    env.update({"https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
                "no_proxy": "pypi.org,files.pythonhosted.org,localhost,127.0.0.1",
                "NO_PROXY": "pypi.org,files.pythonhosted.org,localhost,127.0.0.1"})
    python = env_dir / "bin" / "python3"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True, env=env).returncode != 0
    proc = subprocess.run(["bash", "-c", after_apt], cwd=src, env=env, capture_output=True, text=True, timeout=2300)
    out = proc.stdout + proc.stderr
    reports = sorted((src / "reports").glob("*.md"))
    assert reports, out[-4000:]
    lint = subprocess.run([str(env_dir / "bin" / "clustereval"), "lint", str(reports[-1])], env=env,
                          capture_output=True, text=True)
    (raw,) = (src / "reports").glob("raw-*")
    ev = json.loads((raw / "evalpython.record.json").read_text())
    assert ev["source"] == "default-index", ev
    assert any(t.startswith("PyTorch index") for t in ev["tried"]), ev["tried"]
    assert lint.returncode == 0, lint.stdout[-4000:]
    assert proc.returncode == 0, out[-4000:]
