"""Parsers for the preflight's node probes: the NCCL environment dump, ``nvidia-smi -L``, and the
per-node rendezvous facts. Pure: text in, values out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustereval.probes._text import last_json, last_line

# The seed's dump: env | grep -E '^NCCL_|^FI_|^AWS_OFI'
NCCL_ENV_PREFIXES = ("NCCL_", "FI_", "AWS_OFI")
NVLS_VAR = "NCCL_NVLS_ENABLE"
NVLS_DEFAULT = "2"  # preset only when nothing else sets it

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


# Run with the node's Python before any rendezvous: what torchrun's c10d rendezvous will see there
# (the seed's is_host / local_addr diagnosis) and whether torch is installed, without importing it
# (seconds per node). ``matches_endpoint`` follows torch's ``_matches_machine_hostname`` rule: the
# endpoint is this machine when it is loopback or this hostname, or shares an address with it.
NODE_FACTS_SNIPPET = r"""
import ipaddress, json, socket, sys
import importlib.metadata, importlib.util
endpoint = sys.argv[1]
out = {"hostname": socket.gethostname(), "executable": sys.executable}
try:
    out["resolves"] = socket.gethostbyname(out["hostname"])
except OSError as exc:
    out["resolves"] = ""
def addrs(host):
    try:
        return [(a[3], a[4][0]) for a in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP,
                                                           flags=socket.AI_CANONNAME)]
    except (OSError, ValueError):
        return []
try:
    ip = ipaddress.ip_address(endpoint)
except ValueError:
    ip = None
if endpoint == "localhost" or (ip is not None and ip.is_loopback) or endpoint == out["hostname"]:
    match = True
else:
    theirs = {a for _, a in addrs(endpoint)}
    match = any(canon == endpoint or (ip is not None and a == str(ip)) or a in theirs
                for canon, a in addrs(out["hostname"]))
out["matches_endpoint"] = match
try:
    if importlib.util.find_spec("torch") is None:
        out["torch_error"] = "No module named 'torch'"
    else:
        out["torch"] = importlib.metadata.version("torch")
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass
class NodeFacts:
    hostname: str = ""
    resolves: str = ""  # what the node's own hostname resolves to there ("" = does not resolve)
    torch: str = ""  # installed torch version ("" = not installed for that Python)
    torch_error: str = ""
    matches_endpoint: bool | None = None  # the endpoint address is this node (torch's rule)
    executable: str = ""
    error: str = ""  # the snippet did not run

    @property
    def hostname_is_loopback(self) -> bool:
        return not self.resolves or self.resolves.startswith("127.")


def parse_node_facts(text: str) -> NodeFacts:
    data = last_json(text, key="hostname")
    if data:
        return NodeFacts(hostname=str(data.get("hostname", "")), resolves=str(data.get("resolves", "")),
                             torch=str(data.get("torch", "")), torch_error=str(data.get("torch_error", "")),
                             matches_endpoint=data.get("matches_endpoint"),
                             executable=str(data.get("executable", "")))
    return NodeFacts(error=last_line(text, "no output")[:300])


# One round trip per node: GPU listing, which scratch paths are missing, the rendezvous facts, and
# (on rank 0) the environment. Sections are marked so one missing tool cannot hide the others.
_NODE_PROBE_SCRIPT = r"""
python=$1 endpoint=$2 want=$3; shift 3
case $want in *g*) echo "@@gpus"; nvidia-smi -L 2>&1; echo "@@rc $?";; esac
echo "@@paths"; for p in "$@"; do [ -d "$p" ] || echo "$p"; done
echo "@@unwritable"; for p in "$@"; do if [ -d "$p" ] && [ ! -w "$p" ]; then echo "$p"; fi; done
case $want in *f*) echo "@@facts"; "$python" -c "$FACTS" "$endpoint" 2>&1; echo "@@rc $?";; esac
case $want in *e*) echo "@@env"; env; echo "@@rc $?";; esac
true
"""


def node_probe_argv(python: str, endpoint: str, paths: list[str], *, gpus: bool, facts: bool,
                    env: bool) -> list[str]:
    want = ("g" if gpus else "") + ("f" if facts else "") + ("e" if env else "") or "-"
    script = f"FACTS={_sh_quote(NODE_FACTS_SNIPPET)}\n{_NODE_PROBE_SCRIPT}"
    return ["sh", "-c", script, "sh", python, endpoint, want, *paths]


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@dataclass
class NodeProbe:
    gpus: int | None = None  # None: not asked
    gpu_note: str = ""  # why none were counted ("nvidia-smi is not installed")
    missing_paths: list[str] = field(default_factory=list)
    unwritable_paths: list[str] = field(default_factory=list)  # there, but the eval user cannot write
    facts: NodeFacts | None = None
    env: dict[str, str] = field(default_factory=dict)


def parse_node_probe(text: str) -> NodeProbe:
    sections: dict[str, list[str]] = {}
    rcs: dict[str, int] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@rc ") and current:
            rcs[current] = int(line[5:].strip() or 0)
        elif line.startswith("@@") and " " not in line:
            current = line[2:]
            sections[current] = []
        elif current:
            sections[current].append(line)
    probe = NodeProbe()
    if "gpus" in sections:
        body = "\n".join(sections["gpus"])
        rc = rcs.get("gpus", 0)
        probe.gpus = count_gpus(body) if rc == 0 else 0
        if rc == 127:
            probe.gpu_note = "nvidia-smi is not installed"
        elif rc != 0:
            probe.gpu_note = (body.strip().splitlines() or [f"nvidia-smi exit {rc}"])[-1][:200]
    probe.missing_paths = [ln for ln in sections.get("paths", []) if ln.strip()]
    probe.unwritable_paths = [ln for ln in sections.get("unwritable", []) if ln.strip()]
    if "facts" in sections:
        body = "\n".join(sections["facts"])
        probe.facts = parse_node_facts(body)
        if rcs.get("facts") == 127:
            probe.facts.error = "the interpreter was not found"
    if "env" in sections:
        probe.env = parse_env_dump("\n".join(sections["env"]))
    return probe


# The TCP check across nodes (``phases/preflight_tcp.py`` plans it): a listener on every node and
# one connect command per node. Nothing in either argv grows with the fleet: the listener takes the
# first port and how many, the connect command reads its targets on stdin.
# Listener argv: first port, number of ports, connections expected in all, seconds to wait. It opens
# every port at once (so each is free on this node), prints "listening", then accepts until the
# expected connections came or the time is up.
TCP_LISTEN_SNIPPET = r"""
import resource, selectors, socket, sys, time
first, count, expect = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = count + 64
if soft != resource.RLIM_INFINITY and soft < want:
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    except (OSError, ValueError):
        pass
sel, got = selectors.DefaultSelector(), 0
for port in range(first, first + count):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("", port))
        srv.listen(65535)
    except OSError as exc:
        print(f"error: cannot listen on port {port}: {exc.strerror or exc}", flush=True)
        sys.exit(1)
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ, port)
print("listening", flush=True)
while got < expect and time.monotonic() < deadline:
    for key, _ in sel.select(timeout=max(0.1, deadline - time.monotonic())):
        try:
            conn, peer = key.fileobj.accept()
        except OSError:
            continue
        got += 1
        conn.close()
"""

# Connect argv: the seconds one connect may take; stdin: one "ADDRESS PORT" line per target. Prints
# one line per target, in stdin's order: "ok ADDRESS:PORT" or "error ADDRESS:PORT: why"; exit 1
# when any failed.
TCP_CONNECT_SNIPPET = r"""
import socket, sys
from concurrent.futures import ThreadPoolExecutor
timeout = float(sys.argv[1])
targets = [line.split() for line in sys.stdin.read().splitlines() if line.strip()]
def one(target):
    host, port = target
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return f"ok {where}"
    except OSError as exc:
        return f"error {where}: {exc.strerror or exc}"
with ThreadPoolExecutor(64) as pool:
    lines = list(pool.map(one, targets))
print("\n".join(lines), flush=True)
sys.exit(1 if any(ln.startswith("error") for ln in lines) else 0)
"""
CONNECTS_AT_ONCE = 64  # the connect command's threads: its targets take ceil(targets / 64) connect times


def tcp_listen_argv(python: str, first_port: int, num_ports: int, expected: int, seconds: float) -> list[str]:
    """The listener's command on one node: ports ``first_port`` .. ``first_port + num_ports - 1``."""
    return [python, "-c", TCP_LISTEN_SNIPPET, str(first_port), str(num_ports), str(expected), str(int(seconds))]


def tcp_connect_argv(python: str, connect_s: float) -> list[str]:
    """The connect command on one node; its targets go on stdin (``tcp_targets_text``)."""
    return [python, "-c", TCP_CONNECT_SNIPPET, str(connect_s)]


def tcp_targets_text(targets: list[tuple[str, int]]) -> str:
    """The connect command's stdin: one "ADDRESS PORT" line per target."""
    return "".join(f"{address} {port}\n" for address, port in targets)


def parse_tcp_connect(text: str, num_targets: int) -> list[str] | None:
    """Per target, in order: "" when it was reached, else why not. None when the command did not
    print one line per target (it did not run to its end)."""
    lines = [ln for ln in text.splitlines() if ln.startswith(("ok ", "error "))]
    if len(lines) != num_targets:
        return None
    return ["" if ln.startswith("ok ") else ln.split(": ", 1)[-1] if ": " in ln else ln.removeprefix("error ")
            for ln in lines]
