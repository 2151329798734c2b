"""Reading ``kubectl`` output: pod lists (``get pods -o json``) and kubectl's own error lines.

Pure: text in, records out. The transport decides what each failure means for a run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from clustereval.probes import _text

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # an annotation (and a label since 1.28)
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_INDEX_KEY = "jobset.sigs.k8s.io/job-index"  # which of the JobSet's Jobs the pod belongs to
DEFAULT_CONTAINER_KEY = "kubectl.kubernetes.io/default-container"

_EXIT_LINE = re.compile(r"^command terminated with exit code (\d+)\s*$")


@dataclass
class PodInfo:
    """One pod as ``kubectl get pods -o json`` shows it."""

    name: str
    namespace: str = ""
    phase: str = ""  # Pending | Running | Succeeded | Failed | Unknown
    ip: str = ""  # status.podIP ("" before the pod is scheduled)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    containers: list[str] = field(default_factory=list)  # spec.containers names, in order
    not_running: dict[str, str] = field(default_factory=dict)  # container -> why ("waiting: CrashLoopBackOff")

    def index_key(self, order_by: str) -> tuple:
        """Sort key: the JobSet's job index, then the Job's completion index, then the name."""
        if order_by == "name":
            return (self.name,)

        def number(key: str) -> int:
            text = self.labels.get(key, self.annotations.get(key, ""))
            return int(text) if text.isdigit() else 1 << 30
        return (number(JOBSET_INDEX_KEY), number(JOB_INDEX_KEY), self.name)

    def default_container(self) -> str | None:
        """The container ``kubectl exec`` picks without ``-c``: the annotated default, or the only one."""
        named = self.annotations.get(DEFAULT_CONTAINER_KEY)
        if named:
            return named
        return self.containers[0] if len(self.containers) == 1 else None


def parse_pods(text: str) -> list[PodInfo]:
    """``kubectl get pods -o json`` (a List or a single Pod) -> pods, in the server's order."""
    try:
        doc = json.loads(text or "{}")
    except json.JSONDecodeError:
        return []
    items = doc.get("items", []) if doc.get("kind") != "Pod" else [doc]
    pods = []
    for item in items:
        meta, spec, st = item.get("metadata", {}), item.get("spec", {}), item.get("status", {})
        not_running: dict[str, str] = {}
        for cs in st.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state:
                continue
            for what in ("waiting", "terminated"):
                if what in state:
                    not_running[cs.get("name", "")] = f"{what}: {state[what].get('reason') or 'no reason given'}"
        pods.append(PodInfo(name=meta.get("name", ""), namespace=meta.get("namespace", ""),
                            phase=st.get("phase", ""), ip=st.get("podIP") or "",
                            labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
                            containers=[c.get("name", "") for c in spec.get("containers") or []],
                            not_running=not_running))
    return pods


def order_pods(pods: list[PodInfo], order_by: str) -> list[PodInfo]:
    return sorted(pods, key=lambda p: p.index_key(order_by))


def split_exit_line(stderr: str) -> tuple[str, int | None]:
    """kubectl ends stderr with ``command terminated with exit code N`` when the command in the pod
    exited non-zero: (stderr without that line, N), or (stderr, None) when it is not there."""
    lines = stderr.rstrip("\n").split("\n")
    if lines and (m := _EXIT_LINE.match(lines[-1])):
        rest = "\n".join(lines[:-1])
        return (rest + "\n" if rest else ""), int(m.group(1))
    return stderr, None


@dataclass
class KubectlFailure:
    """kubectl's own failure, read from its stderr."""

    kind: str  # see ``classify``
    line: str  # the line that said so
    name: str = ""  # the pod, container, namespace or context it names
    verb: str = ""  # forbidden: what was refused
    resource: str = ""
    user: str = ""
    namespace: str = ""


# (kind, pattern); the first match wins. Named groups fill the KubectlFailure fields.
_FAILURES: list[tuple[str, str]] = [
    ("context-unknown", r"context was not found for specified context: (?P<name>\S+)"),
    ("context-unknown", r'context "(?P<name>[^"]+)" does not exist'),
    ("context-unknown", r"cannot locate context (?P<name>\S+)"),
    ("forbidden", r'is forbidden: User "(?P<user>[^"]*)" cannot (?P<verb>\w+) resource "(?P<resource>[^"]+)"'
                  r'(?: in API group "[^"]*")?(?: in the namespace "(?P<namespace>[^"]+)")?'),
    ("forbidden", r"\(Forbidden\)"),
    ("unauthorized", r"You must be logged in to the server|\(Unauthorized\)|Unauthorized"),
    ("namespace-not-found", r'namespaces "(?P<name>[^"]+)" not found'),
    ("pod-not-found", r'pods "(?P<name>[^"]+)" not found'),
    ("container-not-found", r"container (?P<name>\S+) is not valid for pod"),
    ("container-unspecified", r"a container name must be specified for pod"),
    ("container-not-running", r'container not found \("(?P<name>[^"]+)"\)|container is not created or running|'
                              r"cannot exec into a container in a completed pod|container not running"),
    ("api-unreachable", r"Unable to connect to the server|The connection to the server .* was refused|"
                        r"dial tcp .*(connection refused|i/o timeout|no such host|no route to host)|"
                        r"net/http: TLS handshake timeout|context deadline exceeded|Client\.Timeout exceeded"),
    ("exec-reset", r"connection reset by peer|broken pipe|websocket: close|unexpected EOF|"
                   r"error reading from error stream|use of closed network connection|stream error|"
                   r"an error on the server .* has prevented the request from succeeding"),
    ("config", r"^error: (?:error loading config file|invalid configuration)|^Error in configuration"),
]


def classify(stderr: str) -> KubectlFailure | None:
    """What kubectl itself said went wrong (None: nothing it recognises; the caller decides)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    # the last "error:" / "Error from server" line is kubectl's verdict; klog lines (E1201 ...) precede it
    verdicts = [ln for ln in lines if ln.lower().startswith(("error", "unable to connect", "the connection to"))]
    for text in (verdicts[-1:] if verdicts else []) + lines[::-1]:
        for kind, pattern in _FAILURES:
            m = re.search(pattern, text)
            if m:
                groups = {k: v for k, v in m.groupdict().items() if v}
                return KubectlFailure(kind=kind, line=text, **groups)
    return None


def last_line(stderr: str) -> str:
    """kubectl's verdict: its last ``error...`` line, else its last line."""
    verdicts = [ln.strip() for ln in stderr.splitlines() if ln.strip().lower().startswith("error")]
    return verdicts[-1] if verdicts else _text.last_line(stderr)
