"""Where a run wrote on the nodes, and what cleanup did with it.

The run's raw folder keeps both (``scratch/areas.json``, ``scratch/cleanup.json``), so
``clustereval cleanup RUN_DIR`` can finish the job after an interrupted or crashed run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ScratchArea:
    """One folder the eval created: ``<mount>/<user>/cluster-eval-<date>-<time>/``."""

    node: str  # the node that created it (any node sees it when shared)
    mount: str  # the declared path it lives under (local_scratch or one of shared_paths)
    path: str  # the folder itself
    trash_root: str  # ``<mount>/<user>/trash``: same filesystem, so a move is a rename
    shared: bool = False  # on a shared mount: one folder for every node
    node_local_tmp: bool = False  # kept for old run folders; cleanup never trusts it (it checks the node)
    created_utc: str = ""


@dataclass
class ScratchMove:
    """What cleanup did with one area."""

    node: str
    path: str
    action: str  # moved | deleted | absent | failed (tried, did not work) | refused (not this run's: untouched)
    moved_to: str = ""  # the trash folder it now sits in
    size_bytes: int = 0  # du of the folder before the move
    trash_dir: str = ""  # ``<mount>/<user>/trash/<stamp>``: what a purge would remove
    shared: bool = False  # the trash sits on a shared mount (one purge serves every node)
    error: str = ""  # why it failed or was refused
    finished_utc: str = ""
