"""Policy inputs as JSON: for ``priority explain --snapshot``, test fixtures and the simulator.

Format (times POSIX seconds, memory MiB; omitted fields take the dataclass defaults)::

    {"now": 1800000000, "cluster": {"gpus": 16, "cpus": 256, "memory_mb": 2097152},
     "pending": [{"job_id": 7, "user": "ana", "team": "vision", "requested": "HIGH",
                  "submit_time": 1799999000, "resources": {"gpus": 8}}],
     "running": [{..., "start_time": 1799990000}],
     "events": [{"kind": "preempted", "team": "nlp", "user": "bo", "time": 1799995000}],
     "state": {"epoch": 1798000000, "rr_tags": {"7": ["LOW", 1799999001]}}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import ConfigError
from hai_slurm.priority.policy.ladder import parse_class
from hai_slurm.priority.policy.state import (
    AUTO,
    EventKind,
    FairnessEvent,
    PendingJob,
    PolicyState,
    Requested,
    Resources,
    RunningJob,
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything :func:`~hai_slurm.priority.policy.priorities.compute_priorities` takes besides
    config."""

    now: float
    cluster: Resources
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...]
    events: tuple[FairnessEvent, ...]
    state: PolicyState


def _requested(value: object, where: str) -> Requested:
    if isinstance(value, str) and value.upper() == AUTO:
        return AUTO
    return parse_class(value, key=f"{where}.requested")


def _build(cls: type[Any], raw: object, where: str, source: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError("expected an object", source=source, key=where, value=raw)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"unknown field {unknown[0]!r}; known: {', '.join(sorted(names))}",
                          source=source, key=where)
    args = dict(raw)
    try:
        if "requested" in args:
            args["requested"] = _requested(args["requested"], where)
        if "start_class" in args and args["start_class"] is not None:
            args["start_class"] = parse_class(args["start_class"], key=f"{where}.start_class")
        if "resources" in args:
            args["resources"] = _build(Resources, args["resources"], f"{where}.resources", source)
        if "source" in args:
            args["source"] = ClassOrigin(args["source"])
        if "kind" in args:
            args["kind"] = EventKind(args["kind"])
        if "nodes" in args:
            args["nodes"] = tuple(args["nodes"])
        return cls(**args)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err), source=source, key=where) from None


def parse_snapshot(text: str, *, source: str = "<string>") -> Snapshot:
    """Read a snapshot from JSON text; errors name the entry and field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"not valid JSON: {err}", source=source) from None
    if not isinstance(data, dict) or "now" not in data:
        raise ConfigError("expected an object with at least 'now'", source=source)
    state_raw = data.get("state", {})
    tags = {int(k): (parse_class(v[0], key=f"state.rr_tags.{k}"), int(v[1]))
            for k, v in state_raw.get("rr_tags", {}).items()}
    return Snapshot(
        now=float(data["now"]),
        cluster=_build(Resources, data.get("cluster", {}), "cluster", source),
        pending=tuple(_build(PendingJob, j, f"pending[{i}]", source)
                      for i, j in enumerate(data.get("pending", []))),
        running=tuple(_build(RunningJob, j, f"running[{i}]", source)
                      for i, j in enumerate(data.get("running", []))),
        events=tuple(_build(FairnessEvent, e, f"events[{i}]", source)
                     for i, e in enumerate(data.get("events", []))),
        state=PolicyState(epoch=state_raw.get("epoch"), rr_tags=tags),
    )
