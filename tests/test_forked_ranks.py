"""torchrun forks each node's ranks from its own process (``--run_path --start_method fork``): the
command a node runs, and what real forked ranks printed on an H200 (``tests/fixtures/torchrun``):
a NCCL sweep, and the failure that asking CUDA before the fork makes ("Cannot re-initialize CUDA in
forked subprocess"), which ``launch`` avoids by having torchrun ask NVML instead."""

from __future__ import annotations

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.torchrun import torchrun_argv
from clustereval.probes.torchrun import parse_worker_events
from clustereval.records.network import RendezvousPlan
from clustereval.store import RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import FIXTURES


def _argv(tmp_path, package_dir: str) -> list[str]:
    node = Node("a", "10.0.0.1", 0)
    ctx = RunContext(config=Config(name="t"), transport=LocalTransport(), nodes=[node],
                     store=RunStore.create(tmp_path / "reports", "t"), eval_python="/venv/bin/python")
    return torchrun_argv(ctx, node, module="allreduce", args=["--backend", "nccl"], num_nodes=1, nproc=8,
                         endpoint="10.0.0.1:29500", run_id="x", plan=RendezvousPlan(), rdzv_timeout_s=60,
                         timeout_s=90, log_dir="/l", package_dir=package_dir)


def test_the_ranks_are_forked_from_torchrun_to_run_the_shipped_workers_file(tmp_path):
    argv = _argv(tmp_path, "/scratch/eval/pkg")
    assert argv[argv.index("/venv/bin/python"):][:4] == ["/venv/bin/python", "-u", "-m", "torch.distributed.run"]
    assert argv[-6:] == ["--run_path", "--start_method", "fork", "/scratch/eval/pkg/clustereval/workers/allreduce.py",
                         "--backend", "nccl"]
    # a node the package could not reach: each rank a new interpreter (the job fails on that node anyway)
    assert _argv(tmp_path, "")[-4:] == ["-m", "clustereval.workers.allreduce", "--backend", "nccl"]


def test_a_forked_nccl_rank_on_an_h200_reports_its_gpu_and_its_sweep():
    events = parse_worker_events((FIXTURES / "torchrun" / "h200-forked-rank-nccl-sweep.log").read_text())
    hello = [e for e in events if e["event"] == "hello"]
    assert [(e["device"], e["device_name"], e["backend"]) for e in hello] == [("cuda:0", "NVIDIA H200", "nccl")]
    rows = [e for e in events if e["event"] == "row"]
    assert rows and all(e["check_ok"] for e in rows)
    assert [e["all_ok"] for e in events if e["event"] == "done"] == [True]


def test_a_forked_rank_that_fails_prints_its_own_traceback_under_its_prefix():
    text = (FIXTURES / "torchrun" / "h200-forked-rank-cuda-poisoned.log").read_text()
    assert not [e for e in parse_worker_events(text) if e["event"] in ("row", "done")]
    # the worker's run_main printed it, in the rank's own output, before torchrun's summary
    own = [line for line in text.splitlines() if line.startswith("[gpu:0]:")]
    assert own[0] == "[gpu:0]:Traceback (most recent call last):"
    assert own[-1].startswith("[gpu:0]:RuntimeError: Cannot re-initialize CUDA in forked subprocess")
    assert text.index(own[-1]) < text.index("ChildFailedError")


def test_a_worker_line_reaches_its_log_in_one_write(monkeypatch):
    """torchrun's tee reads a rank's log file while it grows: a line written as text, then newline,
    can be read in two pieces, each printed with the rank's prefix, and the event is lost."""
    import io
    import json

    from clustereval.workers import distcommon

    class Writes(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return super().write(text)

    out = Writes()
    monkeypatch.setattr("sys.stdout", out)
    distcommon.emit("hello", rank=3, host="n1")
    (line,) = out.calls
    assert line.endswith("\n") and json.loads(line) == {"event": "hello", "rank": 3, "host": "n1"}
