"""The executor measures its waits on the monotonic clock: a step of the wall clock (NTP) in the
middle of a plan neither makes a victim that is still saving miss its deadline (with the
``force`` policy it would be requeued without its acknowledgement and resume from an older
checkpoint) nor lengthens a deadline, a second request or a state poll. A restarted daemon
anchors an open plan once from the stored wall times. (Before: every wait was a wall-clock
difference.)"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.slurm_plugins.types import JobState

DEADLINE = 120.0


@pytest.fixture
def world(tmp_path: Path) -> World:
    """Four nodes of 8 GPUs."""
    return make_world(tmp_path)


def step_wall(world: World, seconds: float) -> None:
    """Step the wall clock by ``seconds`` (an NTP step: no time passes). The victims count the
    time since they heard the request as it passes, not by the stepped clock."""
    world.clock.step(seconds)
    world.asked = {jid: at + seconds for jid, at in world.asked.items()}


def one_victim(world: World, behaviour: Behaviour) -> tuple[int, int, ExecutionRequest]:
    """A victim on n1 with ``behaviour`` and a deadline of ``DEADLINE``, the other nodes busy
    with jobs that are not asked; the victim, the beneficiary and the request."""
    v = world.victim("v", behaviour)
    for i in range(3):
        world.victim(f"f{i}", Behaviour(ack_after=None))
    bene = world.pending("bene", gpus=8)
    return v, bene, ExecutionRequest(bene, (v,), nodes=("n1",), deadlines={v: DEADLINE})


class Phase1:
    """When phase 1 of the executor's plan ended (monotonic) and how each victim left it: the
    executor's ``phase1_done`` hook, before the victims are requeued."""

    def __init__(self, world: World, ex: PreemptionExecutor) -> None:
        self.at: float | None = None
        self.states: dict[int, VictimState] = {}
        self._world = world
        ex.hook = self._hook

    def _hook(self, point: str, plan_id: int) -> None:
        if point == "phase1_done" and self.at is None:
            self.at = self._world.clock.monotonic()
            self.states = {v.job_id: v.state
                           for v in self._world.repo.get_plan(plan_id).victims}

    def done(self) -> bool:
        """Whether phase 1 ended."""
        return self.at is not None


def steps(world: World, plan_id: int) -> list[str]:
    """The plan's recorded states, in order."""
    return [s.to_state.value for s in world.repo.get_plan(plan_id).steps]


def step_until(world: World, ex: PreemptionExecutor, done: Callable[[], bool], *,
               every: float = 0.1, limit: float = 400.0) -> None:
    """Step the open plans every ``every`` s (as the daemon does between cycles) until
    ``done()`` is true, for at most ``limit`` s."""
    start = world.clock.monotonic()
    while not done():
        if world.clock.monotonic() - start > limit:
            raise AssertionError(f"not done after {limit:g} s")
        world.clock.wait(ex.stop, every)
        ex.reconcile(world.fake.snapshot())


@pytest.mark.parametrize("seconds", [600.0, -600.0], ids=["forward", "back"])
def test_a_step_does_not_cost_a_saving_victim_its_acknowledgement(world: World,
                                                                  seconds: float) -> None:
    """The wall clock (the victims' too) steps 600 s either way 1 s after the request; the
    victim saves from 30 s and acknowledges after 100 s of its 120 s deadline: it is acked, the
    plan all_acked and done, the victim requeued once. (Before: forward, it missed at the next
    look and was requeued without its acknowledgement; back, what it wrote bore times before
    the stored request, so its acknowledgement was refused as stale: recorded ended, the plan
    forced.)"""
    v, bene, req = one_victim(world, Behaviour(ack_after=100.0, saving_from=30.0))
    ex = world.executor()
    phase1 = Phase1(world, ex)
    asked = world.clock.monotonic()
    plan_id = ex.start(req, world.fake.snapshot())
    step_until(world, ex, lambda: world.clock.monotonic() - asked >= 1.0)
    step_wall(world, seconds)
    step_until(world, ex, phase1.done, every=0.25)
    assert phase1.states == {v: VictimState.ACKED}
    assert phase1.at is not None and phase1.at - asked == pytest.approx(100.0, abs=0.6)
    step_until(world, ex, lambda: not ex.has_open_plans())
    assert steps(world, plan_id) == ["planned", "signalled", "all_acked", "requeued", "done"]
    assert world.repo.get_plan(plan_id).state is PlanState.DONE
    assert world.fake.jobs[v].restart_count == 1
    if seconds > 0:   # back: Slurm's clock too, so the job it submitted then may not begin yet
        assert world.fake.jobs[bene].state is JobState.RUNNING


def test_a_step_back_does_not_lengthen_the_deadline(world: World) -> None:
    """The wall clock goes back 600 s 1 s after the request; a victim that never acknowledges
    misses its deadline 120 s after the request on the monotonic clock (not 600 s later) and
    is requeued (policy force). (Before: it was waited for 720 s.)"""
    v, _bene, req = one_victim(world, Behaviour(ack_after=None))
    ex = world.executor()
    phase1 = Phase1(world, ex)
    asked = world.clock.monotonic()
    plan_id = ex.start(req, world.fake.snapshot())
    step_until(world, ex, lambda: world.clock.monotonic() - asked >= 1.0)
    step_wall(world, -600.0)
    step_until(world, ex, phase1.done, every=0.25, limit=DEADLINE + 10.0)
    assert phase1.states == {v: VictimState.MISSED}
    assert phase1.at is not None and phase1.at - asked == pytest.approx(DEADLINE, abs=0.3)
    step_until(world, ex, lambda: not ex.has_open_plans())
    assert "forced" in steps(world, plan_id)
    assert world.fake.jobs[v].restart_count == 1


@pytest.mark.parametrize("seconds", [0.0, -600.0], ids=["no-step", "step-back-after"])
def test_a_restarted_daemon_anchors_the_plan_from_the_stored_wall_time(world: World,
                                                                       seconds: float) -> None:
    """The daemon that asked the victim is gone for 110 s; a new one (another process: its own
    monotonic clock) takes the open plan up. The elapsed time so far can only come from the
    wall clock: the victim, which never acknowledges, misses its 120 s deadline about 10 s
    after the new daemon's first look, and a wall step after that look changes nothing."""
    v, _bene, req = one_victim(world, Behaviour(ack_after=None))
    world.executor().start(req, world.fake.snapshot())
    world.clock.advance(110.0)
    world.clock.mono = 5_000.0
    fresh = world.executor()
    phase1 = Phase1(world, fresh)
    looked = world.clock.monotonic()
    fresh.reconcile(world.fake.snapshot())
    assert not phase1.done()
    step_wall(world, seconds)
    step_until(world, fresh, phase1.done, limit=DEADLINE)
    assert phase1.states == {v: VictimState.MISSED}
    assert phase1.at is not None and phase1.at - looked == pytest.approx(DEADLINE - 110.0,
                                                                         abs=0.2)


@pytest.mark.parametrize("seconds", [600.0, -600.0], ids=["forward", "back"])
def test_the_second_request_is_sent_on_time_across_a_step(world: World,
                                                          seconds: float) -> None:
    """The first request reaches no process; the wall clock steps 600 s either way right
    after it. The victim is asked again ``resend_after`` (5 s) after the request on the
    monotonic clock. (Before: at once after a step forward, where it also missed its deadline,
    and 605 s later after a step back.)"""
    v, _bene, req = one_victim(world, Behaviour(ack_after=1.0, misses_first=True))
    ex = world.executor()
    asked = world.clock.monotonic()
    plan_id = ex.start(req, world.fake.snapshot())
    step_wall(world, seconds)

    def requests() -> int:
        return [r.job_id for r in world.fake.signals].count(v)

    step_until(world, ex, lambda: requests() == 2, limit=DEADLINE)
    assert world.clock.monotonic() - asked == pytest.approx(5.0, abs=0.15)
    step_until(world, ex, lambda: not ex.has_open_plans())
    assert steps(world, plan_id) == ["planned", "signalled", "all_acked", "requeued", "done"]


def test_a_step_back_does_not_stall_the_state_polls(world: World) -> None:
    """The wall clock goes back 600 s 1 s after the request; the victim dies (exit 1, no
    acknowledgement) 3 s after it: the next state poll, within ``state_poll`` (0.5 s), sees
    it ended, and it is recorded ended after the 1 s it is still watched for an ack.
    (Before: no Slurm state was read for 600 s.)"""
    v, _bene, req = one_victim(world, Behaviour(ack_after=None, dies_after=3.0))
    ex = world.executor()
    phase1 = Phase1(world, ex)
    asked = world.clock.monotonic()
    ex.start(req, world.fake.snapshot())
    step_until(world, ex, lambda: world.clock.monotonic() - asked >= 1.0)
    step_wall(world, -600.0)
    step_until(world, ex, phase1.done, limit=DEADLINE + 10.0)
    assert phase1.states == {v: VictimState.ENDED}
    assert phase1.at is not None and phase1.at - asked == pytest.approx(4.0, abs=0.6)



def test_the_start_timeout_is_measured_across_a_step_back(world: World) -> None:
    """The victim acknowledges at 10 s (and runs until it is requeued); right after the
    requeue the wall clock (Slurm's too) goes back 600 s, so the beneficiary, submitted "in the
    future" now, cannot begin. The guard is released ``start_timeout`` (60 s) after the requeue
    on the monotonic clock, not 660 s later, and the plan ends done, saying the beneficiary did
    not start."""
    v, _bene, req = one_victim(world, Behaviour(ack_after=10.0, exits=False))
    ex = world.executor()
    requeued: list[float] = []

    def hook(point: str, _plan_id: int) -> None:
        if point == "requeued":
            requeued.append(world.clock.monotonic())
            step_wall(world, -600.0)

    ex.hook = hook
    plan_id = ex.start(req, world.fake.snapshot())
    step_until(world, ex, lambda: not ex.has_open_plans(), limit=200.0)
    assert requeued and world.clock.monotonic() - requeued[0] == pytest.approx(
        ex.settings.start_timeout, abs=0.5)
    plan = world.repo.get_plan(plan_id)
    assert plan.state is PlanState.DONE and "did not start" in plan.steps[-1].note
    assert world.fake.jobs[v].restart_count == 1


def test_a_blocking_run_renews_the_lease_on_the_executors_clock(world: World) -> None:
    """``run`` (scripts, ``recover``) renews the leader lease every 5 s of the executor's clock
    while a victim saves for 20 s; a lease lost meanwhile stops the plan with an error that
    says the new leader finishes it, and the plan stays open for it. (Before: the heartbeat
    read the process's own monotonic clock, so under any other clock it never came; the
    result's ``seconds`` did too.)"""
    from hai_slurm.errors import StateError

    beats: list[float] = []

    def beat() -> bool:
        beats.append(world.clock.monotonic())
        return True

    _v, _bene, req = one_victim(world, Behaviour(ack_after=20.0))
    ex = PreemptionExecutor(world.fake, world.repo, clock=world.clock, heartbeat=beat)
    asked = world.clock.monotonic()
    result = ex.run(req, world.fake.snapshot())
    assert result.state is PlanState.DONE
    # its duration too is on the executor's clock (the process's own saw no time pass)
    assert 20.0 <= result.seconds <= world.clock.monotonic() - asked, result.seconds
    assert len(beats) >= 3 and all(b - asked <= 25.0 for b in beats), beats
    assert all(later - earlier > 5.0 for earlier, later in pairwise(beats)), beats

    (world.tmp / "lost").mkdir()
    other = make_world(world.tmp / "lost")
    v2, _bene2, req2 = one_victim(other, Behaviour(ack_after=20.0))
    lost = PreemptionExecutor(other.fake, other.repo, clock=other.clock, heartbeat=lambda: False)
    with pytest.raises(StateError, match=r"lost the leader lease.*new leader finishes it"):
        lost.run(req2, other.fake.snapshot())
    assert [p.state for p in other.repo.unfinished_plans()] == [PlanState.SIGNALLED]
    assert other.fake.jobs[v2].restart_count == 0
