"""The rules table is the one place a verdict's bar lives: docs/reference.md shows it as the code has
it, the published MAMF it reads names models the spec database knows, and the modules that judge read
their fractions from it."""

from __future__ import annotations

from clustereval.analysis import gpupass, network, storage
from clustereval.analysis.rules import RULES, _mamf_table, judge, rule, rules_markdown
from clustereval.analysis.specs import gpu_specs
from tests.conftest import REPO


def test_docs_reference_shows_the_rules_table_as_the_code_has_it():
    text = (REPO / "docs" / "reference.md").read_text()
    start = text.index("<!-- rules table: generated from RULES, checked by tests/test_rules.py -->\n")
    end = text.index("<!-- end of rules table -->")
    shown = text[start:end].split("\n", 1)[1]
    assert shown == rules_markdown(), "docs/reference.md's rules table is stale: paste rules_markdown() there"


def test_every_published_mamf_names_a_model_of_the_spec_database():
    keys = {s.key for s in gpu_specs()}
    table = _mamf_table()["mamf_bf16_tflops"]
    assert set(table) <= keys, set(table) - keys
    for model, tflops in table.items():
        spec = next(s for s in gpu_specs() if s.key == model)
        assert 0 < tflops < spec.bf16_dense_tflops  # a measured figure stays under the data sheet's peak


def test_the_judging_modules_read_their_bars_from_the_table():
    assert gpupass.HBM_TARGET_FRACTION == rule("gpupass.hbm-copy").fraction
    assert gpupass.PCIE_TARGET_FRACTION == rule("gpupass.pcie").fraction
    assert gpupass.P2P_TARGET_FRACTION == rule("gpupass.p2p-write").fraction
    assert network.HEALTHY_SHARE_OF_SPEC == rule("network.intra-allreduce").fraction
    assert 1 - storage.TARGET_TOLERANCE == rule("storage.fio").fraction


def test_a_figure_at_its_bar_meets_it_and_just_under_misses():
    for r in RULES:
        for source in ("spec", "operator"):
            bar = r.bar(100.0, source)
            assert 0 < bar <= 100.0
            assert judge(r.id, "x", bar, 100.0, source).met
            assert not judge(r.id, "x", bar * 0.999, 100.0, source).met
