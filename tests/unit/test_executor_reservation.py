"""The guard's reservation (FakeSlurm, which enforces reservations when it schedules): the freed
GPUs go to the beneficiary against jobs submitted at any time, nobody is held, the reservation
ends with every end state, comes back after slurmctld lost it, and holds take over only when
Slurm refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.priority.executor.guard import (
    RELEASE_LATER_KEY,
    TOP_PRIORITY,
    PlanContext,
    context_key,
    remember_release,
    sweep_releases,
)
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import PlanState
from hai_slurm.slurm_plugins.types import JobState


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs."""
    return make_world(tmp_path)


def nothing_held(world: World) -> None:
    held = [j.job_id for j in world.fake.jobs.values() if j.held]
    assert held == [], f"jobs left held: {held}"


def step_until_closed(world: World, ex: object, limit: int = 400) -> None:
    """Step the open plans every 0.1 s with a fresh snapshot until none is open."""
    from hai_slurm.priority.executor.preemption import PreemptionExecutor
    assert isinstance(ex, PreemptionExecutor)
    for _ in range(limit):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
        if not ex.has_open_plans():
            return
    raise AssertionError("plans still open")


def context(world: World, plan_id: int) -> PlanContext:
    raw = world.repo.get_value(context_key(plan_id))
    assert isinstance(raw, dict)
    return PlanContext.from_json(raw)


def one_victim_and_a_competitor(world: World) -> tuple[int, int, int]:
    """A victim on n1 that saves in 1 s (three more that never answer fill n2-n4), a pending
    NORMAL competitor and an 8-GPU HIGH beneficiary: (victim, competitor, beneficiary)."""
    v = world.victim("v", Behaviour(ack_after=1.0))
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    comp = world.pending("comp", gpus=8, priority=50, cls="NORMAL")
    return v, comp, world.pending("bene", gpus=8)


def two_node_plan(world: World) -> tuple[list[int], int]:
    """v0 (saves in 1 s) and v1 (3 s) on n1, n2; two more that never answer; backfill on."""
    world.fake.backfill = True
    v = [world.victim("v0", Behaviour(ack_after=1.0)),
         world.victim("v1", Behaviour(ack_after=3.0)),
         world.victim("f2", Behaviour(ack_after=None)),
         world.victim("f3", Behaviour(ack_after=None))]
    return v, world.pending("bene", gpus=8, nodes=2)


def test_reservation_keeps_newcomers_off_the_freed_node_and_holds_nobody(world: World) -> None:
    """The beneficiary needs n1+n2; n1 is free from 1 s, n2 from 3 s. A NORMAL job of a higher
    priority than any but the beneficiary's, submitted at 0.5 s, fits on n1 and backfill would
    start it there; the reservation keeps it off, it is never held (so the daemon can write its
    priority every cycle), and the beneficiary gets both nodes. The reservation is the
    beneficiary's user's, on exactly the target nodes, and ends with the plan."""
    v, bene = two_node_plan(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")),
                       world.fake.snapshot())
    name = context(world, plan_id).reservation
    assert name == f"hai-plan-{plan_id}-{int(world.clock.now)}"
    (resv,) = world.fake.reservations()
    assert (resv.name, resv.nodes, resv.users) == (name, ("n1", "n2"), ("alice",))
    assert {"IGNORE_JOBS", "FLEX"} <= set(resv.flags)
    b = world.fake.jobs[bene]
    assert b.reservation == name and b.req_nodes == "n1,n2" and b.priority == TOP_PRIORITY
    for _ in range(5):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
    late = world.pending("late", gpus=8, priority=10**6, cls="NORMAL")
    for _ in range(15):  # n1 is free from 1 s on; the newcomer stays off it
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
    assert world.fake.jobs[v[0]].state is JobState.FAILED  # v0 saved and left n1
    n = world.fake.jobs[late]
    assert n.state is JobState.PENDING and not n.held
    assert world.fake.set_priority(late, 777).done == (late,)  # the daemon's write lands
    assert context(world, plan_id).held == ()
    step_until_closed(world, ex)
    assert world.repo.get_plan(plan_id).state is PlanState.DONE
    assert b.state is JobState.RUNNING and set(b.nodes) == {"n1", "n2"}
    assert n.state is JobState.PENDING
    assert not [w for w in world.fake.writes if w[:2] == ("scontrol", "hold")]
    assert world.fake.reservations() == ()
    assert b.reservation == ""  # ended while it ran in it: FLEX, it goes on running
    nothing_held(world)


def test_without_the_reservation_the_newcomer_takes_the_freed_node(world: World) -> None:
    """The same run with Slurm refusing the reservation and the guard's holds left out (what
    a guard of pin and priority alone does): backfill gives n1 to the newcomer. This is what
    the reservation prevents (the test above can fail)."""
    v, bene = two_node_plan(world)
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    ex = world.executor()
    ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")), world.fake.snapshot())
    late = world.pending("late", gpus=8, priority=10**6, cls="HIGH")  # above the hold floor
    for _ in range(20):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
    assert world.fake.jobs[late].state is JobState.RUNNING
    assert world.fake.jobs[late].nodes == ("n1",)


def test_refused_reservation_falls_back_to_holds(world: World) -> None:
    """Slurm refuses the reservation: the competitor is held, the context says so, and it is
    released at the end; a job submitted during the plan is held at the next cycle step."""
    v, bene = two_node_plan(world)
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    other = world.pending("other", gpus=8, priority=50, cls="NORMAL")
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")),
                       world.fake.snapshot())
    ctx = context(world, plan_id)
    assert ctx.reservation is None and ctx.held == (other,)
    assert world.fake.jobs[other].held
    world.clock.wait(ex.stop, 0.1)
    late = world.pending("late", gpus=8, priority=50, cls="NORMAL")
    ex.reconcile(world.fake.snapshot())
    assert world.fake.jobs[late].held
    step_until_closed(world, ex)
    b = world.fake.jobs[bene]
    assert b.state is JobState.RUNNING and set(b.nodes) == {"n1", "n2"}
    nothing_held(world)


def competitor_held_while_it_runs(world: World
                                  ) -> tuple[int, int, PreemptionExecutor, int]:
    """Holds fallback: a NORMAL competitor pending in the cycle's snapshot starts (a job
    ended) before the plan (victim on n1, saving in 1 s) holds it, so Slurm holds it while it
    runs: (competitor, beneficiary, executor, plan id)."""
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    v = world.victim("v", Behaviour(ack_after=1.0))
    world.victim("f1", Behaviour(ack_after=None))
    world.victim("f2", Behaviour(ack_after=None))
    blocker = world.victim("f3", Behaviour(ack_after=None))
    comp = world.pending("comp", gpus=8, priority=50, cls="NORMAL")
    bene = world.pending("bene", gpus=8)
    snap = world.fake.snapshot()   # the cycle's: comp pending
    world.fake.finish(blocker, JobState.COMPLETED)
    world.fake.schedule()
    assert world.fake.jobs[comp].state is JobState.RUNNING
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), snap)
    assert comp in context(world, plan_id).held and world.fake.jobs[comp].held
    return comp, bene, ex, plan_id


def test_a_competitor_that_started_before_its_hold_is_released_too(world: World) -> None:
    """Holds fallback: a competitor pending in the cycle's snapshot starts (a job ended)
    before the plan holds it. Slurm takes the hold on the running job (priority 0, as 22.05
    does); the guard's release must free it too, else a later requeue (RequeueExit, a node
    failure) leaves it pending and held for good."""
    comp, bene, ex, _plan = competitor_held_while_it_runs(world)
    step_until_closed(world, ex)
    assert world.fake.jobs[bene].state is JobState.RUNNING
    assert not world.fake.jobs[comp].held
    nothing_held(world)


def test_two_plans_under_the_holds_fallback_hand_a_shared_competitor_over(world: World
                                                                          ) -> None:
    """Slurm refuses both reservations. Plan A (n1) holds the NORMAL competitor; plan B
    (n2+n3) finds it held by A's guard and lists it too, with A's LOW victim, which A will
    requeue held. A ends first (its victim saves in 0.5 s): both stay held, so neither can
    take n2, freed by B's first victim while B waits for its second (backfill on); B's
    beneficiary gets n2+n3, and both are released when B ends. (Before: A's release freed
    them; A's victim restarted on n2, and B's beneficiary waited out its start timeout.)"""
    world.fake.backfill = True
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    va = world.victim("va", Behaviour(ack_after=0.5))
    vb = [world.victim("vb1", Behaviour(ack_after=0.5)),
          world.victim("vb2", Behaviour(ack_after=3.0))]
    world.victim("f", Behaviour(ack_after=None))
    comp = world.pending("comp", gpus=8, priority=50, cls="NORMAL")
    bene_a = world.pending("bene-a", gpus=8)
    bene_b = world.pending("bene-b", gpus=8, nodes=2)
    ex = world.executor()
    pa = ex.start(ExecutionRequest(bene_a, (va,), nodes=("n1",)), world.fake.snapshot())
    pb = ex.start(ExecutionRequest(bene_b, tuple(vb), nodes=("n2", "n3")),
                  world.fake.snapshot())
    assert context(world, pa).held == (comp,) and context(world, pb).held == (comp, va)
    held_after_a: list[bool] = []
    for _ in range(400):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
        if world.repo.get_plan(pa).state is PlanState.DONE and not held_after_a:
            held_after_a.append(world.fake.jobs[comp].held and world.fake.jobs[va].held)
        if not ex.has_open_plans():
            break
    assert held_after_a == [True], "plan A's end released jobs plan B still needs held"
    assert world.repo.get_plan(pb).state is PlanState.DONE
    a, b = world.fake.jobs[bene_a], world.fake.jobs[bene_b]
    assert a.state is JobState.RUNNING and a.nodes == ("n1",)
    assert b.state is JobState.RUNNING and set(b.nodes) == {"n2", "n3"}
    nothing_held(world)


def test_a_late_release_leaves_a_job_another_plan_holds_to_that_plan(world: World) -> None:
    """The late-release sweep (victims not ended yet when their guard was released) leaves
    a job another open plan's guard holds to that plan: it stays held and watched, and that
    plan releases it when it ends."""
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    v, comp, bene = one_victim_and_a_competitor(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v,), nodes=("n1",)), world.fake.snapshot())
    assert context(world, plan_id).held == (comp,) and world.fake.jobs[comp].held
    remember_release(world.repo, [comp], world.clock.now)   # as another plan's end does
    assert sweep_releases(world.repo, world.fake, world.clock.now) == []
    assert world.fake.jobs[comp].held
    assert str(comp) in world.repo.get_value(RELEASE_LATER_KEY)  # type: ignore[operator]
    step_until_closed(world, ex)
    assert world.fake.jobs[bene].state is JobState.RUNNING
    nothing_held(world)


def test_a_held_competitor_another_plan_takes_as_a_victim_is_still_released(world: World
                                                                            ) -> None:
    """Holds fallback: plan A holds a competitor that had started (held while it runs); plan B
    then takes it as a victim and aborts (it never saves). A ends first, while B is open: A
    still releases its hold, as B, whose victim was never requeued, would not. (Reviewed:
    counting B's victims as held by B left it held for good.)"""
    comp, _bene, ex, plan_a = competitor_held_while_it_runs(world)
    other = world.pending("other", gpus=8, cls="VERY_HIGH", priority=20)
    node = world.fake.jobs[comp].nodes
    ex.start(ExecutionRequest(other, (comp,), nodes=node, deadlines={comp: 30.0},
                              on_miss=DeadlineAction.ABORT), world.fake.snapshot())
    for _ in range(100):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
        if world.repo.get_plan(plan_a).state is PlanState.DONE:
            break
    assert world.repo.get_plan(plan_a).state is PlanState.DONE
    assert ex.has_open_plans()   # plan B still waits for its victim
    assert not world.fake.jobs[comp].held


def test_a_plan_without_nodes_holds_instead(world: World) -> None:
    """No target nodes, nothing to reserve: the holds fallback."""
    v, other, bene = one_victim_and_a_competitor(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v,)), world.fake.snapshot())
    assert world.fake.reservations() == () and context(world, plan_id).reservation is None
    assert world.fake.jobs[other].held
    step_until_closed(world, ex)
    nothing_held(world)


def test_reservation_lost_by_slurmctld_is_made_again_at_the_next_step(world: World) -> None:
    """slurmctld restarted before saving its state: the reservation and the beneficiary's link
    are gone. The next step (between cycles, no snapshot) makes it again and links the
    beneficiary; the newcomer never gets the freed node."""
    v, bene = two_node_plan(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")),
                       world.fake.snapshot())
    name = context(world, plan_id).reservation
    world.fake.resvs.clear()
    world.fake.jobs[bene].reservation = ""
    late = world.pending("late", gpus=8, priority=10**6, cls="NORMAL")
    world.clock.wait(ex.stop, 0.1)
    ex.reconcile()
    assert [r.name for r in world.fake.reservations()] == [name]
    assert world.fake.jobs[bene].reservation == name
    step_until_closed(world, ex)
    assert set(world.fake.jobs[bene].nodes) == {"n1", "n2"}
    assert world.fake.jobs[late].state is JobState.PENDING
    assert world.fake.reservations() == ()
    nothing_held(world)


def test_reservation_that_cannot_be_made_again_falls_back_to_holds(world: World) -> None:
    """Lost, and Slurm now refuses it (say, an admin's reservation overlaps): the next cycle
    step holds the competitors instead."""
    v, bene = two_node_plan(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")),
                       world.fake.snapshot())
    world.fake.resvs.clear()
    world.fake.jobs[bene].reservation = ""
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    late = world.pending("late", gpus=8, priority=10**6, cls="NORMAL")
    world.clock.wait(ex.stop, 0.1)
    ex.reconcile(world.fake.snapshot())
    assert context(world, plan_id).reservation is None
    assert world.fake.jobs[late].held
    step_until_closed(world, ex)
    assert set(world.fake.jobs[bene].nodes) == {"n1", "n2"}
    nothing_held(world)


def test_abort_ends_the_reservation_and_unlinks_the_waiting_beneficiary(world: World) -> None:
    """Policy abort, a victim never answers: the plan ends aborted, the reservation is gone,
    the beneficiary (still pending) is no longer linked to it nor pinned."""
    v = [world.victim("v0", Behaviour(ack_after=None)),
         world.victim("v1", Behaviour(ack_after=None)),
         world.victim("f2", Behaviour(ack_after=None)),
         world.victim("f3", Behaviour(ack_after=None))]
    bene = world.pending("bene", gpus=8)
    ex = world.executor(saving_extension=0.0)
    result = ex.run(ExecutionRequest(bene, (v[0],), nodes=("n1",), deadlines={v[0]: 2.0},
                                     on_miss=DeadlineAction.ABORT), world.fake.snapshot())
    assert result.state is PlanState.ABORTED
    b = world.fake.jobs[bene]
    assert b.state is JobState.PENDING and b.reservation == "" and b.req_nodes == ""
    assert world.fake.reservations() == ()


def test_roll_back_ends_the_reservation(world: World) -> None:
    """The beneficiary is cancelled while the victims save: the plan is rolled back and its
    reservation is gone."""
    v, bene = two_node_plan(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")),
                       world.fake.snapshot())
    world.fake.cancel(bene)
    step_until_closed(world, ex)
    assert world.repo.get_plan(plan_id).state is PlanState.ROLLED_BACK
    assert world.fake.reservations() == ()
    nothing_held(world)


def test_recover_makes_the_lost_reservation_again_and_removes_leftovers(world: World) -> None:
    """A daemon dies mid-plan and slurmctld loses the reservation; another daemon's
    ``recover()`` makes it again for the open plan, finishes the plan, and removes a
    ``hai-plan-*`` reservation that belongs to no open plan (an admin's own is left alone)."""
    v, bene = two_node_plan(world)
    ex = world.executor()
    plan_id = ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2")),
                       world.fake.snapshot())
    context_name = context(world, plan_id).reservation
    world.fake.resvs.clear()
    world.fake.jobs[bene].reservation = ""
    world.fake.create_reservation("hai-plan-999-1800000000", ["n3"], ["alice"], 10)
    world.fake.create_reservation("maintenance", ["n4"], ["root"], 10)
    seen: list[tuple[str, ...]] = []
    fresh = world.executor()
    fresh.hook = lambda point, _p: seen.append(
        tuple(r.name for r in world.fake.reservations())) if point == "requeued" else None
    (result,) = fresh.recover()
    assert result.plan_id == plan_id and result.state is PlanState.DONE, result.note
    assert seen == [(context_name, "maintenance")]  # made again, leftover removed
    assert set(world.fake.jobs[bene].nodes) == {"n1", "n2"}
    assert [r.name for r in world.fake.reservations()] == ["maintenance"]
    nothing_held(world)


def test_reservation_lasts_the_whole_plan_and_no_more(world: World) -> None:
    """Its length covers the longest deadline, the saving extension, the requeue retries and
    the start wait, plus 5 min."""
    v, bene = two_node_plan(world)
    ex = world.executor(saving_extension=60.0, start_timeout=60.0)
    ex.start(ExecutionRequest(bene, (v[0], v[1]), nodes=("n1", "n2"),
                              deadlines={v[0]: 30.0, v[1]: 300.0}), world.fake.snapshot())
    (resv,) = world.fake.reservations()
    assert resv.start_time is not None and resv.end_time is not None
    assert resv.end_time - resv.start_time == 60 * (-(-(300 + 60 + 10 + 60) // 60) + 5)


def shared_node_plans(world: World) -> tuple[int, int, int, int]:
    """Plan 1: alice's 4-GPU job on n1 for v0 (saves in 1 s). Plan 2: bob's 2 x 4-GPU job on
    n1 and n2 for v1 (n1, 3 s) and w (n2, 2 s). The other GPUs run jobs that never answer.
    Returns the two beneficiaries and the two plan ids."""
    world.fake.backfill = True
    v0 = world.victim("v0", Behaviour(ack_after=1.0), gpus=4)
    v1 = world.victim("v1", Behaviour(ack_after=3.0), gpus=4)
    w = world.victim("w", Behaviour(ack_after=2.0), gpus=4)
    world.victim("f2", Behaviour(ack_after=None), gpus=4)
    for name in ("f3", "f4"):
        world.victim(name, Behaviour(ack_after=None))
    assert [world.fake.jobs[j].nodes for j in (v0, v1, w)] == [("n1",), ("n1",), ("n2",)]
    b1 = world.pending("b1", gpus=4)
    b2 = world.pending("b2", gpus=4, nodes=2, user="bob")
    ex = world.executor()
    world.ex = ex  # type: ignore[attr-defined]
    p1 = ex.start(ExecutionRequest(b1, (v0,), nodes=("n1",)), world.fake.snapshot())
    p2 = ex.start(ExecutionRequest(b2, (v1, w), nodes=("n1", "n2")), world.fake.snapshot())
    return b1, b2, p1, p2


def test_a_second_plan_on_a_reserved_node_joins_its_reservation(world: World) -> None:
    """Slurm refuses a second reservation on a node: a plan whose target nodes another plan's
    reservation stands on joins it (its nodes and user added, its beneficiary linked), holds
    nobody, and a newcomer stays off both plans' nodes. When the first plan ends the
    reservation stays for the second, covering only its nodes and user; the last plan ends
    it."""
    b1, b2, p1, p2 = shared_node_plans(world)
    ex = world.ex  # type: ignore[attr-defined]
    name = context(world, p1).reservation
    assert name is not None and context(world, p2).reservation == name
    (resv,) = world.fake.reservations()
    assert (resv.name, set(resv.nodes), set(resv.users)) == (name, {"n1", "n2"},
                                                            {"alice", "bob"})
    assert world.fake.jobs[b1].reservation == world.fake.jobs[b2].reservation == name
    late = world.pending("late", gpus=4, priority=10**6, cls="NORMAL")
    seen_alone = False
    for _ in range(400):
        world.clock.wait(ex.stop, 0.1)
        ex.reconcile(world.fake.snapshot())
        if world.repo.get_plan(p1).state is PlanState.DONE and ex.has_open_plans():
            (left,) = world.fake.reservations()
            assert (left.name, set(left.nodes), left.users) == (name, {"n1", "n2"}, ("bob",))
            seen_alone = True
        if not ex.has_open_plans():
            break
    assert seen_alone
    assert world.repo.get_plan(p1).state is world.repo.get_plan(p2).state is PlanState.DONE
    assert world.fake.jobs[b1].nodes == ("n1",)
    assert set(world.fake.jobs[b2].nodes) == {"n1", "n2"}
    assert world.fake.jobs[late].state is JobState.PENDING
    assert not [w for w in world.fake.writes if w[:2] == ("scontrol", "hold")]
    assert world.fake.reservations() == ()
    nothing_held(world)


def test_a_shared_reservation_lost_is_made_again_for_both_plans(world: World) -> None:
    """slurmctld lost the shared reservation and both links: the next step makes it again
    covering both plans' nodes and users, and links both beneficiaries."""
    b1, b2, p1, _ = shared_node_plans(world)
    ex = world.ex  # type: ignore[attr-defined]
    name = context(world, p1).reservation
    world.fake.resvs.clear()
    world.fake.jobs[b1].reservation = world.fake.jobs[b2].reservation = ""
    world.clock.wait(ex.stop, 0.1)
    ex.reconcile()
    (resv,) = world.fake.reservations()
    assert (resv.name, set(resv.nodes), set(resv.users)) == (name, {"n1", "n2"},
                                                            {"alice", "bob"})
    assert world.fake.jobs[b1].reservation == world.fake.jobs[b2].reservation == name
    step_until_closed(world, ex)
    assert world.fake.reservations() == ()
    nothing_held(world)


def test_a_refused_join_holds_and_leaves_the_first_reservation_alone(world: World) -> None:
    """Slurm refuses to change the first plan's reservation: the second plan falls back to
    holds, and the first plan keeps its reservation as it was."""
    world.fake.backfill = True
    v0 = world.victim("v0", Behaviour(ack_after=1.0), gpus=4)
    v1 = world.victim("v1", Behaviour(ack_after=3.0), gpus=4)
    for name in ("f2", "f3", "f4"):
        world.victim(name, Behaviour(ack_after=None))
    b1 = world.pending("b1", gpus=4)
    b2 = world.pending("b2", gpus=4, user="bob")
    other = world.pending("other", gpus=4, priority=50, cls="NORMAL")
    ex = world.executor()
    p1 = ex.start(ExecutionRequest(b1, (v0,), nodes=("n1",)), world.fake.snapshot())
    world.fake.refuse_reservations = "Requested reservation overlaps with another reservation"
    p2 = ex.start(ExecutionRequest(b2, (v1,), nodes=("n1",)), world.fake.snapshot())
    name = context(world, p1).reservation
    assert context(world, p2).reservation is None and other in context(world, p2).held
    (resv,) = world.fake.reservations()
    assert (resv.name, resv.nodes, resv.users) == (name, ("n1",), ("alice",))
    assert world.fake.jobs[b1].reservation == name and world.fake.jobs[b2].reservation == ""
    step_until_closed(world, ex)
    assert world.fake.jobs[b1].nodes == world.fake.jobs[b2].nodes == ("n1",)
    nothing_held(world)
