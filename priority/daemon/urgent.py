"""The urgent path: which new pending jobs are planned between two cycles, and when.

A new job of a class that may preempt should not wait for the next full cycle (30 s by
default) to be planned. Between cycles the daemon polls Slurm's pending jobs in brief
(:meth:`~hai_slurm.slurm_plugins.types.SlurmClient.pending_briefs`) every
``[intervals] urgent_poll`` seconds; a job it has not seen before gets *looks*: the planner runs
for that job alone at each of :data:`URGENT_LOOKS` seconds after the daemon first saw it (0: at
once; later looks because the planner's benefit test, class weight x wait x GPUs against the
victims' lost work, needs some seconds of waiting before it lets a job preempt). A look that
finds a job not worth it yet also says when its wait will outweigh the loss; the job gets one
more look just after that (:func:`look_again`), so it is planned as soon as the test lets it
rather than at the next fixed look; so does a job refused for want of victims while a
lower-class job was too young to give way to it, when that job is old enough (:func:`due_in`).
The simulator (:class:`hai_slurm.priority.sim.ours.HaiSlurm`) looks at the same times.

Pure: this module decides which jobs to look at and when (:func:`observe`); the loop
(:mod:`hai_slurm.priority.daemon.loop`) polls, and runs the planner and executor for them.

Which jobs are new: not seen at the previous poll or cycle, never started (restart count 0:
a requeued victim is not urgent work), submitted at most :data:`NEW_WITHIN` seconds ago (a
daemon that starts, or takes over the lead, leaves the queue it finds to its cycle), and of a
class that may preempt (:func:`may_preempt`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.daemon.job_values import class_of
from hai_slurm.priority.policy.ladder import RANK, URGENT_FROM
from hai_slurm.priority.policy.state import AUTO, Requested
from hai_slurm.slurm_plugins.types import Job, PendingBrief

URGENT_LOOKS: tuple[float, ...] = (0.0, 2.0, 5.0, 10.0, 15.0, 20.0)
"""Seconds after a new job was first seen at which it is planned (the daemon and the simulator
share these). The planner's benefit test usually refuses the first looks and accepts one of the
later ones: a HIGH job (weight 30) of 8 GPUs outweighs a victim's 140 s of save + restart on 8
GPUs after 4.7 s of waiting. A job smaller than the victims it needs takes longer (the test
passes at ``loss / (weight x GPUs)`` of waiting: a 4-GPU HIGH job displacing an 8-GPU victim
after ~13 s, a VERY_HIGH 8-GPU job displacing a 16-GPU one after ~12 s), so the looks go on
until 20 s: with a last look at 10 s such jobs waited for the next cycle (up to 30 s more;
``priority/sim/README.md``, "Tuning on the matrix, second pass")."""

NEW_WITHIN = 60.0
"""A job first seen more than this long after its submission is not new: the daemon was down,
standing by or failing to read Slurm, and the next cycle plans it with the rest."""


def may_preempt(requested: Requested, weights: Mapping[PriorityClass, float]) -> bool:
    """Whether a new job that asked for ``requested`` gets looks: a class of
    :data:`URGENT_FROM` or above whose planner class weight is above 0 (the planner's benefit is
    weight x wait x GPUs, so a class weighted 0 passes the benefit test only as urgent work,
    after ``urgent_benefit_wait``, which the cycle sees as soon). ``AUTO`` does too: the look's
    policy pass resolves it to a class, and the planner decides."""
    if requested == AUTO:
        return True
    cls = PriorityClass(requested)
    return RANK[cls] >= RANK[URGENT_FROM] and weights.get(cls, 0.0) > 0


def brief_of(job: Job) -> PendingBrief:
    """A snapshot's pending job in brief (what :meth:`pending_briefs` lists)."""
    return PendingBrief(job_id=job.job_id, user=job.user, account=job.account, qos=job.qos,
                        submit_time=job.submit_time, restart_count=job.restart_count,
                        requeue=job.requeue, admin_comment=job.admin_comment)


def urgent_rule(default_class: PriorityClass, weights: Mapping[PriorityClass, float]
                ) -> Callable[[PendingBrief], bool]:
    """:func:`may_preempt` of the class a brief's job asked for, as the policy reads it (the
    ``#HAI`` record in ``admin_comment``, else the default class:
    :func:`~hai_slurm.priority.daemon.job_values.class_of`)."""
    def rule(brief: PendingBrief) -> bool:
        cls = class_of(brief.admin_comment, brief.account, brief.requeue, default_class)
        return may_preempt(cls.requested, weights)
    return rule


@dataclass(frozen=True)
class UrgentState:
    """What the urgent path remembers between polls."""

    seen: frozenset[int] = frozenset()
    """The pending jobs of the latest poll or cycle."""
    due: Mapping[int, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    """Each watched job's looks still to come (POSIX seconds, ascending)."""
    watched: frozenset[int] = frozenset()
    """Every job that was given looks and is still pending, with looks to come or not: one
    whose looks are all taken may still get one from :func:`look_again`."""

    def next_look(self) -> float | None:
        """When the earliest look to come is due (None: nothing watched)."""
        return min((times[0] for times in self.due.values()), default=None)


def observe(state: UrgentState, briefs: Iterable[PendingBrief], now: float, *,
            urgent: Callable[[PendingBrief], bool], looks: tuple[float, ...] = URGENT_LOOKS,
            cycle: bool = False) -> tuple[UrgentState, tuple[int, ...]]:
    """One poll at ``now`` of the pending jobs ``briefs``: the new state and the jobs to look at
    now (ascending ids).

    A new job (see the module docstring) is watched with looks at ``now + looks``; a watched job
    that is no longer pending (it started, ended or was cancelled) is dropped; every look due by
    ``now`` is taken at once (a poll that came late does not look twice). ``cycle``: these are
    the pending jobs of a full cycle, which has just planned every one of them: that stands for
    the looks due now (none are returned), and a new job's first look is that cycle.
    """
    pending: dict[int, PendingBrief] = {b.job_id: b for b in briefs}
    due: dict[int, tuple[float, ...]] = {j: t for j, t in state.due.items() if j in pending}
    watched = {j for j in state.watched if j in pending}
    for jid, brief in pending.items():
        if (jid in state.seen or jid in due or brief.restart_count > 0
                or (brief.submit_time is not None and now - brief.submit_time > NEW_WITHIN)
                or not urgent(brief)):
            continue
        due[jid] = tuple(now + offset for offset in looks)
        watched.add(jid)
    now_due = tuple(sorted(j for j, times in due.items() if times[0] <= now))
    for jid in now_due:
        rest = tuple(t for t in due[jid] if t > now)
        if rest:
            due[jid] = rest
        else:
            del due[jid]
    new = UrgentState(seen=frozenset(pending), due=MappingProxyType(due),
                      watched=frozenset(watched))
    return new, () if cycle else now_due


LOOK_MARGIN = 0.2
"""Seconds past the moment the planner said a job's wait would outweigh the loss at which
:func:`look_again` schedules its look (the wait is measured on the look's snapshot, and the test
is strict: benefit > threshold x loss)."""


RIPE_GAP = 5.0
"""Seconds from a pass at least before the look :func:`due_in` gives a job that waits for a
victim to be old enough: young lower-class jobs may ripen every few seconds on a busy cluster,
and a job refused for want of victims would get a look at each."""


def due_in(worth_in: Mapping[int, float], ripe_in: Mapping[int, float], *,
           cycle: float | None = None, ripe_gap: float = RIPE_GAP) -> dict[int, float]:
    """Per job a pass refused, seconds from the pass until a look may find what it lacked:
    the benefit test passing or urgent_benefit_wait (urgent_no_save_wait or
    bound_no_save_wait, when a victim cannot save) reached (``worth_in``, see
    :attr:`~hai_slurm.priority.planner.types.PlanningResult.worth_in`) or a victim too young
    for it old enough (``ripe_in``, at least ``ripe_gap`` away; see
    :attr:`~hai_slurm.priority.planner.types.PlanningResult.ripe_in`); the sooner of the two."""
    got = {jid: max(secs, ripe_gap) for jid, secs in ripe_in.items()
           if cycle is None or secs < cycle}
    for jid, secs in worth_in.items():
        if secs < got.get(jid, secs + 1):
            got[jid] = secs
    return got


def look_again(state: UrgentState, due: Mapping[int, float], now: float, *,
               margin: float = LOOK_MARGIN) -> UrgentState:
    """``state`` with an extra look for each watched job the planner refused, at ``now + due +
    margin`` (``due``: seconds from ``now`` until a look may find what the pass lacked, see
    :func:`due_in`: until its wait alone outweighs the loss, or a victim too young for it is
    old enough), when that comes before its next look or it has none left. So a job is planned
    as soon as the benefit test or the victims' age lets it, not at the next of
    :data:`URGENT_LOOKS` nor, once those are taken, at the next cycle (up to ``[intervals]
    cycle`` later: a job smaller than its victims may pass the test only after the last fixed
    look, and a job waiting for a young victim when it is 1 min old); jobs never watched (lower
    classes, requeued victims) are left to the cycle."""
    due_at = dict(state.due)
    changed = False
    for jid, secs in due.items():
        if jid not in state.watched:
            continue
        times = due_at.get(jid, ())
        at = now + secs + margin
        if not times or at < times[0]:
            due_at[jid] = (at, *times)
            changed = True
    return replace(state, due=MappingProxyType(due_at)) if changed else state


def with_jobs_ahead(focus: frozenset[int], priorities: Mapping[int, int]) -> frozenset[int]:
    """``focus`` and every pending job the policy ranks at or above the lowest of them
    (``priorities``: the policy's Slurm priority per pending job). A look plans for these, so
    a newcomer is planned in its place in the queue, as a cycle would: older top-class jobs
    still waiting are offered victims first, not overtaken by the newcomer."""
    ranked = [priorities[j] for j in focus if j in priorities]
    if not ranked:
        return focus
    floor = min(ranked)
    return focus | frozenset(j for j, p in priorities.items() if p >= floor)
