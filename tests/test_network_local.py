"""Connectivity, a gloo all-reduce sweep and the pairwise hunt through torchrun, for real, on this machine.

Several "nodes" share this machine's loopback address, each with its own torchrun agent, so the
multi-node code paths (rendezvous plan, store hosting, parallel pair rounds) run for real.
"""

from __future__ import annotations

import json
import socket
import sys

import pytest

from clustereval.config import Config
from clustereval.phases.base import Profile, RunContext
from clustereval.phases.network import AllreducePhase, ConnectivityPhase
from clustereval.phases.pairwise import run_pairwise
from clustereval.phases.torchrun import launch, probe_nodes
from clustereval.records import dumps, loads
from clustereval.records.network import AllreduceRecord, ConnectivityRecord, PairwiseRecord
from clustereval.records.run import EvalPythonRecord
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport

SMALL = Profile(name="quick", allreduce_max_bytes=128 * 1024)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ctx(tmp_path, names, address="127.0.0.1", ranks=1) -> RunContext:
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    nodes = [Node(n, address, index=i) for i, n in enumerate(names)]
    config = Config(name="t", nodes=tuple(names), local_scratch=str(tmp_path / "scratch"),
                    rdzv_port=free_port(), cpu_ranks_per_node=ranks)
    return RunContext(config=config, transport=LocalTransport(), nodes=nodes, store=store, profile=SMALL,
                      eval_python=sys.executable)


def test_one_node_connectivity_is_intra_node_with_checked_sum(tmp_path):
    ctx = make_ctx(tmp_path, ["here"], ranks=2)
    rec = ConnectivityPhase().run(ctx)
    assert rec.status == "ok" and rec.allreduce_ok
    assert rec.scope == "intra-node" and rec.backend == "gloo"
    assert rec.num_ranks == 2 and [r.rank for r in rec.ranks] == [0, 1]
    assert {r.executable for r in rec.ranks} == {sys.executable}
    assert all(r.node == "here" and r.torch for r in rec.ranks)
    log = (ctx.store.raw_dir / rec.launch.logs[0]).read_text()
    assert "[here:0]:" in log and "[here:1]:" in log
    assert (ctx.store.raw_dir / "tools" / "connectivity.py").exists()
    assert rec.nccl_env.nvls_enable  # recorded even on CPU: the final env is what GPU runs get
    assert loads(ConnectivityRecord, dumps(rec)) == rec


def test_worker_on_another_interpreter_is_reported(tmp_path):
    ctx = make_ctx(tmp_path, ["here"], ranks=2)
    ctx.records["evalpython"] = EvalPythonRecord(interpreter="/opt/eval/bin/python", torch="9.9.9",
                                                 executables={"here": "/opt/eval/bin/python"})
    rec = ConnectivityPhase().run(ctx)
    assert rec.launch.interpreter_problems and "not the eval Python" in rec.launch.interpreter_problems[0]
    assert any("did not run on the eval Python" in g.text for g in rec.gaps)


@pytest.mark.slow
def test_two_node_gloo_sweep_intra_and_inter(tmp_path):
    ctx = make_ctx(tmp_path, ["a", "b"], ranks=2)
    rec = AllreducePhase().run(ctx)
    assert rec.status == "ok", rec.gaps
    assert [s.nodes for s in rec.intra] == [["a"], ["b"]]
    payloads = [r.payload_bytes for r in rec.intra[0].rows]
    assert payloads == [32768, 65536, 131072]
    assert all(r.check_ok and r.busbw_gb_s > 0 for s in rec.intra for r in s.rows + s.blocking_rows)
    assert rec.inter is not None and rec.inter.num_ranks == 4 and rec.inter.ok
    r = rec.inter.rows[0]
    assert r.busbw_gb_s == pytest.approx(r.algbw_gb_s * 2 * 3 / 4, rel=1e-3)
    assert (ctx.store.raw_dir / rec.inter.plot).read_bytes()[:4] == b"\x89PNG"
    assert loads(AllreduceRecord, dumps(rec)) == rec


@pytest.mark.slow
def test_pairwise_three_nodes_runs_three_rounds_of_disjoint_pairs(tmp_path):
    ctx = make_ctx(tmp_path, ["a", "b", "c"], ranks=1)
    rec = run_pairwise(ctx, ctx.nodes, payload_bytes=64 * 1024)
    assert rec.status == "ok", rec.gaps
    assert rec.num_rounds == 3 and len(rec.pairs) == 3
    assert sorted({p.round for p in rec.pairs}) == [1, 2, 3]
    assert all(p.busbw_gb_s and p.busbw_gb_s > 0 for p in rec.pairs)
    assert rec.mean_busbw_gb_s > 0 and {s.node for s in rec.suspects} == {"a", "b", "c"}
    assert (ctx.store.raw_dir / rec.heatmap).exists()
    assert loads(PairwiseRecord, dumps(rec)) == rec


def _loopback_hostname_and_routable_ip() -> str | None:
    """A local non-loopback IPv4 address, when this machine's hostname resolves only to loopback."""
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)}
    except OSError:
        return None
    if not addrs or not all(a.startswith("127.") or a == "::1" for a in addrs):
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.123", 9))  # no packet is sent: this only picks the source address
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


@pytest.mark.slow
def test_rendezvous_needs_is_host_when_hostname_is_loopback(tmp_path):
    ip = _loopback_hostname_and_routable_ip()
    if ip is None:
        pytest.skip("needs a hostname resolving to loopback and a routable address (the netns cluster covers it)")
    ctx = make_ctx(tmp_path, ["a", "b"], address=ip)
    probes = probe_nodes(ctx, ctx.nodes, ip, ctx.config.rdzv_port)
    assert probes[0].matches_endpoint is False
    broken = launch(ctx, label="nofix", module="connectivity", args=["--backend", "gloo"], nodes=ctx.nodes, nproc=1,
                    port=ctx.config.rdzv_port, timeout_s=60, probes=probes, auto_fix=False, rdzv_timeout_s=6)
    assert not broken.info.ok and broken.info.diagnosis == "store-not-listening"
    fixed = launch(ctx, label="fix", module="connectivity", args=["--backend", "gloo"], nodes=ctx.nodes, nproc=1,
                   port=ctx.config.rdzv_port, timeout_s=60, probes=probes, rdzv_timeout_s=6)
    assert fixed.info.ok and fixed.info.is_host_node == "a"
    assert fixed.info.local_addrs == {"a": ip, "b": ip}
    assert [e["ok"] for e in fixed.of("allreduce")] == [True, True]
    assert json.loads(dumps(fixed.info))["fix_reasons"]
