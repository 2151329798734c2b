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
