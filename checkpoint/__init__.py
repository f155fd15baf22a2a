"""Job-side checkpointing for preemptible Slurm jobs (standard library only).

Use it in a training loop::

    from hai_slurm.checkpoint import Checkpointer

    ck = Checkpointer.from_env()                   # HAI_CHECKPOINT_DIR, SLURM_JOB_ID, RANK, ...
    state = ck.load_latest() or {"step": 0, ...}   # newest *valid* checkpoint, RNG restored
    for step in range(state["step"], total):
        train_one_step(state)
        state["step"] = step + 1
        if ck.requested():                         # USR2 (configurable) or SIGTERM arrived
            ck.save(state)                         # atomic, durable, checksummed; rank 0 only
            ck.acknowledge_and_exit()              # ack.json + exit code 75: safe to requeue
        if ck.due(state["step"]):
            ck.save(state)                         # periodic saves

Trust model: the default serializer is pickle, and unpickling runs code chosen by whoever wrote
the file. The loader therefore reads only files owned by the current user and not writable by
group/others, in a directory with the same property; only point it at checkpoints you wrote. Pass
``serializer="json"`` for states made of JSON values if that is not good enough.

Programs that cannot import this package run under ``hai-run -- CMD ...`` instead. The contract
with the scheduler (control directory, phase and ack files, exit code) is in ``PROTOCOL.md``.
"""

from hai_slurm.checkpoint.checkpointer import Checkpointer
from hai_slurm.checkpoint.env import JobEnv, job_env_from
from hai_slurm.checkpoint.protocol import (
    EXIT_REQUEUE,
    Ack,
    JobReport,
    Phase,
    PhaseRecord,
    read_job_report,
)
from hai_slurm.checkpoint.store import CheckpointInfo, Serializer

__all__ = [
    "EXIT_REQUEUE",
    "Ack",
    "CheckpointInfo",
    "Checkpointer",
    "JobEnv",
    "JobReport",
    "Phase",
    "PhaseRecord",
    "Serializer",
    "job_env_from",
    "read_job_report",
]
