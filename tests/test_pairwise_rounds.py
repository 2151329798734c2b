"""The pairs of one pairwise round run at the same time and take every sample together over SSH, on
the 4-node namespace bed: read from the job start and end and the sample windows each pair's record
holds (one clock: the nodes share this machine). A round whose pairs met different loads (one still
importing torch while the other timed its samples) compared the loads, not the links: that named
healthy nodes over SSH on the 8-node bed."""

from __future__ import annotations

import sys

import pytest

from clustereval.config import load_config
from clustereval.phases.base import RunContext
from clustereval.phases.pairwise import run_pairwise
from clustereval.phases.settings import PairwiseSettings
from clustereval.store import RunState, RunStore
from tests.pairwisecheck import rounds_sampled_together
from tests.test_network_rendezvous_modes import free_port


@pytest.mark.timeout(1500)
def test_the_pairs_of_each_round_are_sampled_together_over_ssh(tmp_path, netns_cluster):
    cluster = netns_cluster(4)
    path = cluster.write_config(tmp_path / "cluster.toml", rdzv_port=free_port(), cpu_ranks_per_node=1,
                                reports_dir=str(tmp_path / "reports"), eval_python=sys.executable)
    store = RunStore.create(tmp_path / "reports", "rounds")
    store.save_state(RunState(name="rounds", stamp="s"))
    ctx = RunContext(config=load_config(path), transport=cluster.transport(), nodes=cluster.cluster_nodes(),
                     store=store, eval_python=sys.executable)
    rec = run_pairwise(ctx, settings=PairwiseSettings(payload_bytes=2**20, samples_per_pair=3))
    assert rec.num_rounds == 3 and len(rec.pairs) == 6, [(p.round, p.a, p.b, p.error) for p in rec.pairs]
    assert all(p.busbw_gb_s is not None for p in rec.pairs), [(p.a, p.b, p.error) for p in rec.pairs]
    assert rounds_sampled_together(rec) == []
