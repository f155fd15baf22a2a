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

Sharded multi-rank jobs (FSDP, DCP, DeepSpeed) keep their framework's save and load::

    part = ck.load_with(lambda p: dcp.load(state, checkpoint_id=p.checkpoint))
    ...
        if ck.requested(step):                     # the same step on every rank
            ck.save_with(lambda p: dcp.save(state, checkpoint_id=p.checkpoint), step=step,
                         shared_files=DCP_FILES)   # committed once every rank's part is durable
            ck.acknowledge_and_exit()              # barrier, destroy process group, exit 75

Recipes (torch.save, DCP sync and async, Lightning) are in ``RECIPES.md``.

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
    ReportReader,
    read_job_report,
)
from hai_slurm.checkpoint.sharded import DCP_FILES, Part, ShardedInfo, SharedFiles
from hai_slurm.checkpoint.signals import ignore_requests_in_worker
from hai_slurm.checkpoint.store import CheckpointInfo, Serializer

__all__ = [
    "DCP_FILES",
    "EXIT_REQUEUE",
    "Ack",
    "CheckpointInfo",
    "Checkpointer",
    "JobEnv",
    "JobReport",
    "Part",
    "Phase",
    "PhaseRecord",
    "ReportReader",
    "Serializer",
    "ShardedInfo",
    "SharedFiles",
    "ignore_requests_in_worker",
    "job_env_from",
    "read_job_report",
]
