"""cluster.toml's ``skip``: the passes an operator does not want, validated like every other key, and
the adapter tools wanted only where an RDMA adapter is."""

from __future__ import annotations

import textwrap

import pytest

from clustereval.config import SKIPPABLE, load_config
from clustereval.configload import template_text
from clustereval.errors import ConfigError
from clustereval.phases.base import RunContext
from clustereval.phases.packages import PackagesPhase
from clustereval.runner import PHASES
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import path_without, run_cli


def test_skip_names_the_runs_passes_and_never_the_gate():
    assert set(SKIPPABLE) == set(PHASES) - {"preflight"}


def test_skip_loads_and_each_unknown_name_is_an_error_at_its_line(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('skip = ["health", "storage", "health"]\n')
    assert load_config(path).skip == ("health", "storage")
    path.write_text(textwrap.dedent("""\
        skip = [
          "health",
          "helth",
          3,
        ]
        """))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msgs = [str(p) for p in exc.value.problems]
    (unknown,) = [m for m in msgs if "helth" in m]
    assert unknown.startswith(f"{path}:3: skip names 'helth', which is not a pass of the run")
    assert "choose from: packages, evalpython" in unknown and "preflight always runs" in unknown
    assert any("skip[2] must be a string, not 3" in m for m in msgs) and len(msgs) == 2
    path.write_text('skip = "health"\n')
    (msg,) = [str(p) for p in pytest.raises(ConfigError, load_config, path).value.problems]
    assert msg.startswith(f"{path}:1:") and "a list of strings" in msg


def test_the_template_documents_skip_and_its_example_loads(tmp_path):
    text = template_text()
    assert '# skip = ["health"]' in text and "DCGM" in text
    path = tmp_path / "cluster.toml"
    path.write_text(text.replace('# skip = ["health"]', 'skip = ["health"]'))
    assert load_config(path).skip == ("health",)
    (tmp_path / "sub").mkdir()
    proc = run_cli("init", cwd=tmp_path / "sub", timeout=60)
    assert proc.returncode == 0 and 'skip = ["health"]' in proc.stdout


def test_a_pass_asked_for_and_skipped_is_bad_input(tmp_path):
    (tmp_path / "cluster.toml").write_text('skip = ["health"]\n')
    proc = run_cli("run", "--phases", "health", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error[phase-skipped]: --phases names health, which cluster.toml's skip list "
                                  "leaves out")
    assert not list(tmp_path.glob("reports/raw-*"))  # no run was started


class _SysAt(LocalTransport):
    """This machine, with the node's /sys/class/infiniband read from a folder the test fills: an RDMA
    adapter cannot be plugged in here, the probe's shell still runs for real."""

    def __init__(self, sys_dir: str) -> None:
        super().__init__()
        self.sys_dir = sys_dir

    def run(self, node, argv, **kw):  # noqa: ANN001
        return super().run(node, [a.replace("/sys/class/infiniband", self.sys_dir) for a in argv], **kw)


@pytest.mark.parametrize("adapter", [False, True])
def test_adapter_tools_are_wanted_only_where_an_adapter_is(tmp_path, monkeypatch, adapter):
    from clustereval.config import Config

    ib = tmp_path / "infiniband"
    ib.mkdir()
    if adapter:
        (ib / "mlx5_0").mkdir()
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "ibstat", "rdma"))
    store = RunStore.create(tmp_path, "t")
    store.save_state(RunState(name="t", stamp="s"))
    ctx = RunContext(config=Config(nodes=("here",), install_packages=False), transport=_SysAt(str(ib)),
                     nodes=[Node("here", "here")], store=store)
    rec = PackagesPhase().run(ctx)
    missing = {g.facts["binary"] for g in rec.gaps if g.kind == "packages.missing"}
    assert ({"ibstat", "rdma"} <= missing) is adapter and (not {"ibstat", "rdma"} & missing) is not adapter
