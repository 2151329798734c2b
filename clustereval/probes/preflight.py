"""Parsers for the preflight's node probes: the NCCL environment dump, ``nvidia-smi -L``, and the
per-node rendezvous facts. Pure: text in, values out."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# The seed's dump: env | grep -E '^NCCL_|^FI_|^AWS_OFI'
NCCL_ENV_PREFIXES = ("NCCL_", "FI_", "AWS_OFI")
NVLS_VAR = "NCCL_NVLS_ENABLE"
NVLS_DEFAULT = "2"  # preset only when nothing else sets it

ENV_ARGV = ["env"]
GPU_LIST_ARGV = ["nvidia-smi", "-L"]


def parse_env_dump(text: str) -> dict[str, str]:
    """``NCCL_*``, ``FI_*`` and ``AWS_OFI*`` variables from ``env`` output, in order."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith(NCCL_ENV_PREFIXES) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            out[key] = value
    return out


def final_nccl_env(platform: dict[str, str], overrides: tuple[tuple[str, str], ...] | list[tuple[str, str]],
                   ) -> tuple[dict[str, str], dict[str, str]]:
    """What every benchmark runs with, and who set each variable.

    Platform values are kept; cluster.toml's ``nccl_env`` overrides them (the operator asked);
    ``NCCL_NVLS_ENABLE=2`` is preset only when neither sets it.
    """
    env = dict(platform)
    source = {k: "platform" for k in platform}
    for key, value in overrides:
        env[key] = value
        source[key] = "cluster.toml"
    if NVLS_VAR not in env:
        env[NVLS_VAR] = NVLS_DEFAULT
        source[NVLS_VAR] = "clustereval default"
    return env, source


def count_gpus(text: str) -> int:
    """GPUs in ``nvidia-smi -L`` output (``GPU 0: NVIDIA H200 (UUID: ...)`` lines)."""
    return sum(1 for line in text.splitlines() if re.match(r"^GPU \d+:", line.strip()))


# Run on each node with the node's Python before any rendezvous: what torchrun's c10d rendezvous
# will see there (the seed's is_host / local_addr diagnosis) and whether torch imports at all.
NODE_FACTS_SNIPPET = r"""
import json, socket, sys
out = {"hostname": socket.gethostname(), "executable": sys.executable}
try:
    out["resolves"] = socket.gethostbyname(out["hostname"])
except OSError as exc:
    out["resolves"] = ""
    out["resolve_error"] = str(exc)
try:
    import torch
    out["torch"] = torch.__version__
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname
    out["matches_endpoint"] = bool(_matches_machine_hostname(sys.argv[1]))
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass
class NodeFacts:
    hostname: str = ""
    resolves: str = ""  # what the node's own hostname resolves to there ("" = does not resolve)
    torch: str = ""  # torch version ("" = not importable)
    torch_error: str = ""
    matches_endpoint: bool | None = None  # torch's _matches_machine_hostname(endpoint) on that node
    executable: str = ""
    error: str = ""  # the snippet did not run

    @property
    def hostname_is_loopback(self) -> bool:
        return not self.resolves or self.resolves.startswith("127.")


def parse_node_facts(text: str) -> NodeFacts:
    for line in reversed(text.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "hostname" in data:
            return NodeFacts(hostname=str(data.get("hostname", "")), resolves=str(data.get("resolves", "")),
                             torch=str(data.get("torch", "")), torch_error=str(data.get("torch_error", "")),
                             matches_endpoint=data.get("matches_endpoint"),
                             executable=str(data.get("executable", "")))
    last = [ln for ln in text.strip().splitlines() if ln.strip()]
    return NodeFacts(error=last[-1][:300] if last else "no output")


# A one-shot TCP listener on the rendezvous port of the first node, and the connect probe run on
# every node: the seed's `echo > /dev/tcp/$MASTER_ADDR/$PORT`, without depending on bash.
TCP_LISTEN_SNIPPET = r"""
import socket, sys, time
port, expect, deadline = int(sys.argv[1]), int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    srv.bind(("", port))
    srv.listen(64)
except OSError as exc:
    print(f"error: cannot listen on port {port}: {exc.strerror or exc}", flush=True)
    sys.exit(1)
print("listening", flush=True)
seen = 0
while seen < expect and time.monotonic() < deadline:
    srv.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        conn, peer = srv.accept()
    except OSError:
        break
    seen += 1
    print(f"accepted {peer[0]}", flush=True)
    conn.close()
"""

TCP_CONNECT_SNIPPET = r"""
import socket, sys, time
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = time.monotonic()
try:
    socket.create_connection((host, port), timeout=timeout).close()
    print(f"ok {time.monotonic() - t0:.3f}")
except OSError as exc:
    print(f"error: {exc.strerror or exc}")
    sys.exit(1)
"""
