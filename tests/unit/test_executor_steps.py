"""The executor as a state machine stepped by the daemon (FakeSlurm): plans never block a
cycle, several are open at once, the guard survives a slurmctld that forgot it, a victim that
cannot acknowledge stays preemptible, and a victim that missed is not chosen again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.errors import StateError
from hai_slurm.priority.executor.guard import (
    TOP_PRIORITY,
    UNPIN_LATER_KEY,
    Guard,
    PlanContext,
    sweep_releases,
    sweep_unpins,
)
from hai_slurm.priority.executor.types import ExecutionRequest, VictimContext
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import Plan, PlanState, VictimState
from hai_slurm.slurm_plugins.types import JobState


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs."""
    return make_world(tmp_path)


def steps_until_closed(world: World, ex: object, limit: int = 400) -> int:
    """Step the open plans every 0.1 s (as the daemon does between cycles) until none is open;
    return how many steps it took."""
    from hai_slurm.priority.executor.preemption import PreemptionExecutor
    assert isinstance(ex, PreemptionExecutor)
    for n in range(limit):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
        if not ex.has_open_plans():
            return n + 1
    raise AssertionError("plans still open")


def nothing_held(world: World) -> None:
    held = [j.job_id for j in world.fake.jobs.values() if j.held]
    assert held == [], f"jobs left held: {held}"


def test_two_plans_open_at_once_each_step_moves_both(world: World) -> None:
    """Two beneficiaries, each with its own victim saving for 2 s: both plans are started
    without waiting, are open together, and both end done about 2 s later; one step never
    waits (the clock does not move inside a step)."""
    v = [world.victim(f"v{i}", Behaviour(ack_after=2.0)) for i in range(4)]
    b1 = world.pending("b1", gpus=8)
    b2 = world.pending("b2", gpus=8)
    ex = world.executor()
    snap = world.fake.snapshot()
    t0 = world.clock.now
    p1 = ex.start(ExecutionRequest(b1, (v[0],), nodes=("n1",)), snap)
    p2 = ex.start(ExecutionRequest(b2, (v[1],), nodes=("n2",)), world.fake.snapshot())
    assert world.clock.now == t0  # starting waits for nothing
    before = world.clock.now
    ex.reconcile(world.fake.snapshot())
    assert world.clock.now == before  # nor does a step
    assert {p.plan_id for p in world.repo.unfinished_plans()} == {p1, p2}
    claims = ex.claims()
    assert claims.beneficiaries == {b1, b2} and claims.victims == {v[0], v[1]}
    assert claims.closed == {"n1", "n2"}   # each guard's reservation: closed to the planner
    steps_until_closed(world, ex)
    assert ex.claims().closed == frozenset()
    assert world.clock.now - t0 == pytest.approx(2.0, abs=0.6)
    for plan_id, bene in ((p1, b1), (p2, b2)):
        assert world.repo.get_plan(plan_id).state is PlanState.DONE
        assert world.fake.jobs[bene].state is JobState.RUNNING
    assert world.fake.jobs[v[0]].restart_count == 1 and world.fake.jobs[v[1]].restart_count == 1
    nothing_held(world)


def test_a_store_error_in_one_plans_step_does_not_stop_the_others(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """One plan's step fails in the state store (here: every step of it): the other plan is
    still stepped to its end, and the failing one stays open for the next step."""
    v = [world.victim(f"v{i}", Behaviour(ack_after=2.0)) for i in range(4)]
    b1 = world.pending("b1", gpus=8)
    b2 = world.pending("b2", gpus=8)
    ex = world.executor()
    p1 = ex.start(ExecutionRequest(b1, (v[0],), nodes=("n1",)), world.fake.snapshot())
    p2 = ex.start(ExecutionRequest(b2, (v[1],), nodes=("n2",)), world.fake.snapshot())
    step = ex.step

    def failing(plan: Plan, *args: object, **kwargs: object) -> object:
        if plan.plan_id == p1:
            raise StateError(f"plan {plan.plan_id}: illegal transition (simulated)")
        return step(plan, *args, **kwargs)   # type: ignore[arg-type]

    monkeypatch.setattr(ex, "step", failing)
    for _ in range(60):   # 6 s
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
    assert world.repo.get_plan(p2).state is PlanState.DONE
    assert world.fake.jobs[b2].state is JobState.RUNNING
    assert [p.plan_id for p in world.repo.unfinished_plans()] == [p1]


def test_the_guard_lost_by_slurmctld_is_reapplied_at_the_next_step(world: World) -> None:
    """The holds fallback (Slurm refused the reservation). slurmctld restarted before saving
    its state: the competitor's hold, the beneficiary's pin and its top priority are gone. The
    next step puts them back; the plan ends done and the competitor never took the freed node.
    (Before: recovery did not re-apply the guard.) The reservation's own loss:
    test_executor_reservation.py."""
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    v = world.victim("v", Behaviour(ack_after=1.0))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    other = world.pending("other", gpus=8, priority=100, cls="NORMAL")
    bene = world.pending("bene", gpus=8)
    ex = world.executor()
    ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    assert world.fake.jobs[other].held and world.fake.jobs[bene].req_nodes == "n1"
    o, b = world.fake.jobs[other], world.fake.jobs[bene]  # what a lost state save does
    o.held, o.priority = False, 50
    b.req_nodes, b.priority = "", 10
    ex.reconcile(world.fake.snapshot())
    assert o.held and b.req_nodes == "n1" and b.priority == TOP_PRIORITY
    steps_until_closed(world, ex)
    assert b.state is JobState.RUNNING and b.nodes == ("n1",)
    assert o.state is JobState.PENDING
    nothing_held(world)


def test_victim_that_cannot_acknowledge_is_requeued_at_its_deadline_even_under_abort(
        world: World) -> None:
    """No #HAI --checkpoint-dir: asked, cannot answer, requeued at its deadline (loss counted
    by the planner), the plan ends done. (Before: every plan needing it was refused.)"""
    v = world.victim("v", Behaviour(ack_after=None), checkpoint=False)
    bene = world.pending("bene", gpus=8)
    ex = world.executor()
    result = ex.run(ExecutionRequest(bene, (v,), nodes=("n1",), deadlines={v: 3.0},
                                     on_miss=DeadlineAction.ABORT), world.fake.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert result.missed == (v,)
    assert world.fake.jobs[v].restart_count == 1
    assert world.fake.jobs[bene].state is JobState.RUNNING
    notes = [a.message for a in world.repo.audit_entries(plan_id=result.plan_id)]
    assert any("cannot acknowledge (no #HAI --checkpoint-dir)" in m for m in notes), notes
    nothing_held(world)


def test_victim_that_missed_an_aborted_plan_is_not_chosen_again_until_requeued(
        world: World) -> None:
    """Abort: the victim that never answered keeps running but is claimed (the planner skips
    it) until Slurm shows it requeued (another restart count)."""
    v = world.victim("v", Behaviour(ack_after=None))
    for i in range(3):  # the other nodes are busy too
        world.victim(f"f{i}", Behaviour(ack_after=None))
    bene = world.pending("bene", gpus=8)
    ex = world.executor(saving_extension=0.0)
    result = ex.run(ExecutionRequest(bene, (v,), deadlines={v: 2.0},
                                     on_miss=DeadlineAction.ABORT), world.fake.snapshot())
    assert result.state is PlanState.ABORTED
    assert {x.job_id: x.state for x in world.repo.get_plan(result.plan_id).victims} == \
        {v: VictimState.MISSED}
    ex.reconcile(world.fake.snapshot())
    assert v in ex.claims().victims  # still running at the same restart count
    world.fake.requeue_any([v], hold=False)
    ex.reconcile(world.fake.snapshot())
    assert v not in ex.claims().victims


def test_a_job_submitted_during_the_ack_wait_does_not_take_the_freed_node(world: World
                                                                          ) -> None:
    """Backfill on: the beneficiary needs n1+n2; v0 saves in 1 s, v1 in 3 s. A job submitted
    at 0.5 s would backfill onto n1 once v0 has left; the next step (with the cycle's snapshot)
    holds it, the beneficiary gets both nodes, and the newcomer is released at the end.
    (Before: the guard held only jobs pending at plan start.)"""
    world.fake.backfill = True
    v = [world.victim("v0", Behaviour(ack_after=1.0)),
         world.victim("v1", Behaviour(ack_after=3.0)),
         world.victim("f2", Behaviour(ack_after=None)),
         world.victim("f3", Behaviour(ack_after=None))]
    bene = world.pending("bene", gpus=8, nodes=2)
    ex = world.executor()
    ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")), world.fake.snapshot())
    for _ in range(5):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
    late = world.pending("late", gpus=8, priority=50, cls="NORMAL")
    steps_until_closed(world, ex)
    b, n = world.fake.jobs[bene], world.fake.jobs[late]
    assert b.state is JobState.RUNNING and set(b.nodes) == {"n1", "n2"}
    assert n.state is JobState.PENDING and not n.held
    nothing_held(world)


def test_a_step_asks_slurm_about_the_beneficiary_and_victims_not_the_held_queue(
        world: World) -> None:
    """Under the holds fallback (Slurm refused the reservation), 60 NORMAL jobs wait behind
    the plan and the guard holds them all. The steps (with the cycle's snapshot, and between
    cycles without one) ask Slurm's job states of the beneficiary and the victims only: the
    held jobs' states come from the snapshot. (Before: every step asked for every held job, 50
    squeue calls at 10,000 pending in bench/load.) A hold lost meanwhile is still put back from
    the snapshot."""
    v = world.victim("v", Behaviour(ack_after=1.0))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    queue = [world.pending(f"q{i}", priority=100, cls="NORMAL") for i in range(60)]
    bene = world.pending("bene", gpus=8)
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    ex = world.executor()
    ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    assert all(world.fake.jobs[q].held for q in queue)
    asked: list[int] = []
    real = world.fake.job_facts

    def counting(job_ids: object) -> object:
        ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)  # type: ignore[call-overload]
        asked.extend(ids)
        return real(ids)

    world.fake.job_facts = counting  # type: ignore[method-assign,assignment]
    world.fake.jobs[queue[7]].held = False  # what a lost state save does
    ex.reconcile(world.fake.snapshot())
    assert world.fake.jobs[queue[7]].held
    for _ in range(5):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile()
    assert asked and set(asked) <= {bene, v}, sorted(set(asked) - {bene, v})[:10]
    steps_until_closed(world, ex)
    assert world.fake.jobs[bene].state is JobState.RUNNING
    nothing_held(world)


def test_beneficiary_pinned_to_a_node_that_went_down_is_unpinned(world: World) -> None:
    """The victim's node stops responding while it saves (its slurmd died): the beneficiary,
    pinned there, is unpinned at the next step with a snapshot and starts on the node that
    freed up meanwhile; the plan ends done once the victim is requeued, nothing held.
    (Before: it stayed pinned to the dead node until start_timeout.)"""
    v = world.victim("v", Behaviour(ack_after=8.0, saving_from=0.5))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    bene = world.pending("bene", gpus=8)
    ex = world.executor(start_timeout=600.0)
    plan_id = ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    assert world.fake.jobs[bene].req_nodes == "n1"
    world.clock.wait(ex.stop, 1.0)
    world.fake.nodes["n1"] = replace(world.fake.nodes["n1"], state="DOWN")
    last = next(j for j in world.fake.jobs.values() if j.name == "f2")
    world.fake.finish(last.job_id)  # n4 frees up
    ex.reconcile(world.fake.snapshot())
    b = world.fake.jobs[bene]
    assert b.req_nodes == ""  # the pin's old value
    world.fake.schedule()
    assert b.state is JobState.RUNNING and b.nodes == ("n4",)
    steps_until_closed(world, ex)
    plan = world.repo.get_plan(plan_id)
    assert plan.state is PlanState.DONE
    assert any("n1" in s.note and "unpinned" in s.note for s in plan.steps) or any(
        "unpinned" in e.message for e in world.repo.audit_entries())
    nothing_held(world)


def test_a_beneficiary_held_after_the_requeue_ends_the_plan_at_once(world: World) -> None:
    """A beneficiary held while its victims save (by its owner, an admin, or by Slurm: a job
    whose launch failed is requeued held, "launch failed requeued held") cannot start, so once
    the victims are requeued the plan ends at that step, saying so, instead of keeping the freed
    node closed until start_timeout (600 s here); the victim runs again, and only the
    beneficiary stays held (not the daemon's hold: it is not the daemon's to release)."""
    v = world.victim("v", Behaviour(ack_after=1.0))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    bene = world.pending("bene", gpus=8)
    ex = world.executor(start_timeout=600.0)

    def held_meanwhile(point: str, _plan: int) -> None:
        if point == "asked":   # the fake would start it as soon as the victim exits
            world.fake.hold([bene])

    ex.hook = held_meanwhile
    t0 = world.clock.now
    plan_id = ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    steps_until_closed(world, ex)
    plan = world.repo.get_plan(plan_id)
    assert plan.state is PlanState.DONE and world.clock.now - t0 < 10.0
    assert "is held" in plan.steps[-1].note and "cannot start" in plan.steps[-1].note
    world.fake.schedule()
    assert world.fake.jobs[v].state is JobState.RUNNING and world.fake.jobs[v].restart_count == 1
    assert [j.job_id for j in world.fake.jobs.values() if j.held] == [bene]


def test_target_node_in_the_plans_own_reservation_keeps_the_pin(world: World) -> None:
    """Slurm (and the fake) shows the target nodes as MIXED+RESERVED while the plan's
    reservation stands: that is the guard working, not a lost node, so the beneficiary stays
    pinned and linked and nobody is held. (Seen on the testbed: the merge of the unpin rule read
    RESERVED as down, unpinned the beneficiary and fell back to holds.)"""
    v = world.victim("v", Behaviour(ack_after=8.0, saving_from=0.5))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    bene = world.pending("bene", gpus=8)
    other = world.pending("other", priority=100, cls="NORMAL")
    ex = world.executor(start_timeout=600.0)
    ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    world.clock.wait(ex.stop, 1.0)
    snap = world.fake.snapshot()
    assert "RESERVED" in next(n for n in snap.nodes if n.name == "n1").state_flags
    ex.reconcile(snap)
    b = world.fake.jobs[bene]
    assert b.req_nodes == "n1"
    assert b.reservation.startswith("hai-plan-")
    assert not world.fake.jobs[other].held
    steps_until_closed(world, ex)
    nothing_held(world)


def test_victim_requeued_held_that_ends_after_the_release_is_released_then(
        world: World) -> None:
    """A victim on a node that stopped responding stays COMPLETING after phase 2's requeuehold;
    when the plan ends (the beneficiary ran elsewhere) its guard cannot release it yet. Once
    slurmctld sees it end it is pending and held: the next cycle's sweep releases it.
    (Before: it was left held for good.)"""
    v = world.victim("v", Behaviour(ack_after=None))
    job = world.fake.jobs[v]
    ctx = PlanContext(7, world.pending("bene"), ("n1",), (), victims_held=(v,))
    guard = Guard(world.fake, world.repo, ctx)
    job.state = JobState.COMPLETING  # the requeuehold is not done until the node answers
    guard.release(world.clock.now)
    assert sweep_releases(world.repo, world.fake, world.clock.now) == []
    job.state, job.held, job.restart_count = JobState.PENDING, True, 1  # the node is back
    assert sweep_releases(world.repo, world.fake, world.clock.now) == [v]
    assert not job.held
    assert sweep_releases(world.repo, world.fake, world.clock.now) == []  # forgotten


def test_a_requeue_slurmctld_lost_is_done_again(world: World) -> None:
    """slurmctld SIGKILLed right after phase 2's requeuehold comes back from an older state
    save: the victim, which had acknowledged and exited, shows RUNNING at the restart count it
    was asked at (a ghost on the GPUs). The guard's next check requeues it held again; one
    running at a higher count (it was released and started again) is left alone. (Before:
    the ghost kept its node and the victim was never requeued: found by the fault tier.)"""
    v = world.victim("v", Behaviour(ack_after=None))
    job = world.fake.jobs[v]
    victim = VictimContext(v, 0, None, 0, 30.0)
    ctx = PlanContext(7, world.pending("bene"), ("n1",), (victim,), victims_held=(v,),
                      requeued_at=world.clock.now)
    Guard(world.fake, world.repo, ctx).check(world.clock.now)
    assert job.state is JobState.PENDING and job.restart_count == 1 and job.held
    job.state, job.held = JobState.RUNNING, False  # restarted after a release: not ours
    Guard(world.fake, world.repo, ctx).check(world.clock.now)
    assert job.state is JobState.RUNNING and job.restart_count == 1


def test_target_node_awaiting_its_registration_keeps_the_pin(world: World) -> None:
    """Right after a slurmctld restart an idle node shows UNKNOWN until its slurmd registers
    (``BootTime=None``, a few seconds; measured on 22.05): a stale state, not a lost node, so
    the beneficiary stays pinned to it; once Slurm marks it DOWN it is unpinned."""
    v = world.victim("v", Behaviour(ack_after=8.0, saving_from=0.5))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    bene = world.pending("bene", gpus=8)
    ex = world.executor(start_timeout=600.0)
    ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    world.clock.wait(ex.stop, 1.0)
    world.fake.nodes["n1"] = replace(world.fake.nodes["n1"], state="UNKNOWN", registered=False)
    ex.reconcile(world.fake.snapshot())
    assert world.fake.jobs[bene].req_nodes == "n1"
    world.fake.nodes["n1"] = replace(world.fake.nodes["n1"], state="DOWN")
    ex.reconcile(world.fake.snapshot())
    assert world.fake.jobs[bene].req_nodes == ""


def test_a_beneficiary_requeued_after_its_plan_loses_the_guards_pin(world: World) -> None:
    """Slurm changes a ReqNodeList only while a job is pending, so a beneficiary that started
    keeps the guard's pin to the target nodes. Requeued later (a node failure, a failed
    launch, a later plan), it gets its own node list back at the next cycle instead of waiting
    for those nodes only; one that ends is forgotten. (Before: pinned for good: seen in the
    slurmctld fault case, where Slurm requeued the beneficiary after a failed launch.)"""
    bene = world.pending("bene", gpus=8)
    ctx = PlanContext(7, bene, ("n1",), (), pinned_from="")
    world.fake.set_req_nodes(bene, "n1")
    world.fake.schedule()
    b = world.fake.jobs[bene]
    assert b.state is JobState.RUNNING
    Guard(world.fake, world.repo, ctx).release(world.clock.now)
    assert b.req_nodes == "n1"  # cannot be changed while it runs
    assert sweep_unpins(world.repo, world.fake, world.fake.snapshot(), world.clock.now) == []
    world.fake.requeue(bene)
    assert b.state is JobState.PENDING and b.req_nodes == "n1"
    assert sweep_unpins(world.repo, world.fake, world.fake.snapshot(),
                        world.clock.now) == [bene]
    assert b.req_nodes == ""
    assert world.repo.get_value(UNPIN_LATER_KEY) == {}


def test_a_beneficiary_requeued_after_its_plan_is_freed_of_the_ended_reservation(
        world: World) -> None:
    """A beneficiary that started is still linked to the guard's reservation when the guard
    ends it. Requeued while the reservation is purged, Slurm holds it (``RESV_DEL_HOLD``,
    "Reservation NAME was deleted"; measured on 22.05 in the slurmctld fault case, where the
    job stayed held for good). The next cycle's sweep unlinks and releases it; a job its
    user held is left alone."""
    bene = world.pending("bene", gpus=8)
    ctx = PlanContext(7, bene, ("n1",), (), reservation="hai-plan-7-1")
    world.fake.create_reservation("hai-plan-7-1", ["n1"], [world.fake.jobs[bene].user], 10)
    world.fake.set_job_reservation(bene, "hai-plan-7-1")
    world.fake.schedule()
    b = world.fake.jobs[bene]
    assert b.state is JobState.RUNNING
    Guard(world.fake, world.repo, ctx).release(world.clock.now)
    world.fake.requeue(bene)
    b.priority, b.reason = 0, "Reservation hai-plan-7-1 was deleted"
    assert sweep_unpins(world.repo, world.fake, world.fake.snapshot(),
                        world.clock.now) == [bene]
    assert b.priority > 0 and b.reservation == ""

    other = world.pending("other", gpus=8)
    world.fake.schedule()
    Guard(world.fake, world.repo, replace(ctx, plan_id=8, beneficiary=other)).release(
        world.clock.now)
    world.fake.requeue(other)
    world.fake.hold([other])   # its user's hold
    assert sweep_unpins(world.repo, world.fake, world.fake.snapshot(), world.clock.now) == []
    assert world.fake.jobs[other].held


def test_a_beneficiary_completing_at_the_release_is_watched_too(world: World) -> None:
    """slurmd refused the beneficiary's launch (slurmctld had lost an earlier one): at the
    guard's release it is COMPLETING, and Slurm requeues it a minute later, by then in
    RESV_DEL_HOLD for the purged reservation (CI, slurmctld fault case: held for good, as
    only a running beneficiary was watched). It is watched, and released once pending."""
    bene = world.pending("bene", gpus=8)
    ctx = PlanContext(7, bene, ("n1",), (), pinned_from="", reservation="hai-plan-7-1")
    world.fake.set_req_nodes(bene, "n1")
    world.fake.schedule()
    b = world.fake.jobs[bene]
    b.state = JobState.COMPLETING
    Guard(world.fake, world.repo, ctx).release(world.clock.now)
    assert sweep_unpins(world.repo, world.fake, world.fake.snapshot(), world.clock.now) == []
    b.state, b.nodes, b.restart_count = JobState.PENDING, (), 1
    b.priority, b.reason = 0, "ReservationDeleted"
    assert sweep_unpins(world.repo, world.fake, world.fake.snapshot(),
                        world.clock.now) == [bene]
    assert b.priority > 0 and b.req_nodes == ""


def test_the_release_reads_the_beneficiary_once(world: World) -> None:
    """Ending the reservation (unlink a waiting beneficiary) and the rest of the release (the
    pin, the watch) share one read of the beneficiary's state."""
    bene = world.pending("bene", gpus=8)
    world.fake.create_reservation("hai-plan-7-1", ["n1"], [world.fake.jobs[bene].user], 10)
    world.fake.set_job_reservation(bene, "hai-plan-7-1")
    world.fake.set_req_nodes(bene, "n1")
    ctx = PlanContext(7, bene, ("n1",), (), pinned_from="", reservation="hai-plan-7-1")
    asked: list[int] = []
    real = world.fake.job_facts

    def counting(job_ids: object) -> object:
        ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)  # type: ignore[call-overload]
        asked.extend(ids)
        return real(ids)

    world.fake.job_facts = counting  # type: ignore[method-assign,assignment]
    Guard(world.fake, world.repo, ctx).release(world.clock.now)
    b = world.fake.jobs[bene]
    assert b.reservation == "" and b.req_nodes == ""
    assert asked == [bene]
