"""From (effective class, within-class key) to the absolute Slurm priority, and minimal writes.

Why absolute ``Priority``: the daemon writes each pending job's priority with
``scontrol update JobId=N Priority=P``. That takes the job out of the multifactor plugin's hands,
so nothing else (age, fair-share, QOS factors recomputed by slurmctld every PriorityCalcPeriod)
moves it, and both the main scheduler and backfill walk the queue in exactly our order: backfill
considers jobs in priority order too, so a lower job only starts early when it does not delay the
higher ones, which is the behaviour we want. ``SiteFactor`` is added to the multifactor sum, so
age and fair-share factors still change the order between our writes; ``Nice`` has a range of
±2147483645 but also only shifts the multifactor sum, with the same drift.

Layout (all integers, well below 2**31; 0 would mean "held" to Slurm)::

    priority = BASE + rank(class) * BAND + score,   0 <= score < BAND

so a job of a higher effective class always outranks every job of a lower one (classes never
overlap; only aging moves a job to another band). The score is *time based*, never a dense rank
over the whole queue, so one job arriving or leaving changes no other job's priority:

* FCFS classes:      score = BAND - 1 - t        (t: seconds of key time since ``epoch``)
* fair-share classes: score = (L - 1 - level) * S + S - 1 - t   (level: the team's quantized
  dominant share, L levels, S = BAND // L seconds of time range)
* round-robin classes: like FCFS on the job's round-robin tag instead of its submit time.

The key time is the original submit time (restored after requeues) minus the compensation boost;
``t`` is clamped to the range, so jobs older than ``epoch`` tie. Equal priorities are ordered by
Slurm itself: earlier submit time first, then lower job id.

Caveat for the Slurm configuration: before comparing priorities, slurmctld's queue sort puts a job
first when its QOS may preempt the other job's QOS (with preemption enabled), and orders by
reservation and partition PriorityTier. So the class QOSes must not carry ``Preempt=`` relations
while the daemon decides preemption, and all classes should share a partition tier; otherwise
those rules, not these priorities, decide the order.
The epoch is carried in :class:`~hai_slurm.priority.policy.state.PolicyState` and moved forward
only when
the present gets close to the end of the range (about every six weeks with default settings), which
rewrites every pending job once.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

#: Lowest priority we write (far from 0, which Slurm reads as "held").
BASE = 10_000
#: Width of one class's band.
BAND = 200_000_000
#: Eight bands: the highest priority we ever write.
MAX_PRIORITY = BASE + 8 * BAND - 1


def share_levels(quantum: float, max_share: float) -> int:
    """Number of distinct fair-share levels: 0 .. max_share in steps of quantum."""
    return round(max_share / quantum) + 1


def share_level(share: float, quantum: float, levels: int) -> int:
    """The level of a dominant share (0 = idle team); shares past the cap share the last level."""
    if share != share or share >= quantum * (levels - 1):  # NaN or at/after the cap
        return levels - 1
    return int(share / quantum)


def time_span(levels: int) -> int:
    """Seconds of key time one fair-share level can order (the narrowest range in use)."""
    return BAND // levels


def choose_epoch(previous: int | None, now: float, span: int) -> int:
    """Keep the previous epoch unless the present is within the last quarter of the range."""
    if previous is None or now < previous or now - previous > span * 3 // 4:
        return int(now) - span // 4
    return previous


def time_score(key_time: float, epoch: int, span: int) -> int:
    """Older key time, higher score: ``span - 1 - (key_time - epoch)`` clamped to [0, span)."""
    offset = int(key_time) - epoch
    if offset <= 0:
        return span - 1
    if offset >= span:
        return 0
    return span - 1 - offset


def fair_share_score(level: int, levels: int, key_time: float, epoch: int) -> int:
    """Lower share first, then older first."""
    span = BAND // levels
    return (levels - 1 - level) * span + time_score(key_time, epoch, span)


def priority_for(class_rank: int, score: int) -> int:
    """The absolute Slurm priority of a job with this class rank and within-class score."""
    return BASE + class_rank * BAND + min(max(score, 0), BAND - 1)


def class_rank_of(priority: int) -> int:
    """Inverse of :func:`priority_for` for the class part (for checks and explain)."""
    return (priority - BASE) // BAND


def diff_priorities(previous: Mapping[int, int], new: Mapping[int, int]) -> dict[int, int]:
    """The writes that turn ``previous`` into ``new``: jobs that are new or whose value changed.

    Jobs gone from ``new`` need no write (Slurm forgets them when they start or end).
    """
    get = previous.get
    return {job: prio for job, prio in new.items() if get(job) != prio}


def budget_writes(current: Mapping[int, int | None], writes: Mapping[int, int],
                  limit: int) -> dict[int, int]:
    """At most ``limit`` of ``writes`` (0: all of them), chosen so that Slurm's queue above a
    line is exactly the policy's order.

    A write is ranked by the higher of the job's value in Slurm now (``current``; None, a job
    Slurm has no value for, counts as 0) and its new value; the ``limit`` highest are kept
    (ties: lower job id first, as Slurm orders equal priorities). With ``T`` the lowest rank
    kept, every job whose new value is above ``T`` is written or already right, and every job
    left unwritten sits at or below ``T`` in Slurm: the top of the queue, where the scheduler
    starts jobs, is right after the first cycle, and the rest follows in the next ones. A job
    whose old value is high (one being demoted, say) is written before it can stay above a job
    just written.
    """
    if limit <= 0 or len(writes) <= limit:
        return dict(writes)
    get = current.get

    def rank(job: int) -> tuple[int, int]:
        return max(get(job) or 0, writes[job]), -job

    return {job: writes[job] for job in heapq.nlargest(limit, writes, key=rank)}
