"""The daemon's cycle against FakeSlurm, SQLite and a fake clock: writes, skips, back-off."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from daemon_helpers import T0, Broken, Rig, record, rig

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.loop import Daemon, Outcome
from hai_slurm.priority.daemon.metrics import sample
from hai_slurm.priority.hooks import CycleExtras, CycleView
from hai_slurm.priority.policy.ladder import RANK
from hai_slurm.priority.policy.scoring import BAND, BASE
from hai_slurm.priority.policy.settings import (
    ClassPolicy,
    DeadlineAction,
    FairnessConfig,
    PolicyConfig,
)
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.priority.store import PlanJob, PlanState, VictimState
from hai_slurm.slurm_plugins.fake import FakeSlurm
from hai_slurm.slurm_plugins.types import ActionResult, ClusterSnapshot


def class_of(priority: int) -> PriorityClass:
    """The class band a written priority falls in."""
    rank = (priority - BASE) // BAND
    return next(c for c, r in RANK.items() if r == rank)


def test_first_cycle_writes_every_job_then_one_write_per_new_job(tmp_path: Path) -> None:
    """After the first cycle, a cycle writes nothing; one new job costs exactly one write."""
    r = rig(tmp_path)
    for i in range(5):
        r.submit(PriorityClass.HIGH if i % 2 else PriorityClass.NORMAL, team=f"t{i % 2}")
        r.tick(7)
    d = r.daemon()
    first = d.run_once()
    assert first.outcome is Outcome.OK and first.writes == 5
    n = len(r.slurm.writes)
    r.tick(10)
    assert d.run_once().writes == 0 and len(r.slurm.writes) == n
    new = r.submit(PriorityClass.NORMAL, team="t0")
    r.tick(10)
    rep = d.run_once()
    assert rep.writes == 1 and rep.decision is not None
    assert list(rep.decision.writes) == [new]
    assert len(r.slurm.writes) == n + 1 and r.slurm.writes[-1][-1] == str(new)


def test_start_order_follows_classes_then_fcfs(tmp_path: Path) -> None:
    """Written priorities put HIGH before NORMAL before LOW, and earlier HIGH first."""
    r = rig(tmp_path)
    low = r.submit(PriorityClass.LOW, gpus=8)
    r.tick(5)
    normal = r.submit(PriorityClass.NORMAL, gpus=8)
    r.tick(5)
    high1 = r.submit(PriorityClass.HIGH, gpus=8)
    r.tick(5)
    high2 = r.submit(PriorityClass.HIGH, gpus=8)
    r.tick(5)
    r.daemon().run_once()
    prio = {j: r.slurm.jobs[j].priority for j in (low, normal, high1, high2)}
    assert prio[high1] > prio[high2] > prio[normal] > prio[low]
    assert [class_of(prio[j]) for j in (high1, normal, low)] == [
        PriorityClass.HIGH, PriorityClass.NORMAL, PriorityClass.LOW]


def test_admin_comment_counts_and_comment_is_ignored(tmp_path: Path) -> None:
    """A user's forged ``hai:v1:`` record in ``comment`` gains nothing."""
    r = rig(tmp_path)
    forged = r.slurm.submit(comment=record(PriorityClass.EXTREME_HIGH), account="vision")
    honest = r.submit(PriorityClass.LOW)
    r.daemon().run_once()
    assert class_of(r.slurm.jobs[forged].priority) is PriorityClass.NORMAL  # default class
    assert class_of(r.slurm.jobs[honest].priority) is PriorityClass.LOW


def test_failed_snapshots_skip_writes_and_back_off_capped(tmp_path: Path) -> None:
    """Slurm errors: no write, waits double from the interval up to backoff_max, then recover."""
    r = rig(tmp_path, cycle=10, lock_ttl=30, backoff_max=60)
    r.submit(PriorityClass.HIGH)
    r.slurm.fail_snapshots = 4
    d = r.daemon()
    waits = []
    for _ in range(4):
        rep = d.run_once()
        assert rep.outcome is Outcome.SKIPPED and "Unable to contact" in rep.reason
        waits.append(rep.next_wait)
        r.tick(1)
    assert waits == [20, 40, 60, 60]
    assert r.slurm.writes == []
    assert sample(d.metrics, "hai_priority_slurm_errors_total") == 4
    ok = d.run_once()
    assert ok.outcome is Outcome.OK and ok.writes == 1 and ok.next_wait == 10
    assert d.failures == 0


def test_partial_snapshot_writes_nothing(tmp_path: Path) -> None:
    """A snapshot without nodes (slurmctld half up) is not acted on."""
    r = rig(tmp_path)
    r.submit(PriorityClass.HIGH)
    d = r.daemon(client=Broken(r.slurm, lambda s: dataclasses.replace(s, nodes=())))
    rep = d.run_once()
    assert rep.outcome is Outcome.SKIPPED and "no nodes" in rep.reason
    assert r.slurm.writes == [] and d.repository.load_jobs() == {}


def test_stale_snapshot_writes_nothing(tmp_path: Path) -> None:
    """A snapshot older than the previous one is stale: skipped."""
    r = rig(tmp_path)
    r.submit(PriorityClass.HIGH)
    stale = {"on": False}

    def doctor(s: ClusterSnapshot) -> ClusterSnapshot:
        return dataclasses.replace(s, time=s.time - 100) if stale["on"] else s

    d = r.daemon(client=Broken(r.slurm, doctor))
    assert d.run_once().outcome is Outcome.OK
    n = len(r.slurm.writes)
    stale["on"] = True
    r.submit(PriorityClass.LOW)
    r.tick(10)
    rep = d.run_once()
    assert rep.outcome is Outcome.SKIPPED and "stale" in rep.reason
    assert len(r.slurm.writes) == n


def test_held_jobs_are_never_written(tmp_path: Path) -> None:
    """Writing a priority would release a held job: held jobs are left alone."""
    r = rig(tmp_path)
    held = r.submit(PriorityClass.HIGH, hold=True)
    r.daemon().run_once()
    assert r.slurm.jobs[held].priority == 0 and r.slurm.writes == []


def test_low_job_past_its_bound_is_promoted_and_counted_once(tmp_path: Path) -> None:
    """Aging: LOW past max_wait moves to BELOW_NORMAL; the promotion is counted once."""
    classes = dict(PolicyConfig().classes)
    classes[PriorityClass.LOW] = ClassPolicy(60, 120, False)
    r = rig(tmp_path, PolicyConfig(classes=classes))
    job = r.submit(PriorityClass.LOW)
    d = r.daemon()
    d.run_once()
    assert class_of(r.slurm.jobs[job].priority) is PriorityClass.LOW
    r.tick(61)
    d.run_once()
    assert class_of(r.slurm.jobs[job].priority) is PriorityClass.BELOW_NORMAL
    r.tick(10)
    d.run_once()
    assert sample(d.metrics, "hai_priority_promotions_total") == 1
    tracked = d.repository.get_job(job)
    assert tracked is not None and tracked.class_origin == "aging"


def _requeued_by_a_plan(d: Daemon, job: int, at: float) -> None:
    """What the executor writes when its plan requeues ``job`` (the store's plan victims)."""
    repo = d.repository
    plan = repo.create_plan(at=at, beneficiaries=[PlanJob(999, "ops", "bob", 8)],
                            victims=[PlanJob(job, "vision", "alice", 8)], reason="test",
                            on_miss=DeadlineAction.ABORT, deadline_at=at + 60)
    repo.update_victims(plan.plan_id, [job], VictimState.ASKED, at=at)
    repo.transition_plan(plan.plan_id, PlanState.SIGNALLED, at=at)
    repo.update_victims(plan.plan_id, [job], VictimState.ACKED, at=at)
    repo.transition_plan(plan.plan_id, PlanState.ALL_ACKED, at=at)
    repo.update_victims(plan.plan_id, [job], VictimState.REQUEUED, at=at)
    repo.transition_plan(plan.plan_id, PlanState.REQUEUED, at=at)
    repo.transition_plan(plan.plan_id, PlanState.DONE, at=at)


def _first_runs_then_requeued(tmp_path: Path, by_plan: bool) -> tuple[Rig, Daemon, int, int]:
    r = rig(tmp_path)
    first = r.submit(PriorityClass.HIGH, gpus=8, nodes=4)
    d = r.daemon()
    d.run_once()
    r.slurm.schedule()
    r.tick(100)
    later = r.submit(PriorityClass.HIGH, gpus=8, nodes=4)
    r.tick(30)
    d.run_once()
    r.slurm.requeue(first)
    if by_plan:
        _requeued_by_a_plan(d, first, r.clock.now)
    r.tick(30)
    d.run_once()
    return r, d, first, later


def test_requeued_job_keeps_its_original_submit_time(tmp_path: Path) -> None:
    """Slurm resets the submit time on requeue; after a requeue by the daemon's own plan, the
    daemon restores it from the store and compensates the job."""
    r, d, first, later = _first_runs_then_requeued(tmp_path, by_plan=True)
    assert r.slurm.jobs[first].priority > r.slurm.jobs[later].priority
    tracked = d.repository.get_job(first)
    assert tracked is not None and tracked.original_submit_at == T0
    assert tracked.run_seconds >= 100
    assert tracked.preemptions == 1


def test_requeue_by_the_owner_buys_no_priority(tmp_path: Path) -> None:
    """`scontrol requeue` of one's own job (no plan of the daemon's): no age restored and no
    boost, so it does not overtake a job submitted after it (before the fix: +10 min per
    requeue, up to 2 h, and its original age back)."""
    r, d, first, later = _first_runs_then_requeued(tmp_path, by_plan=False)
    assert r.slurm.jobs[first].restart_count == 1
    assert r.slurm.jobs[first].priority < r.slurm.jobs[later].priority
    tracked = d.repository.get_job(first)
    assert tracked is not None and tracked.preemptions == 0


def test_plan_requeues_of_an_older_job_with_the_same_id_do_not_count(tmp_path: Path) -> None:
    """Requeues recorded before the daemon first saw this job belong to an earlier job."""
    _, d, first, _ = _first_runs_then_requeued(tmp_path, by_plan=False)
    tracked = d.repository.get_job(first)
    assert tracked is not None
    _requeued_by_a_plan(d, first, tracked.first_seen_at - 1)
    assert d.repository.daemon_requeues({first: tracked.first_seen_at}) == {}
    _requeued_by_a_plan(d, first, tracked.first_seen_at + 1)
    assert d.repository.daemon_requeues({first: tracked.first_seen_at}) == {first: 1}


class Recorder:
    """A planner and executor pair: sees the view, reports one preemption as fairness events."""

    def __init__(self) -> None:
        self.views: list[object] = []

    def plan(self, view: CycleView) -> object | None:
        self.views.append(view)
        return ("plan", sorted(view.result.priorities))

    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        assert plan == ("plan", sorted(view.result.priorities))
        return CycleExtras(events=(
            FairnessEvent(EventKind.PREEMPTED, "vision", "u", view.now),
            FairnessEvent(EventKind.PREEMPTED, "vision", "u", view.now)))


def test_planner_and_executor_hook_runs_after_priorities(tmp_path: Path) -> None:
    """The hook sees the cycle's decisions; its events are committed and count next cycle."""
    policy = PolicyConfig(fairness=FairnessConfig(protect_after=1))
    r = rig(tmp_path, policy)
    job = r.submit(PriorityClass.HIGH)
    hook = Recorder()
    d = r.daemon()
    d.planner, d.executor = hook, hook
    d.run_once()
    assert len(hook.views) == 1 and r.slurm.jobs[job].priority > 1
    assert len(d.repository.events_since(0)) == 2
    r.tick(10)
    rep = d.run_once()
    assert rep.decision is not None and "vision" in rep.decision.result.protected_teams
    assert set(d.repository.active_protections(r.clock.now)) == {"vision"}


def test_no_hook_runs_when_the_snapshot_failed(tmp_path: Path) -> None:
    """Preemption never acts on a failed snapshot either."""
    r = rig(tmp_path)
    hook = Recorder()
    d = r.daemon()
    d.planner, d.executor = hook, hook
    r.slurm.fail_snapshots = 1
    assert d.run_once().outcome is Outcome.SKIPPED and hook.views == []


class FailingWrites(Broken):
    """Writes to ``bad`` fail the way Slurm fails an unknown per-job message."""

    def __init__(self, slurm: FakeSlurm, bad: set[int]) -> None:
        super().__init__(slurm, lambda s: s)
        self.bad = bad

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        hit = self.bad & set(priorities)
        if hit:
            raise SlurmError(f"scontrol update failed: job {min(hit)}: Job has already finished")
        return self._slurm.set_priorities(priorities)


def test_a_failed_write_group_costs_only_itself(tmp_path: Path) -> None:
    """One priority group failing: the others are still written; the next cycle retries it."""
    r = rig(tmp_path)
    ok = r.submit(PriorityClass.HIGH)
    r.tick(5)
    bad = r.submit(PriorityClass.LOW)
    client = FailingWrites(r.slurm, {bad})
    d = r.daemon(client=client)
    rep = d.run_once()
    assert rep.outcome is Outcome.SKIPPED and "Job has already finished" in rep.reason
    assert r.slurm.jobs[ok].priority > 1 and r.slurm.jobs[bad].priority == 1
    assert rep.next_wait == 20  # backed off
    client.bad = set()
    r.tick(20)
    rep = d.run_once()
    assert rep.outcome is Outcome.OK and rep.writes == 1 and r.slurm.jobs[bad].priority > 1
