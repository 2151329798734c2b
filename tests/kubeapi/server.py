"""A stand-in for the part of a Kubernetes API server that ``kubectl get pods`` and ``kubectl exec`` use.

The client stays real: the test suite runs the system ``kubectl`` against this server through a
kubeconfig it writes. The server speaks HTTPS with a certificate of its own (kubectl sends
credentials only over TLS), which the kubeconfig names as the cluster's CA. It answers discovery (``/version``, ``/api``, ``/apis``,
``/api/v1``), pods (list with a label or name selector, get one, delete) and the ``exec``
subresource over WebSocket with the ``v5.channel.k8s.io`` channel protocol (``v4`` when the
client offers nothing newer): channel 0 stdin, 1 stdout, 2 stderr, 3 the final ``metav1.Status``
carrying the exit code, 255 (v5) the client's close of stdin.

Each pod is a node of a ``tests.testbed.NetnsCluster``: its commands run for real in that node's
network namespace and hostname, so pod IPs and TCP between pods are real. Faults are real too:
``delete_pod`` kills every process of the pod and takes its address off the network,
``reset_exec`` makes the next exec streams end in a TCP reset, a user without a permission gets
the 403 ``Status`` an RBAC-enforcing server returns.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.kubeapi.websocket import ConnectionClosed, WebSocket, accept_key

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
ALL = frozenset({("list", "pods"), ("get", "pods"), ("delete", "pods"), ("create", "pods/exec")})


@dataclass
class Pod:
    name: str
    namespace: str
    ip: str
    netns: str  # the test bed node it runs in
    enter: list[str]  # argv prefix that runs `sh -c SCRIPT ARGS` inside the node
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    containers: list[str] = field(default_factory=lambda: ["main"])
    waiting: dict[str, str] = field(default_factory=dict)  # container -> reason it is not running
    phase: str = "Running"
    uid: str = field(default_factory=lambda: secrets.token_hex(8))
    resets: int = 0  # how many exec streams still to reset
    ifname: str = "eth0"

    def manifest(self) -> dict:
        statuses = []
        for c in self.containers:
            state = ({"waiting": {"reason": self.waiting[c]}} if c in self.waiting
                     else {"running": {"startedAt": "2026-01-01T00:00:00Z"}})
            statuses.append({"name": c, "ready": c not in self.waiting, "restartCount": 0, "state": state,
                             "image": "clustereval-standin", "imageID": "", "started": c not in self.waiting})
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid, "labels": self.labels,
                         "annotations": self.annotations, "resourceVersion": "1",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": c, "image": "clustereval-standin"} for c in self.containers],
                     "nodeName": f"worker-{self.netns}", "hostname": self.name},
            "status": {"phase": self.phase, "podIP": self.ip, "podIPs": [{"ip": self.ip}],
                       "hostIP": self.ip, "containerStatuses": statuses},
        }


def status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def match_selector(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, comma-joined."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class KubeApiServer:
    """The stand-in server on 127.0.0.1 (HTTPS). ``start()``, then ``kubeconfig(path)``."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Pod] = {}
        self.tokens: dict[str, str] = {}  # bearer token -> user name
        self.allowed: dict[str, frozenset] = {}  # user -> {(verb, resource)}; missing user: everything
        self.requests: list[str] = []  # "METHOD path" of every request, for tests
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self.port = 0

    # ---- set-up ------------------------------------------------------------------------------
    @classmethod
    def for_cluster(cls, cluster, *, namespace: str = "trial", labels: dict | None = None,  # noqa: ANN001
                    containers: tuple[str, ...] = ("main",)) -> KubeApiServer:
        """One pod per test bed node, named like the node (its hostname), indexed like a Job's pods."""
        server = cls()
        for node in cluster.nodes:
            server.add_pod(Pod(name=node.name, namespace=namespace, ip=node.address, netns=node.netns,
                               enter=cluster.enter_argv(node.index), ifname=node.ifname,
                               labels={"app": "trial", "job-name": "trial", "batch.kubernetes.io/job-name": "trial",
                                       **(labels or {})},
                               annotations={"batch.kubernetes.io/job-completion-index": str(node.index)},
                               containers=list(containers)))
        return server.start()

    def add_pod(self, pod: Pod) -> Pod:
        with self._lock:
            self.pods[(pod.namespace, pod.name)] = pod
        return pod

    def add_user(self, user: str, *, allowed: frozenset | set = ALL) -> str:
        """A bearer token for ``user``, who may do only ``allowed`` ((verb, resource) pairs)."""
        token = secrets.token_hex(16)
        self.tokens[token] = user
        self.allowed[user] = frozenset(allowed)
        return token

    def start(self) -> KubeApiServer:
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.cert_pem = _self_signed_cert()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            both = Path(tmp) / "server.pem"
            both.write_bytes(self.cert_pem[0] + self.cert_pem[1])
            context.load_cert_chain(both)
        # the TLS handshake happens in each connection's own thread, not in the accept loop
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True,
                                                 do_handshake_on_connect=False)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, *, token: str | None = None, namespace: str = "trial",
                   context: str = "standin", server: str | None = None) -> Path:
        """A kubeconfig (JSON is YAML) whose current context reaches this server."""
        user: dict = {"token": token} if token else {}
        doc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
               "clusters": [{"name": "standin", "cluster": {
                   "server": server or self.url,
                   "certificate-authority-data": base64.b64encode(self.cert_pem[0]).decode()}}],
               "users": [{"name": "tester", "user": user}],
               "contexts": [{"name": context, "context": {"cluster": "standin", "user": "tester",
                                                          "namespace": namespace}}],
               "current-context": context}
        path.write_text(json.dumps(doc, indent=2))
        return path

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # ---- faults ------------------------------------------------------------------------------
    def delete_pod(self, name: str, namespace: str = "trial") -> bool:
        """Delete a pod as the kubelet would: every process in it killed, its address gone."""
        with self._lock:
            pod = self.pods.pop((namespace, name), None)
        if pod is None:
            return False
        pids = subprocess.run(["ip", "netns", "pids", pod.netns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "exec", pod.netns, "ip", "link", "set", pod.ifname, "down"],
                       capture_output=True)
        return True

    def reset_exec(self, name: str, times: int = 1, namespace: str = "trial") -> None:
        """The next ``times`` exec streams into the pod end in a TCP reset before the command runs."""
        self.pods[(namespace, name)].resets = times

    # ---- used by the handler -----------------------------------------------------------------
    def pod(self, namespace: str, name: str) -> Pod | None:
        with self._lock:
            return self.pods.get((namespace, name))

    def list_pods(self, namespace: str) -> list[Pod]:
        with self._lock:
            return sorted((p for (ns, _), p in self.pods.items() if ns == namespace), key=lambda p: p.name)


def _self_signed_cert() -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for 127.0.0.1, valid for a day."""
    with tempfile.TemporaryDirectory() as tmp:
        key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", "/CN=clustereval-standin", "-addext",
                        "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True, timeout=30)
        return Path(cert).read_bytes(), Path(key).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # noqa: A002, ANN001 - quiet
        return

    # ---- replies -----------------------------------------------------------------------------
    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        self._json(code, status(code, reason, message, details))

    def _user(self) -> str | None:
        """The authenticated user ('' anonymous when the server has no tokens); None: 401 sent."""
        if not self.api.tokens:
            return ""
        auth = self.headers.get("Authorization", "")
        user = self.api.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if user is None:
            self._fail(401, "Unauthorized", "Unauthorized")
        return user

    def _may(self, user: str, verb: str, resource: str, ns: str, name: str = "") -> bool:
        allowed = self.api.allowed.get(user, ALL)
        if (verb, resource) in allowed:
            return True
        who = f'pods "{name}"' if name else "pods"
        self._fail(403, "Forbidden", f'{who} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API '
                   f'group "" in the namespace "{ns}"', {"name": name, "kind": "pods"} if name else {"kind": "pods"})
        return False

    # ---- routes ------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        self.api.requests.append(f"{method} {url.path}")
        if int(self.headers.get("Content-Length") or 0):
            self.rfile.read(int(self.headers["Content-Length"]))
        if parts == ["version"]:
            return self._json(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0-standin",
                                    "platform": "linux/amd64"})
        if parts == ["api"]:
            return self._json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.api.port}"}]})
        if parts == ["apis"]:
            return self._json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if parts == ["api", "v1"]:
            return self._json(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "shortNames": ["po"],
                 "verbs": ["create", "delete", "get", "list", "watch"]},
                {"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
                 "verbs": ["create", "get"]}]})
        if len(parts) == 4 and parts[:3] == ["api", "v1", "namespaces"] and method == "GET":
            if not any(ns == parts[3] for ns, _ in self.api.pods):
                return self._fail(404, "NotFound", f'namespaces "{parts[3]}" not found',
                                  {"name": parts[3], "kind": "namespaces"})
            return self._json(200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": parts[3]},
                                    "status": {"phase": "Active"}})
        if len(parts) >= 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            user = self._user()
            if user is None:
                return None
            ns = parts[3]
            if len(parts) == 5 and method == "GET":
                return self._list(user, ns, query)
            name = parts[5] if len(parts) > 5 else ""
            if len(parts) == 6 and method == "GET":
                return self._get(user, ns, name)
            if len(parts) == 6 and method == "DELETE":
                return self._delete(user, ns, name)
            if len(parts) == 7 and parts[6] == "exec":
                return self._exec(user, ns, name, query)
        return self._fail(404, "NotFound", "the server could not find the requested resource")

    def _list(self, user: str, ns: str, query: dict) -> None:
        if not self._may(user, "list", "pods", ns):
            return
        selector = (query.get("labelSelector") or [""])[0]
        field_sel = (query.get("fieldSelector") or [""])[0]
        pods = [p for p in self.api.list_pods(ns) if match_selector(selector, p.labels)]
        if field_sel.startswith("metadata.name="):
            pods = [p for p in pods if p.name == field_sel.split("=", 1)[1]]
        self._json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                         "items": [p.manifest() for p in pods]})

    def _get(self, user: str, ns: str, name: str) -> None:
        if not self._may(user, "get", "pods", ns, name):
            return
        pod = self.api.pod(ns, name)
        if pod is None:
            return self._fail(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        self._json(200, pod.manifest())

    def _delete(self, user: str, ns: str, name: str) -> None:
        if not self._may(user, "delete", "pods", ns, name):
            return
        pod = self.api.pod(ns, name)
        if pod is None or not self.api.delete_pod(name, ns):
            return self._fail(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        self._json(200, pod.manifest())

    # ---- exec --------------------------------------------------------------------------------
    def _exec(self, user: str, ns: str, name: str, query: dict) -> None:
        if not self._may(user, "create", "pods/exec", ns, name):
            return
        pod = self.api.pod(ns, name)
        if pod is None:
            return self._fail(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        container = (query.get("container") or [""])[0]
        if not container:
            if len(pod.containers) != 1:
                return self._fail(400, "BadRequest", f"a container name must be specified for pod {name}, choose "
                                  f"one of: [{' '.join(pod.containers)}]")
            container = pod.containers[0]
        if container not in pod.containers:
            return self._fail(400, "BadRequest", f"container {container} is not valid for pod {name}")
        command = query.get("command") or []
        if not command:
            return self._fail(400, "BadRequest", "you must specify at least 1 command")
        if container in pod.waiting:
            # the kubelet cannot attach to a container that is not running; the client shows the body
            body = f'container not found ("{container}")'.encode()
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        if self.headers.get("Upgrade", "").lower() != "websocket":
            return self._fail(400, "BadRequest", "this server speaks only the WebSocket exec protocol")
        offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        protocol = next((p for p in PROTOCOLS if p in offered), None)
        if protocol is None:
            return self._fail(400, "BadRequest", f"no supported subprotocol among {offered}")
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(self.headers.get("Sec-WebSocket-Key", "")))
        self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        if pod.resets > 0:
            pod.resets -= 1
            # SO_LINGER 0: close() sends a TCP reset instead of an orderly FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return None
        want_stdin = (query.get("stdin") or ["false"])[0] in ("true", "1")
        ws = WebSocket(self.connection, self.rfile)
        _Session(ws, pod, command, want_stdin, protocol).run()
        return None


class _Session:
    """One exec: the process in the pod, pumps between its pipes and the channels."""

    def __init__(self, ws: WebSocket, pod: Pod, command: list[str], want_stdin: bool, protocol: str) -> None:
        self.ws, self.pod, self.command, self.want_stdin, self.protocol = ws, pod, command, want_stdin, protocol

    def run(self) -> None:
        script = 'exec "$@"'
        proc = subprocess.Popen([*self.pod.enter, script, *self.command],
                                stdin=subprocess.PIPE if self.want_stdin else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        reader = threading.Thread(target=self._client_to_stdin, args=(proc,), daemon=True)
        reader.start()
        pumps = [threading.Thread(target=self._pipe_to_channel, args=(pipe, channel), daemon=True)
                 for pipe, channel in ((proc.stdout, STDOUT), (proc.stderr, STDERR))]
        for t in pumps:
            t.start()
        rc = proc.wait()
        for t in pumps:
            t.join()
        if rc < 0:
            rc = 128 - rc
        if rc == 0:
            final = {"metadata": {}, "status": "Success"}
        else:
            final = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                     "message": f"command terminated with non-zero exit code: exit status {rc}",
                     "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}
        with contextlib.suppress(ConnectionClosed):
            self.ws.send(bytes([ERROR]) + json.dumps(final).encode())
        self.ws.close()
        time.sleep(0.05)  # let the close frame leave before the socket goes
        with contextlib.suppress(OSError):
            self.ws.sock.shutdown(socket.SHUT_RDWR)

    def _client_to_stdin(self, proc: subprocess.Popen) -> None:
        stdin = proc.stdin
        try:
            while True:
                msg = self.ws.recv()
                if not msg:
                    continue
                channel, data = msg[0], msg[1:]
                if channel == STDIN and stdin is not None and not stdin.closed:
                    try:
                        stdin.write(data)
                        stdin.flush()
                    except (BrokenPipeError, ValueError):
                        pass
                elif channel == CLOSE and data[:1] == bytes([STDIN]) and stdin is not None:
                    with contextlib.suppress(OSError):
                        stdin.close()
        except (ConnectionClosed, OSError, ValueError):
            pass
        finally:
            # the client went away (or hung up): the command sees end of input, as in a real pod
            if stdin is not None:
                with contextlib.suppress(OSError):
                    stdin.close()

    def _pipe_to_channel(self, pipe, channel: int) -> None:  # noqa: ANN001
        lost = False
        while True:
            chunk = pipe.read1(1 << 16) if hasattr(pipe, "read1") else pipe.read(1 << 16)
            if not chunk:
                return
            if lost:
                continue  # keep draining so the command never blocks on a full pipe
            try:
                self.ws.send(bytes([channel]) + chunk)
            except ConnectionClosed:
                lost = True
