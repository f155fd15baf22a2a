"""Start order: class first, then the class's own rule (FCFS, fair share, round robin)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy.ladder import LADDER, RANK
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.scoring import BAND, BASE, MAX_PRIORITY, class_rank_of
from hai_slurm.priority.policy.settings import PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import PendingJob, PolicyResult, Resources, Rule, RunningJob
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

CLUSTER = Resources(64, 1024, 64 * 256 * 1024)
CONFIG = PolicyConfig(teams={"a": TeamQuota(gpus=16), "b": TeamQuota(gpus=16),
                             "c": TeamQuota(gpus=16)})


def run(pending: list[PendingJob], running: list[RunningJob] | None = None,
        config: PolicyConfig = CONFIG, now: float = NOW) -> PolicyResult:
    return compute_priorities(pending, running or [], config=config, cluster=CLUSTER, now=now)


def start_order(result: PolicyResult, jobs: list[PendingJob]) -> list[int]:
    """Job ids in Slurm's order: priority down, then submit time, then job id (its tie-break)."""
    submit = {j.job_id: j.submit_time for j in jobs}
    return sorted(result.priorities, key=lambda j: (-result.priorities[j], submit[j], j))


def test_higher_class_starts_first_even_when_submitted_later() -> None:
    """A NORMAL job submitted a day ago still goes after a HIGH job submitted just now."""
    old_normal = pending_job(1, P.NORMAL, submit=NOW - 3600)
    new_high = pending_job(2, P.HIGH, submit=NOW - 1)
    new_low = pending_job(3, P.LOW, submit=NOW - 2)
    jobs = [old_normal, new_high, new_low]
    assert start_order(run(jobs), jobs) == [2, 1, 3]


def test_fcfs_within_high_classes() -> None:
    """HIGH and above order by submit time, whatever the team."""
    jobs = [pending_job(10 + i, P.HIGH, team="abc"[i % 3], submit=NOW - 100 + i * 7)
            for i in range(6)]
    result = run(list(reversed(jobs)))
    assert start_order(result, jobs) == [j.job_id for j in jobs]
    assert {d.reason.rule for d in result.pending.values()} == {Rule.FCFS}


def test_fair_share_puts_the_team_using_less_of_its_quota_first() -> None:
    """In NORMAL, the team with the lower dominant share goes first, then FCFS inside a team."""
    running = [running_job(1, P.NORMAL, team="a", gpus=12),
               running_job(2, P.NORMAL, team="b", gpus=4)]
    pending = [pending_job(10, P.NORMAL, team="a", submit=NOW - 500),
               pending_job(11, P.NORMAL, team="b", submit=NOW - 100),
               pending_job(12, P.NORMAL, team="a", submit=NOW - 400),
               pending_job(13, P.NORMAL, team="c", submit=NOW - 50)]
    result = run(pending, running)
    # c idle (share 0), b at 4/16, a at 12/16; inside a: 10 before 12.
    assert start_order(result, pending) == [13, 11, 10, 12]
    assert result.pending[11].reason.share == 0.25
    assert result.teams["a"].share == 0.75


def test_dominant_share_counts_cpu_and_memory_too() -> None:
    """A team light on GPUs but heavy on CPUs is not treated as light."""
    config = PolicyConfig(teams={"a": TeamQuota(gpus=16, cpus=64), "b": TeamQuota(gpus=16)})
    running = [running_job(1, team="a", gpus=1, resources=Resources(1, 64, 0)),
               running_job(2, team="b", gpus=8)]
    pending = [pending_job(10, team="a", submit=NOW - 900), pending_job(11, team="b")]
    result = run(pending, running, config)
    assert result.teams["a"].share == 1.0  # 64 of 64 CPUs
    assert start_order(result, pending) == [11, 10]


def test_round_robin_interleaves_teams_in_low_classes() -> None:
    """Team a queued 5 LOW jobs before b and c queued theirs: the teams take turns."""
    a = [pending_job(100 + i, P.LOW, team="a", submit=NOW - 1000 + i) for i in range(5)]
    b = [pending_job(200 + i, P.LOW, team="b", submit=NOW - 500 + i) for i in range(2)]
    c = [pending_job(300, P.LOW, team="c", submit=NOW - 400)]
    result = run(a + b + c)
    order = start_order(result, a + b + c)
    # Rounds: (a, b, c), (a, b), then a's remaining jobs; inside a round, earlier submit first.
    assert order == [100, 200, 300, 101, 201, 102, 103, 104]
    assert {d.reason.rule for d in result.pending.values()} == {Rule.ROUND_ROBIN}


def test_round_robin_newcomer_joins_current_round() -> None:
    """A team arriving later with one job does not wait behind another team's whole backlog."""
    backlog = [pending_job(100 + i, P.BELOW_NORMAL, team="a", submit=NOW - 5000 + i)
               for i in range(50)]
    first = run(backlog)
    late = pending_job(900, P.BELOW_NORMAL, team="b", submit=NOW - 10)
    second = compute_priorities([*backlog, late], [], config=CONFIG, cluster=CLUSTER,
                                state=first.state, now=NOW)
    assert start_order(second, [*backlog, late]).index(900) == 1


def test_classes_cover_disjoint_bands() -> None:
    """Every priority lies inside its effective class's band, and bands keep ladder order."""
    jobs = [pending_job(i, cls, submit=NOW - 10 * i) for i, cls in enumerate(LADDER, start=1)]
    result = run(jobs)
    for job_id, decision in result.pending.items():
        assert class_rank_of(decision.priority) == RANK[decision.effective], job_id
    assert start_order(result, jobs) == [j.job_id for j in reversed(jobs)]


times = st.floats(min_value=NOW - 30 * 86400, max_value=NOW, allow_nan=False)


@given(st.lists(st.tuples(st.sampled_from(list(P)), times, st.sampled_from("abc"),
                          st.integers(0, 3), st.integers(0, 4)),
                min_size=2, max_size=40))
def test_no_overlap_between_classes(specs: list[tuple[P, float, str, int, int]]) -> None:
    """Whatever the submit times, teams, restarts and GPUs: a higher effective class always
    has a higher priority than any job of a lower effective class, all within Slurm's range."""
    pending = [pending_job(i + 1, cls, team=team, submit=t, gpus=gpus, restarts=restarts,
                           first_submit_time=t - 3600 * restarts if restarts else None)
               for i, (cls, t, team, restarts, gpus) in enumerate(specs)]
    running = [running_job(999, P.NORMAL, team="a", gpus=8)]
    result = run(pending, running)
    decisions = list(result.pending.values())
    for d in decisions:
        assert BASE <= d.priority <= MAX_PRIORITY < 2**31
        assert BASE + RANK[d.effective] * BAND <= d.priority < BASE + (RANK[d.effective] + 1) * BAND
    for x in decisions:
        for y in decisions:
            if RANK[x.effective] > RANK[y.effective]:
                assert x.priority > y.priority
