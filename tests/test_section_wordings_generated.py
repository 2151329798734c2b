"""Our own section sentences never fail our own lint, for every fact shape a run records.

``test_wordings_generated.py`` renders every Gap wording from generated facts. Here the same facts
(``tests/wording_facts.py``: node names with digits, error lines with numbers, seconds, paths,
counts of 0/1/many) go through the records the phases write, and the report's own builders render
them: the Network section (connectivity, sweeps, the pairwise table, its sentences and findings),
the Storage section (partitions, scan tables, range and ratio sentences, the concurrent write), the
Environment section (its five tables and sentences), and every Gap's plan as the close-out quotes
it. Each whole report goes through every rule of ``clustereval lint``.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from clustereval.analysis.rendezvous import classify_failure
from clustereval.analysis.stragglers import round_robin
from clustereval.phases.pairwise import judge_pairs
from clustereval.phases.storage import lustre_summary
from clustereval.probes.storage import LustreDf, StripeComponent
from clustereval.records import Gap
from clustereval.records.network import PairResult, PairwiseRecord, RendezvousPlan
from clustereval.records.storage import ConcurrentWrite, FioCell, Layout, LustreTarget, MountScan, NodeWrite
from clustereval.report.gaps import say
from clustereval.report.lint import lint_text
from clustereval.report.render import RunView, render_report
from tests.test_report_matrix import full_run
from tests.test_storage_report import lustre, real_cells
from tests.test_wordings_generated import NODELESS, in_report, section_of
from tests.wording_facts import CATALOG, ERRORS, NODES, PATHS, SECONDS, cases

# node sets as a run meets them: two nodes, four, and six whose names carry digits, dots and dashes
NODE_SETS = [NODES[:2], NODES[2:6], NODES]


def _without_network(records: dict) -> dict:
    """The records less the network phases: their plots cost seconds a report, and a test of
    another section does not read them."""
    return {k: v for k, v in records.items() if k not in ("connectivity", "allreduce", "pairwise")}


def _problems(records: dict) -> list[str]:
    view = RunView(name="h200", stamp="2026-12-03-1013Z", raw_rel="raw-h200-2026-12-03-1013Z", access="ssh",
                   records=records, profile="quick")
    md = render_report(view).markdown
    return [f"[{p.rule}] line {p.line}: {p.message}" for p in lint_text(md)]


def _renamed(records: dict, names: list[str]) -> dict:
    """A full run's records (``test_report_matrix.full_run``) with its nodes called ``names``."""
    records = copy.deepcopy(records)
    old = [n.node for n in records["environment"].nodes]
    to = dict(zip(old, names, strict=True))
    for n in records["environment"].nodes:
        n.node = to[n.node]
    for n in records["preflight"].nodes:
        n.name = n.address = to[n.name]
    records["evalpython"].executables = {to[k]: v for k, v in records["evalpython"].executables.items()}
    for phase in ("health", "gpupass", "matmul", "lemon"):
        for n in getattr(records[phase], "nodes", []):
            if getattr(n, "node", None) in to:
                n.node = to[n.node]
    conn = records["connectivity"]
    conn.launch.nodes = names
    conn.launch.rc_by_node = {to.get(k, k): v for k, v in conn.launch.rc_by_node.items()}
    ar = records.get("allreduce")
    if ar is not None:
        for s in ar.intra:
            s.nodes = [to[x] for x in s.nodes]
            s.launch.nodes = list(s.nodes)
            s.launch.rc_by_node = {to[k]: v for k, v in s.launch.rc_by_node.items()}
        if ar.inter is not None:
            ar.inter.nodes = ar.inter.launch.nodes = list(names)
            ar.inter.launch.rc_by_node = {to[k]: v for k, v in ar.inter.launch.rc_by_node.items()}
    if records["storage"].concurrent is not None:
        for w in records["storage"].concurrent.nodes:
            w.node = to[w.node]
    records.pop("pairwise", None)
    for phase in ("health", "gpupass", "matmul", "lemon"):  # not what these tests read; their plots cost time
        records.pop(phase, None)
    return records


def _hunt(names: list[str], *, slow: dict[str, float] | None = None, failed: dict[tuple[str, str], str] | None = None,
          joined: set[str] | None = None, unresolved: list[str] | None = None,
          ungated: set[tuple[str, str]] | None = None, stopped: tuple[str, int, str] | None = None) -> PairwiseRecord:
    """The pairwise record the phase writes (``phases.pairwise.judge_pairs``) for every pair of ``names``:
    three samples each, ``slow`` nodes' pairs at that fraction of the rate, ``failed`` pairs with their
    error line, ``ungated`` pairs sampled without their round's gate. ``stopped`` (node, round, error):
    the pairs run in the round robin's rounds, and every pair of that node from that round fails."""
    slow, failed, ungated = slow or {}, dict(failed or {}), ungated or set()
    rec = PairwiseRecord(payload_bytes=2**30, backend="nccl", ranks_per_node=8, samples_per_pair=3)
    results = []
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    at = {p: r // max(1, len(names) // 2) + 1 for r, p in enumerate(pairs)}
    if stopped is not None:
        at = {p: r for r, ps in enumerate(round_robin(names), 1) for p in ps}
        pairs = list(at)
        failed.update({p: stopped[2] for p, r in at.items() if stopped[0] in p and r >= stopped[1]})
    for a, b in pairs:
        err = failed.get((a, b), "")
        rate = 90.0 * min(slow.get(a, 1.0), slow.get(b, 1.0))
        results.append(PairResult(a=a, b=b, round=at[(a, b)], error=err,
                                  samples_gb_s=[] if err else [rate * (1 + d) for d in (-0.004, 0.0, 0.003)],
                                  ungated=(a, b) in ungated and not err,
                                  gate_error="gate 1 of the round was not passed together: Timeout (120000ms) "
                                             "reached in wait" if (a, b) in ungated else ""))
    rec.num_rounds = max(r.round for r in results)
    judge_pairs(rec, results, names, joined if joined is not None else set(names))
    rec.unresolved = list(unresolved or [])
    return rec


def _network_cases():
    for names in NODE_SETS:
        n = len(names)
        yield f"{n} nodes, every pair healthy", names, _hunt(names), None
        yield f"{n} nodes, {names[1]} slow", names, _hunt(names, slow={names[1]: 0.5}), None
        if n >= 5:
            yield f"{n} nodes, two slow", names, _hunt(names, slow={names[0]: 0.5, names[3]: 0.6}), None
        for err in ERRORS:
            yield (f"{n} nodes, one pair failed: {err!r}", names,
                   _hunt(names, failed={(names[0], names[1]): err}), err)
        every = {(a, b): ERRORS[k % len(ERRORS)] for k, (a, b) in
                 enumerate((a, b) for i, a in enumerate(names) for b in names[i + 1:])}
        for joined in (set(names), set(names[1:]), set()):
            yield (f"{n} nodes, every pair failed, {len(joined)} joined", names,
                   _hunt(names, failed=every, joined=joined), ERRORS[1])
        mine = {(a, b): ERRORS[k % len(ERRORS)] for k, (a, b) in
                enumerate((a, b) for i, a in enumerate(names) for b in names[i + 1:]) if names[1] in (a, b)}
        for err in ERRORS[:3]:
            yield (f"{n} nodes, {names[1]} completed no pair: {err!r}", names,
                   _hunt(names, failed=dict.fromkeys(mine, err)), None)
        first = {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
        yield (f"{n} nodes, {names[1]} completed no pair, the other pairs ungated", names,
               _hunt(names, failed=mine, ungated=first - set(mine)), None)
        yield f"{n} nodes, one pair ungated", names, _hunt(names, ungated={(names[0], names[-1])}), None
        if n >= 4:  # a node lost mid-hunt: failing from the round it stopped in
            for err in ERRORS[:3]:
                yield (f"{n} nodes, {names[1]} stopped in round 2: {err!r}", names,
                       _hunt(names, stopped=(names[1], 2, err)), None)
            yield (f"{n} nodes, {names[1]} stopped in round 2, {names[2]} slow", names,
                   _hunt(names, stopped=(names[1], 2, ERRORS[0]), slow={names[2]: 0.5}), None)
        if n >= 6:  # slow on the pairs it completed, then lost: a straggler and failing
            yield (f"{n} nodes, {names[1]} slow and stopped in round {n - 2}", names,
                   _hunt(names, stopped=(names[1], n - 2, ERRORS[1]), slow={names[1]: 0.5}), None)
        yield f"{n} nodes, every pair ungated", names, _hunt(names, ungated=first), None
        yield f"{n} nodes, {n - 1} unresolved", names, _hunt(names, unresolved=names[1:]), None
        yield f"{n} nodes, 1 unresolved", names, _hunt(names, unresolved=names[-1:]), None


@pytest.mark.parametrize("names", NODE_SETS, ids=lambda names: f"{len(names)} nodes")
def test_the_network_section_lints_clean_for_every_fact_shape(names):
    failures = []
    base = _renamed(full_run(len(names), 8), names)
    for what, case_names, pw, launch_error in _network_cases():
        if case_names != names:
            continue
        records = copy.deepcopy(base)
        records["pairwise"] = pw
        if launch_error is not None:
            # the same error ended the connectivity test and the inter-node sweep: their sentences and
            # the launcher finding quote it
            conn = records["connectivity"]
            conn.allreduce_ok, conn.launch.ok, conn.status = False, False, "failed"
            conn.launch.rc_by_node = {x: 1 for x in names}
            conn.launch.error, conn.launch.seconds = launch_error, SECONDS[0]
            records["allreduce"].inter.launch.ok = False
            records["allreduce"].inter.launch.rc_by_node = {x: 137 for x in names}
            _, records["allreduce"].inter.launch.diagnosis_text = classify_failure(
                {names[0]: "", names[-1]: launch_error}, [], RendezvousPlan(), "10.0.0.1:29500")
        problems = _problems(records)
        if problems:
            failures.append(f"{what}: {problems[:3]}")
    assert not failures, "\n".join(failures[:8])


def _scan(path: str, *, errors: dict[int, str] | None = None, stands_for=(), layout_errors=(), summary="") -> MountScan:
    scan = lustre(path, 25, "10.4.138.63@tcp:/data 1", 3.0, stands_for=list(stands_for))
    for i, err in (errors or {}).items():
        scan.cells[i] = FioCell(scan.cells[i].file_size_bytes, scan.cells[i].rw, error=err)
    scan.complete = not errors
    if summary or layout_errors:
        scan.layout = Layout(tool="lfs", summary=summary, errors=list(layout_errors))
    return scan


def _storage_cases():
    for path in PATHS[1:]:  # "/tmp" is the local scan's own
        yield f"{path!r} scanned", [_scan(path)], None
        yield f"{path!r} standing for two more", [_scan(path, stands_for=[p for p in PATHS[2:4] if p != path])], None
    # the layout sentence as the phase words it (``phases.storage.lustre_summary``): 0, 1 or many OSTs,
    # one plain or a progressive layout, a stripe count of every OST
    for num_osts in (0, 1, 12):
        for comps in ([StripeComponent(1, 2**20)], [StripeComponent(-1, 4 * 2**20)],
                      [StripeComponent(1, 2**20, str(2**30)), StripeComponent(4, 2**20, "68719476736"),
                       StripeComponent(-1, 4 * 2**20, "EOF")], []):
            df = LustreDf(targets=[LustreTarget(f"fs01-OST{i:04x}_UUID", "OST", i) for i in range(num_osts)])
            summary = lustre_summary(df, comps)
            if summary:
                yield f"a layout of {num_osts} OSTs: {summary!r}", [_scan(PATHS[1], summary=summary)], None
    for path in PATHS[1:]:
        yield f"{path!r} with its layout unreadable", [_scan(path, layout_errors=["`lfs getstripe`: exit 2"])], None
    for err in ERRORS:
        yield f"one run failed: {err!r}", [_scan(PATHS[1], errors={2: err})], None
        yield f"every run failed: {err!r}", [_scan(PATHS[2], errors=dict.fromkeys(range(6), err))], None
    yield "two scans of different speed", [_scan(PATHS[1]), lustre(PATHS[2], 50, "10.4.138.64@tcp:/b", 6.0)], None
    for names in NODE_SETS:
        for seconds in SECONDS:
            yield f"concurrent write from {len(names)} nodes in {seconds} s", [_scan(PATHS[1])], (names, seconds, "")
        for err in ERRORS:
            yield f"concurrent write, {names[-1]} failed: {err!r}", [_scan(PATHS[1])], (names, 2.7, err)


def test_the_storage_section_lints_clean_for_every_fact_shape():
    failures = []
    for what, shared, concurrent in _storage_cases():
        names = concurrent[0] if concurrent else NODES[:1]
        records = _without_network(_renamed(full_run(len(names), 8), names))
        rec = records["storage"]
        rec.shared = shared
        rec.shared_paths = [s.mount for s in shared]
        rec.partitions = rec.partitions[:1] + [dataclasses.replace(rec.partitions[0], mount=s.mount,
                                                                   size_bytes=s.size_bytes, fstype=s.fstype,
                                                                   source=s.source, shared=True) for s in shared]
        rec.concurrent = None
        if concurrent:
            names, seconds, err = concurrent
            writes = [NodeWrite(n, 2**30, seconds + i * 0.01, 400.0 - i) for i, n in enumerate(names)]
            if err:
                writes[-1] = NodeWrite(names[-1], error=err)
            rec.concurrent = ConcurrentWrite(mount=shared[0].mount, size_bytes=shared[0].size_bytes, fstype="lustre",
                                             nodes=writes, aggregate_mib_s=sum(w.mib_s for w in writes) * 0.9,
                                             wall_s=seconds)
            rec.num_nodes = len(names)
        problems = _problems(records)
        if problems:
            failures.append(f"{what}: {problems[:3]}")
    assert not failures, "\n".join(failures[:8])


def test_the_local_scan_lints_clean_with_failed_runs():
    failures = []
    for err in ERRORS:
        for failed in ({0: err}, dict.fromkeys(range(5), err)):
            records = _without_network(_renamed(full_run(1, 8, shared=False), NODES[1:2]))
            cells = real_cells()
            for i, e in failed.items():
                cells[i] = FioCell(cells[i].file_size_bytes, cells[i].rw, error=e)
            records["storage"].local.cells, records["storage"].local.complete = cells, False
            records["storage"].status = "partial"
            problems = _problems(records)
            if problems:
                failures.append(f"{len(failed)} failed with {err!r}: {problems[:3]}")
    assert not failures, "\n".join(failures[:8])


def _environment_cases():
    for names in NODE_SETS:
        for num_gpus in (1, 8):
            yield f"{len(names)} nodes x {num_gpus} GPUs", names, num_gpus, None
    names = NODES[:4]
    yield "processes on the GPUs", names, 8, ("procs", ["4012 python3 1024", "77 Xorg 12"])
    for path in PATHS:
        yield f"a filesystem at {path!r}", names, 8, ("fs", path)
    for torch in ("", "2.13.0+cpu"):
        yield f"torch {torch!r}", names, 8, ("torch", torch)
    yield "no NICs", names, 8, ("nics", 0)
    yield "one NIC", names, 8, ("nics", 1)


def test_the_environment_section_lints_clean_for_every_fact_shape():
    from clustereval.records.environment import FilesystemInfo

    failures = []
    for what, names, num_gpus, change in _environment_cases():
        records = _without_network(_renamed(full_run(len(names), num_gpus), names))
        nodes = records["environment"].nodes
        for i, n in enumerate(nodes):
            n.hostname = NODES[(i + 1) % len(NODES)]
        if change is not None:
            key, value = change
            for n in nodes:
                if key == "procs":
                    n.compute_processes = list(value)
                elif key == "fs":
                    n.filesystems.append(FilesystemInfo(value, 7 * 2**40, "nfs4", "10.0.0.12:/export/data 1",
                                                        shared=True))
                elif key == "torch":
                    n.software.torch = value
                elif key == "nics":
                    n.nics = n.nics[:value]
        problems = _problems(records)
        if problems:
            failures.append(f"{what}: {problems[:3]}")
    assert not failures, "\n".join(failures[:8])


@pytest.mark.parametrize("kind", sorted(CATALOG))
def test_every_plan_lints_clean_as_the_close_out_quotes_it(kind):
    """The close-out quotes each Gap and gives its plan of action beneath it (``report.closeout``)."""
    failures = []
    for what, facts in cases(kind):
        for node in (("",) if kind in NODELESS else ()) + tuple(NODES):
            gap = say(Gap(kind.split(".")[0], node=node, kind=kind, facts=facts))
            body = f"### Gaps\n\n- {gap.text}\n\n  Proposed plan of action: {gap.plan}\n"
            problems = lint_text(in_report(section_of(gap), body))
            if problems:
                failures.append(f"{what} node={node!r}: {gap.plan!r}: " + "; ".join(f"[{p.rule}] {p.message}"
                                                                                for p in problems))
    assert not failures, f"{kind}:\n" + "\n".join(failures[:12])
