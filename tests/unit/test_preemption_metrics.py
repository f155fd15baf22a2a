"""The preemption metrics move when preemptions happen: plans by outcome, victims and
beneficiaries by class and team, lost GPU-seconds, time to start the beneficiary and to resume
the victims; and the gauges for the alerts (bound ratio, last cycle, open plans)."""

from __future__ import annotations

from pathlib import Path

from executor_world import make_world
from test_daemon_factory import SWITCHES, _config, _daemon, _fill_and_wait, step_between_cycles

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.daemon.metrics import DaemonMetrics, sample
from hai_slurm.priority.daemon.plan_metrics import PlanObserver
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import Plan, PlanJob, PlanState, PlanVictim, VictimState
from hai_slurm.slurm_plugins.types import JobState


def test_a_done_plan_moves_the_preemption_counters(tmp_path: Path) -> None:
    """One real preemption (two LOW victims for a HIGH job) through the built daemon: every
    counter moves by what happened, and later cycles time the starts."""
    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    daemon = _daemon(world, _config(tmp_path), switches=SWITCHES)
    m = daemon.metrics
    assert sample(m, "hai_preemption_plans_total", {"outcome": "done"}) == 0
    assert daemon.run_once().outcome.value == "ok"  # starts the plan
    assert sample(m, "hai_preemption_open_plans") == 1
    step_between_cycles(world, daemon)  # the steps until the next cycle carry it out
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE
    assert sample(m, "hai_preemption_plans_total", {"outcome": "done"}) == 0  # seen at a cycle
    assert daemon.run_once().outcome.value == "ok"
    assert sample(m, "hai_preemption_plans_total", {"outcome": "done"}) == 1
    assert sample(m, "hai_preemption_victims_total",
                  {"priority_class": "LOW", "team": "team-a"}) == 2
    assert sample(m, "hai_preemption_beneficiaries_total",
                  {"priority_class": "HIGH", "team": "team-b"}) == 1
    saved = sum(v.gpus * (v.acked_at - v.asked_at) for v in plan.victims
                if v.acked_at is not None and v.asked_at is not None)
    assert saved > 0
    assert sample(m, "hai_preemption_lost_gpu_seconds_total", {"team": "team-a"}) == saved
    assert sample(m, "hai_preemption_unsaved_victims_total", {"team": "team-a"}) == 0
    assert sample(m, "hai_preemption_open_plans") == 0
    world.clock.now += 2
    assert daemon.run_once().outcome.value == "ok"  # the beneficiary runs in this snapshot
    assert world.fake.jobs[bene].state is JobState.RUNNING
    assert sample(m, "hai_preemption_beneficiary_start_seconds_count") == 1
    assert sample(m, "hai_preemption_resume_seconds_count") == 0
    world.fake.finish(bene)
    world.clock.now += 30
    world.fake.schedule(int(world.clock.now))
    requeued = [v.job_id for v in plan.victims]
    assert all(world.fake.jobs[j].state is JobState.RUNNING for j in requeued)
    assert daemon.run_once().outcome.value == "ok"
    assert sample(m, "hai_preemption_resume_seconds_count") == 2
    assert sample(m, "hai_preemption_resume_seconds_sum") > 0
    assert sample(m, "hai_preemption_plans_total", {"outcome": "done"}) == 1  # counted once
    assert len(victims) == 4


def test_aborted_plan_and_open_plans(tmp_path: Path) -> None:
    """An aborted plan counts as aborted and requeues nobody; an unfinished one shows in the
    open-plan gauges with its age."""
    m = DaemonMetrics()
    obs = PlanObserver(m, started_at=100.0)
    world = make_world(tmp_path)
    snap = world.fake.snapshot()
    aborted = Plan(1, PlanState.ABORTED, 150.0, 160.0, "r", DeadlineAction.ABORT, None,
                   (PlanJob(9, "team-b", "bob", 8),),
                   (PlanVictim(5, "team-a", "al", 8, VictimState.MISSED, asked_at=151.0),))
    stuck = Plan(2, PlanState.SIGNALLED, 170.0, 171.0, "r", DeadlineAction.ABORT, None,
                 (PlanJob(10, "team-b", "bob", 8),),
                 (PlanVictim(6, "team-a", "al", 8, VictimState.ASKED, asked_at=171.0),))
    old = Plan(3, PlanState.DONE, 10.0, 20.0, "r", DeadlineAction.ABORT, None,
               (PlanJob(11, "team-b", "bob", 8),), ())
    obs.observe([aborted, stuck, old], snap, {5: PriorityClass.LOW.value}, now=200.0)
    assert sample(m, "hai_preemption_plans_total", {"outcome": "aborted"}) == 1
    assert sample(m, "hai_preemption_plans_total", {"outcome": "done"}) == 0  # before start
    assert sample(m, "hai_preemption_victims_total", {"priority_class": "LOW",
                                                      "team": "team-a"}) == 0
    assert sample(m, "hai_preemption_open_plans") == 1
    assert sample(m, "hai_preemption_oldest_open_plan_seconds") == 30.0


def test_forced_victims_count_as_unsaved(tmp_path: Path) -> None:
    """A victim requeued without an acknowledgement counts as unsaved, its GPU-seconds from the
    request to the requeue as lost."""
    m = DaemonMetrics()
    obs = PlanObserver(m, started_at=0.0)
    snap = make_world(tmp_path).fake.snapshot()
    plan = Plan(1, PlanState.DONE, 100.0, 200.0, "r", DeadlineAction.FORCE, None,
                (PlanJob(9, "team-b", "bob", 8),),
                (PlanVictim(5, "team-a", "al", 4, VictimState.REQUEUED, asked_at=110.0,
                            requeued_at=140.0),))
    obs.observe([plan], snap, {}, now=210.0)
    assert sample(m, "hai_preemption_unsaved_victims_total", {"team": "team-a"}) == 1
    assert sample(m, "hai_preemption_lost_gpu_seconds_total", {"team": "team-a"}) == 4 * 30
    assert sample(m, "hai_preemption_victims_total",
                  {"priority_class": "unknown", "team": "team-a"}) == 1


def test_bound_ratio_and_last_cycle_gauges(tmp_path: Path) -> None:
    """A HIGH job that waited 10 of its 10 minutes shows ratio ~1 and counts past half; the
    last-cycle timestamp is the cycle's time."""
    world = make_world(tmp_path)
    _fill_and_wait(world)  # the HIGH job was submitted 600 s ago; HIGH's bound is 600 s
    daemon = _daemon(world, _config(tmp_path), preempt=False, switches=SWITCHES)
    assert daemon.run_once().outcome.value == "ok"
    m = daemon.metrics
    assert sample(m, "hai_priority_wait_bound_ratio", {"priority_class": "HIGH"}) >= 0.99
    assert sample(m, "hai_priority_jobs_past_half_bound", {"priority_class": "HIGH"}) == 1
    assert sample(m, "hai_priority_jobs_past_half_bound", {"priority_class": "LOW"}) == 0
    assert sample(m, "hai_priority_last_cycle_timestamp_seconds") == world.clock.now
