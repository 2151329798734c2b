"""The docs cannot go stale: docs/reference.md names exactly the commands, options and cluster.toml
keys the code has; the help texts state the rules the code applies; every exit status a command's
help gives is in the README's table; no doc points outside the repository."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from clustereval import configload
from clustereval.cli import cli
from clustereval.config import KubectlConfig, SlurmConfig
from clustereval.phases.settings import PairwiseSettings
from clustereval.runner import PHASES
from tests.conftest import REPO

REFERENCE = REPO / "docs" / "reference.md"


def _commands() -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                walk(cmd, [*prefix, name])
            else:
                out[" ".join([*prefix, name])] = cmd

    walk(cli, [])
    return out


def _long_options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts if o.startswith("--")}


def _reference_sections() -> dict[str, str]:
    """command -> the text of its ``### `clustereval COMMAND ...``` section."""
    text = REFERENCE.read_text().split("## cluster.toml keys")[0]
    parts = re.split(r"^### `clustereval ([a-z]+(?: [a-z]+)?)[^`]*`\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_reference_names_every_command_and_option_and_nothing_else():
    sections = _reference_sections()
    commands = _commands()
    assert sorted(sections) == sorted(commands), "docs/reference.md: one section per command"
    for name, cmd in commands.items():
        documented = set(re.findall(r"^- `(--[a-z-]+)", sections[name], re.MULTILINE))
        assert documented == _long_options(cmd), f"clustereval {name}: options in docs/reference.md"
    head = REFERENCE.read_text().split("### `clustereval")[0]
    assert set(re.findall(r"`(--[a-z-]+)`", head)) == _long_options(cli)


def _code_keys() -> set[str]:
    keys = {k for k in configload.TOP_KEYS if k not in ("ssh", "slurm", "kubectl", "nccl_env", "targets", "verdicts")}
    keys |= {f"ssh.{k}" for k in configload.SSH_KEYS}
    keys |= {f"slurm.{f.name}" for f in dataclasses.fields(SlurmConfig)}
    keys |= {f"kubectl.{f.name}" for f in dataclasses.fields(KubectlConfig)}
    keys |= {f"targets.{k}" for k in configload.TARGET_KEYS}
    keys |= {f"targets.storage.{k}" for k in configload.STORAGE_KEYS}
    keys |= {f"verdicts.{k}" for k in configload.VERDICT_KEYS}
    return keys


def test_reference_names_every_config_key_and_nothing_else():
    text = REFERENCE.read_text().split("## cluster.toml keys")[1]
    documented = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", text, re.MULTILINE))
    assert documented == _code_keys()
    assert "### `[nccl_env]`" in text  # free-form: its own paragraph
    for cell in configload.STORAGE_CELLS:
        assert f"`{cell}`" in text


def test_the_documented_slurm_and_kubectl_keys_are_the_ones_the_loader_takes(tmp_path):
    """The dataclass fields are the loader's schema for [slurm] and [kubectl]: an unknown key is refused."""
    from clustereval.config import load_config
    from clustereval.errors import ClusterEvalError

    for table in ("slurm", "kubectl"):
        path = tmp_path / f"{table}.toml"
        path.write_text(f'access = "{table}"\n[{table}]\nno_such_key = 1\n')
        with pytest.raises(ClusterEvalError) as exc:
            load_config(str(path))
        assert "no_such_key" in "\n".join(exc.value.lines())


def _help(*args: str) -> str:
    res = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def test_help_texts_state_the_rules_the_code_applies():
    pw = PairwiseSettings()
    rule = (f"more than {pw.threshold_pct:g}% below the slowest sample of the healthy pairs "
            f"(above {pw.round_robin_max_nodes} nodes")
    assert rule in _help("pairwise")
    for args in (("pairwise",), ("debug", "nccl"), ("run",), ("preflight",)):
        assert "below the mean" not in _help(*args)
    assert f"(preflight always runs): {', '.join(PHASES)}." in _help("run")
    assert "about a minute" not in _help("run")


def test_every_exit_status_a_help_gives_is_in_the_readme_table():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Exit status"):]
    rows = {}
    for line in table.splitlines():
        m = re.match(r"^\| (`[a-z ]+`(?:, `[a-z ]+`)*) \|(.*)\|$", line)
        if m:
            cells = [c.strip() for c in m.group(2).split(" | ")]
            codes = {str(i) for i, c in enumerate(cells) if c and c != "—"}
            for name in re.findall(r"`([a-z ]+)`", m.group(1)):
                rows[name] = codes
    assert sorted(rows) == sorted(_commands())
    for name in _commands():
        text = _help(*name.split())
        if "Exit status:" not in text:
            continue
        given = set(re.findall(r"\b([0-3]|130|143) ", text.split("Exit status:")[1]))
        assert given - {"130", "143"} <= rows[name], name
    assert "exits 130 on Ctrl-C and 143 on SIGTERM" in " ".join(table.split())


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_docs_point_nowhere_outside_the_repository(doc):
    text = doc.read_text()
    assert "../shared" not in text and "/work/" not in text
    prose = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.DOTALL)  # a link written as an example is no link
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(REPO.resolve()) and path.exists(), f"{doc.name}: {target}"


@pytest.mark.parametrize("doc,sources", [("slurm.md", "clustereval/transport/slurm"),
                                         ("kubernetes.md", "clustereval/transport/kubectl.py")])
def test_every_error_id_of_a_transport_is_in_its_docs_table(doc, sources):
    root = REPO / sources
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    ids = {m for f in files for m in re.findall(r'error_id="([a-z-]+)"', f.read_text())}
    text = (REPO / "docs" / doc).read_text()
    rows = " ".join(ln.split(" | ")[0] for ln in text.splitlines() if ln.startswith("| `"))
    documented = set(re.findall(r"`([a-z-]+)`", rows))
    assert ids <= documented, sorted(ids - documented)
