"""Compensation for requeued jobs: age restored, a bounded boost (credits: test_executor_*)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy.aging import compensation_boost
from hai_slurm.priority.policy.ladder import RANK
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.scoring import BAND, BASE
from hai_slurm.priority.policy.settings import CompensationConfig, PolicyConfig
from hai_slurm.priority.policy.state import PendingJob, PolicyResult, Resources
from hai_slurm.priority.policy.testing import NOW, pending_job

CLUSTER = Resources(16, 256, 16 * 256 * 1024)
CFG = CompensationConfig(per_restart=600, per_wait=0.5, step=600, cap=7200)
CONFIG = replace(PolicyConfig(), compensation=CFG)


def run(jobs: list[PendingJob]) -> PolicyResult:
    return compute_priorities(jobs, [], config=CONFIG, cluster=CLUSTER, now=NOW)


def test_requeued_job_regains_its_original_age() -> None:
    """Slurm reset the submit time at requeue; the job still goes before later submissions."""
    requeued = pending_job(1, P.HIGH, submit=NOW - 10, first_submit_time=NOW - 5000,
                           restarts=1, preemptions=1, prior_wait=1000)
    newer = pending_job(2, P.HIGH, submit=NOW - 3000)
    result = run([requeued, newer])
    assert result.priorities[1] > result.priorities[2]
    assert result.pending[1].reason.age_restored == 4990


def test_boost_grows_with_restarts_and_waiting_in_whole_steps() -> None:
    """restarts * per_restart + per_wait * waited, rounded down to whole steps, capped."""
    assert compensation_boost(0, 10_000, CFG) == 0
    assert compensation_boost(1, 0, CFG) == 600
    assert compensation_boost(1, 1199, CFG) == 600      # 600 + 599.5 -> one step
    assert compensation_boost(1, 1200, CFG) == 1200     # 600 + 600 -> two steps
    assert compensation_boost(3, 0, CFG) == 1800
    assert compensation_boost(50, 10**6, CFG) == 7200   # capped


def test_boost_orders_requeued_job_before_equally_old_job() -> None:
    """Two jobs with the same original submit time: the requeued one goes first."""
    requeued = pending_job(1, P.HIGH, submit=NOW - 10, first_submit_time=NOW - 5000, restarts=2,
                           preemptions=2)
    plain = pending_job(2, P.HIGH, submit=NOW - 5000)
    result = run([requeued, plain])
    assert result.pending[1].reason.boost == 1200
    assert result.priorities[1] > result.priorities[2]


def test_requeues_the_daemon_did_not_cause_earn_no_boost() -> None:
    """`scontrol requeue` of one's own job, 12 times: Slurm counts them, the boost stays 0 (it
    would be the 2 h cap if restarts counted), and only a preemption's requeue earns one."""
    self_requeued = pending_job(1, P.HIGH, submit=NOW - 10, restarts=12)
    plain = pending_job(2, P.HIGH, submit=NOW - 5000)
    result = run([self_requeued, plain])
    assert result.pending[1].reason.boost == 0
    assert result.priorities[1] < result.priorities[2]
    once = replace(self_requeued, restarts=13, preemptions=1)
    assert run([once]).pending[1].reason.boost == CFG.per_restart


@given(st.integers(0, 100), st.floats(0, 10 * 86400), st.sampled_from(list(P)))
def test_boost_never_crosses_a_class_band(restarts: int, waited: float, cls: P) -> None:
    """However large the boost, the job stays in its effective class's band."""
    job = pending_job(1, cls, submit=NOW - waited, first_submit_time=NOW - waited - 60,
                      restarts=restarts, preemptions=restarts)
    decision = run([job]).pending[1]
    low = BASE + RANK[decision.effective] * BAND
    assert low <= decision.priority < low + BAND
    assert decision.reason.boost <= CFG.cap
