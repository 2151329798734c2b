"""A gate that the jobs of one pairwise round pass together before each sample.

The pairs of a round are separate jobs, started together but ready at different times (a torch
import, a rendezvous, a node's first contact all take seconds that vary with the node's load). A
pair that times its samples while another pair still starts up, or after it has finished, meets
another load of the fabric (and, where nodes share CPUs, of the CPUs) than the pair beside it, and
the round's comparison then says more about when each pair ran than about its links. So before
each sample, rank 0 of every pair of the round checks in at one TCP store and waits until every
pair of the round has checked in; its pair's other ranks wait at a barrier behind it. Every pair
then takes sample ``i`` together, after every pair has finished sample ``i - 1``. The store listens
at the run's rendezvous port on the first node of the round's first pair, served by that pair's
local rank 0 on that node (torchrun numbers the ranks in the order the nodes joined, so the pair's
rank 0 may be on its other node); it stays up until every pair has passed its last gate.

A pair that never checks in (it failed to start) holds the others only until ``timeout_s``; after
that, or when the store cannot be reached, the pair samples without the gate and says so. Runs on a
node under ``torch.distributed.run``; stdlib + torch only.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass


@dataclass
class GateSpec:
    host: str  # the store's address: the first node of the round's first pair
    port: int
    pairs: int  # pairs in the round: the check-ins each gate waits for
    key: str  # the round's own prefix, so no round reads another's counts
    timeout_s: float

    @classmethod
    def parse(cls, text: str, pairs: int, key: str, timeout_s: float) -> GateSpec:
        """``text``: HOST:PORT (an IPv6 host in brackets)."""
        host, _, port = text.rpartition(":")
        return cls(host=host.strip("[]"), port=int(port), pairs=pairs, key=key, timeout_s=timeout_s)


class RoundGate:
    """One per process that takes part: ``serve`` (the store's node) and/or ``check_in`` (a pair's
    rank 0). ``wait`` says whether each gate was passed with every pair; ``error`` why not."""

    def __init__(self, spec: GateSpec, *, serve: bool, check_in: bool) -> None:
        self.spec = spec
        self.store = None
        self.serving = serve
        self.checking_in = check_in
        self.error = ""
        self._count = 0
        import torch.distributed as dist

        try:
            self.store = dist.TCPStore(spec.host, spec.port, is_master=serve,
                                       timeout=datetime.timedelta(seconds=spec.timeout_s), wait_for_workers=False)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the store means: sample ungated
            self._give_up(f"the round's gate at {spec.host}:{spec.port} could not be "
                          f"{'served' if serve else 'reached'}: {exc}")

    def _give_up(self, why: str) -> None:
        self.error = self.error or why
        self.store = None

    def wait(self) -> bool:
        """Check in and wait for every pair of the round; False when this gate was not passed
        together (this pair then samples on its own from here on)."""
        self._count += 1
        if self.store is None or not self.checking_in:
            return False
        key = f"{self.spec.key}/gate{self._count}"
        try:
            if self.store.add(key, 1) >= self.spec.pairs:
                self.store.set(f"{key}/open", "1")
            self.store.wait([f"{key}/open"], datetime.timedelta(seconds=self.spec.timeout_s))
            return True
        except Exception as exc:  # noqa: BLE001 - a pair that never came, or a store that went away
            self._give_up(f"gate {self._count} of the round was not passed together: {exc}")
            return False

    def close(self) -> None:
        """The serving pair keeps the store up until every pair has passed its last gate."""
        if self.store is None:
            return
        try:
            if self.checking_in:
                self.store.add(f"{self.spec.key}/finished", 1)
            if self.serving:
                deadline = time.monotonic() + min(self.spec.timeout_s, 30.0)
                while (self.store.add(f"{self.spec.key}/finished", 0) < self.spec.pairs
                       and time.monotonic() < deadline):
                    time.sleep(0.05)
        except Exception:  # noqa: BLE001 - the samples are taken; nothing is left to hold together
            pass
        self.store = None
