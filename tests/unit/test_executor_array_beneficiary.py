"""An array's own pending record as a plan's beneficiary (FakeSlurm, which has no arrays, with
its ``split_array_task`` answering as Slurm does): the plan is made for the record's first task,
split off as a job of its own, which the guard reserves, pins and raises; the record is left
alone. When Slurm refuses the split, nothing is done and the cycle goes on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.errors import PlanRefusedError, SlurmError
from hai_slurm.priority.executor.guard import TOP_PRIORITY
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.slurm_plugins.types import ClusterSnapshot


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs, each held by a LOW job that saves in 1 s."""
    w = make_world(tmp_path)
    for i in range(4):
        w.victim(f"v{i}", Behaviour(ack_after=1.0))
    return w


def _as_array_record(snap: ClusterSnapshot, job_id: int) -> ClusterSnapshot:
    """``snap`` with ``job_id`` shown as an array's own pending record of tasks 1-2."""
    jobs = tuple(replace(j, array_job_id=job_id, array_tasks="1-2") if j.job_id == job_id
                 else j for j in snap.jobs)
    return replace(snap, jobs=jobs)


def test_the_plan_is_for_the_records_first_task_split_off(world: World) -> None:
    record = world.pending("array", gpus=8)
    task = world.pending("array-task-1", gpus=8)   # the job Slurm makes of task 1
    asked: list[int] = []

    def split(job_id: int) -> int:
        asked.append(job_id)
        return task if job_id == record else job_id

    world.fake.split_array_task = split  # type: ignore[method-assign]
    victim = next(iter(j.job_id for j in world.fake.snapshot().running))
    ex = world.executor()
    snap = _as_array_record(world.fake.snapshot(), record)
    plan_id = ex.start(ExecutionRequest(record, (victim,), nodes=("n1",)), snap)
    assert asked == [record]
    plan = world.repo.get_plan(plan_id)
    assert [b.job_id for b in plan.beneficiaries] == [task]
    assert plan.beneficiaries[0].user == "alice"
    t, r = world.fake.jobs[task], world.fake.jobs[record]
    assert t.req_nodes == "n1" and t.reservation and t.priority == TOP_PRIORITY
    assert r.req_nodes == "" and not r.reservation and r.priority != TOP_PRIORITY
    assert ex.claims().beneficiaries == {task}


def test_a_plain_job_is_not_split(world: World) -> None:
    bene = world.pending("bene", gpus=8)
    asked: list[int] = []
    world.fake.split_array_task = lambda j: asked.append(j) or j  # type: ignore[method-assign]
    victim = next(iter(j.job_id for j in world.fake.snapshot().running))
    plan_id = world.executor().start(ExecutionRequest(bene, (victim,), nodes=("n1",)),
                                     world.fake.snapshot())
    assert asked == []
    assert [b.job_id for b in world.repo.get_plan(plan_id).beneficiaries] == [bene]


def test_a_refused_split_starts_nothing(world: World) -> None:
    record = world.pending("array", gpus=8)

    def refuse(job_id: int) -> int:
        raise SlurmError("scontrol update JobId=A_1 failed: Invalid job id specified")

    world.fake.split_array_task = refuse  # type: ignore[method-assign]
    victim = next(iter(j.job_id for j in world.fake.snapshot().running))
    writes = len(world.fake.writes)
    with pytest.raises(PlanRefusedError, match="could not be made a job of its own"):
        world.executor().start(ExecutionRequest(record, (victim,), nodes=("n1",)),
                               _as_array_record(world.fake.snapshot(), record))
    assert world.repo.history() == []
    assert world.fake.writes[writes:] == []
    assert world.fake.reservations() == ()


def test_a_split_task_that_started_meanwhile_starts_nothing(world: World) -> None:
    """Slurm started the task between the read and the split: no plan, no victim asked."""
    record = world.pending("array", gpus=8)
    running = [j.job_id for j in world.fake.snapshot().running]
    world.fake.split_array_task = lambda job_id: running[1]  # type: ignore[method-assign]
    writes = len(world.fake.writes)
    with pytest.raises(PlanRefusedError, match="does not wait any more"):
        world.executor().start(ExecutionRequest(record, (running[0],), nodes=("n1",)),
                               _as_array_record(world.fake.snapshot(), record))
    assert world.repo.history() == []
    assert world.fake.writes[writes:] == []
