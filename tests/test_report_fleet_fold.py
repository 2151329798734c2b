"""A fleet's Environment section: above ``FOLD_NODES`` nodes a row gives the common value with its
node count and names only the nodes that differ, so a large fleet's report stays readable (and
lint-clean); small clusters keep every node's name."""

from __future__ import annotations

import re

from clustereval.analysis.environment import drift
from clustereval.records.environment import EnvironmentRecord
from clustereval.report.environment import FOLD_NODES
from clustereval.report.lint import lint_text
from clustereval.report.render import RunView, render_report
from tests.envfixtures import h200_node

OTHER_KERNEL = "6.8.0-31-generic"


def fleet(num_nodes: int, *, kernels: tuple[int, ...] = (), half_ram: tuple[int, ...] = (),
          same_name: tuple[int, ...] = ()) -> str:
    nodes = []
    for i in range(num_nodes):
        n = h200_node(f"gpu-{i:03d}", i)
        n.hostname = "gpu-dup" if i in same_name else f"gpu-{i:03d}"
        if i in kernels:
            n.kernel = OTHER_KERNEL
        if i in half_ram:
            n.mem_total_bytes //= 2
        nodes.append(n)
    rec = EnvironmentRecord(phase="environment", nodes=nodes, drift=drift(nodes))
    rec.tool_links = {"software.py": "raw-fleet-2026-12-03-1400Z/tools/software.py"}
    view = RunView(name="fleet", stamp="2026-12-03-1400Z", raw_rel="raw-fleet-2026-12-03-1400Z", access="ssh",
                   records={"environment": rec})
    return render_report(view).markdown


def row(md: str, label: str) -> str:
    return next(ln for ln in md.splitlines() if ln.startswith(f"| {label} |"))


def test_forty_nodes_fold_into_the_common_value_and_the_outliers():
    md = fleet(40, kernels=(7, 23), half_ram=(11,))
    assert lint_text(md) == []
    assert "- Nodes / GPUs: 40 nodes (`gpu-000` to `gpu-039`), 2 GPUs each, 80 GPUs in all" in md
    assert row(md, "Hostname") == "| Hostname | 40 nodes, `gpu-000`(node0) to `gpu-039`(node39) |"
    kernel = row(md, "Kernel")
    assert re.search(r"\S+ on 38 nodes; 6\.8\.0-31-generic on `gpu-007`\(node7\), `gpu-023`\(node23\) \|$", kernel)
    assert row(md, "Host RAM").endswith("on 39 nodes; 126 GiB on `gpu-011`(node11) |")
    # no line of the report names more nodes than the fold allows
    assert max(len(re.findall(r"\(node\d+\)", ln)) for ln in md.splitlines()) <= FOLD_NODES


def test_many_outliers_are_counted_past_the_fold_and_a_shared_hostname_is_named():
    md = fleet(40, kernels=tuple(range(0, 40, 3)), same_name=(5, 9))
    assert lint_text(md) == []
    kernel = row(md, "Kernel")
    assert kernel.count("(node") == FOLD_NODES and "and 6 more nodes" in kernel  # 14 nodes on the other kernel
    assert "the same hostname on more than one node: `gpu-dup` on node5, node9" in row(md, "Hostname")


def test_a_small_cluster_names_every_node():
    md = fleet(4, kernels=(2,))
    assert lint_text(md) == []
    assert row(md, "Hostname") == ("| Hostname | `gpu-000`(node0), `gpu-001`(node1), `gpu-002`(node2), "
                                   "`gpu-003`(node3) |")
    assert f"{OTHER_KERNEL} on `gpu-002`(node2)" in row(md, "Kernel")
    assert "`gpu-000`(node0), `gpu-001`(node1), `gpu-003`(node3)" in row(md, "Kernel")
