"""Immutable values the repository reads and writes; the daemon never sees ORM rows.

All times are Unix epoch seconds (``float``), passed in by the caller: the store reads no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import FairnessEvent
from hai_slurm.priority.store.states import PlanState, VictimState

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"


@dataclass(frozen=True)
class TrackedJob:
    """What the daemon remembers about one Slurm job between cycles (and across restarts)."""

    job_id: int
    team: str
    user: str
    requested_class: str
    effective_class: str
    class_origin: ClassOrigin
    original_submit_at: float  # kept because Slurm resets the submit time on requeue
    first_seen_at: float
    updated_at: float
    run_seconds: float = 0.0  # cumulative, over every run of the job
    wait_seconds: float = 0.0  # waited before earlier requeues (Slurm forgets it on requeue)
    last_state: str = "PENDING"
    preemptions: int = 0
    checkpoint_at: float | None = None
    checkpoint_step: int | None = None
    priority: int | None = None  # the last priority the daemon wrote to Slurm



@dataclass(frozen=True)
class CreditEntry:
    """A ledger line: GPU-hours a team lost (positive) or was paid back (negative)."""

    team: str
    gpu_hours: float
    at: float
    job_id: int | None = None
    plan_id: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Protection:
    """A team whose jobs may not be chosen as victims until ``until``."""

    team: str
    until: float
    granted_at: float
    reason: str = ""


@dataclass(frozen=True)
class PlanJob:
    """A job taking part in a plan; ``gpus`` is what it holds (victim) or needs (beneficiary)."""

    job_id: int
    team: str
    user: str
    gpus: int = 0


@dataclass(frozen=True)
class PlanVictim:
    """A victim of a plan and how far it got."""

    job_id: int
    team: str
    user: str
    gpus: int
    state: VictimState
    asked_at: float | None = None
    acked_at: float | None = None
    ack_step: int | None = None
    requeued_at: float | None = None


@dataclass(frozen=True)
class PlanStep:
    """One recorded transition of a plan (``from_state`` is None for its creation)."""

    from_state: PlanState | None
    to_state: PlanState
    at: float
    note: str = ""


@dataclass(frozen=True)
class Plan:
    """A preemption plan as stored, with its jobs and its recorded steps (oldest first)."""

    plan_id: int
    state: PlanState
    created_at: float
    updated_at: float
    reason: str
    on_miss: DeadlineAction
    deadline_at: float | None
    beneficiaries: tuple[PlanJob, ...]
    victims: tuple[PlanVictim, ...]
    steps: tuple[PlanStep, ...] = ()

    @property
    def teams(self) -> frozenset[str]:
        """Every team involved, as beneficiary or as victim."""
        return frozenset(j.team for j in self.beneficiaries) | frozenset(
            v.team for v in self.victims
        )


@dataclass(frozen=True)
class AuditEntry:
    """A line of the daemon's audit log (``data`` must be JSON-serializable)."""

    at: float
    kind: str
    message: str
    team: str | None = None
    job_id: int | None = None
    plan_id: int | None = None
    data: dict[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True)
class CycleWrite:
    """Everything one daemon cycle writes at time ``at``, committed in a single transaction."""

    at: float
    jobs: tuple[TrackedJob, ...] = ()
    forget_jobs: tuple[int, ...] = ()
    events: tuple[FairnessEvent, ...] = ()
    credits: tuple[CreditEntry, ...] = ()
    protections: tuple[Protection, ...] = ()
    audit: tuple[AuditEntry, ...] = ()
    values: tuple[tuple[str, JsonValue], ...] = ()  # small named values (e.g. round-robin cursor)


@dataclass(frozen=True)
class ShadowVictim:
    """A job a shadow plan would have asked to checkpoint and requeued."""

    job_id: int
    team: str
    user: str
    gpus: int
    priority_class: str
    deadline: float
    """Seconds it would have been given to save."""


@dataclass(frozen=True)
class ShadowPlan:
    """A preemption ``hai-slurm daemon --shadow`` decided on and did not carry out."""

    created_at: float
    beneficiary: PlanJob
    beneficiary_class: str
    victims: tuple[ShadowVictim, ...]
    nodes: tuple[str, ...]
    actions: tuple[str, ...]
    """The Slurm commands the real daemon would have issued, in order, in words."""
    reason: str
    on_miss: DeadlineAction
    plan_id: int = 0
    """Assigned by the store (0 before it is recorded)."""

    @property
    def teams(self) -> frozenset[str]:
        """Every team involved."""
        return frozenset({self.beneficiary.team, *(v.team for v in self.victims)})
