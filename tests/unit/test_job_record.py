"""One reader of a job's #HAI record: the policy and the executor see the same team, class,
grace and checkpoint directory for every job, with the same fallbacks."""

from __future__ import annotations

import dataclasses

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.priority.daemon.job_values import job_class
from hai_slurm.priority.executor.records import team_of
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_record
from hai_slurm.slurm_plugins.fake import FakeSlurm
from hai_slurm.slurm_plugins.job_record import FALLBACK_TEAM, job_record
from hai_slurm.slurm_plugins.types import Job


def _job(admin_comment: str = "", account: str = "", requeue: bool = True) -> Job:
    fake = FakeSlurm()
    jid = fake.submit(name="j", account=account or "x")
    job = fake.snapshot().job(jid)
    assert job is not None
    return dataclasses.replace(job, admin_comment=admin_comment, account=account,
                               requeue=requeue)


RECORD = format_record(HaiJobInfo(priority="HIGH", job_class="HIGH", team="vision",
                                  preemptible=True, grace=45, source=ClassOrigin.DIRECTIVE,
                                  checkpoint_dir="/ck/run1"))


def test_record_fields_reach_every_reader() -> None:
    """Team, class, grace and checkpoint dir come from the record."""
    job = _job(RECORD, account="acct")
    rec = job_record(job)
    assert (rec.priority, rec.team, rec.grace, rec.checkpoint_dir) == (
        "HIGH", "vision", 45, "/ck/run1")
    assert team_of(job) == job_class(job, PriorityClass.NORMAL).team == "vision"


def test_no_record_no_account_is_the_fallback_team_everywhere() -> None:
    """Without record and account, policy and executor both count the job for the fallback
    team (the executor used to fall back to the user name, so counters disagreed)."""
    job = _job("", account="")
    assert job_record(job).team == FALLBACK_TEAM
    assert team_of(job) == job_class(job, PriorityClass.NORMAL).team == FALLBACK_TEAM
    assert job_record(_job("", account="acct")).team == "acct"


def test_no_requeue_makes_a_job_unpreemptible_whatever_the_record_says() -> None:
    """``--no-requeue`` wins over a record that says preemptible."""
    assert job_record(_job(RECORD, requeue=True)).preemptible
    assert not job_record(_job(RECORD, requeue=False)).preemptible
    assert job_record(_job("", requeue=True)).grace is None
