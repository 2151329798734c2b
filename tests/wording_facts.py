"""Facts of every shape a real run records, for every Gap kind the report words.

``CATALOG[kind]`` maps each fact of that kind to the values a run can give it, the first one the
usual case; ``OPTIONAL`` names the facts a phase may leave out. ``cases(kind)`` yields the usual
case, each value of each fact in turn, and the case without the optional facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# node names as transports give them: short hostnames, names with digits, IP addresses, FQDNs
NODES = ["vm", "gpu-012", "node3", "10.0.0.12", "ip-10-0-3-17.ec2.internal", "h200x8-a1b2"]
LABELS = ["vm(node0)", "gpu-012(node11)", "10.0.0.12(node3)"]
# error lines as tools and our transports print them: numbers, colons, paths, quotes, parentheses
ERRORS = [
    "connection refused",
    "RuntimeError: Connection reset by peer: 10.0.0.12:29500 (errno 104)",
    "exit status 137 after 3600 s",
    "error: [Errno 98] Address already in use",
    'File "/opt/eval/lib/python3.12/site-packages/torch/distributed/run.py", line 905, in main',
    "CUDA error: an illegal memory access was encountered (700) at step 12",
    "timed out after 61 s",
    "fio: pid=4012, err=28/file:io_u.c:1845, func=io_u error, error=No space left on device",
    "dd: error writing '/mnt/shared/x': Disk quota exceeded; 4096+0 records in, 12 records out",
    "Killed",
    "1",
    "0 ranks answered of 16",
]
PATHS = ["/tmp", "/mnt/shared data/run 1", "/lustre/fs01/scratch/user-7", "/", "/dev/shm"]
LOGS = ["raw-vm-2026-12-03-1013Z/network/connectivity-0.log", "raw-h200-2026-12-03-1013Z/preflight/gloo-gpu-012.log"]
RCS = [1, 0, 2, 137, -9, 255]
SECONDS = [61.0, 0.0, 0.4, 1.0, 3600.0, 59.6]
MESSAGES = [  # ClusterEvalError messages (errors.py, transports)
    "node2 (10.0.0.12:7878) refused the connection",
    "ssh to gpu-012 timed out after 30 s",
    "`hostname` exited with status 255 on 10.0.0.12",
    "kubectl exec into pod eval-0 failed: error: unable to upgrade connection: container not found (\"eval\")",
    "node3: Connection closed by 10.0.0.12 port 22",
]
HINTS = ["", "check the node answers (`ssh node3 true`)", "set [ssh] port in cluster.toml"]
TORCH = ["2.9.1+cu130", "2.13.0+cpu", "", "2.10.0"]
PROCS = [["pid 4012 (python3) on gpu0, 1024 MiB"], ["pid 4012 (python3) on gpu0", "pid 77 (Xorg) on gpu7"], []]
GPU = [0, 1, 7, 15]
PLANS = [{}, {"is_host_node": True}, {"local_addrs": {"vm": "10.0.0.12"}}, {"socket_ifnames": {"vm": "eth0"}}]
DIAGNOSES = ["", "other", "not-joined", "hostname-loopback", "port-in-use", "no-route", "interface", "timeout"]


def _pair_list(errors: list[str]) -> list[list[list[str]]]:
    return [[[NODES[0], errors[0]]], [[n, e] for n, e in zip(NODES, errors, strict=False)]]


CATALOG: dict[str, dict[str, list[Any]]] = {
    # ---- every phase ----
    "node.lost": {"label": LABELS, "title": ["Hardware health", "the connectivity test", "Storage"],
                  "address": ["10.0.0.12", "", "gpu-012:7878"], "why": ["", *ERRORS[:4], "lost"]},
    "node.error": {"label": LABELS, "title": ["Hardware health", "the host packages check"],
                   "address": ["10.0.0.12", ""], "during": ["`dcgmi diag -r 2`", "the package probe and installs",
                                                           "`fio`"],
                   "lost": [False, True], "error_id": ["ssh-unreachable", "command-timeout", "transport"],
                   "message": MESSAGES, "hint": HINTS},
    "phase.error": {"title": ["Hardware health (dcgmi diag -r 2)", "Storage", "Intra-node all-reduce"],
                    "message": MESSAGES + ERRORS[:3], "hint": HINTS},
    "phase.defect": {"title": ["Storage", "GPU performance"], "error": ["KeyError: 'rc'", "ValueError: could not "
                     "convert string to float: '12.5 GiB' (line 3)", "ZeroDivisionError: division by zero"],
                     "log": ["raw-vm-2026-12-03-1013Z/errors/storage.txt"]},
    "gpu.none": {"nodes": [[["vm", "nvidia-smi is not installed"]], [["vm", "no NVIDIA driver"]],
                           [[n, "nvidia-smi is not installed"] for n in NODES],
                           [["gpu-012", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                        "driver (exit 9)"]]]},
    "gpu.not-visible": {"what": ["the GPU performance benchmarks", "the hardware health check"],
                        "nodes": [[["vm", ""]], [["vm", "no NVIDIA driver tools installed"]],
                                  [[n, ""] for n in NODES], [], [["gpu-012", "`/dev/nvidia0` not passed into the "
                                                                             "container (12 devices)"]]]},
    # ---- setup ----
    "preflight.missing": {"need": ["a node list: `nodes` in cluster.toml (1 line per node)", "local_scratch"], "hint": HINTS},
    "preflight.allocation": {"detail": ["the allocation 4012 holds 2 of the 4 nodes asked for",
                                        "no Slurm allocation: SLURM_JOB_ID is not set"]},
    "preflight.unreachable": {"message": MESSAGES, "error_id": ["ssh-unreachable"], "hint": HINTS},
    "preflight.probe-failed": {"message": MESSAGES, "error_id": ["command-timeout"], "hint": HINTS},
    "preflight.ssh-port-refused": {"port": [7878, 22, 2222]},
    "preflight.path-unusable": {"path": PATHS, "key": ["local_scratch", "shared_paths"],
                                "problem": ["does not exist", "is not writable by the eval user",
                                            "is on a 0 B filesystem"]},
    "preflight.no-python": {"python": ["python3", "/opt/conda/envs/eval/bin/python"],
                            "nodes": _pair_list(["python3: not found", "exit status 127", "No such file or directory: "
                                                 "'/opt/conda/envs/eval/bin/python' (errno 2)"])},
    "preflight.rdzv-port-unavailable": {"port": [29500, 6000], "why": ["error: [Errno 98] Address already in use",
                                                                      "[Errno 13] Permission denied", "timed out"]},
    "preflight.tcp-blocked": {"detail": ["connect to 10.0.0.12:29500 timed out after 5 s", "[Errno 111] Connection "
                                         "refused", "No route to host (113)"], "port": [29500, 6000],
                              "endpoint": ["10.0.0.12", "gpu-012"]},
    "preflight.tcp-unreached": {"port": [29503, 6000], "address": ["10.0.0.12", "gpu-012"],
                                "sources": [["gpu-013"], NODES[1:], ["10.0.0.13", "10.0.0.14"]],
                                "detail": ["timed out", "Connection refused", "No route to host"],
                                "first_port": [29500], "last_port": [29504, 30524]},
    "preflight.peer-ssh": {"first": NODES[:3], "nodes": [["gpu-013"], NODES[1:], ["10.0.0.13", "10.0.0.14"]]},
    "preflight.gloo-no-torch": {"python": ["python3", "/opt/conda/envs/eval/bin/python"],
                                "nodes": _pair_list(["No module named 'torch'", "ImportError: libcudart.so.12: "
                                                     "cannot open shared object file: No such file or directory",
                                                     "exit status 1"])},
    "preflight.gloo-failed": {"nodes": [2, 1, 4, 16], "detail": ERRORS[:7], "diagnosis_text": ["", "the hostname "
                              "resolves to 127.0.1.1 on gpu-012", "port 29500 is in use"], "diagnosis": DIAGNOSES,
                              "applied": PLANS, "log": LOGS},
    "evalpython.configured": {"torch": TORCH},
    # the facts ``phases/evalpython.refusal_facts`` takes from ``phases/venvcache._CHECK``'s refusal line
    # (tests/test_venv_wordings.py renders the lines of real refusals on this machine)
    "evalpython.cache-refused": {"label": LABELS, "folder": PATHS,
                                 "what": ["copy", "user", "cache", "inside", "interpreter"],
                                 "problem": ["owned by uid 65534, not by the eval user (uid 0)",
                                             "writable by group or others (mode 775)",
                                             "a symbolic link, not a plain folder", "cannot be read",
                                             "owned by uid 1000, neither by the eval user (uid 0) nor by root"]},
    "evalpython.fallback": {"torch": TORCH[:2], "index_tag": ["cu130", "cpu", ""], "refused_newest": ["", "2.10.0"],
                            "refused_url": ["https://download.pytorch.org/whl/cu130"],
                            "refused_why": ["No matching distribution found for torch==2.10.0",
                                            "ERROR: Could not install packages due to an OSError: [Errno 28] No "
                                            "space left on device: '/home/user/.cache/pip/http-v2/a/b/c'"]},
    "evalpython.node-python": {"torch": TORCH, "index_tag": ["cu130", "cpu", ""], "refused_newest": ["", "2.10.0"],
                               "refused_url": ["https://download.pytorch.org/whl/cu130"],
                               "refused_why": ["No matching distribution found for torch==2.10.0 (from versions: "
                                               "2.8.0, 2.9.1)"]},
    "evalpython.no-torch": {"mode": ["configured", "node-python", "venv", ""],
                            "why": ["No module named 'torch'", "/opt/venv/bin/python: not found (exit 127)",
                                    "ImportError: libcudart.so.13: cannot open shared object file (errno 2)"],
                            "index_tag": ["cu130", "cpu", ""]},
    "evalpython.newest-refused": {"torch": ["2.9.1+cu130"], "index_tag": ["cu130", "cpu"],
                                  "index_kind": ["pytorch", "default"], "refused_newest": ["2.10.0"],
                                  "refused_url": ["https://download.pytorch.org/whl/cu130"],
                                  "refused_why": ["ERROR: No matching distribution found for torch==2.10.0",
                                                  "HTTP error 403 while getting https://download.pytorch.org/whl/"
                                                  "cu130/torch-2.10.0-cp312-cp312-linux_x86_64.whl (from 12 links)"]},
    "evalpython.not-newest": {"torch": ["2.13.0+cpu", "2.9.1+cu130", "2.9.1"], "index_tag": ["cu130", "cpu", ""],
                              "index_kind": ["default", "pytorch"], "newest": ["2.15.0", "2.10.0"],
                              "spec": [["torch"], ["torch==2.9.1"]]},
    "packages.missing": {"binary": ["fio", "ibstat", "rdma", "dcgmi", "pdsh"],
                         # a package named like a tool only beside that tool (the text links it first)
                         "apt": ["infiniband-diags", "fio", "iproute2"], "dnf": ["iproute", "fio"],
                         "enabled": [True, False]},
    "environment.driver-silent": {"label": NODES, "rc": RCS, "error": ["", *ERRORS[:4],
                                  "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]},
    "environment.required-missing": {"label": NODES, "tools": [["lscpu"], ["lscpu", "findmnt", "df"]]},
    # ---- compute ----
    "health.cpu-stand-ins": {},
    "health.no-driver": {},
    "health.dcgm-missing": {"os": ["ubuntu:24.04:debian", "rocky:9.4:rhel centos fedora", "", "sles:15.5:suse"],
                            "cuda": ["13", "12", ""], "num_gpupass_nodes": [0, 1, 2, 16]},
    "health.hostengine-unreachable": {"output": ["", "Error: unable to establish a connection to the specified host: "
                                                 "localhost", *ERRORS[:3]]},
    "health.diag-incomplete": {"level": [2, 1, 3], "output": ["", *ERRORS[:4]], "timeout_min": [0, 15.0, 1.5, 60]},
    "matmul.node-without-gpu": {"error": ERRORS[:4] + ["nvidia-smi is not installed"]},
    "matmul.interrupted": {},
    "matmul.busy": {"processes": PROCS[:2], "gpu": [None, 0, 7]},
    "matmul.load-failed": {"gpu": GPU, "load_gpu": GPU, "load_error": ERRORS[:4]},
    "matmul.search-not-started": {"gpu": GPU, "load_gpu": GPU, "load_error": ERRORS[:4]},
    "matmul.search-failed": {"gpu": GPU, "timed_out": [False, True], "error": ERRORS},
    "matmul.no-msmf-shape": {"gpu": GPU, "pinned": [  # the reasons analysis/matmul.py and steady.py give
        [], [[8192, 8192, 8192, "held 612 W against the 700 W limit (below 90% of it)"]],
        [[4096, 4096, 4096, "SM (streaming multiprocessor) clock stayed at the 1980 MHz boost clock"],
         [16384, 8192, 4096, "its rate moved +3.1% from the first to the second half of its 30 s window (beyond "
                             "±1.0%)"],
         [12288, 8192, 16384, "its clock was still changing after the 120 s soak limit (more than 1.0% between "
                              "5 s spans)"], [2048, 2048, 2048, "no power telemetry"]]],
                             "siblings": [True, False]},
    "matmul.wrong-python": {"why": ["the worker reported /usr/bin/python3 (torch 2.1.0), not the eval Python",
                                    "sys.executable is /opt/conda/bin/python3.10"]},
    "matmul.idle-siblings-twice": {"label": ["vm(node0):gpu3", "gpu-012(node11):gpu0"],
                                   "idle": [[1], [1, 2, 3, 4, 5, 6, 7]]},
    "matmul.gpu-failed-twice": {"gpu": GPU, "error": ERRORS},
    "lemon.busy": {"processes": PROCS[:2]},
    "lemon.gpu-dead": {"gpu": GPU, "node": NODES, "error": ERRORS},
    "gpupass.busy": {"processes": PROCS[:2]},
    "gpupass.worker-failed": {"error": ["", *ERRORS]},
    "gpupass.gpu-error": {"gpu": GPU, "node": NODES, "step": ["hbm", "pcie-solo", "memtest", "vote 2"], "error": ERRORS},
    "gpupass.nvbandwidth-failed": {"rc": RCS, "error": ["", *ERRORS]},
    # ---- network ----
    "network.launch-failed": {
        "job": ["connectivity", "allreduce-inter", "pairwise"],
        "nodes": [["vm"], NODES[:2], NODES],
        "diagnosis": DIAGNOSES, "diagnosis_text": ["", "the hostname resolves to 127.0.1.1 on gpu-012",
                                                   "2 of 4 nodes never joined the rendezvous"],
        "error": ["", *ERRORS[:4]],
        "exits": [[["vm", "failed", 1, 1.0, ""]], [], [["gpu-012", "failed", 137, 61.0, "killed: out of memory"]],
                  [["vm", "unreachable", None, 0.0, "ssh: connect to host 10.0.0.12 port 22: Connection refused"]],
                  [["vm", "timeout", None, 3600.0, ""], ["gpu-012", "timeout", None, 0.4, "no output for 600 s"]],
                  [[n, "failed", rc, s, ""] for n, rc, s in zip(NODES, RCS, SECONDS, strict=False)]],
        "log": ["", *LOGS], "not_joined": [[], ["gpu-012"], NODES[1:]], "applied": PLANS},
    "network.wrong-interpreter": {"problem": ["gpu-012 ran /usr/bin/python3 (torch 2.1.0), not "
                                              "/opt/venv/bin/python (torch 2.9.1)", "rank 3 reported python 3.10.12"]},
    "network.wrong-sum": {"ranks": [1, 2, 16]},
    "network.intra-sweep-failed": {"error": ERRORS, "diagnosis": DIAGNOSES, "applied": PLANS},
    "network.inter-sweep-failed": {"error": ERRORS},
    "pairwise.pair-failed": {"a": NODES[:2], "b": NODES[2:4], "error": ERRORS},
    "pairwise.not-judged": {"why": ["none of the 6 pairs completed", "only 1 of 6 pairs completed",
                                    "only 0 of 1 pairs completed"], "not_joined": [[], ["gpu-012"], NODES[1:]]},
    "pairwise.round-ungated": {
        "round": [2, 1, 13], "pairs": [[f"{NODES[0]} + {NODES[1]}", f"{NODES[2]} + {NODES[3]}"],
                                       [f"{a} + {b}" for a, b in zip(NODES[::2], NODES[1::2], strict=True)]],
        "ungated": [[f"{NODES[2]} + {NODES[3]}"], [f"{NODES[2]} + {NODES[3]}", f"{NODES[4]} + {NODES[5]}"]],
        "missing": [[f"{NODES[0]} + {NODES[1]}"], [], [f"{NODES[0]} + {NODES[1]}", f"{NODES[4]} + {NODES[5]}"]],
        "why": ["gate 1 of the round was not passed together: Timeout (120000ms) reached in wait", "",
                "the round's gate at 10.0.0.12:29500 could not be reached: connection refused"],
        "timeout_s": [120, 0.5, 3600]},
    # ---- storage ----
    "storage.fio-missing": {},
    "storage.path-unreadable": {"path": PATHS, "output": ["", "df: /mnt/x: No such file or directory",
                                                          "df: /lustre: Transport endpoint is not connected (107)"]},
    "storage.local-in-memory": {"path": PATHS, "fstype": ["tmpfs", "ramfs"]},
    "storage.layout-unreadable": {"path": PATHS, "tool": ["Lustre", "BeeGFS", "GPFS"],
                                  "errors": [["`lfs getstripe`: sh: 1: lfs: not found"],
                                             ["`lfs getstripe`: exit 2", "`lfs df`: Permission denied (13)"],
                                             ["`mmlsfs all`: exit 127"]]},
    "storage.scan-refused": {"path": PATHS, "message": ["node3: /mnt/x has room for 3.2 GiB, and the concurrent write (2 nodes x 16.0 GiB) needs 33.0 GiB; nothing was written", "vm: cannot read how much room /mnt/x has: df: /mnt/x: No such file or directory",
                                                        "`/mnt/x` is not on the filesystem cluster.toml names",
                                                        *MESSAGES[:2]], "hint": HINTS},
    "storage.fio-run-failed": {"path": PATHS, "size": [16384, 1048576, 1073741824], "rw": ["read", "write"],
                               "error": ERRORS},
    "storage.concurrent-refused": {"path": PATHS, "message": ["node3: /mnt/x has room for 3.2 GiB, and the concurrent write (2 nodes x 16.0 GiB) needs 33.0 GiB; nothing was written", "vm: cannot read how much room /mnt/x has: df: /mnt/x: No such file or directory",
                                                              *MESSAGES[:2]], "hint": HINTS},
    "storage.concurrent-node-failed": {"path": PATHS, "rc": RCS, "output": ["", *ERRORS[:4]], "error": ERRORS},
    "storage.no-shared": {"num_nodes": [2, 1, 16], "local_figures": [True, False]},
    "debugfs.no-local": {"note": ["local_scratch is not set in cluster.toml", "`/tmp` is a tmpfs (memory, not a "
                                  "disk)", "the local folder has 0 B free of 12 GiB"]},
    "debugfs.fio-missing": {"path": PATHS},
    "debugfs.scan-refused": {"path": PATHS, "message": ["node3: /mnt/x has room for 3.2 GiB, and the concurrent write (2 nodes x 16.0 GiB) needs 33.0 GiB; nothing was written", "vm: cannot read how much room /mnt/x has: df: /mnt/x: No such file or directory",
                                                        *MESSAGES[:2]], "hint": HINTS},
}

OPTIONAL: dict[str, tuple[str, ...]] = {
    "node.lost": ("why", "address"),
    "node.error": ("hint", "lost", "address"),
    "phase.error": ("hint",),
    "gpupass.worker-failed": ("error",),
    "gpupass.gpu-error": ("error",),
    "gpupass.nvbandwidth-failed": ("rc", "error"),
    "network.launch-failed": ("diagnosis_text", "error", "exits", "log", "not_joined", "applied", "diagnosis"),
    "network.intra-sweep-failed": ("diagnosis", "applied"),
    "pairwise.not-judged": ("not_joined",),
    "pairwise.round-ungated": ("why", "timeout_s"),
    "preflight.missing": ("hint",),
    "preflight.unreachable": ("hint",),
    "preflight.gloo-failed": ("diagnosis_text", "diagnosis", "applied"),
    "health.dcgm-missing": ("os", "cuda", "num_gpupass_nodes"),
    "health.hostengine-unreachable": ("output",),
    "health.diag-incomplete": ("output", "timeout_min"),
    "matmul.busy": ("gpu",),
    "matmul.search-failed": ("timed_out",),
    "matmul.no-msmf-shape": ("pinned", "siblings"),
    "storage.path-unreadable": ("output",),
    "storage.concurrent-node-failed": ("rc", "output"),
    "storage.scan-refused": ("hint",),
    "storage.concurrent-refused": ("hint",),
    "debugfs.scan-refused": ("hint",),
    "storage.no-shared": ("num_nodes", "local_figures"),
    "evalpython.no-torch": ("mode", "index_tag"),
    "evalpython.fallback": ("refused_newest", "refused_url", "refused_why"),
    "evalpython.node-python": ("refused_newest", "refused_url", "refused_why"),
    "gpu.not-visible": ("nodes",),
}
# facts that go together: a concurrent write's node failed either with dd's status or with an error
EXCLUSIVE = {"storage.concurrent-node-failed": ("rc", "output")}


def cases(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(what this case varies, its facts) for ``kind``."""
    spec = CATALOG[kind]
    base = {name: values[0] for name, values in spec.items()}
    yield "usual", dict(base)
    for name, values in spec.items():
        for i, value in enumerate(values[1:], 1):
            yield f"{name}[{i}]", {**base, name: value}
    optional = OPTIONAL.get(kind, ())
    if optional:
        yield "without optional facts", {k: v for k, v in base.items() if k not in optional}
    if kind in EXCLUSIVE:
        yield "without " + "/".join(EXCLUSIVE[kind]), {k: v for k, v in base.items() if k not in EXCLUSIVE[kind]}


# ---- fleet-relative verdicts (``report/fleet.py``): the peer groups runs judge ----------------------------
# every kind of figure, peer counts from too few to a large fleet, spreads from a tight pack of GPUs to the
# 4-node smoke run over SSH whose concurrent writes scattered so widely that the old statistics printed
# "fell 394.1% short" (62%), one figure a unit or repeats, a unit slower than its peers or none, and the
# confidences an operator sets; ``fleet_cases`` varies one fact at a time from the first values, then the
# combinations runs met
FLEET: dict[str, list[Any]] = {
    "kind": ["msmf", "lemon", "hbm-copy", "pcie-h2d", "pcie-d2h", "pairwise", "busbw-intra", "concurrent-write"],
    "num_units": [8, 4, 3, 64, 1024],
    "spread": [0.01, 0.001, 0.05, 0.3, 0.62],
    "repeats": [1, 3, 7],
    "group": ["NVIDIA H200, driver 570.86", "", "writing to `/mnt/shared data/run 1`"],
    "slow_frac": [0.0, 0.5, 0.98],
    "confidence": [0.99, 0.95, 0.999],
}
FLEET_COMBOS: list[dict[str, Any]] = [
    {"kind": "concurrent-write", "num_units": 4, "spread": 0.62, "repeats": 1, "group": "writing to `/data`"},
    {"kind": "concurrent-write", "num_units": 4, "spread": 0.3, "repeats": 1, "slow_frac": 0.98},
    {"kind": "busbw-intra", "num_units": 16, "spread": 0.05, "repeats": 1, "group": ""},
    {"kind": "pairwise", "num_units": 4, "spread": 0.62, "repeats": 5, "group": "", "slow_frac": 0.98},
    {"kind": "msmf", "num_units": 1024, "spread": 0.01, "repeats": 7, "slow_frac": 0.5},
    {"kind": "lemon", "num_units": 64, "spread": 0.3, "repeats": 3},
]


def fleet_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """(what this case varies, the facts of one peer group) for the fleet-relative sentences."""
    base = {name: values[0] for name, values in FLEET.items()}
    yield "usual", dict(base)
    for name, values in FLEET.items():
        for i, value in enumerate(values[1:], 1):
            yield f"{name}[{i}]", {**base, name: value}
    for i, combo in enumerate(FLEET_COMBOS):
        yield f"combo[{i}]", {**base, **combo}
