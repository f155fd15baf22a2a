"""Preemption metrics from what the store records, so they hold for any executor.

:class:`PlanObserver` looks, after each cycle's executor step, at the newest plans and at the
snapshot: a plan seen in a final state for the first time counts once (outcome; requeued victims
by class and team; beneficiaries of a ``done`` plan; GPU-seconds lost, as the credit ledger counts
them; victims requeued without an acknowledged checkpoint). Its beneficiary and requeued victims
are then watched in the snapshots until they run: creation to beneficiary start, requeue to
victim resume. :class:`ObservedExecutor` wraps the daemon's executor with it (no change to the
loop). Counts start at zero when the daemon starts (Prometheus' ``rate`` and ``increase`` handle
the reset); only plans that end after the start are counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hai_slurm.priority.daemon.metrics import DaemonMetrics
from hai_slurm.priority.hooks import Claims, CycleExtras, CycleView, Executor
from hai_slurm.priority.store import FINAL_PLAN_STATES, Plan, PlanState, VictimState
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.types import ClusterSnapshot, JobState

_RECENT = 50
"""Plans looked at per cycle (more end in one cycle only if the executor ran 50 plans)."""
_WATCH_LIMIT = 10_000


class PlanObserver:
    """See the module docstring."""

    def __init__(self, metrics: DaemonMetrics, started_at: float) -> None:
        self.metrics = metrics
        self.started_at = started_at
        self._counted: set[int] = set()
        self._beneficiaries: dict[int, float] = {}  # job -> plan created_at
        self._victims: dict[int, float] = {}        # job -> requeued_at

    def observe(self, plans: Sequence[Plan], snap: ClusterSnapshot,
                classes: Mapping[int, str], now: float,
                unfinished: Sequence[Plan] | None = None) -> None:
        """Count newly finished plans among ``plans``; set the open-plan gauges from
        ``unfinished`` (default: the unfinished ones among ``plans``); time the starts seen in
        ``snap``."""
        if unfinished is None:
            unfinished = [p for p in plans if p.state not in FINAL_PLAN_STATES]
        open_ages = [now - p.created_at for p in unfinished]
        self.metrics.open_plans.set(len(open_ages))
        self.metrics.oldest_open_plan.set(max(open_ages, default=0.0))
        for plan in plans:
            if (plan.state in FINAL_PLAN_STATES and plan.plan_id not in self._counted
                    and plan.updated_at >= self.started_at):
                self._counted.add(plan.plan_id)
                self._count(plan, classes)
        self._counted &= {p.plan_id for p in plans}  # older plans never come back into view
        self._starts(snap)

    def _count(self, plan: Plan, classes: Mapping[int, str]) -> None:
        m = self.metrics
        m.plans.labels(plan.state.value).inc()

        def cls(job_id: int) -> str:
            return classes.get(job_id, "unknown")

        for v in plan.victims:
            if v.state is not VictimState.REQUEUED:
                continue
            m.preempted.labels(cls(v.job_id), v.team).inc()
            start = v.asked_at if v.asked_at is not None else plan.created_at
            end = v.acked_at if v.acked_at is not None else (v.requeued_at or plan.updated_at)
            m.lost_gpu_seconds.labels(v.team).inc(v.gpus * max(0.0, end - start))
            if v.acked_at is None:
                m.unsaved.labels(v.team).inc()
            if v.requeued_at is not None and len(self._victims) < _WATCH_LIMIT:
                self._victims[v.job_id] = v.requeued_at
        if plan.state is PlanState.DONE:
            for b in plan.beneficiaries:
                m.preempting.labels(cls(b.job_id), b.team).inc()
                if len(self._beneficiaries) < _WATCH_LIMIT:
                    self._beneficiaries[b.job_id] = plan.created_at

    def _starts(self, snap: ClusterSnapshot) -> None:
        for watch, histogram in ((self._beneficiaries, self.metrics.beneficiary_start),
                                 (self._victims, self.metrics.resume)):
            for job_id, since in list(watch.items()):
                job = snap.job(job_id)
                if job is None:  # ended or forgotten: no start to time
                    del watch[job_id]
                elif (job.state is JobState.RUNNING and job.start_time is not None
                      and job.start_time >= since - 1):
                    histogram.observe(max(0.0, job.start_time - since))
                    del watch[job_id]


class ObservedExecutor:
    """An :class:`~hai_slurm.priority.hooks.Executor` that feeds a :class:`PlanObserver` after
    the executor it wraps has run."""

    def __init__(self, inner: Executor, observer: PlanObserver) -> None:
        self.inner = inner
        self.observer = observer

    # The optional hooks of an executor whose plans span cycles (see hooks.Executor), passed
    # through: without them the daemon would step open plans once per cycle only.
    @property
    def poll_interval(self) -> float:
        """The inner executor's, else 0 (no stepping between cycles)."""
        return float(getattr(self.inner, "poll_interval", 0.0) or 0.0)

    def has_open_plans(self) -> bool:
        """The inner executor's answer (False for one without plans that span cycles)."""
        has_open = getattr(self.inner, "has_open_plans", None)
        return bool(has_open()) if has_open is not None else False

    def claims(self) -> Claims:
        """What the inner executor's open plans claim."""
        claims = getattr(self.inner, "claims", None)
        result = claims() if claims is not None else None
        return result if isinstance(result, Claims) else Claims()

    def reconcile(self) -> object:
        """Step the inner executor's open plans (observed at the next cycle, which reads the
        plans that ended meanwhile from the store)."""
        reconcile = getattr(self.inner, "reconcile", None)
        return reconcile() if reconcile is not None else []

    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        """The inner executor's step, then the observation (read-only)."""
        extras = self.inner.execute(plan, view)
        repo: Repository = view.repository
        self.observer.observe(repo.history(limit=_RECENT), view.snapshot, job_classes(view),
                              view.now, unfinished=repo.unfinished_plans())
        return extras


def job_classes(view: CycleView) -> dict[int, str]:
    """Each job's effective class this cycle (the tracked record's for jobs no longer active)."""
    out = {j: t.effective_class for j, t in view.tracked.items()}
    out.update({j: d.effective.value for j, d in view.result.running.items()})
    out.update({j: d.effective.value for j, d in view.result.pending.items()})
    return out
