"""The pairs of one pairwise round run at the same time and take every sample together over SSH, on
the 4-node namespace bed: read from the job start and end and the sample windows each pair's record
holds (one clock: the nodes share this machine). A round whose pairs met different loads (one still
importing torch while the other timed its samples) compared the loads, not the links: that named
healthy nodes over SSH on the 8-node bed.

The hunt is the session's `clustereval pairwise` on the even 4-node bed (``four_node_pairwise``,
one gloo rank a node, the command's own payload and samples), read from its record."""

from __future__ import annotations

import json

import pytest

from clustereval.records import from_dict
from clustereval.records.network import PairwiseRecord
from tests.pairwisecheck import rounds_sampled_together


@pytest.mark.timeout(1800)  # the session's pairwise bed may start here
def test_the_pairs_of_each_round_are_sampled_together_over_ssh(four_node_pairwise):
    command = four_node_pairwise.commands["even"]
    assert command.result.returncode == 0 and command.raw is not None, command.result.stderr[-3000:]
    rec = from_dict(PairwiseRecord, json.loads((command.raw / "pairwise.record.json").read_text()))
    assert rec.num_rounds == 3 and len(rec.pairs) == 6, [(p.round, p.a, p.b, p.error) for p in rec.pairs]
    assert all(p.busbw_gb_s is not None for p in rec.pairs), [(p.a, p.b, p.error) for p in rec.pairs]
    assert rec.samples_per_pair >= 3
    assert rounds_sampled_together(rec) == []
