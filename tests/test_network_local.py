"""Connectivity and a gloo all-reduce sweep through torchrun, for real, on this one machine.

The multi-node paths (rendezvous fixes, inter-node sweep, pairwise rounds) run on the namespace
cluster in test_network_netns.py.
"""

from __future__ import annotations

import socket
import sys

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.network import AllreducePhase, ConnectivityPhase
from clustereval.phases.settings import NetworkSettings
from clustereval.records import dumps, loads
from clustereval.records.network import AllreduceRecord, ConnectivityRecord
from clustereval.records.run import EvalPythonRecord
from clustereval.report.gaps import say
from clustereval.report.network_plots import sweep_plot_path
from clustereval.runner import render
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport

SMALL = NetworkSettings(max_bytes=128 * 1024)


@pytest.fixture(autouse=True)
def cpu_node(monkeypatch):
    """This machine as a node without GPUs, also where it has one: the gloo path is under test."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ctx(tmp_path, names, address="127.0.0.1", ranks=1) -> RunContext:
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    nodes = [Node(n, address, index=i) for i, n in enumerate(names)]
    (tmp_path / "scratch").mkdir(exist_ok=True)  # the node's local disk: clustereval never creates it
    config = Config(name="t", nodes=tuple(names), local_scratch=str(tmp_path / "scratch"),
                    rdzv_port=free_port(), cpu_ranks_per_node=ranks)
    return RunContext(config=config, transport=LocalTransport(), nodes=nodes, store=store,
                      eval_python=sys.executable)


def test_one_node_connectivity_is_intra_node_with_checked_sum(tmp_path):
    ctx = make_ctx(tmp_path, ["here"], ranks=2)
    # the eval-Python phase said another interpreter: the workers' self-report must catch it
    ctx.records["evalpython"] = EvalPythonRecord(interpreter="/opt/eval/bin/python", torch="9.9.9",
                                                 executables={"here": "/opt/eval/bin/python"})
    rec = ConnectivityPhase().run(ctx)
    assert rec.allreduce_ok
    assert rec.scope == "intra-node" and rec.backend == "gloo"
    assert rec.num_ranks == 2 and [r.rank for r in rec.ranks] == [0, 1]
    assert {r.executable for r in rec.ranks} == {sys.executable}
    assert all(r.node == "here" and r.torch for r in rec.ranks)
    log = (ctx.store.raw_dir / rec.launch.logs[0]).read_text()
    assert "[here:0]:" in log and "[here:1]:" in log
    assert (ctx.store.raw_dir / "tools" / "connectivity.py").exists()
    assert rec.nccl_env.nvls_enable  # recorded even on CPU: the final env is what GPU runs get
    assert rec.launch.interpreter_problems and "not the eval Python" in rec.launch.interpreter_problems[0]
    assert any("did not run on the eval Python" in say(g).text for g in rec.gaps)
    assert "network.wrong-interpreter" in {g.kind for g in rec.gaps}
    assert loads(ConnectivityRecord, dumps(rec)) == rec


def test_one_node_gloo_sweep_both_modes(tmp_path):
    ctx = make_ctx(tmp_path, ["here"], ranks=2)
    rec = AllreducePhase(SMALL).run(ctx)
    assert rec.status == "ok", rec.gaps
    (sweep,) = rec.intra
    assert rec.inter is None  # one node: no inter-node sweep at all
    assert sweep.nodes == ["here"] and sweep.num_ranks == 2 and sweep.backend == "gloo"
    assert [r.payload_bytes for r in sweep.rows] == [32768, 65536, 131072]
    assert [r.payload_bytes for r in sweep.blocking_rows] == [32768, 65536, 131072]
    assert all(r.check_ok and r.busbw_gb_s > 0 for r in sweep.rows + sweep.blocking_rows)
    r = sweep.rows[0]
    assert r.busbw_gb_s == pytest.approx(r.algbw_gb_s, rel=1e-9)  # 2(n-1)/n = 1 for n = 2
    assert r.algbw_gb_s == pytest.approx(r.payload_bytes / r.time_s / 1e9, rel=1e-9)
    assert loads(AllreduceRecord, dumps(rec)) == rec
    # the plot is drawn from the record when the report is rendered
    ctx.store.save_record("allreduce", rec)
    render(ctx.store, "local")
    assert (ctx.store.raw_dir / sweep_plot_path([sweep])).read_bytes()[:4] == b"\x89PNG"
