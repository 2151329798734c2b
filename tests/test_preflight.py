"""The preflight gate: the checklist, the node probes, and the real thing on a namespace cluster."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

from clustereval.analysis.rendezvous import plan_rendezvous
from clustereval.config import Config, HostEntry, load_config
from clustereval.phases.base import RunContext
from clustereval.phases.preflight import PreflightPhase, checklist
from clustereval.phases.torchrun import torchrun_argv
from clustereval.probes.preflight import (
    final_nccl_env,
    parse_env_dump,
    parse_node_probe,
)
from clustereval.probes.torchrun import PROBE_SNIPPET
from clustereval.records import dumps, loads
from clustereval.records.network import RendezvousProbe
from clustereval.records.run import PreflightRecord
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.factory import make_transport, nodes_of
from clustereval.transport.local import LocalTransport
from tests.conftest import run_cli

# ---- pure parts --------------------------------------------------------------------------------


def test_env_dump_keeps_only_the_nccl_family():
    text = "PATH=/bin\nNCCL_IB_HCA=mlx5\nFI_PROVIDER=efa\nAWS_OFI_NCCL_VERSION=1.9\nMY_NCCL_X=1\nNCCL_SOCKET_IFNAME==eth0\n"
    assert parse_env_dump(text) == {"NCCL_IB_HCA": "mlx5", "FI_PROVIDER": "efa", "AWS_OFI_NCCL_VERSION": "1.9",
                                    "NCCL_SOCKET_IFNAME": "=eth0"}


def test_final_env_keeps_platform_values_and_presets_nvls_only_when_unset():
    env, source = final_nccl_env({"NCCL_NVLS_ENABLE": "0", "NCCL_NET_PLUGIN": "ofi"}, [])
    assert env == {"NCCL_NVLS_ENABLE": "0", "NCCL_NET_PLUGIN": "ofi"} and set(source.values()) == {"platform"}
    env, source = final_nccl_env({"NCCL_IB_HCA": "mlx5"}, [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_DEBUG", "WARN")])
    assert env == {"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "WARN", "NCCL_NVLS_ENABLE": "2"}
    assert source == {"NCCL_IB_HCA": "cluster.toml", "NCCL_DEBUG": "cluster.toml",
                      "NCCL_NVLS_ENABLE": "clustereval default"}


def test_node_probe_output_is_split_into_its_sections():
    text = ("@@gpus\nGPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n@@rc 0\n"
            "@@paths\n/data\n"
            '@@facts\n{"hostname": "gpu-a", "resolves": "127.0.1.1", "matches_endpoint": false, "torch": "2.13.0"}\n'
            "@@rc 0\n@@env\nHOME=/root\nNCCL_NVLS_ENABLE=0\n@@rc 0\n")
    probe = parse_node_probe(text)
    assert probe.gpus == 2 and probe.missing_paths == ["/data"] and probe.env == {"NCCL_NVLS_ENABLE": "0"}
    assert probe.facts is not None and probe.facts.hostname_is_loopback and probe.facts.torch == "2.13.0"
    missing = parse_node_probe("@@gpus\nsh: 1: nvidia-smi: not found\n@@rc 127\n@@paths\n")
    assert missing.gpus == 0 and missing.gpu_note == "nvidia-smi is not installed" and missing.facts is None


def _rdzv_probe(node: Node, resolves: list[str], matches: bool, names: dict | None = None) -> RendezvousProbe:
    return RendezvousProbe(node=node.name, hostname=node.name, hostname_addrs=resolves, route_addr=node.address,
                           matches_endpoint=matches, route_ifname="eth0", peer_names=names or {})


def test_rendezvous_plan_fixes_loopback_hostnames(tmp_path):
    nodes = [Node("a", "10.0.0.1", 0), Node("b", "10.0.0.2", 1), Node("c", "10.0.0.3", 2)]
    known = {n.name: [n.address] for n in nodes}
    fine = [_rdzv_probe(n, [n.address], n.index == 0, known) for n in nodes]
    plan = plan_rendezvous(fine, "10.0.0.1", {n.name: n.address for n in nodes})
    assert not plan.reasons and not plan.local_addrs and not plan.is_host_node
    assert plan.socket_ifnames == {"a": "eth0", "b": "eth0", "c": "eth0"}  # from each node's route to the endpoint
    store = RunStore.create(tmp_path / "reports", "t")
    ctx = RunContext(config=Config(name="t"), transport=LocalTransport(), nodes=nodes, store=store, eval_python="py")
    argv = torchrun_argv(ctx, nodes[1], module="m", args=[], num_nodes=3, nproc=1, endpoint="10.0.0.1:29500",
                         run_id="x", plan=plan, rdzv_timeout_s=60, timeout_s=90, log_dir="/l")
    assert "--local_addr" not in argv and argv[argv.index("--rdzv_conf") + 1] == "timeout=60,join_timeout=60"
    broken = [_rdzv_probe(nodes[0], ["127.0.1.1"], False, known), fine[1],
              _rdzv_probe(nodes[2], [], False, known)]
    plan = plan_rendezvous(broken, "10.0.0.1", {n.name: n.address for n in nodes})
    assert plan.is_host_node == "a" and plan.local_addrs == {n.name: n.address for n in nodes}
    first = torchrun_argv(ctx, nodes[0], module="m", args=[], num_nodes=3, nproc=1, endpoint="10.0.0.1:29500",
                          run_id="x", plan=plan, rdzv_timeout_s=60, timeout_s=90, log_dir="/l")
    assert first[first.index("--rdzv_conf") + 1].endswith(",is_host=1")
    assert first[first.index("--local_addr") + 1] == "10.0.0.1"
    assert len(plan.reasons) == 3 and "127.0.1.1" in plan.reasons[1]
    # a peer that cannot resolve b's hostname needs the fix too (peers known by IP only)
    blind = [_rdzv_probe(n, [n.address], n.index == 0, {m.name: [m.address] if m is n else [] for m in nodes})
             for n in nodes]
    plan = plan_rendezvous(blind, "10.0.0.1", {n.name: n.address for n in nodes})
    assert plan.is_host_node == "a" and len(plan.local_addrs) == 3
    assert any("cannot resolve the hostname of b" in r for r in plan.reasons)


def _probe_answer(*python_flags: str) -> tuple[dict, set[str]]:
    """The rendezvous probe's JSON on this machine, and every module its interpreter looked for."""
    proc = subprocess.run([sys.executable, *python_flags, "-X", "importtime", "-c", PROBE_SNIPPET, "127.0.0.1", "29500",
                           "127.0.0.1", "192.0.2.1", socket.gethostname()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")}
    return json.loads(proc.stdout.strip().splitlines()[-1]), imported


def test_the_rendezvous_probe_gives_torchs_own_answers_and_imports_torch_only_for_a_gpu_build():
    import torch
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    answer, imported = _probe_answer()
    peers = ["127.0.0.1", "192.0.2.1", socket.gethostname()]
    assert answer["error"] == ""
    assert answer["matches_endpoint"] is _matches_machine_hostname("127.0.0.1")
    assert answer["matches"] == {p: _matches_machine_hostname(p) for p in peers}
    assert answer["num_gpus"] == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    # a CPU build cannot see a GPU: its `import torch` (seconds on every node, every run) is skipped
    gpu_build = bool(torch.version.cuda or getattr(torch.version, "hip", None))
    assert ("torch" in imported) == gpu_build, sorted(imported)


def test_the_rendezvous_probe_without_torch_says_so():
    answer, _ = _probe_answer("-S")  # no site-packages: torch cannot be found
    assert answer["num_gpus"] == 0 and answer["matches"] == {} and answer["matches_endpoint"] is None
    assert "No module named 'torch'" in answer["error"], answer


def test_missing_items_stop_before_any_node_is_contacted(tmp_path):
    # 10.255.255.1 would hang a probe: nothing may be contacted when the checklist is incomplete
    (tmp_path / "hostfile").write_text("10.255.255.1\n10.255.255.2\n")
    (tmp_path / "cluster.toml").write_text('access = "ssh"\nnodes = ["a", "b"]\nhostfile = "hostfile"\n')
    t0 = time.monotonic()
    proc = run_cli("preflight", "--config", str(tmp_path / "cluster.toml"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "missing before the eval can start:" in proc.stdout
    assert "  - Local disk path + shared-FS path: list the shared mounts" in proc.stdout
    assert "Reachability" not in proc.stdout and time.monotonic() - t0 < 20


def test_checklist_rows_follow_the_runbook():
    cfg = Config(name="x", access="ssh", nodes=("a", "b"), hostfile="hf",
                 hosts=(HostEntry("10.0.0.1"), HostEntry("10.0.0.2")), shared_paths=("/data",), gpus_per_node=8,
                 given=("gpus_per_node", "shared_paths"))
    rows = {c.need: c for c in checklist(cfg, "ssh, port 7878")}
    assert list(rows) == ["How to exec on a node", "All node identities", "Hostfile (or equivalent) with peer IPs",
                          "SSH / launcher details", "GPUs per node", "Local disk path + shared-FS path",
                          "Advertised uni bandwidth / official TFLOPS"]
    assert all(c.known for c in rows.values() if c.required)
    assert rows["GPUs per node"].value == "8 (cluster.toml)"
    assert not rows["Advertised uni bandwidth / official TFLOPS"].required


def test_one_node_local_preflight_is_fast_and_round_trips(tmp_path):
    cfg = Config(name="solo", nodes=("here",), local_scratch=str(tmp_path))
    store = RunStore.create(tmp_path / "reports", "solo")
    store.save_state(RunState(name="solo", stamp="s"))
    ctx = RunContext(config=cfg, transport=LocalTransport(), nodes=[Node("here", "here")], store=store)
    t0 = time.monotonic()
    rec = PreflightPhase().run(ctx)
    assert time.monotonic() - t0 < 10
    assert rec.passed and rec.status == "ok" and [p.kind for p in rec.probes] == ["exec", "torch"]
    assert rec.final_env.get("NCCL_NVLS_ENABLE") and ctx.nccl_env == rec.final_env
    assert loads(PreflightRecord, dumps(rec)) == rec


def test_cli_preflight_on_this_machine(tmp_path):
    proc = run_cli("preflight", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Preflight checklist" in proc.stdout and "preflight passed: 1 node ready" in proc.stdout
    # its own run folder with its record, named on the console; no report
    (raw,) = (tmp_path / "reports").iterdir()
    assert raw.name.startswith("raw-") and "-preflight-" in raw.name and (raw / "preflight.record.json").exists()
    assert f"run folder: reports/{raw.name}" in proc.stderr
    assert not list((tmp_path / "reports").glob("*.md"))


# ---- the namespace cluster over SSH ------------------------------------------------------------


def test_preflight_passes_on_three_nodes_with_gloo_and_fixes_a_loopback_hostname(cluster3):
    # node0 (the rendezvous host) resolves its own hostname to 127.0.1.1: without is_host and
    # --local_addr the rendezvous would time out; preflight must detect and fix it
    cluster3.set_hostname_loopback(0)
    proc = run_cli("preflight", "--config", str(cluster3.config_path), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for node in cluster3.nodes:
        assert f"│ ssh      │ {node.name} │ ok" in out
        assert f"│ tcp      │ {node.name} │ ok" in out
        assert f"│ gloo     │ {node.name} │ ok     │ rank {node.index} of 3: all-reduce sum 6" in out
    assert f"rendezvous fix: {cluster3.nodes[0].name}: --local_addr {cluster3.nodes[0].address}" in out
    assert "is_host=1" in out and "preflight passed: 3 nodes ready" in out
    # the package shipped for the gloo check is gone again from every node's scratch: a declared
    # scratch folder other than /tmp itself is moved to its trash, never deleted
    for node in cluster3.nodes:
        scratch = cluster3.node_scratch_dir(node.index)
        left = [p for p in scratch.rglob("gloo_check.py") if "trash" not in p.relative_to(scratch).parts]
        assert left == []


def test_killed_sshd_fails_within_seconds_naming_the_node(cluster3):
    cluster3.kill_sshd(1)
    node = cluster3.nodes[1]
    t0 = time.monotonic()
    proc = run_cli("preflight", "--config", str(cluster3.config_path), timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    assert elapsed < 15, elapsed  # python start-up included; the probe itself fails at connect
    assert f"- {node.name} ({node.address}:{cluster3.ssh_port}): refused the connection." in proc.stdout
    assert "preflight failed: nothing slow was started" in proc.stderr
    assert "│ gloo" not in proc.stdout and "│ tcp" not in proc.stdout


def test_wrong_ssh_port_is_named_as_such(cluster3):
    wrong = cluster3.ssh_port + 7
    path = cluster3.write_config(cluster3.workdir / "wrong-port.toml", ssh_port=wrong)
    proc = run_cli("preflight", "--config", str(path), timeout=120)
    assert proc.returncode == 1
    assert f"Every node refused SSH on port {wrong}: the port is probably wrong." in proc.stdout


def test_rendezvous_port_in_use_is_reported_before_gloo(cluster3):
    transport = cluster3.transport()
    first = cluster3.cluster_nodes()[0]
    blocker = transport.popen(first, ["python3", "-c", "import socket, time; s = socket.socket(); "
                                      "s.bind(('', 29555)); s.listen(); print('up', flush=True); time.sleep(60)"])
    try:
        assert blocker.stdout is not None and blocker.stdout.readline().strip() == "up"
        path = cluster3.write_config(cluster3.workdir / "busy.toml", rdzv_port=29555)
        proc = run_cli("preflight", "--config", str(path), timeout=120)
    finally:
        blocker.kill()
        blocker.wait()
    assert proc.returncode == 1
    assert f"Port 29555, one of the ports the run's jobs meet at, could not be opened on {first.name}" in proc.stdout
    assert "│ gloo" not in proc.stdout


def test_nodes_without_torch_skip_gloo_with_a_gap(cluster3, tmp_path):
    """Preflight skips its gloo check on nodes whose Python has no torch, deferring it to after the eval
    Python is built; when that one has no torch either, the deferred check says so in a Gap."""
    # an interpreter that cannot see site-packages: torch is not importable with it
    wrapper = cluster3.shared_dir / "python-no-site"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    cfg = load_config(cluster3.write_config(cluster3.workdir / "notorch.toml", eval_python=str(wrapper)))
    store = RunStore.create(tmp_path / "reports", cfg.name)
    store.save_state(RunState(name=cfg.name, stamp="s"))
    ctx = RunContext(config=cfg, transport=make_transport(cfg), nodes=nodes_of(cfg), store=store)
    rec = PreflightPhase().run(ctx)
    gloo = [p for p in rec.probes if p.kind == "gloo"]
    assert len(gloo) == 3 and all(p.skipped and p.detail.startswith("deferred: ") for p in gloo)
    assert rec.gloo_deferred and rec.passed  # reachability passed; the check runs after the eval Python
    assert not [g for g in rec.gaps if g.kind.startswith("preflight.gloo")]
    # the eval Python (here the configured one) has no torch either: the deferred check says it did not run
    from clustereval.phases.evalpython import EvalPythonPhase
    from clustereval.phases.preflight import deferred_gloo

    ctx.records["preflight"] = rec
    ctx.records["evalpython"] = EvalPythonPhase().run(ctx)
    assert deferred_gloo(ctx, rec) and rec.passed and not rec.gloo_deferred
    gloo = [p for p in rec.probes if p.kind == "gloo"]
    assert len(gloo) == 3 and all(p.skipped and p.detail.startswith("not run: ") for p in gloo)
    assert any("The CPU gloo check did not run" in g.text and "No module named 'torch'" in g.text
               for g in map(say, rec.gaps))
    assert any(g.kind == "preflight.gloo-no-torch" and not g.text for g in rec.gaps)  # the record holds facts
    assert [n.hostname for n in rec.nodes] == [n.name for n in cluster3.nodes]
    assert loads(PreflightRecord, dumps(rec)) == rec


def test_run_on_this_machine_writes_the_preflight_record_and_a_report(tmp_path):
    # this machine alone; scratch under the test's folder so parallel runs in the same minute never meet
    (tmp_path / "scratch").mkdir()
    (tmp_path / "cluster.toml").write_text(f'name = "solo"\nlocal_scratch = "{tmp_path / "scratch"}"\n'
                                           "install_packages = false\n")
    proc = run_cli("run", "--profile", "quick", "--phases", "environment", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    (raw,) = (tmp_path / "reports").glob("raw-*")
    report = tmp_path / "reports" / f"{raw.name[4:]}.md"
    assert report.exists() and report.read_text().startswith("# ")
    rec = loads(PreflightRecord, (raw / "preflight.record.json").read_text())
    assert rec.passed and rec.phase == "preflight" and rec.checklist
    assert (raw / "preflight.record.json").read_text() == dumps(rec)  # round-trips byte for byte
    assert "Preflight checklist" in proc.stdout


def test_run_stops_at_the_gate_when_something_is_missing(tmp_path):
    (tmp_path / "hostfile").write_text("10.255.255.1\n10.255.255.2\n")
    (tmp_path / "cluster.toml").write_text('access = "ssh"\nnodes = ["a", "b"]\nhostfile = "hostfile"\n'
                                           f'reports_dir = "{tmp_path / "reports"}"\n')
    proc = run_cli("run", "--config", str(tmp_path / "cluster.toml"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    (raw,) = (tmp_path / "reports").glob("raw-*")
    rec = loads(PreflightRecord, (raw / "preflight.record.json").read_text())
    assert not rec.passed and rec.missing == ["Local disk path + shared-FS path"] and rec.probes == []
    assert sorted(p.name for p in raw.glob("*.record.json")) == ["preflight.record.json"]
