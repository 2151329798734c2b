"""Shared test helpers. The CLI runs as a real subprocess from this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.cputime"]  # --cpu-top=N: the tests that cost the most CPU

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def only_leftovers(result: subprocess.CompletedProcess) -> bool:
    """A run or report whose every phase was ok and every measured figure met its rule: exit 0, or exit 1
    with each Underperforming bullet a leftover Gap (a pass that did not run here, e.g. DCGM on a CPU
    bed), named on stderr as such, and nothing else said to have failed."""
    out = (result.stdout or "") + (result.stderr or "")
    lines = [ln for ln in out.splitlines() if ln.startswith("underperforming: ")]
    if result.returncode == 0:
        return not lines
    return (result.returncode == 1 and bool(lines) and "not every phase is ok" not in out
            and all(ln.endswith("— what did not run (the report's Gaps)") for ln in lines))


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
    """`clustereval ARGS` as a user runs it, importing this checkout's package."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "clustereval", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def path_without(folder: Path, *commands: str) -> str:
    """A PATH on which ``commands`` cannot be found, everything else of this PATH can: ``folder``
    gets a link to every other program (on a GPU machine nvidia-smi sits in /usr/bin beside sh)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        for prog in Path(entry).glob("*") if entry and Path(entry).is_dir() else []:
            link = folder / prog.name
            if prog.name not in commands and not link.exists() and not link.is_symlink():
                link.symlink_to(prog)
    return str(folder)


def has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


# Tests that start torchrun, a gloo rendezvous or a whole `clustereval run` on this machine's own
# network (access = "local"): they meet at the config's rdzv_port (29500 unless the test picks one),
# so two of them side by side would take each other's port. A test of these modules that builds a
# namespace bed instead runs its jobs inside the nodes' namespaces and is not held to this.
THIS_HOST_PORT_MODULES = frozenset({"test_e2e", "test_evalpython", "test_network_local", "test_readme",
                                    "test_sigterm", "test_targets"})
THIS_HOST_PORTS = "this-host-rdzv-ports"
BED_FIXTURES = frozenset({"netns_cluster", "cluster3", "slurm_cluster", "four_node_smoke", "four_node_pairwise"})


def _shared_fixtures(item) -> list[str]:
    """The session- and module-scoped fixtures of this suite that ``item`` uses: its expensive
    shared runs and beds (``tmp_path_factory`` and other plugins' fixtures are not ours)."""
    info = getattr(item, "_fixtureinfo", None)
    keys = []
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        fixdef = defs[-1]
        owner = getattr(fixdef.func, "__module__", "") or ""
        if fixdef.scope in ("session", "module") and owner.split(".")[0] == "tests":
            keys.append(name if fixdef.scope == "session" else f"{item.module.__name__.split('.')[-1]}.{name}")
    return keys


def xdist_groups(items) -> None:
    """One ``xdist_group`` per set of tests that must run in one pytest-xdist worker, one after the
    other (``--dist loadgroup``): the tests that read one session- or module-scoped run (a second
    worker would run it again), and the tests that use this machine's rendezvous ports. Tests that
    share a fixture with two groups join them into one. Every other test, namespace beds included
    (each bed has its own random names, subnet and ports), goes to whichever worker is free."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys_of = {}
    for item in items:
        keys = _shared_fixtures(item)
        module = item.module.__name__.split(".")[-1] if getattr(item, "module", None) else ""
        if module in THIS_HOST_PORT_MODULES and not BED_FIXTURES & set(item.fixturenames):
            keys.append(THIS_HOST_PORTS)
        keys += [str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")]
        keys_of[item] = keys
        for key in keys:
            parent[find(key)] = find(keys[0])
    members: dict[str, list[str]] = {}
    for key in parent:
        members.setdefault(find(key), []).append(key)
    for item in items:  # a test's own xdist_group marks (on it, its class or module) are keys above
        for node in item.listchain():
            node.own_markers = [m for m in node.own_markers if m.name != "xdist_group"]
    for item, keys in keys_of.items():
        if keys:
            together = members[find(keys[0])]
            item.add_marker(pytest.mark.xdist_group(THIS_HOST_PORTS if THIS_HOST_PORTS in together else min(together)))


# a test's guessed share of a worker's time, for the order below: a whole run or a bed costs about a
# minute of the 2 cores, most other tests well under a second
HEAVY_S, LIGHT_S = 60.0, 0.5


def heaviest_first(items) -> None:
    """Put the units pytest-xdist hands out (an ``xdist_group``, else a single test) in order of their
    guessed cost, heaviest first: a worker that gets a long unit last would run on alone while the
    others idle. A unit's cost is the sum of its tests' (``slow`` mark or a bed: HEAVY_S). The sort is
    stable, so the collection order holds among equals."""
    def unit(item) -> str:
        group = item.get_closest_marker("xdist_group")
        return str(group.args[0]) if group and group.args else item.nodeid

    cost: dict[str, float] = {}
    unit_of = {item: unit(item) for item in items}
    for item, key in unit_of.items():
        heavy = item.get_closest_marker("slow") is not None or item.get_closest_marker("netns") is not None
        cost[key] = cost.get(key, 0.0) + (HEAVY_S if heavy else LIGHT_S)
    items.sort(key=lambda item: -cost[unit_of[item]])


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    xdist_groups(items)
    for item in items:
        if BED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.netns)
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
    heaviest_first(items)
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def netns_cluster():
    """Factory for multi-node clusters on this machine (see ``tests/testbed.py``).

    ``netns_cluster(num_nodes=3, **cluster_toml_fields) -> NetnsCluster``: builds ``num_nodes``
    network namespaces on a private bridge (random ``10.x.y.0/24``, random id in every name), each
    with its own hostname and an sshd on ``cluster.ssh_port`` that accepts the generated test key
    (node to node too), and writes ``cluster.hostfile``, ``cluster.config_path`` (cluster.toml,
    access = "ssh"; keyword fields override its top-level keys) and ``cluster.ssh_config``. Every
    cluster made is torn down after the test, failed or not. Skips (with the reason) when this
    machine cannot build it: not root, or no ``ip netns``.

    On the returned ``NetnsCluster``: ``nodes`` (``TestNode``: index, name, netns, address, veth),
    ``transport()`` (an ``SshTransport``), ``cluster_nodes()`` (``transport.base.Node`` list),
    ``ssh_settings()``, ``write_config(path=None, ssh_port=None, extra="", nodes=None, **fields)``,
    ``kill_sshd(i)`` / ``start_sshd(i)``, ``set_hostname_loopback(i, on=True)`` (the node's own
    hostname resolves to 127.0.1.1 there), ``set_name_resolution(mode)`` (``all``,
    ``own-address-ip-peers``, ``loopback-ip-peers``: how hostnames resolve on every node), ``shape(i, rate_mbit=None, delay_ms=None)`` /
    ``unshape(i)`` (tc on the node's link, both directions; delay needs sch_netem and raises
    ``TestbedUnavailable`` without it), ``exec(i, argv)`` (run inside the node without ssh),
    ``ssh_argv(i, *argv)``, ``shared_dir`` / ``scratch_dir`` (shared_paths / local_scratch).
    """
    from tests.testbed import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    made = []

    def make(num_nodes: int = 3, **config_fields):
        cluster = NetnsCluster.create(num_nodes, **config_fields)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()


@pytest.fixture
def cluster3(netns_cluster):
    """A fresh 3-node ``NetnsCluster`` (see ``netns_cluster``)."""
    return netns_cluster(3)


@pytest.fixture
def slurm_cluster(netns_cluster, monkeypatch):
    """A real Slurm cluster over a fresh 3-node ``NetnsCluster`` (see ``tests/slurmbed.py``).

    slurmctld and munged run here, one slurmd inside each node's namespace; ``SLURM_CONF`` is set
    for the test (and for ``run_cli``, which inherits the environment), ``SLURM_JOB_ID`` cleared.
    Stopped after the test with every job cancelled and every leftover process killed. Skips
    (with the reason) when Slurm is not installed or the test bed cannot be built.
    """
    from tests.slurmbed import SlurmCluster, slurm_unavailable_reason
    from tests.testbed import TestbedUnavailable

    reason = slurm_unavailable_reason()
    if reason:
        pytest.skip(reason)
    netns = netns_cluster(3)
    try:
        cluster = SlurmCluster.create(netns)
    except TestbedUnavailable as exc:
        pytest.skip(f"the local Slurm cluster did not start: {exc}")
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    for key in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(key, raising=False)
    try:
        yield cluster
    finally:
        cluster.close()


TCSH = "/usr/bin/tcsh"


def python_without_and_with_torch(folder: Path) -> tuple[Path, Path]:
    """Two interpreters made from this one: ``nodepy/bin/python3``, a venv without this Python's
    site-packages (no torch: a fresh node's ``python3``), and ``evalvenv/bin/python``, a venv that
    sees them (torch: the ``eval_python`` a conda or venv install gives)."""
    for name, extra in (("nodepy", []), ("evalvenv", ["--system-site-packages"])):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", *extra, str(folder / name)], check=True,
                       capture_output=True, timeout=300)
    return folder / "nodepy" / "bin" / "python3", folder / "evalvenv" / "bin" / "python"


class SmokeRun:
    """One finished `clustereval run --profile smoke` on the 4-node SSH bed (see ``four_node_smoke``)."""

    def __init__(self, cluster, result: subprocess.CompletedProcess, tcsh_node: int | None) -> None:
        self.cluster = cluster
        self.result = result
        self.tcsh_node = tcsh_node  # the node whose login shell is tcsh, None without tcsh here

    @property
    def output(self) -> str:
        return self.result.stdout + self.result.stderr


@pytest.fixture(scope="session")
def four_node_smoke():
    """The suite's one uninterrupted 4-node smoke run over SSH, read by every test that checks a
    whole healthy run (report, exit status, scratch left behind, a tcsh login shell on node0). The
    nodes' ``python3`` has no torch; ``eval_python`` is a venv with it.

    The run is the expensive part (every phase, torchrun on four nodes); the tests that read it
    assert different things about the same run, so it runs once per session. Node0 logs in with
    tcsh when tcsh is installed (the tcsh tests skip otherwise; the others still run)."""
    from tests.testbed import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = NetnsCluster.create(4)
    try:
        # the usual fresh cluster: PATH's python3 has no torch, eval_python is a venv that has it
        node_python, eval_python = python_without_and_with_torch(cluster.workdir)
        cluster.set_node_env(python_dir=str(node_python.parent))
        cluster.write_config(eval_python=str(eval_python))
        tcsh_node = None
        if Path(TCSH).exists():
            cluster.set_login_shell(0, TCSH)
            tcsh_node = 0
        result = run_cli("run", "--config", str(cluster.config_path), "--profile", "smoke", cwd=cluster.workdir,
                         timeout=1500)
        yield SmokeRun(cluster, result, tcsh_node)
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def readme_first_command(tmp_path_factory):
    """The README's first command after its apt-get step, run once per session as a new user runs it
    (see ``tests/readmerun.ReadmeRun``): a fresh venv without torch, the package installed from a
    copy of the checkout, `clustereval run --profile quick` with no cluster.toml, the eval Python
    built from pip's configured index into a fresh venv cache. The run is the expensive part (a torch
    build, then the quick profile's measurements); the tests that read it assert different things
    about the same run, in test_readme.py and test_e2e.py."""
    from tests.readmerun import ReadmeRun, first_command

    run = ReadmeRun(tmp_path_factory.mktemp("readme"))
    run.start(first_command((REPO / "README.md").read_text()), timeout=2300)
    if run.skip_reason:
        pytest.skip(run.skip_reason)
    return run


# ``four_node_pairwise`` holds every node's link to PAIRWISE_LINK_MBIT from the start, as a fabric's
# links are held to their rate: unshaped, a gloo pair on a CPU shared with the rest of the suite carries
# whatever the machine's load leaves it, and its samples moved by 60% and more from one to the next
# (enough to hide a node four times slower); held to the link rate they moved by under 2% with three
# CPU burners beside the bed. For the "slow" and "debug" commands node2's link is held to a quarter.
PAIRWISE_LINK_MBIT = 400
PAIRWISE_RATE_MBIT = 100  # node2's link in ``four_node_pairwise``: far below what a healthy pair carries


class PairwiseCommand:
    """One command of ``four_node_pairwise``: how it ended, its run folder, and every path under the
    nodes' scratch roots right after it (the bed itself is gone by the time a test reads it)."""

    def __init__(self, argv: list[str], result: subprocess.CompletedProcess, raw: Path | None,
                 scratch_paths: list[Path], scratch_dirs: set[Path]) -> None:
        self.argv = argv
        self.result = result
        self.raw = raw  # reports/raw-<name>-... this command made (None when it made none)
        self.scratch_paths = scratch_paths  # every file and folder under the scratch roots, sorted
        self.scratch_dirs = scratch_dirs  # those of them that are folders


class PairwiseBed:
    """The 4-node bed's pairwise commands, in the order they ran (see ``four_node_pairwise``)."""

    def __init__(self, names: list[str], slow: str, reports: Path, scratch_roots: list[Path],
                 shared_root: Path) -> None:
        self.names = names  # the nodes' names, node0 first
        self.slow = slow  # the node whose link was held to PAIRWISE_RATE_MBIT for the last two commands
        self.reports = reports
        self.scratch_roots = scratch_roots  # each node's own local_scratch, seen from this machine
        self.shared_root = shared_root
        self.commands: dict[str, PairwiseCommand] = {}


@pytest.fixture(scope="session")
def four_node_pairwise(tmp_path_factory):
    """The suite's pairwise hunts on the 4-node SSH bed (gloo, one rank a node, every link held to
    ``PAIRWISE_LINK_MBIT``), three commands in this order: ``clustereval pairwise`` on the even bed
    (``commands["even"]``), then with node2's link held to ``PAIRWISE_RATE_MBIT`` both ways
    ``clustereval pairwise`` (``"slow"``) and
    ``clustereval debug nccl --sample-seconds 0.3`` (``"debug"``), each with the commands' default
    payload and samples. Read by the tests of the exit status, the fleet verdicts, the debug
    workflow's ranking and the scratch each command leaves.

    Each command is a whole hunt (six torchrun pairs in three rounds); the tests read different
    things of the same commands, so they run once per session. The bed is closed once they ran:
    the reports, and a listing of every node's scratch after each command, stay."""
    from tests.testbed import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    reports = tmp_path_factory.mktemp("pairwise") / "reports"
    cluster = NetnsCluster.create(4)
    try:
        config = cluster.write_config(rdzv_port=20000 + cluster.ssh_port % 9000, cpu_ranks_per_node=1,
                                      reports_dir=str(reports))
        roots = [cluster.node_scratch_dir(i) for i in range(4)]
        bed = PairwiseBed([n.name for n in cluster.nodes], cluster.nodes[2].name, reports, roots, cluster.shared_dir)
        for i in range(4):
            cluster.shape(i, rate_mbit=PAIRWISE_LINK_MBIT)
        for key, argv in (("even", ["pairwise"]), ("slow", ["pairwise"]),
                          ("debug", ["debug", "nccl", "--sample-seconds", "0.3"])):
            if key == "slow":
                cluster.shape(2, rate_mbit=PAIRWISE_RATE_MBIT)
            before = set(reports.glob("raw-*")) if reports.exists() else set()
            result = run_cli(*argv, "--config", str(config), cwd=cluster.workdir, timeout=600)
            made = sorted(set(reports.glob("raw-*")) - before) if reports.exists() else []
            paths = sorted(p for root in [*roots, cluster.shared_dir] for p in root.rglob("*"))
            bed.commands[key] = PairwiseCommand(argv, result, made[0] if made else None, paths,
                                                {p for p in paths if p.is_dir()})
    finally:
        cluster.close()
    return bed

