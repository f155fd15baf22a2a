"""The pure policy's settings: per-class bounds, aging, decay, fairness, quotas, compensation.

Plain frozen values with defaults; :mod:`hai_slurm.priority.config.loader` reads them from the
daemon's TOML file, and the policy, planner and simulator take them as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.policy.ladder import LADDER


class DeadlineAction(StrEnum):
    """What the preemption executor does when a victim misses its checkpoint deadline."""

    ABORT = "abort"  # nobody is requeued; the victims go on (they are not chosen again until
    #                  they have been requeued)
    FORCE = "force"  # requeue anyway, without an ack: the loss is counted (the default: one
    #                  victim that never acknowledges cannot stall anyone)


@dataclass(frozen=True, slots=True)
class ClassPolicy:
    """Per-class settings: guaranteed wait, grace cap, opt-out of preemption, deadline action."""

    max_wait: float
    grace_cap: float
    preemptible_optional: bool
    on_deadline: DeadlineAction = DeadlineAction.FORCE


#: Defaults per class: (max wait, grace cap, preemptible may be "no").
DEFAULT_CLASSES: Mapping[str, tuple[float, float, bool]] = MappingProxyType({
    "EXTREME_HIGH": (120, 600, True),
    "VERY_HIGH": (300, 600, True),
    "HIGH": (600, 600, True),
    "ABOVE_NORMAL": (1800, 300, False),
    "NORMAL": (7200, 300, False),
    "UNDER_NORMAL": (14400, 180, False),
    "BELOW_NORMAL": (28800, 120, False),
    "LOW": (86400, 120, False),
})


@dataclass(frozen=True, slots=True)
class AgingConfig:
    """Aging: promotion past the class bound; step = 1 + depth // depth_per_step, <= max_step."""

    max_class: PriorityClass = PriorityClass.HIGH
    depth_per_step: int = 1000
    max_step: int = 2


@dataclass(frozen=True, slots=True)
class DecayConfig:
    """``source`` becomes ``target`` after ``after`` seconds of cumulative running (0: off)."""

    source: PriorityClass = PriorityClass.ABOVE_NORMAL
    target: PriorityClass = PriorityClass.NORMAL
    after: float = 1800.0


@dataclass(frozen=True, slots=True)
class FairnessConfig:
    """Rolling-window counters: protect after > protect_after preemptions, demote after > M.

    ``demote_excess`` (X) makes demotion relative to the team's share: a team is a repeat
    offender only when it also preempted more than X times as often per quota GPU as the other
    teams together in the window (0: the absolute count M alone decides, as before).
    ``protect_borrowed``: whether protection also covers a team's borrowed (over-quota) jobs;
    off by default, so a protected team's borrowed GPUs can still be reclaimed.
    ``protect_excess`` (Y) makes protection relative the same way: a team is protected only when
    it was also preempted more than Y times as often per quota GPU as the others (0: N alone).
    """

    window: float = 86400.0
    protect_after: int = 3
    protect_for: float = 3600.0
    demote_after: int = 5
    demote_from: PriorityClass = PriorityClass.HIGH
    demote_excess: float = 10.0
    protect_borrowed: bool = False
    protect_excess: float = 2.0


@dataclass(frozen=True, slots=True)
class FairShareConfig:
    """DRF shares are compared in steps of ``quantum`` and capped at ``max_share``."""

    quantum: float = 0.05
    max_share: float = 2.0


@dataclass(frozen=True, slots=True)
class CompensationConfig:
    """Boost (seconds of extra age) for requeued jobs, counted in whole ``step``s, capped."""

    per_restart: float = 600.0
    per_wait: float = 0.5
    step: float = 600.0
    cap: float = 7200.0


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """A team's quota: GPUs (optionally per class), CPUs and memory (None: GPU-proportional)."""

    gpus: int = 0
    cpus: int | None = None
    memory_mb: int | None = None
    class_gpus: Mapping[PriorityClass, int] = field(default_factory=dict)
    allowed_classes: frozenset[PriorityClass] = frozenset(PriorityClass)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Everything the pure policy needs."""

    classes: Mapping[PriorityClass, ClassPolicy] = field(default_factory=lambda: MappingProxyType({
        c: ClassPolicy(*DEFAULT_CLASSES[c.name]) for c in LADDER}))
    default_class: PriorityClass = PriorityClass.NORMAL
    aging: AgingConfig = AgingConfig()
    decay: DecayConfig = DecayConfig()
    fairness: FairnessConfig = FairnessConfig()
    fair_share: FairShareConfig = FairShareConfig()
    compensation: CompensationConfig = CompensationConfig()
    teams: Mapping[str, TeamQuota] = field(default_factory=dict)
    team_default: TeamQuota = TeamQuota()

    def quota(self, team: str) -> TeamQuota:
        """The quota of ``team`` (the team default when it is not listed)."""
        return self.teams.get(team, self.team_default)
