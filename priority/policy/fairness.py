"""Fairness counters over a rolling window: protection of often-preempted teams, demotion of
teams that preempt too often.

A window ending at ``t`` holds the events with time in ``(t - window, t]``.

* **Protection.** When an event of kind PREEMPTED at time ``t`` makes a team's count in the window
  ending at ``t`` exceed ``protect_after`` (N), the team is protected until ``t + protect_for`` (T):
  its running jobs within its quota are not preemption victims (its borrowed jobs stay
  victims, so others can reclaim their quota, unless ``protect_borrowed`` is set).
  With ``protect_excess`` (Y) > 0 the threshold is relative to the team's share, as demotion's:
  ``max(N, Y x others x f / (1 - f))`` with ``others`` the other teams' PREEMPTED events in the
  window: on an overloaded cluster where every team is preempted in proportion to its quota,
  nobody is protected (otherwise every team is, and nothing can be preempted for anyone: the
  41.9-hour HIGH waits of issue 16); a team preempted well beyond its share still is.
* **Demotion.** A job of class ``demote_from`` or higher whose team had more than ``demote_after``
  (M) PREEMPTING events in the window ending at the job's submit time is treated one class lower,
  for as long as the team's count in the window ending *now* is still above M ("until the window
  clears"). Jobs submitted while the team was under M are never demoted.
  Aging still applies to a demoted job: the guaranteed wait of its lower class holds.
  With ``demote_excess`` (X) > 0 the threshold is relative to the team's share: at time ``t`` it
  is ``max(M, X x others x f / (1 - f))``, where ``others`` counts the other teams' PREEMPTING
  events in the window ending at ``t`` and ``f`` is the team's part of the quotas: the team is
  demoted only when it preempts more than X times as often per quota GPU as the rest. On a
  busy cluster, where every team preempts in proportion to its share, nobody is demoted; a team
  that preempts well beyond its share still is. X = 0 (or a single team): M alone decides.

Counters are kept per team and per user; the thresholds apply to teams.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hai_slurm.priority.policy.settings import FairnessConfig
from hai_slurm.priority.policy.state import EventKind, FairnessEvent


@dataclass(frozen=True, slots=True)
class FairnessIndex:
    """Event times sorted per team (and per user), per kind."""

    preempted: Mapping[str, tuple[float, ...]]
    preempting: Mapping[str, tuple[float, ...]]
    all_preempting: tuple[float, ...]
    user_preempted: Mapping[str, tuple[float, ...]]
    user_preempting: Mapping[str, tuple[float, ...]]
    all_preempted: tuple[float, ...] = ()


def index_events(events: Iterable[FairnessEvent]) -> FairnessIndex:
    """Group and sort event times by kind and by team and user.

    An index is a function of the events alone (frozen values; its mappings are never changed
    after they are made). Callers that index the same events pass after pass keep the last one
    in :class:`~hai_slurm.priority.policy.priorities.PolicyMemo`."""
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
        all_preempting=tuple(sorted(t for v in groups[EventKind.PREEMPTING, False].values()
                                    for t in v)),
        user_preempted=frozen(EventKind.PREEMPTED, True),
        user_preempting=frozen(EventKind.PREEMPTING, True),
        all_preempted=tuple(sorted(t for v in groups[EventKind.PREEMPTED, False].values()
                                   for t in v)),
    )


def count_in_window(times: tuple[float, ...], end: float, window: float) -> int:
    """How many of the sorted ``times`` fall in ``(end - window, end]``."""
    return bisect_right(times, end) - bisect_right(times, end - window)


def protect_limit(own: int, everyone: tuple[float, ...], fraction: float, at: float,
                  cfg: FairnessConfig) -> float:
    """The PREEMPTED count in the window ending at ``at`` that a team with ``own`` events there
    and ``fraction`` of the quotas may reach without being protected."""
    if cfg.protect_excess <= 0 or not everyone or fraction >= 1.0:
        return float(cfg.protect_after)
    others = count_in_window(everyone, at, cfg.window) - own
    return max(float(cfg.protect_after),
               cfg.protect_excess * others * fraction / (1.0 - fraction))


def protected_until(times: tuple[float, ...], now: float, cfg: FairnessConfig, *,
                    everyone: tuple[float, ...] = (), fraction: float = 1.0,
                    starts: tuple[float, ...] | None = None) -> float | None:
    """When the team's protection ends, or None if it is not protected at ``now``.

    ``everyone``: all teams' PREEMPTED times, sorted; ``fraction``: the team's part of the
    quotas (without them, or with ``protect_excess`` 0, the limit is N).

    Each event at ``t`` that put the team over its limit protects it until
    ``t + protect_for``; the latest such event up to ``now`` ends last (see
    :func:`protecting_events`; ``starts``: what it gives for these values, when the caller
    kept it)."""
    if starts is None:
        starts = protecting_events(times, cfg, everyone, fraction)
    i = bisect_right(starts, now)
    if i == 0:
        return None
    end = starts[i - 1] + cfg.protect_for
    return end if end > now else None


def protecting_events(times: tuple[float, ...], cfg: FairnessConfig,
                      everyone: tuple[float, ...] = (), fraction: float = 1.0
                      ) -> tuple[float, ...]:
    """The times among the sorted ``times`` (a team's PREEMPTED events) whose event put the
    team over its limit in the window ending there: each protects it for ``protect_for``.

    Whether one did depends on the events up to it alone, not on ``now``, so a caller that
    asks pass after pass keeps them while the events are the same
    (:class:`~hai_slurm.priority.policy.priorities.PolicyMemo`: a cycle asks for every team,
    and the events change far less often than ``now``)."""
    out: list[float] = []
    for i, t in enumerate(times):
        own = i + 1 - bisect_right(times, t - cfg.window)
        if own > protect_limit(own, everyone, fraction, t, cfg):
            out.append(t)
    return tuple(out)


def demote_limit(own: int, everyone: tuple[float, ...], fraction: float, at: float,
                 cfg: FairnessConfig) -> float:
    """The PREEMPTING count in the window ending at ``at`` that a team with ``own`` events
    there and ``fraction`` of the quotas may reach without being demoted."""
    if cfg.demote_excess <= 0 or not everyone or fraction >= 1.0:
        return float(cfg.demote_after)
    others = count_in_window(everyone, at, cfg.window) - own
    return max(float(cfg.demote_after), cfg.demote_excess * others * fraction / (1.0 - fraction))


def over_limit(times: tuple[float, ...], at: float, cfg: FairnessConfig, *,
               everyone: tuple[float, ...] = (), fraction: float = 1.0) -> bool:
    """True when the team's PREEMPTING count in the window ending at ``at`` is over its limit.

    ``everyone``: all teams' PREEMPTING times, sorted; ``fraction``: the team's part of the
    quotas. Without ``everyone`` (or with ``demote_excess`` 0) the limit is M.
    """
    own = count_in_window(times, at, cfg.window)
    return own > demote_limit(own, everyone, fraction, at, cfg)


def demoting(times: tuple[float, ...], now: float, cfg: FairnessConfig, *,
             everyone: tuple[float, ...] = (), fraction: float = 1.0) -> bool:
    """True while the team is over its limit in the window ending now."""
    return over_limit(times, now, cfg, everyone=everyone, fraction=fraction)


def demoted(times: tuple[float, ...], submit: float, now: float, cfg: FairnessConfig, *,
            everyone: tuple[float, ...] = (), fraction: float = 1.0) -> bool:
    """True for a job submitted while its team was over its limit, until that clears."""
    return (over_limit(times, submit, cfg, everyone=everyone, fraction=fraction)
            and over_limit(times, now, cfg, everyone=everyone, fraction=fraction))


def user_counts(index: FairnessIndex, now: float, window: float) -> dict[str, tuple[int, int]]:
    """Per user: (times preempted, times preempting) in the window ending now."""
    users = set(index.user_preempted) | set(index.user_preempting)
    empty: tuple[float, ...] = ()
    return {u: (count_in_window(index.user_preempted.get(u, empty), now, window),
                count_in_window(index.user_preempting.get(u, empty), now, window))
            for u in sorted(users)}
