"""The two-phase executor on FakeSlurm: all acknowledge, one misses (abort / force), saving."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_world import T0, Behaviour, World, make_world

from hai_slurm.errors import ConfigError, StateError
from hai_slurm.priority.executor.guard import TOP_PRIORITY, context_key
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutionRequest, ExecutorSettings
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import EventKind
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.slurm_plugins.types import JobState

ABORT = DeadlineAction.ABORT  # the policy these tests exercise (the default is force)


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs."""
    return make_world(tmp_path)


def fill(world: World, behaviours: list[Behaviour]) -> list[int]:
    """Four 8-GPU victims, one per node."""
    return [world.victim(f"v{i}", b) for i, b in enumerate(behaviours)]


def steps(world: World, plan_id: int) -> list[str]:
    """The plan's recorded states, in order."""
    return [s.to_state.value for s in world.repo.get_plan(plan_id).steps]


def test_all_acknowledge_then_all_requeued_and_beneficiary_starts(world: World) -> None:
    """Every victim saves; all four are requeued, the 16-GPU beneficiary runs on n1+n2."""
    victims = fill(world, [Behaviour(ack_after=t) for t in (0.5, 1.0, 1.5, 2.0)])
    other = world.pending("other", gpus=8, priority=5, cls="NORMAL")
    bene = world.pending("bene", gpus=8, nodes=2, priority=10)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 10.0))
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert steps(world, result.plan_id) == ["planned", "signalled", "all_acked", "requeued", "done"]
    assert set(result.requeued) == set(victims[:2])
    assert result.beneficiary_started
    jobs = world.fake.jobs
    assert jobs[bene].state is JobState.RUNNING and set(jobs[bene].nodes) == {"n1", "n2"}
    for v in victims[:2]:  # requeued, released, one restart more, waiting for GPUs again
        assert jobs[v].state is JobState.PENDING and not jobs[v].held
        assert jobs[v].restart_count == 1
    assert not jobs[other].held
    assert [w for w in world.fake.writes if w[2].startswith("ReqNodeList=")] == [
        ("scontrol", "update", "ReqNodeList=n1,n2", str(bene))]
    # The reservation keeps the competitor off the nodes: it is never held (nor anybody).
    assert not [w for w in world.fake.writes if w[:2] == ("scontrol", "hold")]
    links = [w for w in world.fake.writes if w[2].startswith("Reservation=hai-plan-")]
    assert links[0][2].startswith(f"Reservation=hai-plan-{result.plan_id}-")
    assert links[0][3] == str(bene)
    assert world.fake.reservations() == ()  # ended with the plan
    assert world.repo.get_value(context_key(result.plan_id)) is None
    assert result.ack_seconds == pytest.approx({victims[0]: 0.5, victims[1]: 1.0}, abs=0.25)


def test_competitor_cannot_take_the_freed_gpus(world: World) -> None:
    """A pending job that fits on one freed node does not get it (the reservation) while the
    beneficiary waits for the second node."""
    victims = fill(world, [Behaviour(ack_after=0.2), Behaviour(ack_after=3.0)] +
                   [Behaviour()] * 2)
    small = world.pending("small", gpus=8, priority=10**6)  # higher than anything but TOP
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"))
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE
    assert world.fake.jobs[small].state is JobState.PENDING  # n1 was free for 2.8 s: not taken
    assert world.fake.jobs[bene].state is JobState.RUNNING
    assert world.fake.jobs[bene].priority == TOP_PRIORITY


def test_events_and_credits_are_committed_with_done(world: World) -> None:
    """PREEMPTED per victim, PREEMPTING for the beneficiary, credits for the saving time."""
    victims = fill(world, [Behaviour(ack_after=2.0)] * 2 + [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"))
    world.executor().run(req, world.fake.snapshot())
    counts = world.repo.event_counts(0)
    assert counts[("team-a", EventKind.PREEMPTED)] == 2
    assert counts[("team-b", EventKind.PREEMPTING)] == 1
    # 8 GPUs x ~2 s of saving each, in GPU-hours
    assert world.repo.credit_balance("team-a") == pytest.approx(2 * 8 * 2.0 / 3600, rel=0.1)


def test_one_victim_never_acknowledges_abort_requeues_nobody(world: World) -> None:
    """Policy abort: the plan ends aborted, the running victims go on, nobody waits held."""
    b = [Behaviour(ack_after=0.5, exits=False), Behaviour(ack_after=None),
         Behaviour(ack_after=1.0, exits=False), Behaviour(ack_after=1.5, exits=False)]
    victims = fill(world, b)
    other = world.pending("other", gpus=8, cls="NORMAL")
    bene = world.pending("bene", gpus=32, nodes=4)
    req = ExecutionRequest(bene, tuple(victims), nodes=("n1", "n2", "n3", "n4"),
                           deadlines=dict.fromkeys(victims, 5.0), on_miss=ABORT)
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.ABORTED
    assert result.missed == (victims[1],)
    assert steps(world, result.plan_id) == ["planned", "signalled", "aborted"]
    for v in victims:
        job = world.fake.jobs[v]
        assert job.state is JobState.RUNNING and job.restart_count == 0
    assert world.fake.jobs[bene].state is JobState.PENDING
    assert not world.fake.jobs[other].held and not world.fake.jobs[bene].held
    plan = world.repo.get_plan(result.plan_id)
    assert {v.job_id: v.state for v in plan.victims}[victims[1]] is VictimState.MISSED
    notes = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any(f"victim {victims[1]} missed its deadline of 5 s" in m for m in notes), notes
    assert world.repo.event_counts(0) == {}


def test_abort_still_requeues_victims_that_saved_and_exited(world: World) -> None:
    """Victims that acknowledged and exited 75 are requeued (not held): they lose nothing."""
    victims = fill(world, [Behaviour(ack_after=0.5), Behaviour(ack_after=None)] +
                   [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 3.0), on_miss=ABORT)
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.ABORTED
    assert result.requeued == (victims[0],)
    j0 = world.fake.jobs[victims[0]]
    assert j0.restart_count == 1 and not j0.held
    assert world.fake.jobs[victims[1]].state is JobState.RUNNING
    # the requeued victim counts as preempted; the beneficiary gained nothing: no event
    assert world.repo.event_counts(0) == {("team-a", EventKind.PREEMPTED): 1}


def test_force_requeues_the_slow_victim_anyway(world: World) -> None:
    """Policy force: the plan goes forced -> requeued -> done, the slow victim loses work."""
    victims = fill(world, [Behaviour(ack_after=0.5), Behaviour(ack_after=None)] +
                   [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 3.0), on_miss=DeadlineAction.FORCE)
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE
    assert steps(world, result.plan_id) == ["planned", "signalled", "forced", "requeued", "done"]
    assert world.fake.jobs[bene].state is JobState.RUNNING
    assert world.fake.jobs[victims[1]].restart_count == 1


def test_a_save_in_progress_is_waited_for(world: World) -> None:
    """Saving at the 3 s deadline, acknowledged at 7 s: waited for (extension 10 s), done."""
    victims = fill(world, [Behaviour(ack_after=7.0, saving_from=2.0), Behaviour(ack_after=0.5)]
                   + [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 3.0))
    result = world.executor(saving_extension=10.0).run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert result.ack_seconds[victims[0]] == pytest.approx(7.0, abs=0.25)


def test_a_save_longer_than_the_extension_is_a_miss(world: World) -> None:
    """The extension is a cap: still saving after deadline + extension counts as missed."""
    victims = fill(world, [Behaviour(ack_after=20.0, saving_from=1.0)] + [Behaviour()] * 3)
    bene = world.pending("bene", gpus=8)
    req = ExecutionRequest(bene, (victims[0],), deadlines={victims[0]: 3.0}, on_miss=ABORT)
    result = world.executor(saving_extension=5.0).run(req, world.fake.snapshot())
    assert result.state is PlanState.ABORTED
    assert world.clock.now - T0 == pytest.approx(8.0, abs=0.5)
    note = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any("still saving at the extended deadline" in m for m in note), note


def test_victim_ending_on_its_own_is_gone_not_missed(world: World) -> None:
    """A victim that completes by itself during phase 1 frees its GPUs: the plan goes on."""
    victims = fill(world, [Behaviour(ack_after=None, completes_after=0.3),
                           Behaviour(ack_after=1.0)] + [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 5.0))
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE
    states = {v.job_id: v.state for v in world.repo.get_plan(result.plan_id).victims}
    assert states == {victims[0]: VictimState.GONE, victims[1]: VictimState.REQUEUED}


def test_refused_when_jobs_changed_but_not_when_a_victim_cannot_acknowledge(world: World
                                                                           ) -> None:
    """Nothing is recorded or signalled when the request no longer fits reality; a victim
    without a checkpoint directory is accepted under either policy (it stays preemptible).
    (Before: refused under abort, so the planner's plans needing it never ran.)"""
    v = world.victim("v", checkpoint=False)
    bene = world.pending("bene", gpus=8)
    ex = world.executor()
    snap = world.fake.snapshot()
    for policy in DeadlineAction:
        assert not isinstance(ex.prepare(ExecutionRequest(bene, (v,), on_miss=policy), snap),
                              str)
    world.fake.cancel(bene)
    why = ex.prepare(ExecutionRequest(bene, (v,), on_miss=DeadlineAction.FORCE), snap)
    assert why == f"beneficiary {bene} is not pending any more (CANCELLED)"
    with pytest.raises(StateError, match="not started: beneficiary"):
        ex.run(ExecutionRequest(bene, (v,)), snap)
    assert world.repo.history() == [] and world.fake.signals == []


def test_bad_requests_and_settings_are_refused_with_the_key() -> None:
    """Bad input names the key and value."""
    with pytest.raises(ConfigError, match="its own victim"):
        ExecutionRequest(5, (5,))
    with pytest.raises(ConfigError, match="not a victim"):
        ExecutionRequest(5, (6,), deadlines={7: 3.0})
    with pytest.raises(ConfigError, match=r"deadlines: .* got -1\.0"):
        ExecutionRequest(5, (6,), deadlines={6: -1.0})
    with pytest.raises(ConfigError, match="poll: must be > 0 seconds, got 0"):
        ExecutorSettings(poll=0)


def aborted_before_a_late_save(world: World) -> tuple[list[int], PreemptionExecutor]:
    """A plan aborted at its 3-s deadline: victim 0 saves 8 s after the request, victim 1
    never answers."""
    victims = fill(world, [Behaviour(ack_after=8.0), Behaviour(ack_after=None)] +
                   [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 3.0), on_miss=ABORT)
    ex = world.executor(saving_extension=0.0)
    assert ex.run(req, world.fake.snapshot()).state is PlanState.ABORTED
    return victims, ex


def test_a_late_acknowledgement_after_abort_is_still_requeued(world: World) -> None:
    """A victim that saves and exits after the plan gave up is requeued by the next cycle's
    sweep (not held), so it does not stay FAILED; one that never answers is left alone."""
    victims, ex = aborted_before_a_late_save(world)
    assert world.fake.jobs[victims[0]].state is JobState.RUNNING  # not yet acknowledged
    assert ex.recover() == []  # nothing late yet
    for _ in range(60):  # 6 s later it saves and exits
        world.clock.wait(ex.stop, 0.1)
    assert world.fake.jobs[victims[0]].state is JobState.FAILED
    ex.recover()
    j0, j1 = world.fake.jobs[victims[0]], world.fake.jobs[victims[1]]
    assert j0.state is JobState.PENDING and j0.restart_count == 1 and not j0.held
    assert j1.state is JobState.RUNNING and j1.restart_count == 0
    kinds = [a.kind for a in world.repo.audit_entries()]
    assert "late-ack" in kinds


def test_a_victim_slurm_refuses_to_requeue_ends_the_plan_gone(world: World) -> None:
    """A victim's owner sets ``Requeue=0`` after the plan chose it; it saves and exits: the
    requeue is refused for good, so after the retry window it is recorded gone, the audit
    says why, and the plan finishes with the beneficiary on the freed GPUs. (Before: the
    fake requeued it anyway, unlike Slurm; the real backends raised at every step, so the
    plan never ended and its guard stood.)"""
    victims = fill(world, [Behaviour(ack_after=0.5), Behaviour(ack_after=1.0)] +
                   [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 10.0))
    ex = world.executor()
    ex.hook = lambda point, _p: setattr(world.fake.jobs[victims[0]], "requeue", False) \
        if point == "asked" else None
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert result.requeued == (victims[1],)
    assert {v.job_id: v.state for v in world.repo.get_plan(result.plan_id).victims} == {
        victims[0]: VictimState.GONE, victims[1]: VictimState.REQUEUED}
    assert world.fake.jobs[victims[0]].state is JobState.FAILED  # exited 75, not requeued
    assert world.fake.jobs[bene].state is JobState.RUNNING
    audit = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any(f"[{victims[0]}] (Slurm refuses to requeue them" in m for m in audit), audit


def test_an_abort_names_the_saved_victim_slurm_refuses_to_requeue(world: World) -> None:
    """Abort: the victim that saved and exited is requeued unless Slurm refuses (here
    ``Requeue=0`` set during the plan): then the audit says so, and the plan still ends."""
    victims = fill(world, [Behaviour(ack_after=0.5), Behaviour(ack_after=None)] +
                   [Behaviour()] * 2)
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 3.0), on_miss=ABORT)
    ex = world.executor()
    ex.hook = lambda point, _p: setattr(world.fake.jobs[victims[0]], "requeue", False) \
        if point == "asked" else None
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.ABORTED
    assert result.requeued == ()
    assert world.fake.jobs[victims[0]].restart_count == 0
    audit = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any(f"[{victims[0]}] (Slurm refuses to requeue them" in m for m in audit), audit


def test_a_late_acknowledgement_slurm_refuses_to_requeue_is_not_called_requeued(
        world: World) -> None:
    """The late-ack sweep's audit says a job was requeued only when Slurm did it: a victim
    whose owner set ``Requeue=0`` saves and exits after the abort, and stays ended."""
    victims, ex = aborted_before_a_late_save(world)
    world.fake.jobs[victims[0]].requeue = False
    for _ in range(60):  # 6 s later it saves and exits
        world.clock.wait(ex.stop, 0.1)
    ex.recover()
    assert world.fake.jobs[victims[0]].state is JobState.FAILED
    late = [a.message for a in world.repo.audit_entries() if a.kind == "late-ack"]
    assert len(late) == 1 and "not requeued: Slurm refuses to" in late[0], late
