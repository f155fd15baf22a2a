"""The daemon file's ``[planner]`` and ``[executor]`` tables: preemption settings, validated.

:func:`read_preempt` turns both tables into a :class:`PreemptConfig` (planner settings,
executor settings, whether preemption runs at all, whether checkpoint requests also go through
Redis) or raises :class:`~hai_slurm.errors.ConfigError` naming the file, line, key, bad value
and what is allowed, like the rest of :mod:`hai_slurm.priority.config.loader`. Defaults are those of
:class:`~hai_slurm.priority.planner.types.PlannerConfig` and
:class:`~hai_slurm.priority.executor.types.ExecutorSettings`, so a tuned default there is the
default here.

Per-class executor settings live with the other class settings: a victim's deadline is its own
``#HAI --grace`` capped by ``classes.X.grace_cap`` (``default_grace`` here when it gave none),
and what happens when a victim misses it is ``classes.X.on_deadline`` of the beneficiary's class.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.toml_reader import (
    Table,
    boolean,
    class_keys,
    integer,
    number,
    string,
)
from hai_slurm.priority.executor.types import ExecutorSettings
from hai_slurm.priority.planner.types import PlannerConfig
from hai_slurm.priority.policy.ladder import class_names
from hai_slurm.priority.policy.units import parse_duration

PREEMPT_KEYS = ("planner", "executor")
"""Root keys of the daemon file read here."""

_DURATION = "seconds (e.g. 600) or '45s', '10m', '1h'"


@dataclass(frozen=True, slots=True)
class PreemptConfig:
    """Preemption in the daemon: on or off, the planner's and the executor's settings.

    ``redis``: checkpoint requests also go out as Redis messages (besides the signal): true
    when ``redis_url`` is set and ``[executor] redis`` is not false.
    """

    enabled: bool = True
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    redis: bool = True


def read_preempt(root: Table, redis_url: str | None) -> PreemptConfig:
    """Read ``[planner]`` and ``[executor]`` of the daemon file's root table."""
    pl = root.sub("planner")
    d = PlannerConfig()
    enabled = pl.get("enabled", True, boolean, "true or false")
    given = dict(
        min_run_time=pl.get("min_run_time", d.min_run_time, _duration, _DURATION),
        urgent_min_run_time=pl.get("urgent_min_run_time", d.urgent_min_run_time, _duration,
                                   _DURATION),
        class_weights=_weights(pl.sub("class_weights"), d),
        class_min_run_time=_min_runs(pl.sub("class_min_run_time")),
        benefit_threshold=pl.get("benefit_threshold", d.benefit_threshold, number(0.0),
                                 "a number >= 0 (preempt when benefit > this x lost work)"),
        urgent_benefit_wait=pl.get("urgent_benefit_wait", d.urgent_benefit_wait, _duration,
                                   _DURATION),
        urgent_no_save_wait=pl.get("urgent_no_save_wait", d.urgent_no_save_wait,
                                   _duration_or_off, f"{_DURATION}, or 'off' (never: the "
                                   "benefit test decides)"),
        bound_no_save_wait=pl.get("bound_no_save_wait", d.bound_no_save_wait,
                                  _duration_or_off, f"{_DURATION}, or 'off' (never, the "
                                  "default: a job past its bound takes victims that save)"),
        borrowed_discount=pl.get("borrowed_discount", d.borrowed_discount, number(0.0, 1.0),
                                 "a number from 0 to 1 (a borrowed victim's loss counts x this "
                                 "against jobs within quota)"),
        victim_age_wait=pl.get("victim_age_wait", d.victim_age_wait, number(0.0),
                               "a number >= 0 (fraction of the youngest victim's run time)"),
        restart_cost=pl.get("restart_cost", d.restart_cost, _duration, _DURATION),
        restart_cost_per_node=pl.get("restart_cost_per_node", d.restart_cost_per_node,
                                     _duration, _DURATION),
        save_cost=pl.get("save_cost", d.save_cost, _duration, _DURATION),
        max_staleness=pl.get("max_staleness", d.max_staleness, _duration, _DURATION),
        max_plans=pl.get("max_plans", d.max_plans, integer(0), "an integer >= 0"),
        max_searches=pl.get("max_searches", d.max_searches, integer(0), "an integer >= 0"),
        plans_per_pending=pl.get("plans_per_pending", d.plans_per_pending, number(0.0),
                                 "a number >= 0 (0: fixed limits)"),
        max_candidates_per_node=pl.get("max_candidates_per_node", d.max_candidates_per_node,
                                       integer(1, 16), "an integer from 1 to 16"),
        allow_cross_leaf=pl.get("allow_cross_leaf", d.allow_cross_leaf, boolean,
                                "true or false"),
        reserve_after=pl.get("reserve_after", d.reserve_after, number(0.0),
                             "a number >= 0 (fraction of the class's max_wait; 0: off)"),
        aged_preempt=pl.get("aged_preempt", d.aged_preempt, boolean, "true or false"),
    )
    pl.finish()
    try:
        planner = PlannerConfig(**given)  # type: ignore[arg-type]
    except ConfigError as err:  # a combination PlannerConfig itself refuses
        raise pl.error(err.key or "enabled", str(err).split(": ", 1)[-1], err.value) from None

    ex = root.sub("executor")
    e = ExecutorSettings()
    redis = ex.get("redis", True, boolean, "true or false") and redis_url is not None
    positive = _DURATION + ", > 0"
    given_ex = dict(
        poll=ex.get("poll", e.poll, _at_least(MIN_POLL), f"{_DURATION}, at least {MIN_POLL:g}s"),
        state_poll=ex.get("state_poll", e.state_poll, _at_least(MIN_POLL),
                          f"{_DURATION}, at least {MIN_POLL:g}s (one Slurm query each)"),
        default_deadline=ex.get("default_grace", e.default_deadline, _positive, positive),
        saving_extension=ex.get("saving_extension", e.saving_extension, _duration, _DURATION),
        start_timeout=ex.get("start_timeout", e.start_timeout, _positive, positive),
        clock_skew=ex.get("clock_skew", e.clock_skew, _duration, _DURATION),
        signal=ex.get("signal", e.signal, _signal_name,
                      "a signal name such as USR2 (not USR1: NCCL uses it)"),
        late_ack_window=ex.get("late_ack_window", e.late_ack_window, _duration, _DURATION),
        resend_after=ex.get("resend_after", e.resend_after, _duration, _DURATION),
    )
    ex.finish()
    try:
        executor = ExecutorSettings(**given_ex)  # type: ignore[arg-type]
    except ConfigError as err:
        raise ex.error(err.key or "poll", str(err).split(": ", 1)[-1], err.value) from None
    return PreemptConfig(enabled=enabled, planner=planner, executor=executor, redis=redis)


def _min_runs(table: Table) -> MappingProxyType[PriorityClass, float]:
    """``[planner.class_min_run_time]``: per victim class, durations."""
    out: dict[PriorityClass, float] = {}
    for cls, name in class_keys(table).items():
        out[cls] = table.get(name, 0.0, _duration, _DURATION)
    return MappingProxyType(out)


def _weights(table: Table, d: PlannerConfig) -> MappingProxyType[PriorityClass, float]:
    out = dict(d.class_weights)
    for cls, name in class_keys(table).items():
        out[cls] = table.get(name, out[cls], number(0.0), "a number >= 0; classes: "
                             + ", ".join(class_names()))
    return MappingProxyType(out)


def _duration(value: object) -> float:
    return parse_duration(value)


def _duration_or_off(value: object) -> float | None:
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    return parse_duration(value)


MIN_POLL = 0.05
"""The shortest ``[executor] poll`` and ``state_poll``: a wait for a victim's save polls its
files and Slurm at that pace, so shorter ones only load slurmctld and the file system."""


def _at_least(minimum: float) -> Callable[[object], float]:
    def convert(value: object) -> float:
        seconds = parse_duration(value)
        if seconds < minimum:
            raise ValueError(f"must be at least {minimum:g} s")
        return seconds
    return convert


def _positive(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be longer than 0")
    return seconds


def _signal_name(value: object) -> str:
    name = string(value).strip().upper().removeprefix("SIG")
    if name == "USR1":
        raise ValueError("USR1 is taken by NCCL")
    if name in ("KILL", "STOP"):
        raise ValueError(f"SIG{name} cannot be caught or ignored, so no job could save on it; "
                         "use USR2 (the job library's default)")
    if name not in signal.Signals.__members__ and f"SIG{name}" not in signal.Signals.__members__:
        raise ValueError(f"unknown signal {value!r}")
    return name
