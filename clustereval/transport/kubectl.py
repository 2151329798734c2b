"""Run commands in the pods of a Kubernetes trial with ``kubectl exec``.

Every pod is a node. A command is ``kubectl exec [-i] POD -c CONTAINER -- argv``: the argv reaches
the container's runtime as a list, with no shell in between; environment and working directory
become ``env K=V`` and a fixed ``sh -c 'cd "$1" ...'`` script whose only inputs are arguments.
Files travel as tar streams over exec stdin/stdout (as ``kubectl cp`` does), so the pods need
``tar`` and ``sh``, nothing else. The system ``kubectl`` is used on purpose: the user's kubeconfig,
its auth plugins (``aws eks get-token``, OIDC) and its TLS settings all keep working; every
global option we add is built in ``kubectl_base``.

kubectl's own failures (an unknown context, RBAC, a pod that is gone, a container that is not
running, the API server out of reach, an exec stream reset) are read from its stderr by
``probes.kubectl`` and raised as one-line errors naming the pod and the ``[kubectl]`` setting.
A reset stream is repeated once, and only for a command that is safe to run twice; either way a
second probe (``true`` in the pod) says whether the pod itself still answers.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from clustereval.config import KubectlConfig
from clustereval.errors import CommandTimeout, TransportError, UsageError
from clustereval.probes import kubectl as probe
from clustereval.records import CommandResult
from clustereval.transport.base import (
    DEFAULT_TIMEOUT_S,
    GET_SCRIPT,
    Node,
    Transport,
    copy_payload,
    env_prefix,
    popen_held_stdin,
    run_parallel,
    unpack_copy,
)

KILL_GRACE_S = 5  # a command past its timeout gets SIGTERM in the pod, then SIGKILL this much later
LOCAL_MARGIN_S = 15  # the local kubectl waits this much longer than the in-pod timeout
FANOUT = 16  # kubectl processes at once: each is a full client with its own API connection
PODS_PER_GET = 128  # pod names one `kubectl get pods` names (at most 253 bytes each: under 33 KB)
PROBE_ARGV = ["true"]
# Commands that only read: repeating one after a reset stream cannot change anything in the pod.
# kubectl's WebSocket client reads the server's messages before it has opened its stdout and stderr
# streams, and drops what arrives for a stream not open yet ("Unknown stream id 2, discarding
# message"): a command that prints at once (dd's summary, a short tar) can lose its output on a busy
# client. It opens stdin after the other streams and only then sends, so every command first waits
# for one line on stdin: whatever it prints after that has a stream to go to.
READY_LINE = "\n"
_AFTER_READY = 'read -r _ready; exec "$@"'

SAFE_TO_REPEAT = frozenset({"true", "hostname", "cat", "ls", "stat", "df", "findmnt", "lsblk", "lscpu", "nproc",
                            "uname", "id", "nvidia-smi", "getconf", "readlink", "test", "printenv"})

# A long-running command (torchrun) must stop when the controller lets go of it: the kubelet does
# not kill an exec'd process when its stream closes. The wrapper starts "$@" in its own session and
# waits for the stream's stdin to close (kubectl killed, the connection lost, the handle dropped),
# then signals the whole process group. (A background job's stdin is /dev/null in sh, so the
# stream's stdin is kept on fd 3.)
_WATCHDOG = ('exec 3<&0; setsid "$@" </dev/null 3<&- & pid=$!; '
             '{ cat <&3 >/dev/null; kill -TERM -$pid; sleep 5; kill -KILL -$pid; } >/dev/null 2>&1 & '
             'watch=$!; exec 3<&-; wait $pid; rc=$?; kill $watch 2>/dev/null; exit $rc')
_IN_DIR = 'cd "$1" && shift && exec "$@"'


class KubectlTransport(Transport):
    """``Transport`` over ``kubectl exec``. ``Node.name`` is the pod, ``Node.address`` its IP."""

    method = "kubectl"
    fanout = FANOUT

    def __init__(self, cfg: KubectlConfig, *, binary: str = "kubectl") -> None:
        self.cfg = cfg
        self.binary = binary
        self.context = cfg.context or ""  # resolved on first use when the kubeconfig's current one applies
        self.namespace = cfg.namespace or ""
        self.retries: list[str] = []  # "pod: what was repeated" for every reset stream retried
        self._nodes: list[Node] | None = None
        self._containers: dict[str, str] = {}
        self._lock = threading.Lock()

    # ---- argv ----------------------------------------------------------------------------------
    def kubectl_base(self) -> list[str]:
        """Every global kubectl option clustereval sets, in one place."""
        argv = [self.binary]
        if self.cfg.kubeconfig:
            argv.append(f"--kubeconfig={self.cfg.kubeconfig}")
        if self.cfg.context:
            argv.append(f"--context={self.cfg.context}")
        if self.cfg.namespace:
            argv.append(f"--namespace={self.cfg.namespace}")
        # the user's own options last: where they repeat one of ours, kubectl takes the later value
        return argv + list(self.cfg.args)

    def exec_argv(self, node: Node, argv: list[str]) -> list[str]:
        """``kubectl exec -i``: every command reads its stdin (the ready line, or the watchdog's feed);
        never ``-t`` so stdout and stderr stay separate and byte-exact."""
        full = self.kubectl_base() + ["exec", "-i", node.name]
        container = self._containers.get(node.name) or self.cfg.container
        if container:
            full += ["-c", container]
        return full + ["--"] + [str(a) for a in argv]

    def describe(self) -> str:
        return f"kubectl exec: {self.access_detail()}"

    def access_detail(self) -> str:
        """Context, namespace, container and how the pods were chosen: the report's Access line."""
        parts = [f"context `{self.context}`"] if self.context else []
        parts.append(f"namespace `{self.namespace or self.cfg.namespace or 'default'}`")
        if self.cfg.container:
            parts.append(f"container `{self.cfg.container}`")
        return ", ".join(parts + [self.selection()])

    def selection(self) -> str:
        """How the pods were chosen, in words."""
        cfg = self.cfg
        order = "by name" if cfg.order_by == "name" else "by completion index"
        if cfg.pods:
            return "pods " + ", ".join(f"`{p}`" for p in cfg.pods) + " as listed"
        if cfg.selector:
            return f"pods with label `{cfg.selector}`, ordered {order}"
        if cfg.job:
            return f"the pods of Job `{cfg.job}`, ordered {order}"
        return f"the pods of JobSet `{cfg.jobset}`, ordered {order}"

    # ---- the API: pods -------------------------------------------------------------------------
    def _client(self, args: list[str], what: str) -> subprocess.CompletedProcess:
        """A kubectl call that talks to the API only (get, config): bounded by request_timeout_s."""
        timeout = self.cfg.request_timeout_s
        argv = self.kubectl_base() + [f"--request-timeout={timeout}s"] + args
        try:
            return subprocess.run(argv, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL,
                                  timeout=timeout + LOCAL_MARGIN_S)
        except FileNotFoundError:
            raise _no_kubectl(self.binary) from None
        except subprocess.TimeoutExpired:
            raise TransportError("kubernetes", f"`kubectl {what}` got no answer within {timeout + LOCAL_MARGIN_S} s",
                                 "the API server may be down or out of reach from here: `kubectl cluster-info`",
                                 error_id="kubectl-api-unreachable") from None

    def _resolve_context(self) -> None:
        if self.context and self.namespace:
            return
        view = self._client(["config", "view", "--minify", "-o",
                             "jsonpath={.contexts[0].name}|{.contexts[0].context.namespace}"], "config view")
        if view.returncode != 0:
            raise self.failure("kubernetes", view.stderr, "config view")
        name, _, namespace = view.stdout.strip().partition("|")
        self.context = self.context or name
        self.namespace = self.namespace or namespace or "default"

    def list_pods(self) -> list[probe.PodInfo]:
        """The configured pods, in node order. Raises when the API refuses or none match."""
        self._resolve_context()
        cfg = self.cfg
        if cfg.pods:
            found: dict[str, probe.PodInfo] = {}
            missing: list[str] = []
            # a listed fleet is asked for PODS_PER_GET names at a time: no command line grows with it
            for at in range(0, len(cfg.pods), PODS_PER_GET):
                names = list(cfg.pods[at:at + PODS_PER_GET])
                proc = self._client(["get", "pods", *names, "-o", "json"], "get pods")
                got = {p.name: p for p in probe.parse_pods(proc.stdout)}
                found.update(got)
                gone = [n for n in names if n not in got]
                if proc.returncode != 0 and not gone:
                    raise self.failure("kubernetes", proc.stderr, "get pods")
                if gone:
                    failure = probe.classify(proc.stderr)
                    if failure is not None and failure.kind != "pod-not-found":
                        raise self.failure("kubernetes", proc.stderr, "get pods")
                    missing += gone
            if missing:
                raise UsageError(f"pod{'s' if len(missing) > 1 else ''} {', '.join(missing)} not found in namespace "
                                 f"{self.namespace}", "check [kubectl] pods (and namespace / context): "
                                 f"`kubectl get pods -n {self.namespace}` lists what is there",
                                 error_id="pod-not-found")
            return [found[n] for n in cfg.pods]
        selector = cfg.selector or (f"{probe.JOB_NAME_LABEL}={cfg.job}" if cfg.job
                                    else f"{probe.JOBSET_NAME_LABEL}={cfg.jobset}")
        proc = self._client(["get", "pods", "-l", selector, "-o", "json"], "get pods")
        if proc.returncode != 0:
            raise self.failure("kubernetes", proc.stderr, "get pods")
        pods = [p for p in probe.parse_pods(proc.stdout) if p.phase not in ("Succeeded", "Failed")]
        if not pods:
            raise UsageError(f"no running pod in namespace {self.namespace} matches {self.selection()}",
                             f"`kubectl get pods -n {self.namespace} -l {selector}`; check [kubectl] "
                             "selector / job / jobset and namespace", error_id="pod-not-found")
        return probe.order_pods(pods, cfg.order_by)

    def nodes(self, wanted: Sequence[str] = ()) -> list[Node]:
        """Every pod as a node: hostname from inside the pod, address from the platform's hostfile
        when [kubectl] hostfile names one, else the pod's ``status.podIP``. ``wanted`` is not used:
        [kubectl] pods / selector / job / jobset choose the pods."""
        if self._nodes is not None:
            return self._nodes
        pods = self.list_pods()
        for pod in pods:
            self._containers[pod.name] = self._container_of(pod)
        bare = [Node(name=p.name, address=p.ip, index=i) for i, p in enumerate(pods)]
        names = self._hostnames(bare)
        addresses = self._platform_hostfile(bare) if self.cfg.hostfile else [p.ip for p in pods]
        no_ip = [p.name for p, a in zip(pods, addresses, strict=True) if not a]
        if no_ip:
            raise TransportError(no_ip[0], "has no IP address yet (status.podIP is empty)",
                                 "wait until the pods are scheduled and running: `kubectl get pods -o wide`",
                                 error_id="pod-not-running")
        self._nodes = [Node(name=n.name, address=a, index=n.index,
                            extra={"hostname": names.get(n.name, ""), "pod": n.name, "namespace": self.namespace,
                                   "container": self._containers[n.name]})
                       for n, a in zip(bare, addresses, strict=True)]
        return self._nodes

    def _container_of(self, pod: probe.PodInfo) -> str:
        want = self.cfg.container
        if want:
            if want not in pod.containers:
                raise UsageError(f"pod {pod.name} has no container {want} (its containers: "
                                 f"{', '.join(pod.containers) or 'none'})", "set [kubectl] container to one of them",
                                 error_id="container-not-found")
            return want
        default = pod.default_container()
        if default is None:
            raise UsageError(f"pod {pod.name} has {len(pod.containers)} containers "
                             f"({', '.join(pod.containers)}) and none is marked default",
                             "set [kubectl] container to the one that runs the training image",
                             error_id="container-unspecified")
        return default

    def _hostnames(self, nodes: list[Node]) -> dict[str, str]:
        """``hostname`` in every pod. An RBAC refusal is the user's, not one pod's: it stops here."""
        names: dict[str, str] = {}

        def one(node: Node) -> None:
            try:
                res = self.run(node, ["hostname"], timeout_s=30)
            except TransportError as exc:
                if exc.error_id in ("kubectl-forbidden", "kubectl-unauthorized", "kubectl-api-unreachable"):
                    raise
                return  # this pod's own trouble: preflight names it
            if res.ok:
                names[node.name] = res.stdout.strip().split(".")[0]

        run_parallel(nodes, one, self.fanout)
        return names

    def _platform_hostfile(self, nodes: list[Node]) -> list[str]:
        from clustereval.configload import parse_hostfile

        path = self.cfg.hostfile or ""
        first = nodes[0]
        res = self.run(first, ["cat", "--", path], timeout_s=30)
        where = f"{path} in pod {first.name}"
        if not res.ok:
            raise UsageError(f"cannot read the platform hostfile {where}: "
                             f"{(res.stderr.strip().splitlines() or [f'exit {res.rc}'])[-1]}",
                             "fix [kubectl] hostfile, or leave it out to use the pods' IPs",
                             error_id="platform-hostfile")
        hosts, problems = parse_hostfile(res.stdout, where)
        if problems:
            raise UsageError(f"the platform hostfile cannot be read: {problems[0]}",
                             "clustereval never edits it; leave [kubectl] hostfile out to use the pods' IPs",
                             error_id="platform-hostfile")
        if len(hosts) != len(nodes):
            raise UsageError(f"the platform hostfile {where} lists {len(hosts)} addresses for {len(nodes)} pods",
                             "select exactly the pods the hostfile describes, or leave [kubectl] hostfile out",
                             error_id="platform-hostfile")
        return [h.address for h in hosts]

    # ---- errors --------------------------------------------------------------------------------
    def where(self, pod: str) -> str:
        return f"{pod} (namespace {self.namespace or self.cfg.namespace or 'default'})"

    def error_for(self, node: Node, rc: int, output: str, *, seconds: float | None = None,
                  during: str = "") -> TransportError | None:
        """For a finished ``popen``: the error when ``rc``/``output`` are kubectl's own failure; None
        when the command ran in the pod (whatever its exit code)."""
        if rc == 0 or probe.split_exit_line(output)[1] is not None or probe.classify(output) is None:
            return None
        err = self.failure(node.name, output, f"exec {node.name}")
        return err if isinstance(err, TransportError) else TransportError(node.name, err.message, err.hint,
                                                                           error_id=err.error_id)

    def failure(self, pod: str, stderr: str, what: str) -> TransportError | UsageError:
        """The one-line error for kubectl's own failure in ``stderr``."""
        failure = probe.classify(stderr)
        line = probe.last_line(stderr) or "kubectl failed without a message"
        ns = self.namespace or self.cfg.namespace or "default"
        kind = failure.kind if failure else ""
        if kind == "context-unknown":
            assert failure is not None
            return UsageError(f"the kubeconfig has no context {failure.name or self.cfg.context!r}",
                              "`kubectl config get-contexts` lists them; fix [kubectl] context",
                              error_id="kubectl-context-unknown")
        if kind == "forbidden":
            assert failure is not None
            who = f"user {failure.user}" if failure.user else "this user"
            verb = f"{failure.verb} {failure.resource}" if failure.verb else "that request"
            return TransportError(pod, f"{who} may not {verb} in namespace {failure.namespace or ns} (RBAC)",
                                  f"ask the cluster admin for a Role allowing `{failure.verb or 'the verb'}` on "
                                  f"`{failure.resource or 'pods'}` (check: `kubectl auth can-i "
                                  f"{failure.verb or 'create'} {failure.resource or 'pods/exec'} -n {ns}`)",
                                  error_id="kubectl-forbidden", where=self.where(pod))
        if kind == "unauthorized":
            return TransportError(pod, "the API server did not accept the credentials (Unauthorized)",
                                  "log in again (a fresh token); `kubectl auth whoami` shows who you are",
                                  error_id="kubectl-unauthorized", where=self.where(pod))
        if kind == "api-unreachable":
            return TransportError(pod, f"the API server is out of reach: {line}",
                                  "check the kubeconfig's server address and the network / VPN to it "
                                  "(`kubectl cluster-info`)", error_id="kubectl-api-unreachable",
                                  where=self.where(pod))
        if kind == "namespace-not-found":
            return UsageError(f"namespace {failure.name if failure else ns} does not exist",
                              "fix [kubectl] namespace: `kubectl get namespaces`", error_id="kubectl-namespace-unknown")
        if kind == "pod-not-found":
            return TransportError(pod, f"pod {pod} no longer exists in namespace {ns}",
                                  "the pod was deleted or rescheduled; its results so far are kept: "
                                  "`kubectl get pods` shows what runs now", error_id="pod-not-found",
                                  where=self.where(pod))
        if kind in ("container-not-found", "container-unspecified"):
            return TransportError(pod, f"{line.removeprefix('Error from server (BadRequest): ')}",
                                  "set [kubectl] container to a container of the pod "
                                  f"(`kubectl get pod {pod} -o jsonpath='{{.spec.containers[*].name}}'`)",
                                  error_id="container-not-found", where=self.where(pod))
        if kind == "container-not-running":
            container = self._containers.get(pod) or self.cfg.container or "the container"
            return TransportError(pod, f"container {container} is not running ({line.removeprefix('error: ')})",
                                  f"`kubectl describe pod {pod}` shows why (crash loop, image pull, OOM)",
                                  error_id="container-not-running", where=self.where(pod))
        if kind == "exec-reset":
            return TransportError(pod, f"the exec stream was reset ({line.removeprefix('error: ')})",
                                  "the API server or kubelet dropped the connection; run again (or --resume)",
                                  error_id="kubectl-exec-reset", transient=True, where=self.where(pod))
        if kind == "config":
            return UsageError(f"kubectl cannot use the kubeconfig: {line}",
                              "check [kubectl] kubeconfig / $KUBECONFIG", error_id="kubectl-config")
        return TransportError(pod, f"kubectl {what} failed: {line}",
                              f"run `kubectl {what}` by hand to see the full error", error_id="kubectl-failed",
                              where=self.where(pod))

    # ---- run / popen ---------------------------------------------------------------------------
    def _wrap(self, argv: list[str], env: Mapping[str, str] | None, cwd: str | None,
              timeout_s: float | None) -> list[str]:
        words = env_prefix(env) + [str(a) for a in argv]
        if timeout_s is not None:
            # the command dies in the pod when its time is up (killing kubectl alone would leave it running)
            words = ["timeout", "-k", str(KILL_GRACE_S), f"{max(1, int(round(timeout_s)))}"] + words
        if cwd:
            words = ["sh", "-c", _IN_DIR, "sh", cwd] + words
        return words

    def _after_ready(self, node: Node, words: list[str]) -> list[str]:
        """``kubectl exec -i`` of ``words`` once the client's streams are open (``READY_LINE`` first)."""
        return self.exec_argv(node, ["sh", "-c", _AFTER_READY, "sh", *words])

    def _exec_once(self, node: Node, argv: list[str], timeout_s: float, env: Mapping[str, str] | None,
                   cwd: str | None, stdin: str | None) -> CommandResult:
        full = self._after_ready(node, self._wrap(argv, env, cwd, timeout_s))
        start = time.monotonic()
        try:
            proc = subprocess.run(full, input=READY_LINE + (stdin or ""), capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s + LOCAL_MARGIN_S)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(node.name, f"no answer through kubectl exec within {timeout_s + LOCAL_MARGIN_S:.0f} s",
                                 "the pod, its node or the API server stopped responding", transient=True,
                                 where=self.where(node.name)) from None
        except FileNotFoundError:
            raise _no_kubectl(self.binary) from None
        seconds = round(time.monotonic() - start, 3)
        stderr, code = probe.split_exit_line(proc.stderr)
        if proc.returncode != 0 and code is None:
            raise self.failure(node.name, proc.stderr, f"exec {node.name}")
        rc = proc.returncode if code is None else code
        timed_out = rc in (124, 137) and seconds >= timeout_s - 0.5
        return CommandResult(node=node.name, argv=list(argv), rc=rc, stdout=proc.stdout,
                             stderr=stderr + (f"\ntimed out after {timeout_s:.0f} s" if timed_out else ""),
                             seconds=seconds, timed_out=timed_out)

    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        try:
            return self._exec_once(node, argv, timeout_s, env, cwd, stdin)
        except TransportError as exc:
            if exc.error_id != "kubectl-exec-reset":
                raise
            first = exc
        safe = stdin is None and bool(argv) and os.path.basename(str(argv[0])) in SAFE_TO_REPEAT
        if safe:
            self.retries.append(f"{node.name}: `{' '.join(map(str, argv))[:60]}` repeated after a reset stream")
            try:
                return self._exec_once(node, argv, timeout_s, env, cwd, stdin)
            except TransportError as exc:
                if exc.error_id != "kubectl-exec-reset":
                    raise
        raise self._after_reset(node, first, repeated=safe)

    def _after_reset(self, node: Node, first: TransportError, *, repeated: bool) -> TransportError:
        """A second probe decides what a reset stream means: the pod answers (a dropped stream) or not."""
        try:
            probe_ok = self._exec_once(node, PROBE_ARGV, 15, None, None, None).ok
            probe_err = "it exited non-zero"
        except TransportError as exc:
            probe_ok, probe_err = False, _reset_detail(exc.message) if exc.error_id == "kubectl-exec-reset" \
                else exc.message.split(": ", 1)[-1]
        what = "twice" if repeated else "and the command was not repeated (it may not be safe to run twice)"
        detail = _reset_detail(first.message)
        if probe_ok:
            return TransportError(node.name, f"the exec stream was reset ({detail}) {what}; the pod answered a "
                                  "second probe", "a flaky API server or kubelet connection: run again with --resume",
                                  error_id="kubectl-exec-reset", where=self.where(node.name))
        return TransportError(node.name, f"the exec stream was reset ({detail}) {what}, and a second probe failed "
                              f"too ({probe_err})", f"`kubectl get pod {node.name} -o wide`: the pod or its node may "
                              "be gone", error_id="kubectl-exec-reset", where=self.where(node.name))

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        """Start a long-running command; stdout and stderr come back merged on ``proc.stdout``.

        Killing the returned process, losing the stream, or this controller exiting stops the
        command in the pod and all its children (the watchdog above). Once the ``Popen`` object
        is garbage collected, the command is stopped too."""
        inner = self._wrap(argv, env, cwd, None)
        full = self.exec_argv(node, ["sh", "-c", _WATCHDOG, "sh", *inner])
        # kubectl's stdin reaches EOF exactly when the handle or this process goes away, and the
        # watchdog in the pod stops the command then
        try:
            return popen_held_stdin(full)
        except FileNotFoundError:
            raise _no_kubectl(self.binary) from None

    # ---- files ---------------------------------------------------------------------------------
    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        """``remote`` in the pod becomes a copy of ``local`` (a directory is merged into it)."""
        local = Path(local)
        script, args, data = copy_payload(node, local, remote)
        rc, _, err = self._stream(node, ["sh", "-c", script, "sh", *args], data, timeout_s, f"copy {local}")
        if rc != 0:
            why = (err.strip() or f"exit {rc}").splitlines()[-1]
            raise TransportError(node.name, f"copy {local} -> {remote} failed: {why}",
                                 "check the path in the pod is writable and has space (and that the image has tar)",
                                 error_id="copy-failed", where=self.where(node.name))

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        """``local`` becomes a copy of ``remote`` (a file, or a directory merged into ``local``)."""
        local = Path(local)
        rc, out, err = self._stream(node, ["sh", "-c", GET_SCRIPT, "sh", remote], None, timeout_s,
                                    f"copy {remote}", repeatable=True)
        if rc != 0:
            why = (err.strip() or f"exit {rc}").splitlines()[-1]
            raise TransportError(node.name, f"copy {remote} -> {local} failed: {why}",
                                 "check the path exists in the pod and is readable", error_id="copy-failed",
                                 where=self.where(node.name))
        unpack_copy(node, remote, local, out)

    def _stream(self, node: Node, argv: list[str], data: bytes | None, timeout_s: float, what: str, *,
                repeatable: bool = False) -> tuple[int, bytes, str]:
        """Bytes in, bytes out through one exec: (rc of the command, stdout, stderr)."""
        full = self._after_ready(node, self._wrap(argv, None, None, timeout_s))
        for attempt in (1, 2):
            try:
                proc = subprocess.run(full, input=READY_LINE.encode() + (data or b""), capture_output=True,
                                      timeout=timeout_s + LOCAL_MARGIN_S)
            except subprocess.TimeoutExpired:
                raise CommandTimeout(node.name, f"{what} did not finish within {timeout_s:.0f} s",
                                     "a large copy needs a larger timeout", where=self.where(node.name)) from None
            except FileNotFoundError:
                raise _no_kubectl(self.binary) from None
            stderr, code = probe.split_exit_line(proc.stderr.decode(errors="replace"))
            if proc.returncode == 0 or code is not None:
                return (code or 0), proc.stdout, stderr
            err = self.failure(node.name, stderr, f"exec {node.name}")
            if not (isinstance(err, TransportError) and err.error_id == "kubectl-exec-reset"):
                raise err
            if not repeatable or attempt == 2:
                raise self._after_reset(node, err, repeated=repeatable)
            self.retries.append(f"{node.name}: {what} repeated after a reset stream")
        raise AssertionError("unreachable")


def _reset_detail(message: str) -> str:
    """'connection reset by peer' out of kubectl's 'error reading from error stream: next reader: read tcp ...'."""
    inner = message[message.find("(") + 1:message.rfind(")")] if "(" in message else message
    return inner.rsplit(": ", 1)[-1] or inner


def _no_kubectl(binary: str) -> UsageError:
    return UsageError(f"{binary}: command not found; access = \"kubectl\" needs the kubectl client here",
                      "install kubectl (https://kubernetes.io/docs/tasks/tools/) or run clustereval where it is",
                      error_id="kubectl-missing")
