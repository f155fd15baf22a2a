"""Minimal writes: time-based scores, so one changed job means one Slurm write."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.scoring import choose_epoch, diff_priorities, time_span
from hai_slurm.priority.policy.state import PendingJob, PolicyResult
from hai_slurm.priority.policy.testing import NOW, Workload, pending_job, synthetic_cluster


@pytest.fixture(scope="module")
def cluster() -> Workload:
    """10,000 pending and 2,000 running jobs over 50 teams."""
    return synthetic_cluster(seed=7)


def cycle(w: Workload, pending: list[PendingJob], prev: PolicyResult | None,
          now: float = NOW) -> PolicyResult:
    return compute_priorities(pending, w.running, config=w.config, cluster=w.cluster,
                              events=w.events, state=prev.state if prev else None, now=now)


def test_diff_priorities_lists_new_and_changed_jobs_only() -> None:
    """Unchanged jobs and jobs gone from the queue need no write."""
    assert diff_priorities({1: 10, 2: 20, 3: 30}, {1: 10, 2: 21, 4: 40}) == {2: 21, 4: 40}


@pytest.mark.parametrize("cls", [P.HIGH, P.NORMAL, P.LOW])
def test_one_new_job_among_10000_is_one_write(cluster: Workload, cls: P) -> None:
    """A job arriving (FCFS, fair-share or round-robin class) changes no other priority."""
    first = cycle(cluster, cluster.pending, None)
    assert len(first.priorities) == 10_000
    new = pending_job(999_999, cls, team="team03", submit=NOW, gpus=2)
    second = cycle(cluster, [*cluster.pending, new], first)
    assert diff_priorities(first.priorities, second.priorities) == {
        999_999: second.priorities[999_999]}


def test_a_job_leaving_the_queue_changes_nothing_else(cluster: Workload) -> None:
    """When a pending job starts (leaves the pending list), no other job needs a write."""
    first = cycle(cluster, cluster.pending, None)
    rest = [j for j in cluster.pending if j.job_id % 97 != 0]
    assert diff_priorities(first.priorities, cycle(cluster, rest, first).priorities) == {}


def test_round_robin_tags_survive_cycles(cluster: Workload) -> None:
    """The state carries round-robin tags, so the same input gives the same priorities."""
    first = cycle(cluster, cluster.pending, None)
    again = cycle(cluster, cluster.pending, first)
    assert again.priorities == first.priorities
    assert again.state.rr_tags == first.state.rr_tags


def test_priority_changes_with_time_only_where_something_fell_due(cluster: Workload) -> None:
    """30 s later only aging promotions and compensation steps that fell due are rewritten."""
    first = cycle(cluster, cluster.pending, None)
    later = cycle(cluster, cluster.pending, first, now=NOW + 30)
    changed = diff_priorities(first.priorities, later.priorities)
    assert len(changed) < 50
    for job_id in changed:
        a, b = first.pending[job_id], later.pending[job_id]
        assert a.effective != b.effective or a.reason.boost != b.reason.boost


def test_epoch_moves_only_near_the_end_of_the_range() -> None:
    """The epoch stays put for most of the range, then jumps forward once."""
    span = time_span(41)
    epoch = choose_epoch(None, NOW, span)
    assert choose_epoch(epoch, NOW + span // 3, span) == epoch
    moved = choose_epoch(epoch, epoch + span * 3 // 4 + 1, span)
    assert moved > epoch


def test_requeue_with_restored_age_is_one_write(cluster: Workload) -> None:
    """A job that is requeued (new submit time, restarts + 1) is the only one rewritten."""
    first = cycle(cluster, cluster.pending, None)
    job = next(j for j in cluster.pending if j.requested is P.HIGH and not j.restarts)
    requeued = replace(job, submit_time=NOW - 1, first_submit_time=job.submit_time, restarts=1,
                       preemptions=1, prior_wait=NOW - job.submit_time)
    pending = [requeued if j is job else j for j in cluster.pending]
    changed = diff_priorities(first.priorities, cycle(cluster, pending, first).priorities)
    assert set(changed) == {job.job_id}


job_specs = st.lists(
    st.tuples(st.sampled_from(list(P)), st.sampled_from(["team00", "team01", "team02", "x"]),
              st.floats(0, 3 * 86400), st.integers(0, 2)),
    min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(job_specs, st.sampled_from(list(P)), st.sampled_from(["team00", "team01", "new"]),
       st.floats(0, 3 * 86400))
def test_any_new_job_is_exactly_one_write(specs: list[tuple[P, str, float, int]], cls: P,
                                          team: str, age: float) -> None:
    """Whatever the queue and whatever the newcomer (class, team, age), only it is written."""
    w = synthetic_cluster(seed=3, pending=0, running=40, nodes=8, teams=3, events=20)
    pending = [pending_job(i + 1, c, team=t, submit=NOW - a, restarts=r, preemptions=r,
                           first_submit_time=NOW - a - 600 if r else None)
               for i, (c, t, a, r) in enumerate(specs)]
    first = cycle(w, pending, None)
    new = pending_job(10_000, cls, team=team, submit=NOW - age)
    second = cycle(w, [*pending, new], first)
    assert set(diff_priorities(first.priorities, second.priorities)) == {10_000}
