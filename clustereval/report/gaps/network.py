"""Wordings of the network phases' Gaps: connectivity, the all-reduce sweeps, the pairwise hunt (also as
`clustereval pairwise` and `clustereval debug nccl` run it)."""

from __future__ import annotations

from clustereval.analysis.rendezvous import fix_for
from clustereval.records import Gap
from clustereval.records.network import RendezvousPlan
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import no_paths, raw_output, status_words

# the launches a "network.launch-failed" Gap names (its fact "job")
LAUNCH_JOBS = {"connectivity": "The connectivity test", "allreduce-inter": "The inter-node all-reduce benchmark"}


def _exit_words(state: str, rc: int | None, seconds: float, cause: str) -> str:
    if state == "failed":
        return f"exited with {status_words(rc)} after {seconds:.0f} s" + (f" ({cause})" if cause else "")
    if state == "unreachable":
        return f"could not be reached ({cause})"
    return f"{cause or state} after {seconds:.0f} s"


def applied_fix(diagnosis: str, facts: dict) -> str:
    """The plan of action for a failed launch, never a fix the launch already had: ``facts["applied"]``
    holds what its rendezvous plan set (``is_host_node``, ``local_addrs``, ``socket_ifnames``)."""
    return fix_for(diagnosis, RendezvousPlan(**facts.get("applied", {})))


@wording("network.launch-failed")
def _launch_failed(g: Gap) -> tuple[str, str]:
    """A job that failed to start or finish: a launcher problem, with each node's own exit."""
    f = g.facts
    why = f.get("diagnosis_text") or raw_output(f.get("error", ""), "the launch failed")
    exits = "; ".join(f"{node} {_exit_words(state, rc, seconds, cause)}" for node, state, rc, seconds, cause
                      in f.get("exits", []))
    what = LAUNCH_JOBS.get(f["job"], f["job"])
    diagnosis = f.get("diagnosis", "")
    if f.get("not_joined") and diagnosis in ("", "other"):
        diagnosis = "not-joined"
    return (f"{what} did not run: torchrun on {', '.join(f.get('nodes', []))} failed ({why}). Node by node: {exits}. "
            f"Log: `{f.get('log', '')}`.", applied_fix(diagnosis, f))


@wording("network.wrong-interpreter")
def _wrong_interpreter(g: Gap) -> tuple[str, str]:
    return (f"A worker did not run on the eval Python: {raw_output(no_paths(g.facts['problem']), 'another interpreter')}.",
            "make the nodes' eval Python the interpreter torchrun starts (see the Eval Python gap), then run "
            "`clustereval run --resume RUN_DIR`")


@wording("network.wrong-sum")
def _wrong_sum(g: Gap) -> tuple[str, str]:
    return (f"The connectivity all-reduce returned a wrong sum on {g.facts['ranks']} rank(s).",
            "run `clustereval snapshot` on the nodes and check the GPUs' health")


@wording("network.intra-sweep-failed")
def _intra_sweep_failed(g: Gap) -> tuple[str, str]:
    return (f"The intra-node all-reduce sweep on {g.node} did not complete: {raw_output(g.facts['error'], 'no error')}.",
            applied_fix(g.facts.get("diagnosis", ""), g.facts))


@wording("network.inter-sweep-failed")
def _inter_sweep_failed(g: Gap) -> tuple[str, str]:
    return (f"The inter-node all-reduce sweep did not complete: {raw_output(g.facts['error'], 'no error')}.",
            "read the launch log in the raw folder")


@wording("pairwise.pair-failed")
def _pair_failed(g: Gap) -> tuple[str, str]:
    f = g.facts
    return (f"The pair {f['a']} + {f['b']} did not complete ({raw_output(f['error'], 'no error')}).",
            "read the pair's launch log in the raw folder, fix the cause and run `clustereval pairwise` again")


@wording("pairwise.not-judged")
def _not_judged(g: Gap) -> tuple[str, str]:
    f = g.facts
    who = f"; {', '.join(f['not_joined'])} joined no pair" if f.get("not_joined") else ""
    return (f"No straggler was judged: {f['why']}{who}. This is a launcher problem, not a verdict on the fabric.",
            "fix the launch (see the pairs' errors above), then run `clustereval pairwise` again")


def _pairs_words(pairs: list[str]) -> str:
    return ", ".join(pairs[:-1]) + f" and {pairs[-1]}" if len(pairs) > 1 else "".join(pairs)


@wording("pairwise.round-ungated")
def _round_ungated(g: Gap) -> tuple[str, str]:
    """A round of several pairs whose pairs did not take every sample together (workers.roundgate)."""
    f = g.facts
    ungated, missing = list(f.get("ungated", [])), list(f.get("missing", []))
    verb = "was" if len(ungated) == 1 else "were"
    why = f" ({raw_output(f['why'], '')})" if f.get("why") else ""
    if missing:
        cause = (f"{_pairs_words(missing)} did not complete, so {'it' if len(missing) == 1 else 'they'} did not "
                 f"come to every gate of the round, and {_pairs_words(ungated)} {verb} sampled without "
                 f"{'it' if len(missing) == 1 else 'them'} after waiting up to {f.get('timeout_s', 0):g} s{why}")
    else:
        cause = f"{_pairs_words(ungated)} did not pass the round's gate with every pair{why}"
    return (f"Round {f['round']} of the pairwise hunt ({_pairs_words(list(f.get('pairs', [])))}) did not take its "
            f"samples together: {cause}. Those samples may have overlapped other pairs' traffic or been taken "
            "without it, so they were neither a healthy reference nor evidence of a slow pair.",
            "read the round's launch logs in the raw folder, fix the cause that stopped a pair before the "
            "round's gate, and run `clustereval pairwise` again")
