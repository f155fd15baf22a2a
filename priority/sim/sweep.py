"""``--sweep``: a grid over settings, and the Pareto front of its results.

Each ``PARAM=a,b,c`` adds one axis; every combination is run. The objectives, all minimised:
p95 queue delay of the top classes (HIGH and above), GPU-hours lost, and 1 - Jain's index.
A point is on the front when no other point is at least as good on all three and better on one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hai_slurm.errors import ConfigError

Objectives = tuple[float, float, float]


def parse_axes(specs: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``["planner.min_run_time=0,600", ...]`` -> ``[("planner.min_run_time", ("0", "600"))]``."""
    axes: list[tuple[str, tuple[str, ...]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not key.strip() or not vals:
            raise ConfigError("expected PARAM=a,b,c (e.g. planner.benefit_threshold=0.5,1,2)",
                              key="--sweep", value=spec)
        if any(k == key.strip() for k, _ in axes):
            raise ConfigError("the same parameter is swept twice", key="--sweep", value=spec)
        axes.append((key.strip(), vals))
    return axes


def grid(axes: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[tuple[str, str], ...]]:
    """Every combination, as ((param, value), ...) in axis order."""
    return [tuple(zip([k for k, _ in axes], combo, strict=True))
            for combo in itertools.product(*(v for _, v in axes))]


def objectives(result: dict[str, Any]) -> Objectives:
    """(top-class p95 delay s, GPU-hours lost, 1 - Jain) of one run."""
    t = result["totals"]
    return (float(t["top_classes_queue_delay_s"]["p95"]), float(t["gpu_hours_lost"]),
            round(1.0 - float(t["jain_index"]), 6))


def pareto(points: Sequence[Objectives]) -> list[bool]:
    """For each point, whether it is on the Pareto front (minimising every objective)."""
    def dominated(i: int) -> bool:
        a = points[i]
        return any(all(x <= y for x, y in zip(b, a, strict=True)) and b != a
                   for j, b in enumerate(points) if j != i)
    return [not dominated(i) for i in range(len(points))]


def front_table(rows: Sequence[dict[str, Any]]) -> str:
    """The sweep's rows by policy, each policy's front first, as text (``pareto``: on the front
    of the rows of its own policy)."""
    width = max((len(r["policy"]) for r in rows), default=6)
    lines = [f"{'policy':<{width}}  {'front':<6}{'top p95 delay':>14}{'lost GPU-h':>12}"
             f"{'Jain':>8}  settings"]
    for row in sorted(rows, key=lambda r: (r["policy"], not r["pareto"], r["objectives"])):
        o = row["objectives"]
        setting = " ".join(f"{k}={v}" for k, v in row["params"].items())
        lines.append(f"{row['policy']:<{width}}  {'*' if row['pareto'] else '':<6}"
                     f"{o[0]:>13.0f}s{o[1]:>12.1f}{1 - o[2]:>8.4f}  {setting}")
    return "\n".join(lines)
