"""A victim is never lost: every way a victim can end during a plan, on FakeSlurm (issue 12)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from executor_world import T0, Behaviour, World, make_world

from hai_slurm.checkpoint import JobReport, read_job_report
from hai_slurm.errors import SlurmError
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import EventKind
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.slurm_plugins.types import JobFacts, JobIds, JobState


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs."""
    return make_world(tmp_path)


def two_victims(world: World, first: Behaviour, second: Behaviour | None = None
                ) -> tuple[list[int], int, ExecutionRequest]:
    """Victims on n1 and n2 (two more filling n3, n4), a 16-GPU beneficiary on n1+n2."""
    victims = [world.victim(f"v{i}", b) for i, b in
               enumerate([first, second or Behaviour(ack_after=1.0), Behaviour(), Behaviour()])]
    bene = world.pending("bene", gpus=8, nodes=2)
    req = ExecutionRequest(bene, tuple(victims[:2]), nodes=("n1", "n2"),
                           deadlines=dict.fromkeys(victims[:2], 10.0))
    return victims, bene, req


def states(world: World, plan_id: int) -> dict[int, VictimState]:
    """Each victim's recorded state."""
    return {v.job_id: v.state for v in world.repo.get_plan(plan_id).victims}


def steps(world: World, plan_id: int) -> list[str]:
    """The plan's recorded states, in order."""
    return [s.to_state.value for s in world.repo.get_plan(plan_id).steps]


@pytest.mark.parametrize("dies_as", [JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.TIMEOUT],
                         ids=["disk-full-exit-1", "oom", "timeout"])
def test_victim_that_dies_during_the_save_is_requeued_held(world: World,
                                                           dies_as: JobState) -> None:
    """A save that fails (disk full: exit 1, older checkpoints untouched) or a step killed by
    the request: the victim is requeued held, released once the beneficiary runs; the plan
    says it was requeued without an acknowledgement. (Before: recorded gone, never requeued.)"""
    victims, bene, req = two_victims(world, Behaviour(ack_after=None, dies_after=0.5,
                                                      dies_as=dies_as))
    ex = world.executor()
    seen: list[bool] = []
    ex.hook = lambda point, _p: seen.extend(
        world.fake.jobs[v].held for v in victims[:2]) if point == "requeued" else None
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert steps(world, result.plan_id) == ["planned", "signalled", "forced", "requeued", "done"]
    assert states(world, result.plan_id) == {victims[0]: VictimState.REQUEUED,
                                             victims[1]: VictimState.REQUEUED}
    assert seen == [True, True], "both victims must be held until the beneficiary runs"
    job = world.fake.jobs[victims[0]]
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.held
    assert world.fake.jobs[bene].state is JobState.RUNNING
    assert f"{victims[0]} ended {dies_as.value} without an acknowledgement, requeued" \
        in result.note
    audit = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any(f"victim {victims[0]} ended ({dies_as.value})" in m for m in audit), audit


def test_beneficiary_that_runs_and_ends_between_two_looks_still_gets_a_held_requeue(
        world: World) -> None:
    """The victim's save fails (exit 1); the short beneficiary starts on its node and completes
    before the executor's next look: the plan goes on (forced, requeued held, done), it is not
    undone into an unheld requeue. (Before: "beneficiary no longer waits (COMPLETED)", rolled
    back, then done: planned, signalled, done; seen on the testbed under load.)"""
    victims = [world.victim(f"v{i}", Behaviour(ack_after=None, dies_after=0.5) if i == 0
                            else Behaviour()) for i in range(4)]
    bene = world.pending("bene")
    req = ExecutionRequest(bene, (victims[0],), nodes=("n1",), deadlines={victims[0]: 10.0})
    tick = world.tick
    ran: list[bool] = []

    def tick_and_finish() -> None:
        tick()
        if world.fake.jobs[bene].state is JobState.RUNNING:
            ran.append(True)
            world.fake.finish(bene, JobState.COMPLETED)
    world.tick = tick_and_finish  # type: ignore[method-assign]
    held: list[bool] = []
    ex = world.executor()
    ex.hook = lambda point, _p: held.append(world.fake.jobs[victims[0]].held) \
        if point == "requeued" else None
    result = ex.run(req, world.fake.snapshot())
    assert ran, "the beneficiary never started"
    assert result.state is PlanState.DONE, result.note
    assert steps(world, result.plan_id) == ["planned", "signalled", "forced", "requeued", "done"]
    assert held == [True]
    assert result.beneficiary_started
    job = world.fake.jobs[victims[0]]
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.held


def test_gone_is_never_acked(world: World) -> None:
    """A plan whose every victim died is not ``all_acked``: it is ``forced`` and says why."""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=None, dies_after=0.3),
                                      Behaviour(ack_after=None, dies_after=0.6))
    result = world.executor().run(req, world.fake.snapshot())
    plan = world.repo.get_plan(result.plan_id)
    assert "all_acked" not in steps(world, result.plan_id)
    forced = next(s for s in plan.steps if s.to_state is PlanState.FORCED)
    assert "ended without an acknowledgement" in forced.note
    assert set(result.requeued) == set(victims[:2])


def test_ack_written_just_after_the_job_ended_counts(world: World) -> None:
    """The job's state flips to ended 32 ms before its ack.json lands: the victim is acked
    (step recorded), not gone, and requeued. (Before: marked gone, never requeued.)"""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=0.5, ack_lag=0.032, step=321))
    result = world.executor(state_poll=0.1).run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert steps(world, result.plan_id) == ["planned", "signalled", "all_acked", "requeued",
                                            "done"]
    plan = world.repo.get_plan(result.plan_id)
    v0 = next(v for v in plan.victims if v.job_id == victims[0])
    assert v0.state is VictimState.REQUEUED and v0.ack_step == 321
    assert world.fake.jobs[victims[0]].restart_count == 1


def test_completion_before_the_request_is_not_requeued(world: World) -> None:
    """A victim that completed (exit 0) between the planning and the request is left done."""
    victims, bene, req = two_victims(world, Behaviour())
    ex = world.executor()
    prepared = ex.prepare(req, world.fake.snapshot())
    assert not isinstance(prepared, str)
    world.fake.finish(victims[0], JobState.COMPLETED)
    result = ex.run(req, world.fake.snapshot(), prepared)
    assert result.state is PlanState.DONE, result.note
    assert states(world, result.plan_id)[victims[0]] is VictimState.GONE
    assert world.fake.jobs[victims[0]].state is JobState.COMPLETED
    assert world.fake.jobs[bene].state is JobState.RUNNING
    audit = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any("completed (exit 0) during the plan; not requeued" in m for m in audit), audit


def flaky_facts(world: World, down_from: float, down_until: float) -> None:
    """slurmctld is down between the two times (after the request): job_facts raises."""
    real: Callable[[JobIds], dict[int, JobFacts]] = world.fake.job_facts

    def facts(ids: JobIds) -> dict[int, JobFacts]:
        if T0 + down_from <= world.clock.now < T0 + down_until:
            raise SlurmError("squeue: error: slurm_load_jobs error: Unable to contact slurm "
                             "controller (connect failure)")
        return real(ids)
    world.fake.job_facts = facts  # type: ignore[method-assign]


def test_slurmctld_down_during_the_save_does_not_undo_the_plan(world: World) -> None:
    """slurmctld unreachable from 0.2 s to 6 s while the victims save (acks at 1 s and 3 s):
    the executor keeps reading the acknowledgements, retries the states, and finishes the plan.
    (Before: the first failed query rolled the plan back; acked victims left FAILED 75.)"""
    victims, bene, req = two_victims(world, Behaviour(ack_after=1.0), Behaviour(ack_after=3.0))
    flaky_facts(world, 0.2, 6.0)
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert states(world, result.plan_id) == dict.fromkeys(victims[:2], VictimState.REQUEUED)
    assert world.fake.jobs[bene].state is JobState.RUNNING


def test_acked_victim_slurm_sees_exit_late_is_requeued_after_abort(world: World) -> None:
    """Abort (the other victim never answers) while slurmctld sees the acked victim's exit only
    8 s after its ack, past the 3-s exit wait: it is watched and requeued when it has exited.
    (Before: left FAILED 75.)"""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=0.5, exit_lag=8.0),
                                      Behaviour(ack_after=None))
    req = ExecutionRequest(req.beneficiary, req.victims, nodes=req.nodes,
                           deadlines={victims[0]: 10.0, victims[1]: 1.0},
                           on_miss=DeadlineAction.ABORT)
    ex = world.executor(saving_extension=0.0)
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.ABORTED, result.note
    assert world.fake.jobs[victims[0]].state is JobState.RUNNING  # Slurm has not seen it end
    for _ in range(100):  # the daemon's next cycles
        world.clock.wait(ex.stop, 0.1)
        ex.recover()
    job = world.fake.jobs[victims[0]]
    assert job.restart_count == 1 and job.state is JobState.PENDING and not job.held
    assert world.fake.jobs[victims[1]].state is JobState.RUNNING  # the one that missed goes on
    late = [a for a in world.repo.audit_entries() if a.kind == "late-ack"]
    assert [a.job_id for a in late] == [victims[0]]


def test_slurm_failing_at_the_requeue_leaves_the_plan_to_recovery(world: World) -> None:
    """Slurm fails at phase 2's requeue after both victims saved: the plan is not undone (that
    would requeue them unheld and give their GPUs to anyone); the next cycle's recover()
    requeues them held and ends the plan done once the beneficiary runs."""
    victims, bene, req = two_victims(world, Behaviour(ack_after=0.5), Behaviour(ack_after=0.7))
    real = world.fake.requeue_any
    calls: list[bool] = []

    def requeue_any(ids: JobIds, *, hold: bool) -> tuple[int, ...]:
        calls.append(hold)
        if len(calls) == 1:
            raise SlurmError("scontrol requeuehold: Unable to contact slurm controller")
        return real(ids, hold=hold)
    world.fake.requeue_any = requeue_any  # type: ignore[method-assign]
    ex = world.executor()
    with pytest.raises(SlurmError):
        ex.run(req, world.fake.snapshot())
    (result,) = ex.recover()
    assert calls == [True, True]
    assert result.state is PlanState.DONE, result.note
    assert states(world, result.plan_id) == dict.fromkeys(victims[:2], VictimState.REQUEUED)
    assert world.fake.jobs[bene].state is JobState.RUNNING


def test_beneficiary_that_ran_means_done_not_rolled_back(world: World) -> None:
    """The daemon dies after the request; the victims save and exit, the beneficiary starts on
    their GPUs and even completes before the daemon is back: recovery requeues the victims and
    ends the plan done (preempting counted), not rolled_back."""
    victims, bene, req = two_victims(world, Behaviour(ack_after=0.5), Behaviour(ack_after=0.7))
    ex = world.executor()

    def crash(point: str, _plan: int) -> None:
        if point == "asked":
            raise KeyboardInterrupt  # stands for SIGKILL
    ex.hook = crash
    with pytest.raises(KeyboardInterrupt):
        ex.run(req, world.fake.snapshot())
    for _ in range(20):  # two seconds without a daemon
        world.clock.wait(ex.stop, 0.1)
    assert world.fake.jobs[bene].state is JobState.RUNNING
    world.fake.finish(bene, JobState.COMPLETED)
    (result,) = world.executor().recover()
    assert result.state is PlanState.DONE, result.note
    assert result.beneficiary_started
    assert states(world, result.plan_id) == dict.fromkeys(victims[:2], VictimState.REQUEUED)
    assert "runs on the freed GPUs" in result.note or "started" in result.note
    assert world.repo.event_counts(0)[("team-b", EventKind.PREEMPTING)] == 1


def test_save_time_is_the_jobs_own(world: World) -> None:
    """The job acknowledges 2 s after the request, the daemon sees it only at 9 s (slow shared
    file system): the recorded save time and the credit follow the job's ack time, 2 s.
    (Before: 9 s.)"""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=2.0, exits=False),
                                      Behaviour(ack_after=2.0, exits=False))

    def slow(control_dir: str, job_id: str, uid: int, **kw: float) -> JobReport:
        report = read_job_report(control_dir, job_id, uid, **kw)  # type: ignore[arg-type]
        if world.clock.now < T0 + 9.0:
            return JobReport(report.job_id, report.phase, None, report.problems)
        return report
    ex = world.executor()
    ex.reader = slow
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert result.ack_seconds == pytest.approx(dict.fromkeys(victims[:2], 2.0), abs=0.3)
    plan = world.repo.get_plan(result.plan_id)
    for v in plan.victims:
        assert v.acked_at is not None and v.asked_at is not None
        assert v.acked_at - v.asked_at == pytest.approx(2.0, abs=0.3)
    assert world.repo.credit_balance("team-a") == pytest.approx(2 * 8 * 2.0 / 3600, rel=0.1)


def test_force_policy_requeues_the_ended_and_the_missed(world: World) -> None:
    """Policy force: one victim never answers, the other dies; both are requeued."""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=None, dies_after=0.4),
                                      Behaviour(ack_after=None))
    req = ExecutionRequest(req.beneficiary, req.victims, nodes=req.nodes,
                           deadlines=dict.fromkeys(victims[:2], 2.0),
                           on_miss=DeadlineAction.FORCE)
    result = world.executor(saving_extension=0.0).run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert states(world, result.plan_id) == dict.fromkeys(victims[:2], VictimState.REQUEUED)


def test_victim_slurm_requeued_before_its_ack_was_read_is_held(world: World) -> None:
    """``RequeueExit=75`` requeues a victim (pending, not held) before the executor read its
    ack: it is taken as ended, held until the beneficiary runs, requeued once only.
    (Before: a pending victim was neither acked nor ended: it missed, the plan aborted.)"""
    victims, bene, req = two_victims(world, Behaviour(ack_after=None, dies_after=0.5,
                                                      slurm_requeues=True))
    ex = world.executor()
    seen: list[bool] = []
    ex.hook = lambda point, _p: seen.append(world.fake.jobs[victims[0]].held) \
        if point == "requeued" else None
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert seen == [True]
    assert states(world, result.plan_id)[victims[0]] is VictimState.REQUEUED
    job = world.fake.jobs[victims[0]]
    assert job.restart_count == 1 and not job.held
    assert world.fake.jobs[bene].state is JobState.RUNNING
    audit = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any("requeued by Slurm (RequeueExit)" in m for m in audit), audit


def test_victim_that_missed_the_request_is_asked_again_and_saves(world: World) -> None:
    """The first request reaches no process (sent while the victim's step was listed but its
    task had not started): nothing it writes shows the request, so 5 s later it is asked once
    more, saves and acknowledges; the plan is ``all_acked``, not ``forced``, and the victim
    loses nothing. (Before: it was requeued at its deadline without an ack.)"""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=1.0, misses_first=True))
    ex = world.executor()
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert steps(world, result.plan_id) == ["planned", "signalled", "all_acked", "requeued",
                                            "done"]
    assert result.plan_id not in ex._resent   # an ended plan's memory is dropped
    assert [r.job_id for r in world.fake.signals].count(victims[0]) == 2
    assert result.ack_steps[victims[0]] == 100
    audit = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any(f"victim {victims[0]} showed no sign of the request" in m for m in audit), audit


def test_victim_that_heard_the_request_is_not_asked_again(world: World) -> None:
    """A victim that shows ``saving`` soon after the request but takes 8 s to acknowledge gets
    one request only; one that writes nothing until its ack at 8 s (a long training step) is
    asked again at 5 s, which does it no harm: it still acknowledges."""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=8.0, saving_from=0.5),
                                      Behaviour(ack_after=8.0))
    result = world.executor().run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    asked = [r.job_id for r in world.fake.signals]
    assert asked.count(victims[0]) == 1   # heard: saving from 0.5 s
    assert asked.count(victims[1]) == 2   # wrote nothing until its ack: asked again at 5 s


def test_second_request_can_be_turned_off(world: World) -> None:
    """``resend_after = 0``: a victim that missed the request is not asked again; it misses
    its deadline and is requeued without an ack (the behaviour before the second request)."""
    victims, _bene, req = two_victims(world, Behaviour(ack_after=1.0, misses_first=True))
    result = world.executor(resend_after=0.0, saving_extension=0.0).run(
        req, world.fake.snapshot())
    assert [r.job_id for r in world.fake.signals].count(victims[0]) == 1
    assert "forced" in steps(world, result.plan_id)
