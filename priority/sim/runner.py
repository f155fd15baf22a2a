"""One simulation setup (configurations of every policy) and running a policy on a trace.

:class:`Setup` gathers what a run depends on besides the trace and the cluster: the daemon
configuration (hai-slurm), the planner settings, the cost model, the multifactor settings and
the allocator's backfill flag. :func:`apply_param` changes one of them by a dotted name (what
``--sweep`` varies); :func:`run_policy` runs one policy and returns the JSON-ready result.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import Level, Topology
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import DaemonConfig, check_cycle
from hai_slurm.priority.planner.types import PlannerConfig
from hai_slurm.priority.policy.ladder import parse_class
from hai_slurm.priority.policy.units import parse_duration
from hai_slurm.priority.sim.baselines import Fifo, HaiPlatform, MultifactorConfig, SlurmMultifactor
from hai_slurm.priority.sim.costs import CostModel
from hai_slurm.priority.sim.engine import Engine, Policy, rounded_up
from hai_slurm.priority.sim.metrics import summarize
from hai_slurm.priority.sim.ours import HaiSlurm
from hai_slurm.priority.sim.trace import Trace

POLICIES = ("fifo", "slurm-multifactor", "hai-platform", "hai-slurm")
FORMAT = 1


@dataclass(frozen=True)
class Setup:
    """Everything a run depends on besides the trace and the cluster."""

    config: DaemonConfig = field(default_factory=DaemonConfig)
    planner: PlannerConfig | None = None   # None: the daemon configuration's [planner]
    costs: CostModel = field(default_factory=CostModel)
    multifactor: MultifactorConfig = field(default_factory=MultifactorConfig)
    backfill: bool = True

    def planner_config(self) -> PlannerConfig:
        """The planner settings: the daemon configuration's ``[planner]`` (its defaults when
        the file has none: the daemon's own), so the simulated policy plans with exactly what
        the daemon would; ``planner`` (a ``--sweep`` or ``--set``) overrides it."""
        if self.planner is not None:
            return self.planner
        return self.config.preempt.planner


def with_quotas(config: DaemonConfig, teams: tuple[str, ...], total_gpus: int) -> DaemonConfig:
    """``config``, with quotas split evenly over ``teams`` when it gives the teams none.

    A configuration that sets ``[team_defaults] gpus`` or lists every team keeps its quotas.
    """
    policy = config.policy
    if not teams or policy.team_default.gpus > 0 or all(t in policy.teams for t in teams):
        return config
    default = replace(policy.team_default, gpus=max(1, total_gpus // len(teams)))
    return replace(config, policy=replace(policy, team_default=default))


def make_policy(name: str, setup: Setup) -> Policy:
    """A fresh policy object called ``name``."""
    if name == "fifo":
        return Fifo()
    if name == "slurm-multifactor":
        return SlurmMultifactor(setup.multifactor)
    if name == "hai-platform":
        return HaiPlatform()
    if name == "hai-slurm":
        return HaiSlurm(setup.config, setup.planner_config())
    raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}",
                      key="policy", value=name)


def _convert(old: object, text: str, key: str, *, optional: type | None = None) -> object:
    """``text`` as a value of ``old``'s type; ``optional`` (the type of a field that may be
    None, such as ``planner.urgent_no_save_wait``: float or int; None for the others): "off"
    gives None, as in the daemon file, and a field that is None now takes a number of that
    type."""
    if optional is not None and text.strip().lower() == "off":
        return None
    if old is None and optional in (float, int):
        old = 0.0 if optional is float else 0
    try:
        if isinstance(old, bool):
            if text.lower() not in ("true", "false", "yes", "no", "1", "0"):
                raise ValueError("expected true or false")
            return text.lower() in ("true", "yes", "1")
        if isinstance(old, PriorityClass):
            return parse_class(text, key=key)
        if isinstance(old, int | float):
            number = (float(parse_duration(text)) if any(c.isalpha() for c in text)
                      and text.strip().lower() not in ("nan", "inf", "infinity")
                      else float(text))
            _check_number(number, key)
            return int(number) if isinstance(old, int) else number
    except ValueError as err:
        raise ConfigError(f"bad value: {err}", key=key, value=text) from None
    raise ConfigError("this setting cannot be swept (not a number, flag or class)", key=key,
                      value=text)


_POSITIVE = ("max_wait", "cycle", "lock_ttl", "backoff_max")
"""Settings the daemon's file requires above 0 (``priority.config.loader``)."""


def _check_number(value: float, key: str) -> None:
    """As the daemon's file reads them: every numeric setting here (a duration, count, weight
    or share) is finite and not negative, and a bound or an interval is above 0."""
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a finite number >= 0")
    if value == 0 and key.rsplit(".", 1)[-1] in _POSITIVE:
        raise ValueError("must be longer than 0")
    if key == "intervals.cycle":
        check_cycle(value)


def _set(obj: Any, path: list[str], text: str, key: str) -> Any:
    name = path[0]
    if isinstance(obj, Mapping):
        if name.upper() not in PriorityClass.__members__:
            raise ConfigError(f"unknown class {name!r}", key=key, value=text)
        cls = PriorityClass[name.upper()]
        new = dict(obj)
        new[cls] = _set(obj[cls], path[1:], text, key) if len(path) > 1 else _convert(
            obj[cls], text, key)
        return MappingProxyType(new)
    if not dataclasses.is_dataclass(obj) or name not in {f.name for f in dataclasses.fields(obj)}:
        names = sorted(f.name for f in dataclasses.fields(obj)) if dataclasses.is_dataclass(
            obj) else []
        raise ConfigError(f"unknown setting {name!r}" + (
            f"; known here: {', '.join(names)}" if names else ""), key=key, value=text)
    old = getattr(obj, name)
    # float | None -> float (the field's resolved annotation); None when it is never None
    kinds = typing.get_args(typing.get_type_hints(type(obj))[name])
    optional = next((t for t in kinds if t is not type(None)), None) \
        if type(None) in kinds else None
    value = (_set(old, path[1:], text, key) if len(path) > 1
             else _convert(old, text, key, optional=optional))
    return replace(obj, **{name: value})  # type: ignore[type-var]


def apply_param(setup: Setup, key: str, text: str) -> Setup:
    """``setup`` with the setting ``key`` set to ``text``.

    Keys: ``planner.FIELD``, ``costs.FIELD``, ``multifactor.FIELD``, ``backfill``, and the
    daemon configuration's ``intervals.*``, ``aging.*``, ``decay.*``, ``fairness.*``,
    ``fair_share.*``, ``compensation.*``, ``classes.CLASS.max_wait`` (dataclass field names;
    decay uses ``source``/``target``/``after``).
    """
    parts = key.split(".")
    if parts[0] == "backfill" and len(parts) == 1:
        return replace(setup, backfill=bool(_convert(True, text, key)))
    if parts[0] == "planner":
        return replace(setup, planner=_set(setup.planner_config(), parts[1:], text, key))
    if parts[0] in ("costs", "multifactor"):
        return replace(setup, **{parts[0]: _set(getattr(setup, parts[0]), parts[1:], text,
                                                key)})
    if parts[0] == "intervals":
        return replace(setup, config=_set(setup.config, parts, text, key))
    if len(parts) >= 2:
        policy = _set(setup.config.policy, parts, text, key)
        return replace(setup, config=replace(setup.config, policy=policy))
    raise ConfigError("expected SECTION.SETTING (e.g. planner.min_run_time, costs.grace_time, "
                      "aging.max_step, classes.HIGH.max_wait)", key=key, value=text)


def run_notes(trace: Trace, topology: Topology) -> list[str]:
    """What the run changes about the trace's jobs (said in the result and on screen)."""
    most = max((len(c.gpus) for c in topology.cells_at(Level.NODE)), default=0)
    rounded = rounded_up(trace.jobs, most)
    return [f"{rounded} jobs spread over several nodes run with the same GPU count on each, "
            "rounded up (9 GPUs on 2 nodes: 2 x 5)"] if rounded else []


def run_policy(name: str, trace: Trace, topology: Topology, setup: Setup, *, seed: int,
               progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, Any],
                                                                            Engine]:
    """Run ``name`` on ``trace``; the JSON-ready result (no wall-clock values) and the engine."""
    total = sum(len(c.gpus) for c in topology.cells_at(Level.NODE))
    config = with_quotas(setup.config, trace.teams, total)
    setup = replace(setup, config=config)
    engine = Engine(trace, topology, make_policy(name, setup), costs=setup.costs,
                    backfill=setup.backfill, progress=progress).run()
    policy = config.policy
    bounds = {c: p.max_wait for c, p in policy.classes.items()}
    quotas = {t: policy.quota(t).gpus for t in trace.teams}
    result: dict[str, Any] = {
        "format": FORMAT, "policy": name, "seed": seed,
        "trace": {"source": trace.source, "jobs": len(trace.jobs),
                  "skipped_rows": dict(sorted(trace.skipped.items())),
                  "notes": [*trace.notes, *run_notes(trace, topology)]},
        "cluster": {"gpus": total, "nodes": len(topology.cells_at(Level.NODE)),
                    "leaf_switches": len(topology.cells_at(Level.LEAF_SWITCH))},
        "costs": dataclasses.asdict(setup.costs),
        "backfill": setup.backfill,
    }
    result.update(summarize(engine, bounds=bounds, quotas=quotas))
    counts = getattr(engine.policy, "counts", None)
    if counts is not None:
        result["totals"]["policy_events"] = dict(sorted(counts.items()))
    return result, engine
