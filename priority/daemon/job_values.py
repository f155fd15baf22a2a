"""From Slurm's view of a job (plus what the daemon remembers) to the policy's job values.

Pure: a :class:`~hai_slurm.slurm_plugins.types.Job`, the job's
:class:`~hai_slurm.priority.store.TrackedJob` (or None) and ``now`` in, a
:class:`~hai_slurm.priority.policy.state.PendingJob` or
:class:`~hai_slurm.priority.policy.state.RunningJob`
out. Class, team and preemptibility come from the ``hai:v1:`` record job_submit.lua wrote into
``admin_comment`` (only admins can write it); the user-writable ``comment`` is never read. A job
without a record (submitted before the plugin was installed, or by a cluster without it) gets the
configured default class and its Slurm account as team.

What Slurm forgets on a requeue comes from the tracked job: the original submit time, the seconds
waited and run before. That is compensation, given only to jobs the daemon's plans requeued
(``TrackedJob.preemptions``): a job requeued by its owner, an admin or Slurm starts again as
Slurm restarts it. ``run_seconds`` in the store counts running time up to ``updated_at`` (the
last cycle that saw the job), so each cycle adds only the time since then.

Resources are the job's GPUs, CPUs and memory as the adapter read them (allocated while running,
requested while pending): the fair-share classes rank teams by their dominant share of all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.priority.policy.state import AUTO, PendingJob, Requested, Resources, RunningJob
from hai_slurm.priority.store import TrackedJob
from hai_slurm.slurm_plugins.job_record import record_of
from hai_slurm.slurm_plugins.types import Job, JobState


@dataclass(frozen=True, slots=True)
class JobClass:
    """What a job asked for: requested class (or AUTO), where it came from, team, preemptible."""

    requested: Requested
    source: ClassOrigin
    team: str
    preemptible: bool


def job_class(job: Job, default_class: PriorityClass) -> JobClass:
    """Requested class, source, team, preemptible from ``admin_comment`` (never ``comment``)."""
    return _job_class(job.admin_comment, job.account, job.requeue, default_class)


def class_of(admin_comment: str, account: str, requeue: bool,
             default_class: PriorityClass) -> JobClass:
    """:func:`job_class` from the three fields of a job it reads (for a job in brief,
    :class:`~hai_slurm.slurm_plugins.types.PendingBrief`)."""
    return _job_class(admin_comment, account, requeue, default_class)


@lru_cache(maxsize=4096)
def _job_class(admin_comment: str, account: str, requeue: bool,
               default_class: PriorityClass) -> JobClass:
    # Cached: a queue has few distinct records, and the daemon reads 12,000 jobs a cycle.
    record = record_of(admin_comment, account, requeue)
    requested: Requested
    if record.priority is None:
        requested = default_class
    else:
        requested = AUTO if record.priority == AUTO else PriorityClass(record.priority)
    source = ClassOrigin.DEFAULT if record.source is ClassOrigin.DEFAULT else ClassOrigin.DIRECTIVE
    return JobClass(requested, source, record.team, record.preemptible)


def run_stretch(job: Job, tracked: TrackedJob | None) -> tuple[float, float]:
    """(seconds run before the current stretch, when the stretch began): the job has run
    ``before + max(0, now - since)`` seconds in total, across requeues (``since`` is infinite
    for a job that does not run now or has no start time: no stretch)."""
    base = tracked.run_seconds if tracked is not None else 0.0
    if job.state is not JobState.RUNNING or job.start_time is None:
        return base, math.inf
    since = float(job.start_time)
    if tracked is not None and tracked.last_state == _RUNNING:
        since = max(since, tracked.updated_at)  # counted up to the last cycle already
    return base, since


_RUNNING = JobState.RUNNING.value


def run_seconds(job: Job, tracked: TrackedJob | None, now: float) -> float:
    """Seconds the job has run in total, across requeues, as of ``now``."""
    base, since = run_stretch(job, tracked)
    return base + (now - since if now > since else 0.0)


def wait_seconds(job: Job, tracked: TrackedJob | None) -> float:
    """Seconds waited before the current run (or before the current pending spell).

    Grows when the daemon sees a job it last saw pending running now: the spell from its
    (Slurm-reset) submit or eligible time to its start is added.
    """
    base = tracked.wait_seconds if tracked is not None else 0.0
    if (tracked is None or tracked.last_state != JobState.PENDING.value
            or job.state is not JobState.RUNNING or job.start_time is None):
        return base
    since = max(job.submit_time or 0, job.eligible_time or 0)
    return base + max(0.0, float(job.start_time - since)) if since else base


def original_submit(job: Job, tracked: TrackedJob | None, now: float) -> float:
    """The submit time before any requeue (Slurm resets its own on requeue)."""
    if tracked is not None:
        return tracked.original_submit_at
    return float(job.submit_time) if job.submit_time is not None else now


def pending_job(job: Job, tracked: TrackedJob | None, default_class: PriorityClass,
                now: float) -> PendingJob:
    """The policy's view of a pending job."""
    cls = job_class(job, default_class)
    submit = float(job.submit_time) if job.submit_time is not None else now
    # Compensation (original submit time, earlier waits, a boost) only for requeues the daemon's
    # own plans caused; the loop counts them (``TrackedJob.preemptions``) from the store.
    preempted = tracked.preemptions if tracked is not None and job.restart_count > 0 else 0
    requeued = preempted > 0
    return PendingJob(
        job_id=job.job_id, user=job.user, team=cls.team, requested=cls.requested,
        submit_time=submit, resources=Resources(job.gpus_requested, job.cpus, job.memory_mb),
        source=cls.source,
        first_submit_time=tracked.original_submit_at if requeued and tracked else None,
        eligible_time=float(job.eligible_time) if job.eligible_time is not None else None,
        prior_wait=tracked.wait_seconds if requeued and tracked else 0.0,
        run_time=tracked.run_seconds if tracked is not None else 0.0,
        restarts=job.restart_count, preemptions=preempted, preemptible=cls.preemptible,
        slurm_reason=job.reason,
    )


def start_class(tracked: TrackedJob | None) -> PriorityClass | None:
    """The effective class a running job started with (the daemon keeps it in the store)."""
    if tracked is None:
        return None
    try:
        return PriorityClass(tracked.effective_class)
    except ValueError:
        return None


def running_job(job: Job, tracked: TrackedJob | None, default_class: PriorityClass,
                now: float) -> RunningJob:
    """The policy's view of a running job: its run time as (seconds before the current
    stretch, when that began; see :func:`run_stretch`), which ``now`` does not move (infinite
    ``since``, no stretch: None)."""
    cls = job_class(job, default_class)
    start = float(job.start_time) if job.start_time is not None else now
    gpus = job.gpus_allocated or job.gpus_requested
    before, since = run_stretch(job, tracked)
    return RunningJob(
        job_id=job.job_id, user=job.user, team=cls.team, requested=cls.requested,
        submit_time=original_submit(job, tracked, now), start_time=start,
        resources=Resources(gpus, job.cpus, job.memory_mb), source=cls.source,
        run_time=before, running_since=None if since == math.inf else since,
        restarts=job.restart_count,
        # an interactive job (srun, salloc) is never requeued by slurmctld ("Only batch jobs
        # are accepted"): a plan taking it would wait on it for ever
        preemptible=cls.preemptible and job.batch, start_class=start_class(tracked),
        last_checkpoint=tracked.checkpoint_at if tracked is not None else None,
        nodes=job.nodes,
    )
