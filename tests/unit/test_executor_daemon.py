"""One daemon cycle with the planner hook and the executor, on FakeSlurm: planned, saved, done."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import StateError
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.loop import Daemon
from hai_slurm.priority.daemon.planning import SnapshotPlanner
from hai_slurm.priority.executor.guard import TOP_PRIORITY
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.planner.testing import gpu_cluster
from hai_slurm.priority.planner.types import PlannerConfig
from hai_slurm.priority.policy.state import EventKind
from hai_slurm.priority.store import PlanState
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.lock import LeaderLock
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.types import JobState


def test_daemon_cycle_plans_and_executes_a_preemption(tmp_path: Path) -> None:
    """Four LOW jobs fill 4 x 8 GPUs; a HIGH 16-GPU job waits; one cycle starts a plan without
    waiting for the acks; a second cycle while it waits leaves the beneficiary's top priority
    alone and plans nothing more; the steps between cycles then finish it: the beneficiary
    runs on one leaf's two nodes, two victims were requeued, the plan is done with its
    events."""
    world = make_world(tmp_path)
    victims = [world.victim(f"v{i}", Behaviour(ack_after=0.5)) for i in range(4)]
    world.fake.advance(world.fake.now + 3600)  # they have run an hour
    world.clock.now = float(world.fake.now)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    bene = world.fake.submit(name="bene", uid=1000, account="team-b", qos="high", nodes=2,
                             gpus_per_node=8, admin_comment=format_admin_comment(info),
                             now=world.fake.now - 600)
    cfg = dataclasses.replace(DaemonConfig(), database_url="sqlite://", state_dir=str(tmp_path))
    planner = SnapshotPlanner(gpu_cluster(2, 2), PlannerConfig(min_run_time=60.0))
    lock = LeaderLock(upgrade(f"sqlite:///{tmp_path / 'state.db'}"))  # the world's database
    daemon = Daemon(world.fake, world.repo, lock, config=cfg, clock=world.clock,
                    planner=planner, executor=world.executor(), interval=1.0)
    report = daemon.run_once()
    assert report.outcome.value == "ok", report.reason
    assert planner.last is not None and len(planner.last.plans) == 1, planner.last
    (plan,) = world.repo.history()
    assert plan.state is PlanState.SIGNALLED  # the cycle did not wait for the acks
    assert world.fake.jobs[bene].priority == TOP_PRIORITY
    report = daemon.run_once()  # a cycle while the plan waits
    assert report.outcome.value == "ok", report.reason
    assert world.fake.jobs[bene].priority == TOP_PRIORITY  # the policy left the pin's priority
    assert len(world.repo.history()) == 1  # nothing planned twice
    assert daemon._plans_open()
    for _ in range(20):  # the steps between cycles, every poll_interval
        world.clock.wait(daemon.stop_event, daemon.executor.poll_interval)  # type: ignore[union-attr]
        daemon.step_plans()
    assert not daemon._plans_open()
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE
    job = world.fake.jobs[bene]
    assert job.state is JobState.RUNNING
    pairs = ({"n1", "n2"}, {"n3", "n4"})
    assert set(job.nodes) in pairs
    requeued = [v for v in victims if world.fake.jobs[v].restart_count == 1]
    assert len(requeued) == 2
    assert {n for v in victims if v not in requeued for n in world.fake.jobs[v].nodes} \
        == next(p for p in pairs if p != set(job.nodes))
    counts = world.repo.event_counts(0)
    assert counts[("team-a", EventKind.PREEMPTED)] == 2
    assert counts[("team-b", EventKind.PREEMPTING)] == 1


def _ten_second_daemon(tmp: Path, *, ack_after: float) -> tuple[World, Daemon]:
    """Four LOW 8-GPU victims that ack ``ack_after`` s after a request, an hour old; a HIGH
    16-GPU job waiting 10 min; a daemon with a 10-s cycle over them."""
    world = make_world(tmp)
    for i in range(4):
        world.victim(f"v{i}", Behaviour(ack_after=ack_after))
    world.fake.advance(world.fake.now + 3600)
    world.clock.now = float(world.fake.now)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    world.fake.submit(name="bene", uid=1000, account="team-b", qos="high", nodes=2,
                      gpus_per_node=8, admin_comment=format_admin_comment(info),
                      now=world.fake.now - 600)
    cfg = dataclasses.replace(DaemonConfig(), database_url="sqlite://", state_dir=str(tmp))
    lock = LeaderLock(upgrade(f"sqlite:///{tmp / 'state.db'}"))
    daemon = Daemon(world.fake, world.repo, lock, config=cfg, clock=world.clock,
                    planner=SnapshotPlanner(gpu_cluster(2, 2), PlannerConfig(min_run_time=60.0)),
                    executor=world.executor(), interval=10.0)
    return world, daemon


def test_the_wait_between_cycles_steps_open_plans(tmp_path: Path) -> None:
    """With a 10-s cycle, the plan a cycle started is finished during the wait before the next
    cycle (steps every poll_interval), not 10 s later; with no plan open the wait is one
    plain wait."""
    world, daemon = _ten_second_daemon(tmp_path, ack_after=0.5)
    report = daemon.run_once()
    (plan,) = world.repo.history()
    assert plan.state is PlanState.SIGNALLED
    started = world.clock.now
    daemon._wait(report)
    assert world.clock.now - started == pytest.approx(10.0, abs=0.01)  # the cycle's interval
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE  # stepped during the wait, not at the next cycle
    done_at = max(s.at for s in plan.steps)
    assert done_at - started < 3.0


def test_a_database_error_renewing_the_lease_between_cycles_is_waited_out(
        tmp_path: Path) -> None:
    """The lease renewal in a step between cycles fails (the database is locked, or MariaDB
    restarts): the wait goes on (a warning; the next step tries again) instead of the error
    ending the daemon with a plan open, and the plan is finished once the database answers."""
    world, daemon = _ten_second_daemon(tmp_path, ack_after=12.0)   # open past a renewal
    # no urgent polls: they renew the lease too, and catch its errors themselves
    daemon.config = dataclasses.replace(daemon.config, intervals=dataclasses.replace(
        daemon.config.intervals, urgent_poll=0.0))
    report = daemon.run_once()
    lock = daemon.lock
    renew = lock.acquire_or_renew
    fails = {"left": 1}

    def flaky(*args: object, **kwargs: object) -> object:
        if fails["left"] > 0:
            fails["left"] -= 1
            raise StateError("database is locked")
        return renew(*args, **kwargs)   # type: ignore[arg-type]

    lock.acquire_or_renew = flaky   # type: ignore[method-assign]
    for _ in range(2):   # 20 s: the renewal 5 s in fails; the plan ends at about 12.5 s
        daemon._wait(report)
    assert fails["left"] == 0
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE


def test_the_last_ack_is_acted_on_within_poll_not_state_poll(tmp_path: Path) -> None:
    """Victims ack 0.53 s after the request. Between cycles the daemon steps the plans every
    state_poll (0.5 s) and, in between, looks for acks every poll (0.1 s): the victims are
    requeued within about 0.1 s of their acks, not at the next state poll, 0.47 s later."""
    world, daemon = _ten_second_daemon(tmp_path, ack_after=0.53)
    executor = daemon.executor
    assert isinstance(executor, PreemptionExecutor)
    assert (executor.ack_interval, executor.poll_interval) == (0.1, 0.5)
    report = daemon.run_once()
    (plan,) = world.repo.history()
    asked = max(v.asked_at or 0.0 for v in plan.victims)
    daemon._wait(report)
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE
    requeued = next(s.at for s in plan.steps if s.to_state is PlanState.REQUEUED)
    acked = max(v.acked_at or 0.0 for v in plan.victims)   # the acks' own times
    assert acked >= asked + 0.53
    assert 0 <= requeued - acked <= 0.1 + 1e-6, (acked - asked, requeued - asked)


def test_a_daemon_cycle_cleans_up_after_a_beneficiary_pending_again(tmp_path: Path) -> None:
    """A beneficiary that ran when its plan ended kept the guard's pin; requeued later, the
    next daemon cycle gives it its own node list back (``sweep_leftovers`` in the cycle)."""
    from hai_slurm.priority.executor.guard import remember_unpin

    world = make_world(tmp_path)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    bene = world.fake.submit(name="bene", uid=1000, account="team-b", qos="high", nodes=1,
                             gpus_per_node=8, admin_comment=format_admin_comment(info))
    world.fake.set_req_nodes(bene, "n1")
    world.fake.schedule()
    remember_unpin(world.repo, bene, "", "n1", None, world.clock.now)
    world.fake.requeue(bene)
    cfg = dataclasses.replace(DaemonConfig(), database_url="sqlite://", state_dir=str(tmp_path))
    lock = LeaderLock(upgrade(f"sqlite:///{tmp_path / 'state.db'}"))
    daemon = Daemon(world.fake, world.repo, lock, config=cfg, clock=world.clock,
                    planner=SnapshotPlanner(gpu_cluster(2, 2)), executor=world.executor(),
                    interval=1.0)
    report = daemon.run_once()
    assert report.outcome.value == "ok", report.reason
    assert world.fake.jobs[bene].req_nodes == ""
