"""A gate that the jobs of one pairwise round pass together before each sample.

The pairs of a round are separate jobs, started together but ready at different times (a torch
import, a rendezvous, a node's first contact all take seconds that vary with the node's load). A
pair that times its samples while another pair still starts up, or after it has finished, meets
another load of the fabric (and, where nodes share CPUs, of the CPUs) than the pair beside it, and
the round's comparison then says more about when each pair ran than about its links. So before
each sample, rank 0 of every pair of the round checks in at one TCP store (served by rank 0 of the
round's first pair, at the run's rendezvous port on that pair's first node) and waits until every
pair of the round has checked in; its pair's other ranks wait at a barrier behind it. Every pair
then takes sample ``i`` together, after every pair has finished sample ``i - 1``.

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
    index: int  # this pair's place in the round; 0 serves the store
    key: str  # the round's own prefix, so no round reads another's counts
    timeout_s: float

    @classmethod
    def parse(cls, text: str, pairs: int, index: int, key: str, timeout_s: float) -> GateSpec:
        """``text``: HOST:PORT (an IPv6 host in brackets)."""
        host, _, port = text.rpartition(":")
        return cls(host=host.strip("[]"), port=int(port), pairs=pairs, index=index, key=key, timeout_s=timeout_s)


class RoundGate:
    """Rank 0 of each pair holds one; ``passed`` says whether every gate so far saw every pair."""

    def __init__(self, spec: GateSpec) -> None:
        self.spec = spec
        self.store = None
        self.passed = True
        self.error = ""
        self._count = 0
        import torch.distributed as dist

        try:
            self.store = dist.TCPStore(spec.host, spec.port, is_master=spec.index == 0,
                                       timeout=datetime.timedelta(seconds=spec.timeout_s), wait_for_workers=False)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the store means: sample ungated
            self._give_up(f"the round's gate at {spec.host}:{spec.port} could not be reached: {exc}")

    def _give_up(self, why: str) -> None:
        self.passed = False
        self.error = self.error or why
        self.store = None

    def wait(self) -> bool:
        """Check in and wait for every pair of the round; False when this gate was not passed
        together (this pair then samples on its own from here on)."""
        self._count += 1
        if self.store is None:
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
            self.store.add(f"{self.spec.key}/finished", 1)
            if self.spec.index == 0:
                deadline = time.monotonic() + min(self.spec.timeout_s, 30.0)
                while (self.store.add(f"{self.spec.key}/finished", 0) < self.spec.pairs
                       and time.monotonic() < deadline):
                    time.sleep(0.05)
        except Exception:  # noqa: BLE001 - the samples are taken; nothing is left to hold together
            pass
        self.store = None
