"""Quotas: borrowed detection, per-class quotas, dominant shares and AUTO."""

from __future__ import annotations

import math

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.quota import borrowed_jobs, dominant_share
from hai_slurm.priority.policy.settings import PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import AUTO, PendingJob, PolicyResult, Resources, RunningJob
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

CLUSTER = Resources(32, 512, 32 * 256 * 1024)
CONFIG = PolicyConfig(teams={
    "a": TeamQuota(gpus=8),
    "b": TeamQuota(gpus=16, class_gpus={P.HIGH: 4, P.ABOVE_NORMAL: 8}),
})


def run(running: list[RunningJob], pending: list[PendingJob] | None = None) -> PolicyResult:
    return compute_priorities(pending or [], running, config=CONFIG, cluster=CLUSTER, now=NOW)


def test_jobs_beyond_the_quota_are_borrowed_youngest_lowest_first() -> None:
    """Team a (quota 8) runs 12 GPUs: the lowest-class, latest-started 4 GPUs are borrowed."""
    running = [running_job(1, P.NORMAL, team="a", gpus=4, start=NOW - 3000),
               running_job(2, P.HIGH, team="a", gpus=4, start=NOW - 100),
               running_job(3, P.NORMAL, team="a", gpus=4, start=NOW - 2000)]
    result = run(running)
    assert {j for j, d in result.running.items() if d.borrowed} == {3}
    assert result.teams["a"].over_quota and result.teams["a"].usage.gpus == 12


def test_team_within_quota_borrows_nothing() -> None:
    """At exactly its quota a team has no borrowed jobs."""
    running = [running_job(1, team="a", gpus=8)]
    assert not run(running).running[1].borrowed


def test_unknown_team_has_the_default_quota_of_zero() -> None:
    """A team missing from the configuration gets team_defaults (0 GPUs): all borrowed."""
    assert run([running_job(1, team="stranger", gpus=1)]).running[1].borrowed


def test_per_class_quota_marks_excess_of_that_class_borrowed() -> None:
    """Team b may run 4 HIGH GPUs within quota; a second HIGH job of 4 is borrowed."""
    running = [running_job(1, P.HIGH, team="b", gpus=4, start=NOW - 500),
               running_job(2, P.HIGH, team="b", gpus=4, start=NOW - 100),
               running_job(3, P.NORMAL, team="b", gpus=4)]
    result = run(running)
    assert [j for j, d in result.running.items() if d.borrowed] == [2]


def test_dominant_share_defaults_cpu_memory_quota_to_gpu_fraction() -> None:
    """Quota 8 of 32 GPUs means a quarter of the CPUs: 64 of 128 CPUs is a share of 0.5."""
    share = dominant_share(Resources(2, 64, 0), TeamQuota(gpus=8), Resources(32, 512, 0))
    assert share == 0.5


def test_dominant_share_without_quota_is_infinite() -> None:
    """Using GPUs with a quota of 0 sorts the team last; using nothing is 0."""
    assert math.isinf(dominant_share(Resources(1, 1, 1), TeamQuota(gpus=0), CLUSTER))
    assert dominant_share(Resources(), TeamQuota(gpus=0), CLUSTER) == 0.0


def test_auto_takes_the_highest_class_with_room_in_its_quota() -> None:
    """b has HIGH 4 (used 4) and ABOVE_NORMAL 8 (used 0): AUTO gives ABOVE_NORMAL."""
    running = [running_job(1, P.HIGH, team="b", gpus=4)]
    auto_small = pending_job(10, AUTO, team="b", gpus=2)
    auto_huge = pending_job(11, AUTO, team="b", gpus=16)
    result = run(running, [auto_small, auto_huge])
    assert result.pending[10].effective is P.ABOVE_NORMAL
    assert result.pending[10].reason.auto_class is P.ABOVE_NORMAL
    assert result.pending[11].effective is CONFIG.default_class  # no class has room


def test_borrowed_jobs_ignore_zero_gpu_jobs() -> None:
    """CPU-only jobs never count as borrowed GPUs."""
    jobs = [(running_job(1, team="a", gpus=0, resources=Resources(0, 4, 0)), P.NORMAL)]
    assert borrowed_jobs(jobs, TeamQuota(gpus=0)) == set()
