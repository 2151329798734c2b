"""The README stays true: its command table lists exactly the commands the CLI has, and the CI
entry point runs the README's test command."""

from __future__ import annotations

import json
import re
import subprocess

import click
import pytest

from clustereval.cli import cli
from tests.conftest import REPO, only_leftovers
from tests.readmerun import first_command


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


def test_readme_has_exactly_two_fresh_machine_commands():
    readme = (REPO / "README.md").read_text()
    line = first_command(readme)
    assert line.startswith("apt-get update && apt-get install -y ")
    assert " python3 -m pip install " in line and line.endswith("clustereval run --profile quick")
    setup = readme[readme.index("## Quick start"):]
    setup = setup[:setup.index("\n## ", 5)]
    assert re.findall(r"```bash\n(.*?)```", setup, re.DOTALL) == [line + "\n", "bash scripts/test.sh\n"]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_readme_first_command_on_a_python_without_torch(readme_first_command):
    """The first command as written, after its apt-get step (which gives the system Python pip and
    venv): run in a fresh environment that has neither torch nor clustereval, from a copy of the
    checkout. The eval Python is then built from pip's configured index, with the PyTorch index made
    unreachable (every https request but PyPI's goes to a closed port), so that step really runs
    (in a venv cache of this run's own: ``tests/readmerun.py``)."""
    run = readme_first_command
    out = run.output
    reports = sorted((run.src / "reports").glob("*.md"))
    assert reports, out[-4000:]
    lint = subprocess.run([str(run.venv / "bin" / "clustereval"), "lint", str(reports[-1])], env=run.env,
                          capture_output=True, text=True)
    (raw,) = (run.src / "reports").glob("raw-*")
    ev = json.loads((raw / "evalpython.record.json").read_text())
    assert ev["source"] == "default-index", ev
    assert any(t.startswith("PyTorch index") for t in ev["tried"]), ev["tried"]
    assert ev["venv_built"] and not ev["venv_reused"], ev
    assert lint.returncode == 0, lint.stdout[-4000:]
    assert only_leftovers(run.result), out[-4000:]
