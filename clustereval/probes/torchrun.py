"""torchrun on the nodes: the snippets that ask each node the rendezvous questions (and clean up
after a job), and parsing what a launch printed: worker JSON lines behind ``[<node>:<local rank>]:``
prefixes. Pure: constants and text in, values out."""

from __future__ import annotations

import json
import re

_PREFIX = re.compile(r"^\[(?P<role>.*?):(?P<local_rank>\d+)\]:(?P<rest>.*)$")


def parse_worker_events(text: str) -> list[dict]:
    """Every JSON object a worker printed, with ``_role`` and ``_local_rank`` from the tee prefix."""
    events = []
    for line in text.splitlines():
        m = _PREFIX.match(line)
        role, local_rank, rest = (m.group("role"), int(m.group("local_rank")), m.group("rest")) if m else ("", -1, line)
        rest = rest.strip()
        if not rest.startswith("{") or '"event"' not in rest:
            continue
        try:
            obj = json.loads(rest)
        except ValueError:
            continue
        if isinstance(obj, dict) and "event" in obj:
            obj["_role"] = role
            obj["_local_rank"] = local_rank
            events.append(obj)
    return events


def prefix_log(node: str, text: str) -> str:
    """Every line carries its node: worker lines already say ``[node:rank]:``, launcher lines get ``[node]:``."""
    out = []
    for line in text.splitlines():
        out.append(line if _PREFIX.match(line) else f"[{node}]: {line}")
    return "\n".join(out) + ("\n" if out else "")


# Runs on each node with the eval Python: the runbook's rendezvous probes, as JSON. argv: the endpoint
# host, the port, then the peers' addresses, or "-" to read them from stdin (one per line: a fleet's
# addresses never go on a command line).
PROBE_SNIPPET = r"""
import json, os, socket, sys
host, port, peers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if peers == ["-"]:
    peers = sys.stdin.read().split()
out = {"hostname": socket.gethostname(), "hostname_addrs": [], "route_addr": "", "matches_endpoint": None,
       "num_gpus": 0, "error": "", "matches": {}, "routes": {}}
try:
    out["hostname_addrs"] = sorted({a[4][0] for a in socket.getaddrinfo(out["hostname"], None,
                                                                          proto=socket.IPPROTO_TCP)})
except Exception as exc:
    out["error"] = "hostname: %s" % exc

def route(addr):
    try:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((addr, port))  # no packet is sent: the kernel picks the source address
        src = s.getsockname()[0]
        s.close()
        return src
    except Exception:
        return ""

out["route_addr"] = route(host)
out["routes"] = {p: route(p) for p in peers}
out["route_ifname"] = ""
out["env_ifnames"] = {k: os.environ[k] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if os.environ.get(k)}
try:
    import fcntl, struct
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == out["route_addr"]:
                out["route_ifname"] = name
                break
except Exception:
    pass

def torch_file(rel):
    # one of torch's own standard-library-only modules, run from its file: torch's exact code without
    # the seconds `import torch` costs on every node (None where torch or the file is not there)
    try:
        import importlib.util
        found = importlib.util.find_spec("torch")
        path = os.path.join(os.path.dirname(found.origin), *rel.split("/"))
        spec = importlib.util.spec_from_file_location("_clustereval_torch_" + rel.split("/")[-1][:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except Exception:
        return None

try:
    utils = torch_file("distributed/elastic/rendezvous/utils.py")
    if utils is None:
        from torch.distributed.elastic.rendezvous import utils
    out["matches_endpoint"] = bool(utils._matches_machine_hostname(host))
    out["matches"] = {p: bool(utils._matches_machine_hostname(p)) for p in peers}
except Exception as exc:
    out["error"] += " torch: %s" % exc
try:
    version = torch_file("version.py")
    if version is None or getattr(version, "cuda", None) or getattr(version, "hip", None):
        import torch
        out["num_gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # else a CPU build of torch: torch.cuda.is_available() is False on it, no GPU to count
except Exception:
    pass
print(json.dumps(out))
"""

# The runbook's step 3 (can a worker reach the port?): a listener on the endpoint node, connects elsewhere.
LISTEN_SNIPPET = r"""
import socket, sys, time
port, seconds, want = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("", port))
except OSError as exc:
    print("BIND-FAILED %s" % exc)
    sys.exit(0)
s.listen(64)
s.settimeout(0.5)
print("LISTENING", flush=True)
end, got = time.time() + seconds, 0
while time.time() < end and got < want:
    try:
        c, _ = s.accept()
        got += 1
        c.close()
    except OSError:
        pass
print("ACCEPTED %d" % got)
"""
CONNECT_SNIPPET = r"""
import socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + seconds
while True:
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("OPEN")
        break
    except OSError as exc:
        if time.time() > end:
            print("CLOSED %s" % exc)
            break
        time.sleep(0.3)
"""



# Runs on each node: what the peers' hostnames resolve to there (the runbook's "is the advertised
# master resolvable everywhere?"). argv: the names, or "-" to read them from stdin (one per line).
RESOLVE_SNIPPET = r"""
import json, socket, sys
out = {}
names = sys.argv[1:]
if names == ["-"]:
    names = sys.stdin.read().split()
for name in names:
    try:
        out[name] = sorted({a[4][0] for a in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)})
    except OSError:
        out[name] = []
print(json.dumps(out))
"""

# Runs on each node after a job was stopped: every process that carries the job's tag in its
# environment (torchrun, its agent, its workers, whatever session they started) is signalled, then
# the rendezvous port is checked free. Prints one JSON line.
REAP_SNIPPET = r"""
import errno, json, os, signal, socket, sys, time
tag, port, wait_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
needle = b"\0" + ("CLUSTEREVAL_JOB=%s" % tag).encode() + b"\0"
me = os.getpid()

def ours():
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as fh:
                if needle in b"\0" + fh.read() + b"\0":
                    found.append(int(d))
        except OSError:
            pass
    return found

first = ours()
for sig, pause in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 3.0)):
    left = ours()
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    end = time.time() + pause
    while time.time() < end and ours():
        time.sleep(0.1)

def held():
    if port <= 0:
        return False
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("", port))
        return False
    except OSError as exc:
        return exc.errno == errno.EADDRINUSE
    finally:
        s.close()

end = time.time() + wait_s
busy = held()
while busy and time.time() < end:
    time.sleep(0.2)
    busy = held()
print(json.dumps({"found": len(first), "left": len(ours()), "port_free": not busy}))
"""


