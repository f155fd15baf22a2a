"""Builders for policy inputs, for tests, the benchmark and the simulator.

``pending_job(...)`` and ``running_job(...)`` fill every field with a plausible default so a test
names only what it is about; :func:`synthetic_cluster` makes a large reproducible workload.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.policy.settings import PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import (
    AUTO,
    EventKind,
    FairnessEvent,
    PendingJob,
    Requested,
    Resources,
    RunningJob,
)

#: A fixed "now" for tests (2027-01-15 08:00 UTC).
NOW = 1_800_000_000.0


def pending_job(job_id: int, requested: Requested = PriorityClass.NORMAL, *, team: str = "t1",
                user: str = "u1", submit: float = NOW - 60, gpus: int = 1,
                **fields: Any) -> PendingJob:
    """A pending job with defaults; ``fields`` sets any other PendingJob field."""
    fields.setdefault("resources", Resources(gpus, gpus * 8, gpus * 64 * 1024))
    return PendingJob(job_id=job_id, user=user, team=team, requested=requested,
                      submit_time=submit, **fields)


def running_job(job_id: int, requested: Requested = PriorityClass.NORMAL, *, team: str = "t1",
                user: str = "u1", start: float = NOW - 600, gpus: int = 1,
                **fields: Any) -> RunningJob:
    """A running job with defaults (run time = since ``start``); ``fields`` sets the rest."""
    fields.setdefault("resources", Resources(gpus, gpus * 8, gpus * 64 * 1024))
    fields.setdefault("run_time", NOW - start)
    fields.setdefault("submit_time", start - 30)
    return RunningJob(job_id=job_id, user=user, team=team, requested=requested,
                      start_time=start, **fields)


@dataclass(frozen=True)
class Workload:
    """A synthetic cluster: jobs, fairness events, configuration and capacity."""

    pending: list[PendingJob]
    running: list[RunningJob]
    events: list[FairnessEvent]
    config: PolicyConfig
    cluster: Resources


def synthetic_cluster(seed: int = 1, *, pending: int = 10_000, running: int = 2_000,
                      nodes: int = 500, gpus_per_node: int = 8, teams: int = 50,
                      events: int = 600) -> Workload:
    """Jobs of every class (some requeued, some AUTO) over ``teams`` teams, reproducibly."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    names = [f"team{i:02d}" for i in range(teams)]
    classes = list(PriorityClass)
    weights = [1, 2, 6, 10, 30, 15, 20, 16]  # EXTREME_HIGH .. LOW
    quotas = {t: TeamQuota(gpus=nodes * gpus_per_node // teams,
                           class_gpus={PriorityClass.HIGH: 16} if i % 5 == 0 else {})
              for i, t in enumerate(names)}
    cluster = Resources(nodes * gpus_per_node, nodes * 128, nodes * 1024 * 1024)
    run: list[RunningJob] = []
    for j in range(running):
        gpus = rng.choice((1, 2, 2, 4))
        start = NOW - rng.uniform(60, 3 * 86400)
        run.append(running_job(
            1 + j, rng.choices(classes, weights)[0], team=rng.choice(names),
            user=f"u{rng.randrange(400)}", start=start, gpus=gpus,
            submit_time=start - rng.uniform(0, 3600), last_checkpoint=start + 600))
    pend: list[PendingJob] = []
    for j in range(pending):
        gpus = rng.choice((1, 1, 2, 4, 8, 16))
        submit = NOW - rng.uniform(0, 2 * 86400)
        requeued = rng.random() < 0.05
        requested: Requested = AUTO if rng.random() < 0.02 else rng.choices(classes, weights)[0]
        pend.append(pending_job(
            100_000 + j, requested, team=rng.choice(names), user=f"u{rng.randrange(400)}",
            submit=submit, gpus=gpus, first_submit_time=submit - 7200 if requeued else None,
            prior_wait=3000.0 if requeued else 0.0, run_time=1200.0 if requeued else 0.0,
            restarts=1 if requeued else 0, preemptions=1 if requeued else 0))
    evs = [FairnessEvent(rng.choice(list(EventKind)), rng.choice(names),
                         f"u{rng.randrange(400)}", NOW - rng.uniform(0, 2 * 86400))
           for _ in range(events)]
    return Workload(pend, run, evs, PolicyConfig(teams=quotas), cluster)
