"""Aging, decay and compensation: how time changes a job's class and place.

**Aging.** Each class ``c`` has a guaranteed maximum wait ``B(c)``. A pending job whose total wait
``w`` reaches ``B(base)`` is promoted; if it keeps waiting, it is promoted again when ``w`` reaches
the sum of the bounds of the classes it has passed through, and so on, never above
``aging.max_class`` (classes at or above it are not aged). Each promotion moves the job

    step(c) = min(max_step, 1 + depth(c) // depth_per_step)

classes up, where ``depth(c)`` is the number of pending jobs whose class before aging is ``c``: in
a deep queue one class is not enough to get an overdue job started, so it moves further.

**Decay.** A job of class ``decay.from`` (ABOVE_NORMAL) that has run ``decay.after`` seconds in
total, across requeues, counts as ``decay.to`` (NORMAL), both running and pending again.

**Compensation.** A job the daemon preempted (requeued by one of its plans) is ordered by its
original submit time (the age Slurm reset is restored) and, on top, gets a boost of extra age::

    raw   = preemptions * per_restart + per_wait * waited_since_requeue
    boost = min(cap, floor(raw / step) * step)

counted in whole steps so the priority changes only every ``step`` seconds. Requeues the daemon
did not cause (``scontrol requeue`` by the owner, an exit code Slurm requeues) earn nothing:
otherwise a user could buy up to ``cap`` of age by requeueing their own job. The boost only moves
the job inside its class band: it never crosses into another class (only aging does that).
The GPU-hours a preempted job spent saving are credited to its team by the executor
(:func:`hai_slurm.priority.executor.records.settle_records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.policy.ladder import LADDER, RANK
from hai_slurm.priority.policy.settings import (
    AgingConfig,
    ClassPolicy,
    CompensationConfig,
    DecayConfig,
)


def aging_step(depth: int, cfg: AgingConfig) -> int:
    """Classes gained per promotion for a class with ``depth`` pending jobs."""
    return min(cfg.max_step, 1 + depth // cfg.depth_per_step)


@dataclass(frozen=True, slots=True)
class Aged:
    """Result of aging one job: its class, classes gained, and seconds to the next promotion."""

    effective: PriorityClass
    gained: int
    next_in: float | None


def age(base: PriorityClass, wait: float, classes: Mapping[PriorityClass, ClassPolicy],
        depth: Mapping[PriorityClass, int], cfg: AgingConfig) -> Aged:
    """Promote ``base`` for a job that has waited ``wait`` seconds (see the module doc)."""
    ceiling = RANK[cfg.max_class]
    current = RANK[base]
    if current >= ceiling:
        return Aged(base, 0, None)
    passed = 0.0
    while current < ceiling:
        cls = LADDER[current]
        passed += classes[cls].max_wait
        if wait < passed:
            return Aged(cls, current - RANK[base], passed - wait)
        current = min(ceiling, current + aging_step(depth.get(cls, 0), cfg))
    return Aged(LADDER[current], current - RANK[base], None)


def decays(cls: PriorityClass, run_time: float, cfg: DecayConfig) -> bool:
    """True when a job of ``cls`` that has run ``run_time`` seconds counts one class lower."""
    return cls is cfg.source and cfg.after > 0 and run_time >= cfg.after


def compensation_boost(preemptions: int, waited: float, cfg: CompensationConfig) -> int:
    """Seconds of extra age for a job the daemon requeued ``preemptions`` times, waiting
    ``waited`` since."""
    if preemptions <= 0:
        return 0
    raw = preemptions * cfg.per_restart + cfg.per_wait * max(0.0, waited)
    steps = int(raw // cfg.step)
    return int(min(cfg.cap, steps * cfg.step))
