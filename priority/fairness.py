"""Fairness counters over a rolling window: protection of often-preempted teams, demotion of
teams that preempt too often.

A window ending at ``t`` holds the events with time in ``(t - window, t]``.

* **Protection.** When an event of kind PREEMPTED at time ``t`` makes a team's count in the window
  ending at ``t`` exceed ``protect_after`` (N), the team is protected until ``t + protect_for`` (T):
  its running jobs are not preemption victims.
* **Demotion.** A job of class ``demote_from`` or higher whose team had more than ``demote_after``
  (M) PREEMPTING events in the window ending at the job's submit time is treated one class lower,
  for as long as the team's count in the window ending *now* is still above M ("until the window
  clears"). Jobs submitted while the team was under M are never demoted.
  Aging still applies to a demoted job: the guaranteed wait of its lower class holds.

Counters are kept per team and per user; the thresholds apply to teams.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hai_slurm.priority.config import FairnessConfig
from hai_slurm.priority.state import EventKind, FairnessEvent


@dataclass(frozen=True, slots=True)
class FairnessIndex:
    """Event times sorted per team (and per user), per kind."""

    preempted: Mapping[str, tuple[float, ...]]
    preempting: Mapping[str, tuple[float, ...]]
    user_preempted: Mapping[str, tuple[float, ...]]
    user_preempting: Mapping[str, tuple[float, ...]]


def index_events(events: Iterable[FairnessEvent]) -> FairnessIndex:
    """Group and sort event times by kind and by team and user."""
    groups: dict[tuple[EventKind, bool], defaultdict[str, list[float]]] = {
        (kind, by_user): defaultdict(list) for kind in EventKind for by_user in (False, True)}
    for event in events:
        groups[event.kind, False][event.team].append(event.time)
        groups[event.kind, True][event.user].append(event.time)

    def frozen(kind: EventKind, by_user: bool) -> dict[str, tuple[float, ...]]:
        return {k: tuple(sorted(v)) for k, v in groups[kind, by_user].items()}

    return FairnessIndex(
        preempted=frozen(EventKind.PREEMPTED, False),
        preempting=frozen(EventKind.PREEMPTING, False),
        user_preempted=frozen(EventKind.PREEMPTED, True),
        user_preempting=frozen(EventKind.PREEMPTING, True),
    )


def count_in_window(times: tuple[float, ...], end: float, window: float) -> int:
    """How many of the sorted ``times`` fall in ``(end - window, end]``."""
    return bisect_right(times, end) - bisect_right(times, end - window)


def protected_until(times: tuple[float, ...], now: float, cfg: FairnessConfig) -> float | None:
    """When the team's protection ends, or None if it is not protected at ``now``."""
    until = None
    for i, t in enumerate(times):
        if t > now:
            break
        if i + 1 - bisect_right(times, t - cfg.window) > cfg.protect_after:
            end = t + cfg.protect_for
            if end > now and (until is None or end > until):
                until = end
    return until


def demoting(times: tuple[float, ...], now: float, cfg: FairnessConfig) -> bool:
    """True while the team has preempted more than M times in the window ending now."""
    return count_in_window(times, now, cfg.window) > cfg.demote_after


def demoted(times: tuple[float, ...], submit: float, now: float, cfg: FairnessConfig) -> bool:
    """True for a job submitted while its team was over M and the window has not cleared yet."""
    return (count_in_window(times, submit, cfg.window) > cfg.demote_after
            and count_in_window(times, now, cfg.window) > cfg.demote_after)


def user_counts(index: FairnessIndex, now: float, window: float) -> dict[str, tuple[int, int]]:
    """Per user: (times preempted, times preempting) in the window ending now."""
    users = set(index.user_preempted) | set(index.user_preempting)
    empty: tuple[float, ...] = ()
    return {u: (count_in_window(index.user_preempted.get(u, empty), now, window),
                count_in_window(index.user_preempting.get(u, empty), now, window))
            for u in sorted(users)}
