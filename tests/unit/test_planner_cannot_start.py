"""A pending job that Slurm keeps back for something free GPUs do not give (a begin time, a
dependency, its array's task limit, a limit of its QOS or association, ...) gets no plan: its
victims would save and restart for nothing. ``priority explain`` says why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from executor_world import Behaviour, make_world, plan_for_high_job

from hai_slurm.priority.daemon.live import not_planned
from hai_slurm.priority.hooks import Claims
from hai_slurm.slurm_plugins.types import Job, JobState


def _job(reason: str, state: JobState = JobState.PENDING) -> Job:
    return Job(job_id=7, name="j", user="u", uid=1000, account="a", partition="p", qos="q",
               state=state, state_flags=(), reason=reason, priority=1, submit_time=0,
               eligible_time=0, start_time=None, time_limit=None, node_count=1, nodes=(),
               node_list="", gpus_requested=8, gpus_per_node={}, restart_count=0,
               requeue=True, comment="", admin_comment="", batch=True, held=False)


@pytest.mark.parametrize(("reason", "blocker"), [
    ("BeginTime", "BeginTime"),
    ("Dependency", "Dependency"),
    ("DependencyNeverSatisfied", "DependencyNeverSatisfied"),
    ("JobArrayTaskLimit", "JobArrayTaskLimit"),
    ("QOSMaxGRESPerUser", "QOSMaxGRESPerUser"),
    ("AssocGrpGRES", "AssocGrpGRES"),
    ("MaxGRESPerAccount", "MaxGRESPerAccount"),
    ("PartitionDown", "PartitionDown"),
    ("Reservation", "Reservation"),
    ("Resources", None),
    ("Priority", None),
    ("None", None),
    ("", None),
    ("ReqNodeNotAvail, UnavailableNodes:n3", None),
    ("Nodes_required_for_job_are_DOWN", None),
])
def test_start_blocker_names_the_reasons_free_gpus_do_not_lift(reason: str,
                                                                blocker: str | None) -> None:
    assert _job(reason).start_blocker == blocker


def test_a_running_job_has_no_start_blocker() -> None:
    assert _job("BeginTime", JobState.RUNNING).start_blocker is None


def test_waits_for_gpus_unless_held_or_kept_back_but_a_begin_time_soon_counts() -> None:
    """A begin time within ``soon`` (a requeued job's, its requeue delay away) is waited out
    while the victims save; one further off, a dependency, a hold, a running job are not."""
    now = 1000.0
    assert _job("Resources").waits_for_gpus(now, 60) and _job("Priority").waits_for_gpus(now, 60)
    assert _job("ReqNodeNotAvail, UnavailableNodes:n3").waits_for_gpus(now, 60)
    begin = _job("BeginTime")
    assert dataclasses.replace(begin, eligible_time=1011).waits_for_gpus(now, 60)
    assert dataclasses.replace(begin, eligible_time=1060).waits_for_gpus(now, 60)
    assert not dataclasses.replace(begin, eligible_time=1061).waits_for_gpus(now, 60)
    assert not dataclasses.replace(begin, eligible_time=None).waits_for_gpus(now, 60)
    assert not _job("Dependency").waits_for_gpus(now, 60)
    assert not dataclasses.replace(_job("JobHeldUser"), held=True).waits_for_gpus(now, 60)
    assert not dataclasses.replace(_job("Resources"), held=True).waits_for_gpus(now, 60)
    assert not _job("None", JobState.RUNNING).waits_for_gpus(now, 60)


def test_no_plan_for_a_high_job_waiting_for_its_begin_time(tmp_path: Path) -> None:
    """Four LOW jobs fill 4 x 8 GPUs; a HIGH 8-GPU job with ``--begin`` an hour away waited
    10 min: no verdict, no plan, and explain says it waits for its begin time. The same job
    without ``--begin`` gets its plan (the victims were there to take)."""
    for begin in (True, False):
        tmp = tmp_path / str(begin)
        tmp.mkdir()
        world = make_world(tmp)
        for i in range(4):
            world.victim(f"v{i}", Behaviour(ack_after=0.5))
        last, bene = plan_for_high_job(world, tmp, begin_in=3600 if begin else None)
        planned = {p.beneficiary for p in last.plans}
        if begin:
            assert bene not in last.decisions and not planned
            job = world.fake.snapshot().job(bene)
            assert job is not None and job.start_blocker == "BeginTime"
            text = not_planned(job, Claims(), float(world.fake.now), 60.0)
            assert "begin time" in text and "BeginTime" in text
            soon = dataclasses.replace(job, eligible_time=world.fake.now + 30)
            assert "BeginTime" not in not_planned(soon, Claims(), float(world.fake.now), 60.0)
        else:
            assert planned == {bene}
