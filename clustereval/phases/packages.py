"""Host packages the phases need, installed before the environment dump, as the runbook does.

Only what a node lacks is installed (apt or dnf, through ``sudo -n`` when not root); a blocked
install is a Gap naming the fallback, never a silent skip.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from clustereval.phases.base import RunContext
from clustereval.phases.pernode import each_node
from clustereval.probes._text import last_line
from clustereval.records import Gap
from clustereval.records.run import NodePackages, PackagesRecord
from clustereval.transport.base import Node


@dataclass(frozen=True)
class Need:
    binary: str
    apt: str
    dnf: str
    why: str
    gpu_only: bool = False  # needed only where the NVIDIA driver is (nvidia-smi answers)
    adapter_only: bool = False  # needed only where an RDMA adapter is (/sys/class/infiniband lists one)
    for_pass: str = ""  # the pass that needs it: not wanted when the operator left that pass out


# what the eval does without each, and the tool's link, are the Gap's words: report/gaps/setup.py
NEEDS = (
    Need("fio", "fio", "fio", "the storage scans", for_pass="storage"),
    Need("ibstat", "infiniband-diags", "infiniband-diags", "InfiniBand/RoCE adapter state and rate",
         adapter_only=True),
    Need("rdma", "iproute2 rdma-core", "iproute rdma-core", "`rdma link` (EFA and RoCE ports)", adapter_only=True),
    Need("dcgmi", "datacenter-gpu-manager-4-cuda{cuda}", "datacenter-gpu-manager-4-cuda{cuda}",
         "`dcgmi diag -r 2` hardware health", gpu_only=True, for_pass="health"),
)

# Probe script: fixed names only, no user data reaches the shell.
_PROBE = ("for b in fio ibstat rdma dcgmi nvidia-smi apt-get dnf sudo; do "
          "command -v $b >/dev/null 2>&1 && echo have:$b; done; echo uid:$(id -u); "
          "[ -n \"$(ls /sys/class/infiniband 2>/dev/null)\" ] && echo have:rdma-adapter; "
          "nvidia-smi 2>/dev/null | sed -n -E 's/.*CUDA Version: ([0-9]+)[.].*/cuda:\\1/p'")
_APT_OPTS = ["-o", "Acquire::Retries=0", "-o", "Acquire::http::Timeout=15", "-o", "Acquire::https::Timeout=15"]


def parse_probe(text: str) -> tuple[set[str], int, str]:
    """(binaries present, uid, CUDA major from the driver or '')."""
    have = {line[5:] for line in text.splitlines() if line.startswith("have:")}
    uid = next((int(line[4:]) for line in text.splitlines() if line.startswith("uid:") and line[4:].isdigit()), -1)
    cuda = next((line[5:] for line in text.splitlines() if line.startswith("cuda:")), "")
    return have, uid, cuda


def packages_for(needs: list[Need], manager: str, cuda: str) -> list[str]:
    names: list[str] = []
    for need in needs:
        spec = need.apt if manager == "apt" else need.dnf
        names += spec.format(cuda=cuda).split()
    return names


PROBE_TIMEOUT_S = 120


class PackagesPhase:
    name = "packages"
    title = "Host packages"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> PackagesRecord:
        record = PackagesRecord(enabled=ctx.config.install_packages)
        wanted = self._wanted(ctx)  # read once for every node
        steps = each_node(ctx, self.name, "the host packages check", ctx.nodes, lambda n: self._node(ctx, n, wanted),
                          what="the package probe and installs")
        record.nodes = [s.value if s.value is not None else
                        NodePackages(node=s.node.name, errors=[s.error.message if s.error else "no answer"])
                        for s in steps]
        record.gaps += [s.gap for s in steps if s.gap is not None]
        for np_ in record.nodes:
            for need in NEEDS:
                if need.binary in np_.missing:
                    record.gaps.append(Gap(phase=self.name, node=np_.node, kind="packages.missing",
                                           facts={"binary": need.binary, "apt": need.apt.split()[0],
                                                  "dnf": need.dnf.split()[0], "enabled": record.enabled}))
        # a tool that could not be installed (no route, no package in the node's repositories) is its
        # Gap above, and the pass that needs it says it did not run: the check itself did its work, so
        # only a node that gave no answer makes this phase partial or failed
        if any(not s.ok for s in steps):
            record.status = "partial" if any(s.ok for s in steps) else "failed"
        return record

    @staticmethod
    def _wanted(ctx: RunContext) -> set[str]:
        """The passes this run plans (``skip`` in cluster.toml and ``--phases`` leave some out)."""
        planned: list[str] = []
        with contextlib.suppress(OSError, ValueError):  # a context without a saved state plans every pass
            planned = list(ctx.store.load_state().phases_planned)
        passes = {n.for_pass for n in NEEDS if n.for_pass}
        wanted = {p for p in passes if not planned or p in planned}
        return wanted - set(ctx.config.skip)

    def _node(self, ctx: RunContext, node: Node, wanted: set[str]) -> NodePackages:
        out = NodePackages(node=node.name)
        # a sub-second probe; the margin is for a saturated node or exec path (kubectl exec through the API
        # server), where 30 s once ran out and a healthy node was reported partial
        probe = ctx.repeatable.run(node, ["sh", "-c", _PROBE], timeout_s=PROBE_TIMEOUT_S)
        have, uid, cuda = parse_probe(probe.stdout)
        # absent hardware is not a Gap: no driver, no DCGM wanted; no RDMA adapter, no adapter tools wanted
        # a pass the operator left out needs nothing either (no DCGM wanted when health is skipped)
        needed = [n for n in NEEDS if ("nvidia-smi" in have or not n.gpu_only)
                  and ("rdma-adapter" in have or not n.adapter_only)
                  and (not n.for_pass or n.for_pass in wanted)]
        out.present = sorted(n.binary for n in needed if n.binary in have)
        lacking = [n for n in needed if n.binary not in have]
        out.manager = "apt" if "apt-get" in have else "dnf" if "dnf" in have else ""
        if not lacking:
            return out
        if not ctx.config.install_packages or not out.manager:
            if ctx.config.install_packages:
                out.errors.append("no apt-get or dnf on the node")
            out.missing = [n.binary for n in lacking]
            return out
        prefix: list[str] = []
        if uid != 0:
            if "sudo" not in have:
                out.errors.append("not root and no sudo")
                out.missing = [n.binary for n in lacking]
                return out
            prefix, out.sudo = ["sudo", "-n"], True
        ctx.progress(self.name, node.name, f"installing {', '.join(n.binary for n in lacking)}", None)
        if out.manager == "apt":
            upd = ctx.transport.run(node, prefix + ["apt-get", *_APT_OPTS, "update"], timeout_s=180)
            if not upd.ok:
                out.errors.append("apt-get update failed: " + last_line(upd.stderr, "no output"))
        for need in lacking:
            pkgs = packages_for([need], out.manager, cuda)
            if out.manager == "apt":
                argv = prefix + ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", *_APT_OPTS, "install", "-y",
                                 "--install-recommends" if need.binary == "dcgmi" else "--no-install-recommends",
                                 *pkgs]
            else:
                argv = prefix + ["dnf", "install", "-y", *pkgs]
            if need.gpu_only and not cuda:
                out.errors.append(f"{need.binary}: the driver's CUDA major could not be read")
                continue
            res = ctx.transport.run(node, argv, timeout_s=600)
            if res.ok:
                out.installed += pkgs
            else:
                out.errors.append(f"{' '.join(pkgs)}: " + last_line(res.stderr or res.stdout, "no output"))
        # a second probe decides what is really there (an install can "fail" after succeeding)
        again, _, _ = parse_probe(ctx.repeatable.run(node, ["sh", "-c", _PROBE], timeout_s=PROBE_TIMEOUT_S).stdout)
        out.missing = [n.binary for n in lacking if n.binary not in again]
        out.present = sorted(set(out.present) | {n.binary for n in lacking if n.binary in again})
        return out


