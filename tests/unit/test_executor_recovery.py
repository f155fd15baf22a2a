"""A killed executor's plans are finished or rolled back on restart; nothing stays held."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.priority.executor.guard import context_key
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.store import PlanJob, PlanState, VictimState
from hai_slurm.slurm_plugins.types import JobState


class Crash(BaseException):
    """Stands for SIGKILL: nothing after the crash point runs (not even except/finally logic
    that catches Exception)."""


def crash_at(point: str):  # type: ignore[no-untyped-def]
    def hook(name: str, _plan: int) -> None:
        if name == point:
            raise Crash(point)
    return hook


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs."""
    return make_world(tmp_path)


def setup(world: World) -> tuple[list[int], int, int, ExecutionRequest]:
    """Two 8-GPU victims on n1/n2, a held-able competitor and a 16-GPU beneficiary."""
    victims = [world.victim(f"v{i}", Behaviour(ack_after=0.5 + i)) for i in range(4)]
    other = world.pending("other", gpus=8, priority=100, cls="NORMAL")
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 10.0))
    return victims, other, bene, req


def crashed_run(world: World, req: ExecutionRequest, point: str) -> int:
    """Run until ``point``, crash there; return the plan id."""
    ex = world.executor()
    ex.hook = crash_at(point)
    with pytest.raises(Crash):
        ex.run(req, world.fake.snapshot())
    (plan,) = world.repo.unfinished_plans()
    return plan.plan_id


def nothing_held(world: World) -> None:
    held = [j.job_id for j in world.fake.jobs.values() if j.held]
    assert held == [], f"jobs left held: {held}"


def test_killed_between_phase_1_and_phase_2_is_completed(world: World) -> None:
    """Crash after every victim acknowledged (and exited): restart requeues them, B starts."""
    victims, other, bene, req = setup(world)
    plan_id = crashed_run(world, req, "phase1_done")
    assert world.repo.get_plan(plan_id).state is PlanState.SIGNALLED
    # the guard is still up: the crash left the reservation (nobody is held)
    assert [r.nodes for r in world.fake.reservations()] == [("n1", "n2")]
    assert not world.fake.jobs[other].held
    (result,) = world.executor().recover()
    assert result.state is PlanState.DONE, result.note
    assert world.fake.jobs[bene].state is JobState.RUNNING
    for v in victims[:2]:
        assert world.fake.jobs[v].state is JobState.PENDING
        assert world.fake.jobs[v].restart_count == 1
    nothing_held(world)
    assert world.fake.reservations() == ()
    assert world.repo.get_value(context_key(plan_id)) is None
    assert world.repo.unfinished_plans() == []


def test_killed_before_anyone_was_asked_and_the_beneficiary_started_alone(
        world: World) -> None:
    """Crash right after the plan was written (nobody asked); meanwhile a job ends by itself
    and the beneficiary starts on its GPUs. The restart ends the plan as not needed (it
    preempted nobody, so it is not DONE: its beneficiary gets no preempting event), instead
    of a refused transition that stopped every later step; nothing is held or reserved."""
    victim = world.victim("v", Behaviour(ack_after=1.0))
    fillers = [world.victim(f"f{i}", Behaviour(ack_after=None)) for i in range(3)]
    bene = world.pending("bene", gpus=8)
    plan_id = crashed_run(world, ExecutionRequest(bene, (victim,), nodes=("n1",)), "planned")
    assert world.repo.get_plan(plan_id).state is PlanState.PLANNED
    world.fake.finish(fillers[0], JobState.COMPLETED)
    world.fake.schedule()
    assert world.fake.jobs[bene].state is JobState.RUNNING
    (result,) = world.executor().recover()
    assert result.state in (PlanState.ABORTED, PlanState.ROLLED_BACK), result.note
    assert "started without it" in result.note
    assert world.fake.jobs[victim].state is JobState.RUNNING
    assert world.fake.jobs[victim].restart_count == 0
    nothing_held(world)
    assert world.fake.reservations() == ()
    assert world.repo.unfinished_plans() == []


def test_killed_after_the_requeue_is_finished(world: World) -> None:
    """Crash right after phase 2's requeue-hold: restart releases everybody and ends done."""
    victims, _other, bene, req = setup(world)
    crashed_run(world, req, "requeued")
    assert world.fake.jobs[victims[0]].held  # requeued held, crash before release
    (result,) = world.executor().recover()
    assert result.state is PlanState.DONE
    nothing_held(world)
    assert world.fake.jobs[bene].state is JobState.RUNNING


def test_killed_in_phase_1_then_beneficiary_cancelled_is_rolled_back(world: World) -> None:
    """Beneficiary gone after the crash: wait out the asked victims, requeue those that
    exited (not held), release the guard, roll back."""
    victims, _other, bene, req = setup(world)
    plan_id = crashed_run(world, req, "asked")
    world.fake.cancel(bene)
    (result,) = world.executor().recover()
    assert result.state is PlanState.ROLLED_BACK
    assert "no longer waits" in result.note
    for v in victims[:2]:  # both acknowledged and exited while recovery waited
        assert world.fake.jobs[v].state is JobState.PENDING
        assert world.fake.jobs[v].restart_count == 1
    nothing_held(world)
    states = {v.job_id: v.state for v in world.repo.get_plan(plan_id).victims}
    assert set(states.values()) == {VictimState.REQUEUED}


def test_killed_in_phase_1_resumes_waiting_with_the_original_deadline(world: World) -> None:
    """Beneficiary still waiting: the restarted executor keeps collecting acks and finishes."""
    _victims, _other, bene, req = setup(world)
    crashed_run(world, req, "asked")
    (result,) = world.executor().recover()
    assert result.state is PlanState.DONE
    assert world.fake.jobs[bene].state is JobState.RUNNING
    nothing_held(world)


def test_plan_without_context_is_rolled_back(world: World) -> None:
    """A daemon killed between create_plan and storing its context did nothing: roll back."""
    plan = world.repo.create_plan(at=1.0, beneficiaries=[PlanJob(9, "t", "u")],
                                  victims=[PlanJob(8, "t2", "u2")], reason="test")
    ex = PreemptionExecutor(world.fake, world.repo, clock=world.clock)
    (result,) = ex.recover()
    assert result.state is PlanState.ROLLED_BACK
    assert world.repo.get_plan(plan.plan_id).steps[-1].note.startswith("recovered without")


def test_recover_with_nothing_unfinished_does_nothing(world: World) -> None:
    """The daemon calls recover() every cycle; with no unfinished plan it touches nothing."""
    assert world.executor().recover() == []
    assert world.fake.writes == []
