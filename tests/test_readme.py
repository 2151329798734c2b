"""The README stays true: its command table lists exactly the commands the CLI has, and the CI
entry point runs the README's test command."""

from __future__ import annotations

import re

import click

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
