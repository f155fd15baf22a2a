"""Array tasks acknowledge: the job side and the daemon name the control directory alike."""

from __future__ import annotations

import os
from pathlib import Path

from hai_slurm.checkpoint import Checkpointer, read_job_report
from hai_slurm.checkpoint.env import job_env_from
from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.executor.records import victim_contexts
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm


def array_task_env(tmp: Path, own_id: int) -> dict[str, str]:
    """What Slurm sets in task 7 of array 100, whose own id is ``own_id``."""
    return {"SLURM_JOB_ID": str(own_id), "SLURM_ARRAY_JOB_ID": "100",
            "SLURM_ARRAY_TASK_ID": "7", "HAI_CHECKPOINT_DIR": str(tmp / "ck")}


def test_array_task_names_itself_by_its_own_job_id(tmp_path: Path) -> None:
    """The control directory is ``.hai/<SLURM_JOB_ID>``, never ``.hai/100_7``."""
    env = job_env_from(array_task_env(tmp_path, 107))
    assert env.job_id == "107"
    assert env.control_dir == tmp_path / "ck" / ".hai" / "107"


def test_daemon_reads_an_array_tasks_ack(tmp_path: Path) -> None:
    """An array task acknowledges with the library; the executor's view of the same job (its
    raw id from Slurm) finds the ack in the directory it computes. (Before: the job wrote to
    ``.hai/100_7`` and the daemon looked in ``.hai/107``: never seen.)"""
    fake = FakeSlurm([FakeNode("n1", gpus=8), FakeNode("n2", gpus=8)], now=1_800_000_000)
    info = HaiJobInfo(priority="LOW", job_class="LOW", team="a", preemptible=True, grace=30,
                      source=ClassOrigin.DIRECTIVE, checkpoint_dir=str(tmp_path / "ck"))
    victim = fake.submit(name="task", uid=os.getuid(), account="a", qos="low", nodes=1,
                         gpus_per_node=8, admin_comment=format_admin_comment(info))
    fake.schedule()
    bene = fake.submit(name="b", uid=os.getuid(), account="b", qos="high", nodes=2,
                       gpus_per_node=8)
    ck = Checkpointer.from_env(environ=array_task_env(tmp_path, victim), install_signals=False)
    try:
        ck.save({"step": 5}, step=5)
        ack = ck.acknowledge()
    finally:
        ck.close()
    assert ack is not None
    contexts = victim_contexts(ExecutionRequest(bene, (victim,)), fake.snapshot(),
                               fake.job_facts([bene, victim]), 60.0)
    assert not isinstance(contexts, str), contexts
    (ctx,) = contexts
    assert ctx.control_dir is not None
    report = read_job_report(ctx.control_dir, str(victim), os.getuid())
    assert report.ack is not None and report.ack.step == 5, report.problems
