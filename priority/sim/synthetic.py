"""A synthetic trace for stress tests: Poisson arrivals, chosen size, class and team mixes.

:func:`parse_spec` reads ``"jobs=2000,rate=0.05,duration=3600,sizes=1:60/2:20/8:20,
classes=HIGH:10/NORMAL:60/LOW:30,teams=4"``; :func:`generate` turns a spec and a seed into a
:class:`~hai_slurm.priority.sim.trace.Trace`, the same one for the same seed. Durations are
exponential around ``duration`` (at least 60 s); sizes above ``node_gpus`` ask for whole nodes.
``no_save`` (0 to 1, default 0) is the fraction of jobs that cannot save on request
(``TraceJob.saves``), drawn from a stream of its own: the other values of the jobs are those of
the same spec without it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.policy.ladder import parse_class
from hai_slurm.priority.sim.trace import Trace, TraceJob


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """What to generate. ``rate`` is arrivals per second; mixes are relative weights."""

    jobs: int = 1000
    rate: float = 0.02
    duration: float = 3600.0
    sizes: Mapping[int, float] = field(default_factory=lambda: MappingProxyType(
        {1: 50.0, 2: 20.0, 4: 15.0, 8: 10.0, 16: 5.0}))
    classes: Mapping[PriorityClass, float] = field(default_factory=lambda: MappingProxyType({
        PriorityClass.VERY_HIGH: 2.0, PriorityClass.HIGH: 8.0,
        PriorityClass.ABOVE_NORMAL: 10.0, PriorityClass.NORMAL: 40.0,
        PriorityClass.BELOW_NORMAL: 15.0, PriorityClass.LOW: 25.0}))
    teams: int = 4
    node_gpus: int = 8
    no_save: float = 0.0


def _mix(text: str, key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split("/"):
        name, sep, weight = part.partition(":")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not sep or not name or value < 0:
            raise ConfigError(f"expected NAME:WEIGHT pairs separated by '/', got {part!r}",
                              key=f"synthetic.{key}", value=text)
        out[name] = value
    if not any(out.values()):
        raise ConfigError("at least one weight must be > 0", key=f"synthetic.{key}", value=text)
    return out


def parse_spec(text: str) -> SyntheticSpec:
    """A spec from ``key=value`` pairs separated by commas (keys: the fields of SyntheticSpec)."""
    spec = SyntheticSpec()
    known = {f.name for f in fields(SyntheticSpec)}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise ConfigError(f"expected KEY=VALUE with KEY one of {', '.join(sorted(known))}",
                              key="synthetic", value=item)
        try:
            if key == "sizes":
                sizes = {int(k): v for k, v in _mix(value, key).items()}
                if min(sizes) < 1:
                    raise ValueError("sizes must be >= 1 GPU")
                spec = replace(spec, sizes=MappingProxyType(sizes))
            elif key == "classes":
                spec = replace(spec, classes=MappingProxyType(
                    {parse_class(k, key="synthetic.classes"): v
                     for k, v in _mix(value, key).items()}))
            elif key in ("jobs", "teams", "node_gpus"):
                number = int(value)
                if number < 1:
                    raise ValueError("must be >= 1")
                spec = (replace(spec, jobs=number) if key == "jobs" else
                        replace(spec, teams=number) if key == "teams" else
                        replace(spec, node_gpus=number))
            elif key == "no_save":
                share = float(value)
                if not 0 <= share <= 1:
                    raise ValueError("must be between 0 and 1")
                spec = replace(spec, no_save=share)
            else:
                real = float(value)
                if not real > 0 or not math.isfinite(real):
                    raise ValueError("must be > 0")
                spec = replace(spec, rate=real) if key == "rate" else replace(spec,
                                                                              duration=real)
        except ValueError as err:
            raise ConfigError(f"bad value: {err}", key=f"synthetic.{key}", value=value) from None
    return spec


def generate(spec: SyntheticSpec, seed: int) -> Trace:
    """The trace for ``spec`` and ``seed`` (same inputs, same jobs)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible workload, not secrets
    sizes, size_w = list(spec.sizes), list(spec.sizes.values())
    classes, class_w = list(spec.classes), list(spec.classes.values())
    teams = [f"team{i}" for i in range(spec.teams)]
    t = 0.0
    jobs = []
    for i in range(spec.jobs):
        t += rng.expovariate(spec.rate)
        gpus = rng.choices(sizes, size_w)[0]
        nodes = math.ceil(gpus / spec.node_gpus) if gpus > spec.node_gpus else 0
        team = rng.choice(teams)
        duration = max(60, round(rng.expovariate(1.0 / spec.duration)))
        jobs.append(TraceJob(i + 1, int(t), duration, gpus, team,
                             rng.choices(classes, class_w)[0], nodes, team))
    return Trace(with_no_save(jobs, spec.no_save, f"{seed}/no-save"), f"synthetic(seed={seed})")


def with_no_save(jobs: Sequence[TraceJob], share: float, seed: str) -> tuple[TraceJob, ...]:
    """``jobs`` with about ``share`` of them unable to save on request, drawn from a random
    stream of ``seed`` (so the jobs' other values do not move with ``share``)."""
    if share <= 0:
        return tuple(jobs)
    rng = random.Random(seed)  # noqa: S311 - reproducible workload, not secrets
    return tuple(replace(j, saves=rng.random() >= share) for j in jobs)
