"""Pure pieces of the all-reduce worker (the worker itself runs for real in test_network_local)."""

from clustereval.workers.allreduce import GIB, KIB, MIB, busbw_factor, fit_max_bytes, payloads


def test_payloads_are_powers_of_two_inclusive():
    sizes = payloads(32 * KIB, 16 * GIB)
    assert sizes[0] == 32 * KIB and sizes[-1] == 16 * GIB and len(sizes) == 20
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))


def test_busbw_factor_is_the_ring_formula():
    assert busbw_factor(2) == 1.0
    assert busbw_factor(8) == 1.75
    assert busbw_factor(1) == 1.0


def test_largest_payload_halves_until_it_fits():
    assert fit_max_bytes(16 * GIB, 140 * GIB, 2 * GIB) == 16 * GIB
    assert fit_max_bytes(16 * GIB, 12 * GIB, 2 * GIB) == 8 * GIB
    assert fit_max_bytes(4 * MIB, 1 * MIB, 0) == 512 * KIB


def test_real_h200_sweep_output_becomes_a_sweep_record(fixtures):
    from clustereval.phases.network import sweep_from
    from clustereval.phases.torchrun import LaunchResult
    from clustereval.probes.torchrun import parse_worker_events
    from clustereval.records.network import LaunchInfo

    events = parse_worker_events((fixtures / "allreduce" / "h200x2-sweep.jsonl").read_text())
    res = LaunchResult(info=LaunchInfo(label="allreduce-intra-vm", nodes=["vm"], nproc_per_node=2, world_size=2,
                                       ok=True, rc_by_node={"vm": 0}), events=events, outputs={"vm": ""})
    sweep = sweep_from(res, "intra-node", "nccl", 16 * GIB)
    assert sweep.ok and sweep.device_name == "NVIDIA H200" and sweep.num_ranks == 2
    assert len(sweep.rows) == 20 and len(sweep.blocking_rows) == 20
    assert sweep.rows[0].payload_bytes == 32 * KIB and sweep.rows[-1].payload_bytes == 16 * GIB
    peak = sweep.peak
    assert peak is not None and peak.payload_bytes == 8 * GIB and round(peak.busbw_gb_s, 1) == 346.1
    assert {r.method for r in sweep.rows} == {"cuda-graph", "events"}
    assert sweep.sweep_seconds > 0
