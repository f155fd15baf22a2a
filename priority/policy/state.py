"""Plain values the policy (and the preemption planner) read and return.

Everything is a frozen dataclass or a str enum: the daemon builds these from one Slurm snapshot plus
its database, hands them to :func:`hai_slurm.priority.policy.priorities.compute_priorities` with
``now``, and
stores what comes back. No field refers to Slurm, the database or the clock.

Times are POSIX seconds (float), durations seconds, memory MiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, NamedTuple

from hai_slurm.classes import ClassOrigin, PriorityClass

#: What ``#HAI --priority=AUTO`` requests: the highest class the team still has quota for.
AUTO: Literal["AUTO"] = "AUTO"
Requested = PriorityClass | Literal["AUTO"]



class Rule(StrEnum):
    """How jobs of one class are ordered among themselves."""

    FCFS = "first come, first served"
    FAIR_SHARE = "team fair share (DRF)"
    ROUND_ROBIN = "round robin between teams"


class EventKind(StrEnum):
    """Kinds of fairness events."""

    PREEMPTED = "preempted"    # the team/user lost a running job to a preemption
    PREEMPTING = "preempting"  # the team/user's job caused a preemption


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of GPUs, CPUs and memory (MiB)."""

    gpus: int = 0
    cpus: int = 0
    memory_mb: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpus + other.gpus, self.cpus + other.cpus,
                         self.memory_mb + other.memory_mb)


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start, as the policy sees it.

    ``submit_time`` is Slurm's (reset by a requeue); ``first_submit_time`` is the original one
    the daemon remembers, ``prior_wait`` the seconds waited before earlier requeues and
    ``run_time`` the seconds run before them. A job never requeued leaves them at None and 0.
    ``restarts`` is Slurm's count of requeues, ``preemptions`` how many of them the daemon's
    plans caused: only those are compensated (a user cannot buy age with ``scontrol requeue``).
    """

    job_id: int
    user: str
    team: str
    requested: Requested
    submit_time: float
    resources: Resources = Resources(1, 1, 0)
    source: ClassOrigin = ClassOrigin.DIRECTIVE
    first_submit_time: float | None = None
    eligible_time: float | None = None
    prior_wait: float = 0.0
    run_time: float = 0.0
    restarts: int = 0
    preemptions: int = 0
    preemptible: bool = True
    slurm_reason: str = ""

    @property
    def original_submit(self) -> float:
        """The submit time before any requeue (the age Slurm reset is restored from this)."""
        return self.submit_time if self.first_submit_time is None else self.first_submit_time

    def wait(self, now: float) -> float:
        """Seconds waited in total: before earlier requeues plus since it became eligible."""
        since = self.submit_time if self.eligible_time is None else max(
            self.submit_time, self.eligible_time)
        return self.prior_wait + max(0.0, now - since)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job. ``run_time`` counts the seconds it ran before ``running_since``, across
    requeues; it has run :meth:`run_time_at` ``now`` seconds in all: ``run_time`` plus the time
    since ``running_since`` (None: ``run_time`` is the whole count). Kept as these two, not as
    one total of ``now``, so a job nothing happened to keeps the same value from one cycle to
    the next (see :class:`~hai_slurm.priority.daemon.cycle.CycleMemo`).

    ``start_class`` is the effective class the job had when it started (the daemon records it), so
    a job that aged up keeps its rank while it runs (without it: the requested class, AUTO
    counting as the default class). ``last_checkpoint`` and ``nodes`` are for the planner.
    """

    job_id: int
    user: str
    team: str
    requested: Requested
    submit_time: float
    start_time: float
    resources: Resources = Resources(1, 1, 0)
    source: ClassOrigin = ClassOrigin.DIRECTIVE
    run_time: float = 0.0
    restarts: int = 0
    preemptible: bool = True
    start_class: PriorityClass | None = None
    last_checkpoint: float | None = None
    nodes: tuple[str, ...] = ()
    running_since: float | None = None

    def run_time_at(self, now: float) -> float:
        """Seconds run in total as of ``now``: ``run_time`` plus the time since
        ``running_since``, if that began before ``now``."""
        since = self.running_since
        return self.run_time + (now - since if since is not None and now > since else 0.0)


@dataclass(frozen=True, slots=True)
class FairnessEvent:
    """One preemption as seen by one side: a team/user was preempted, or preempted someone.

    The policy counts these over a rolling window; the store keeps them (``plan_id`` links an
    event to the plan that caused it)."""

    kind: EventKind
    team: str
    user: str
    time: float
    job_id: int | None = None
    plan_id: int | None = None


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What the policy carries from one cycle to the next (the daemon persists it).

    ``epoch`` anchors the time part of priorities (see :mod:`hai_slurm.priority.policy.scoring`);
    ``rr_tags`` maps a job to (class, round-robin tag) for the round-robin classes. Losing it
    costs one rewrite of the affected jobs, not correctness.
    """

    epoch: int | None = None
    rr_tags: Mapping[int, tuple[PriorityClass, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TeamState:
    """A team's standing this cycle (explain, metrics, planner)."""

    team: str
    usage: Resources
    quota_gpus: int
    share: float
    preempted: int
    preempting: int
    protected_until: float | None
    demoting: bool

    @property
    def over_quota(self) -> bool:
        """True when the team runs more GPUs than its quota (the excess is borrowed)."""
        return self.usage.gpus > self.quota_gpus


class PendingReason(NamedTuple):
    """Why a pending job has its place: every input its priority came from.

    A NamedTuple rather than a frozen dataclass because the policy builds one per pending job
    every cycle (10,000+), and tuples are several times cheaper to build; it is just as immutable.
    """

    requested: Requested
    source: ClassOrigin
    base: PriorityClass           # after AUTO, fairness demotion and decay, before aging
    auto_class: PriorityClass | None
    demoted: bool
    decayed: bool
    wait: float
    bound: float                  # the base class's maximum wait
    aging_steps: int              # classes gained by aging
    next_promotion_in: float | None
    depth: int                    # pending jobs in the base class (drives the aging step)
    rule: Rule
    share: float | None           # team dominant share (fair-share classes)
    rr_tag: int | None            # round-robin tag (round-robin classes)
    boost: int                    # compensation, seconds of extra age
    age_restored: float           # seconds of age restored after requeues


class PendingDecision(NamedTuple):
    """The policy's verdict on one pending job (a NamedTuple for the same reason)."""

    job_id: int
    effective: PriorityClass
    priority: int
    reason: PendingReason


class RunningDecision(NamedTuple):
    """The policy's verdict on one running job (for the preemption planner; a NamedTuple for
    the reason :class:`PendingReason` is one)."""

    job_id: int
    team: str
    effective: PriorityClass
    decayed: bool
    borrowed: bool
    protected: bool
    preemptible: bool


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """Everything one policy cycle produced."""

    pending: Mapping[int, PendingDecision]
    running: Mapping[int, RunningDecision]
    priorities: Mapping[int, int]
    teams: Mapping[str, TeamState]
    state: PolicyState
    promotions: tuple[int, ...]   # pending jobs aged into a higher class
    demotions: tuple[int, ...]    # jobs demoted by the fairness rule
    decays: tuple[int, ...]       # jobs decayed (pending or running)
    protected_teams: frozenset[str]
    users: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # (preempted, preempting)
