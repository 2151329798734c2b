"""Run commands on the nodes of a Slurm allocation with ``srun``.

The allocation is either one that exists (``[slurm] job_id`` or ``SLURM_JOB_ID``; left running)
or one this transport asks for with ``salloc --no-shell`` and cancels with ``scancel`` in
``close()`` (also at interpreter exit, so Ctrl-C and errors release it too). Every command is a
job step: ``srun --jobid J --overlap --nodes 1 --nodelist NODE``; the same command on every node
is one step over all of them. Files travel as tar streams through a step's stdin/stdout, so
nothing assumes a shared filesystem.

Slurm's own failures (no controller, no allocation, a node down, the time limit reached, an
unknown partition) are read from srun/salloc stderr by ``probes.slurm`` and raised as one-line
errors that name the node or the ``[slurm]`` setting.

Where each part lives: ``allocation`` asks for, adopts, renews and gives back the job (and
cancels what is left at interpreter exit); ``transport`` runs steps and copies through it;
``steps`` is srun as a local process; ``failures`` maps srun/salloc stderr to errors;
``client`` wraps scontrol, squeue, sinfo and scancel.
"""

from clustereval.transport.slurm.transport import SlurmTransport

__all__ = ["SlurmTransport"]
