"""Team quotas: usage, dominant shares (DRF), borrowed jobs, AUTO classes and victim order.

* **Dominant share.** For each resource (GPU, CPU, memory) a team's running usage divided by its
  quota of that resource; the largest of the three. CPU and memory quotas default to the team's
  GPU fraction of the cluster's CPUs and memory. A team using something it has no quota for has an
  infinite share (it sorts last among fair-share jobs).
* **Borrowed.** A team's running jobs are walked from the highest class down, oldest start first;
  each is *within quota* while the running total (and the class total, when the team has a
  per-class quota for that class) stays within quota; the rest are *borrowed*: they run on GPUs
  nobody else wanted, and they give way first (unless they would lose more than 1 /
  ``planner.borrowed_discount`` times the work of a victim within quota).
* **AUTO** resolves to the highest class, among those the team may use and has a per-class quota
  for, whose quota still has room for the job; otherwise to the default class.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.policy.ladder import LADDER, RANK
from hai_slurm.priority.policy.settings import PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import Resources, RunningJob

_ZERO = Resources()


def team_usage(jobs: Iterable[RunningJob]) -> dict[str, Resources]:
    """Resources each team's running jobs hold."""
    gpus: defaultdict[str, int] = defaultdict(int)
    cpus: defaultdict[str, int] = defaultdict(int)
    mem: defaultdict[str, int] = defaultdict(int)
    for job in jobs:
        res = job.resources
        gpus[job.team] += res.gpus
        cpus[job.team] += res.cpus
        mem[job.team] += res.memory_mb
    return {t: Resources(gpus[t], cpus[t], mem[t]) for t in gpus}


def dominant_share(usage: Resources, quota: TeamQuota, cluster: Resources) -> float:
    """The largest of usage/quota over GPUs, CPUs and memory (0 for an idle team)."""
    fraction = quota.gpus / cluster.gpus if cluster.gpus else 0.0
    cpu_quota = quota.cpus if quota.cpus is not None else fraction * cluster.cpus
    mem_quota = quota.memory_mb if quota.memory_mb is not None else fraction * cluster.memory_mb
    share = 0.0
    for used, allowed in ((usage.gpus, quota.gpus), (usage.cpus, cpu_quota),
                          (usage.memory_mb, mem_quota)):
        if used <= 0:
            continue
        if allowed <= 0:
            return math.inf
        share = max(share, used / allowed)
    return share


def borrowed_jobs(jobs: Sequence[tuple[RunningJob, PriorityClass]], quota: TeamQuota) -> set[int]:
    """Ids of one team's running jobs that run beyond its quota (see the module doc)."""
    order = sorted(jobs, key=lambda jc: (-RANK[jc[1]], jc[0].start_time, jc[0].job_id))
    total = 0
    per_class: defaultdict[PriorityClass, int] = defaultdict(int)
    out: set[int] = set()
    for job, cls in order:
        gpus = job.resources.gpus
        if gpus == 0:
            continue
        limit = quota.class_gpus.get(cls)
        if total + gpus <= quota.gpus and (limit is None or per_class[cls] + gpus <= limit):
            total += gpus
            per_class[cls] += gpus
        else:
            out.add(job.job_id)
    return out


def resolve_auto(team: str, gpus: int, class_usage: Mapping[PriorityClass, int],
                 config: PolicyConfig) -> PriorityClass:
    """The class ``#HAI --priority=AUTO`` stands for, given the team's GPUs in use per class."""
    quota = config.quota(team)
    for cls in reversed(LADDER):
        limit = quota.class_gpus.get(cls)
        if limit is None or cls not in quota.allowed_classes:
            continue
        if class_usage.get(cls, 0) + gpus <= limit:
            return cls
    return config.default_class
