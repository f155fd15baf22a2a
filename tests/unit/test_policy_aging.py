"""Aging (promotion past the class bound, step growing with queue depth) and decay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy.aging import age, aging_step
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.settings import AgingConfig, DecayConfig, PolicyConfig
from hai_slurm.priority.policy.state import PendingJob, PolicyResult, Resources, RunningJob
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

CLUSTER = Resources(64, 1024, 64 * 256 * 1024)
CONFIG = PolicyConfig()
LOW_BOUND = CONFIG.classes[P.LOW].max_wait            # 24 h by default
BN_BOUND = CONFIG.classes[P.BELOW_NORMAL].max_wait    # 8 h by default


def run(pending: list[PendingJob], running: list[RunningJob] | None = None,
        config: PolicyConfig = CONFIG, now: float = NOW) -> PolicyResult:
    return compute_priorities(pending, running or [], config=config, cluster=CLUSTER, now=now)


def test_low_job_is_promoted_exactly_at_its_bound() -> None:
    """One second before the bound: LOW; at the bound: BELOW_NORMAL, above every LOW job."""
    before = pending_job(1, P.LOW, submit=NOW - LOW_BOUND + 1)
    at = pending_job(2, P.LOW, submit=NOW - LOW_BOUND)
    fresh_bn = pending_job(3, P.BELOW_NORMAL, submit=NOW - 5)
    result = run([before, at, fresh_bn])
    assert result.pending[1].effective is P.LOW
    assert result.pending[1].reason.next_promotion_in == pytest.approx(1.0)
    assert result.pending[2].effective is P.BELOW_NORMAL
    assert result.pending[2].reason.aging_steps == 1
    assert result.promotions == (2,)
    assert result.priorities[2] > result.priorities[1]
    # Aged into BELOW_NORMAL it competes there (round robin joins the current round).
    assert result.priorities[2] >= result.priorities[3]


def test_waiting_on_promotes_again_after_the_next_bound() -> None:
    """Past LOW's bound plus BELOW_NORMAL's bound, a LOW job is two classes up."""
    job = pending_job(1, P.LOW, submit=NOW - LOW_BOUND - BN_BOUND - 1)
    result = run([job])
    assert result.pending[1].effective is P.UNDER_NORMAL
    assert result.pending[1].reason.aging_steps == 2


def test_aging_stops_at_the_ceiling() -> None:
    """However long it waits, aging never lifts a job above aging.max_class."""
    job = pending_job(1, P.LOW, submit=NOW - 365 * 86400)
    assert run([job]).pending[1].effective is P.HIGH
    config = replace(CONFIG, aging=AgingConfig(max_class=P.NORMAL))
    assert run([job], config=config).pending[1].effective is P.NORMAL
    high = pending_job(2, P.HIGH, submit=NOW - 365 * 86400)
    decision = run([high]).pending[2]
    assert decision.effective is P.HIGH and decision.reason.next_promotion_in is None


def test_wait_counts_from_eligibility_and_across_requeues() -> None:
    """Time before the job became eligible does not count; time waited before a requeue does."""
    not_yet = pending_job(1, P.LOW, submit=NOW - LOW_BOUND - 10, eligible_time=NOW - 100)
    requeued = pending_job(2, P.LOW, submit=NOW - 100, prior_wait=LOW_BOUND - 50,
                           first_submit_time=NOW - 2 * LOW_BOUND, restarts=1)
    result = run([not_yet, requeued])
    assert result.pending[1].effective is P.LOW
    assert result.pending[2].effective is P.BELOW_NORMAL


@pytest.mark.parametrize(("depth", "step"), [(0, 1), (999, 1), (1000, 2), (5000, 2)])
def test_aging_step_formula(depth: int, step: int) -> None:
    """step = min(max_step, 1 + depth // depth_per_step)."""
    assert aging_step(depth, AgingConfig(depth_per_step=1000, max_step=2)) == step


def test_deep_queue_promotes_further() -> None:
    """Past the bound, a job in a queue deeper than depth_per_step jumps two classes."""
    config = replace(CONFIG, aging=AgingConfig(depth_per_step=10, max_step=3))
    overdue = pending_job(1, P.LOW, submit=NOW - LOW_BOUND - 1)
    shallow = run([overdue], config=config)
    assert shallow.pending[1].effective is P.BELOW_NORMAL
    crowd = [pending_job(100 + i, P.LOW, team=f"t{i % 4}") for i in range(10)]
    deep = run([overdue, *crowd], config=config)
    assert deep.pending[1].effective is P.UNDER_NORMAL
    assert deep.pending[1].reason.depth == 11
    assert deep.pending[1].reason.aging_steps == 2


def test_age_reports_time_to_next_promotion() -> None:
    """The next promotion falls when the wait reaches the sum of the bounds passed."""
    aged = age(P.LOW, LOW_BOUND + 60, CONFIG.classes, {}, CONFIG.aging)
    assert aged.effective is P.BELOW_NORMAL
    assert aged.next_in == pytest.approx(BN_BOUND - 60)


def test_above_normal_running_job_decays_after_30_minutes() -> None:
    """A running ABOVE_NORMAL job counts as NORMAL from 30 minutes of running on."""
    young = running_job(1, P.ABOVE_NORMAL, start=NOW - 1799)
    old = running_job(2, P.ABOVE_NORMAL, start=NOW - 1800)
    result = run([], [young, old])
    assert result.running[1].effective is P.ABOVE_NORMAL and not result.running[1].decayed
    assert result.running[2].effective is P.NORMAL and result.running[2].decayed
    assert result.decays == (2,)


def test_decay_counts_running_time_before_a_requeue() -> None:
    """A requeued ABOVE_NORMAL job that already ran 30 minutes waits as NORMAL."""
    job = pending_job(1, P.ABOVE_NORMAL, run_time=1800.0, restarts=1)
    fresh = pending_job(2, P.ABOVE_NORMAL, run_time=600.0, restarts=1)
    result = run([job, fresh])
    assert result.pending[1].effective is P.NORMAL and result.pending[1].reason.decayed
    assert result.pending[2].effective is P.ABOVE_NORMAL


def test_decay_time_is_configurable_and_can_be_off() -> None:
    """decay.after shortens the 30 minutes (as the testbed test does); 0 turns decay off."""
    short = replace(CONFIG, decay=DecayConfig(after=20.0))
    job = running_job(1, P.ABOVE_NORMAL, start=NOW - 25)
    assert run([], [job], short).running[1].effective is P.NORMAL
    off = replace(CONFIG, decay=DecayConfig(after=0.0))
    long_runner = running_job(2, P.ABOVE_NORMAL, start=NOW - 86400)
    assert run([], [long_runner], off).running[2].effective is P.ABOVE_NORMAL


def test_running_job_keeps_the_class_it_started_with() -> None:
    """A LOW job that aged to NORMAL and started keeps NORMAL while it runs."""
    job = running_job(1, P.LOW, start_class=P.NORMAL)
    assert run([], [job]).running[1].effective is P.NORMAL
