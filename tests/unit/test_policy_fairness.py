"""Fairness counters: protection after N preemptions, demotion after M, window expiry."""

from __future__ import annotations

from dataclasses import replace

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy import fairness
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.settings import FairnessConfig, PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import (
    EventKind,
    FairnessEvent,
    PendingJob,
    PolicyResult,
    Resources,
    RunningJob,
)
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

HOUR = 3600.0
CFG = FairnessConfig(window=24 * HOUR, protect_after=3, protect_for=HOUR, demote_after=2,
                     demote_from=P.HIGH)
CONFIG = PolicyConfig(fairness=CFG, teams={"a": TeamQuota(gpus=8), "b": TeamQuota(gpus=8)})
CLUSTER = Resources(16, 256, 16 * 256 * 1024)


def preempted(team: str, *ages: float) -> list[FairnessEvent]:
    return [FairnessEvent(EventKind.PREEMPTED, team, "u1", NOW - a) for a in ages]


def preempting(team: str, *ages: float) -> list[FairnessEvent]:
    return [FairnessEvent(EventKind.PREEMPTING, team, "u2", NOW - a) for a in ages]


def run(pending: list[PendingJob], running: list[RunningJob], events: list[FairnessEvent],
        now: float = NOW) -> PolicyResult:
    return compute_priorities(pending, running, config=CONFIG, cluster=CLUSTER, events=events,
                              now=now)


def test_protection_needs_more_than_n_preemptions() -> None:
    """N = 3 preemptions in the window: not protected; the 4th protects for T."""
    three = preempted("a", 300, 200, 100)
    assert fairness.protected_until(fairness.index_events(three).preempted["a"], NOW, CFG) is None
    four = preempted("a", 400, 300, 200, 100)
    until = fairness.protected_until(fairness.index_events(four).preempted["a"], NOW, CFG)
    assert until == NOW - 100 + HOUR


def test_protection_expires_after_t() -> None:
    """Protection lasts T after the event that crossed the threshold, then ends."""
    events = preempted("a", 400, 300, 200, 100)
    times = fairness.index_events(events).preempted["a"]
    assert fairness.protected_until(times, NOW + HOUR - 101, CFG) is not None
    assert fairness.protected_until(times, NOW + HOUR - 100, CFG) is None


def test_events_spread_wider_than_the_window_do_not_protect() -> None:
    """Four preemptions, but never more than three inside any 24 h window."""
    events = preempted("a", 70 * HOUR, 50 * HOUR, 30 * HOUR, 10 * HOUR)
    times = fairness.index_events(events).preempted["a"]
    assert fairness.protected_until(times, NOW, CFG) is None


def test_protected_team_jobs_are_flagged_protected() -> None:
    """A team preempted too often gets its running jobs flagged ``protected`` (the planner then
    skips them: test_planner_inputs)."""
    running = [running_job(1, P.LOW, team="a", gpus=4), running_job(2, P.LOW, team="b", gpus=4)]
    result = run([], running, preempted("a", 400, 300, 200, 100))
    assert result.protected_teams == frozenset({"a"})
    assert result.running[1].protected and not result.running[2].protected


def test_new_high_jobs_of_a_team_that_preempted_too_often_are_demoted() -> None:
    """After M = 2 preemptions caused, a HIGH job submitted then counts as ABOVE_NORMAL."""
    events = preempting("a", 3 * HOUR, 2 * HOUR, HOUR)
    before = pending_job(1, P.HIGH, team="a", submit=NOW - 2.5 * HOUR)  # only 1 event then
    after = pending_job(2, P.HIGH, team="a", submit=NOW - 0.25 * HOUR)  # 3 events then
    normal = pending_job(3, P.NORMAL, team="a", submit=NOW - 0.25 * HOUR)
    other = pending_job(4, P.HIGH, team="b", submit=NOW - 0.25 * HOUR)
    result = run([before, after, normal, other], [], events)
    assert result.pending[1].effective is P.HIGH
    assert result.pending[2].effective is P.ABOVE_NORMAL and result.pending[2].reason.demoted
    assert result.pending[3].effective is P.NORMAL  # below demote_from: untouched
    assert result.pending[4].effective is P.HIGH
    assert result.demotions == (2,)
    assert result.teams["a"].demoting and not result.teams["b"].demoting


def test_exactly_m_preemptions_do_not_demote() -> None:
    """Demotion needs more than M events in the window."""
    events = preempting("a", 2 * HOUR, HOUR)
    job = pending_job(1, P.HIGH, team="a", submit=NOW - 60)
    assert run([job], [], events).pending[1].effective is P.HIGH


def test_demotion_lasts_until_the_window_clears() -> None:
    """Once the team's count in the window ending now drops to M, the demotion ends.

    (Aging is capped at ABOVE_NORMAL here, so that only the window decides.)
    """
    config = replace(CONFIG, aging=replace(CONFIG.aging, max_class=P.ABOVE_NORMAL))
    events = preempting("a", 3 * HOUR, 2 * HOUR, HOUR)
    job = pending_job(1, P.HIGH, team="a", submit=NOW - 0.5 * HOUR)

    def effective(now: float) -> P:
        return compute_priorities([job], [], config=config, cluster=CLUSTER, events=events,
                                  now=now).pending[1].effective

    assert effective(NOW + 21 * HOUR - 1) is P.ABOVE_NORMAL
    assert effective(NOW + 21 * HOUR) is P.HIGH


def test_aging_still_applies_to_a_demoted_job() -> None:
    """The guaranteed wait holds for everyone: past ABOVE_NORMAL's bound it is HIGH again."""
    events = preempting("a", 3 * HOUR, 2 * HOUR, HOUR)
    job = pending_job(1, P.HIGH, team="a", submit=NOW - 0.5 * HOUR)
    decision = run([job], [], events).pending[1]
    assert decision.reason.demoted and decision.reason.aging_steps == 1
    assert decision.effective is P.HIGH


def test_window_and_user_counters() -> None:
    """Counters count events in (now - window, now], per team and per user."""
    events = preempted("a", 25 * HOUR, 23 * HOUR) + preempting("b", 10.0)
    result = run([], [], events)
    assert result.teams["a"].preempted == 1
    assert result.teams["b"].preempting == 1
    assert result.users == {"u1": (1, 0), "u2": (0, 1)}


def test_demotion_threshold_is_configurable() -> None:
    """demote_after is M: with M = 5 three events do nothing."""
    config = replace(CONFIG, fairness=replace(CFG, demote_after=5))
    events = preempting("a", 3 * HOUR, 2 * HOUR, HOUR)
    job = pending_job(1, P.HIGH, team="a", submit=NOW - 60)
    result = compute_priorities([job], [], config=config, cluster=CLUSTER, events=events, now=NOW)
    assert result.pending[1].effective is P.HIGH


def test_demotion_is_relative_to_the_team_share() -> None:
    """With demote_excess X = 2, a team over M is demoted only if it preempted
    more than X times as often per quota GPU as the other teams together (equal quotas here)."""
    config = replace(CONFIG, fairness=replace(CFG, demote_excess=2.0))
    job = pending_job(1, P.HIGH, team="a", submit=NOW - 60)

    def effective(events: list[FairnessEvent]) -> P:
        return compute_priorities([job], [], config=config, cluster=CLUSTER, events=events,
                                  now=NOW).pending[1].effective

    a_four = preempting("a", 4 * HOUR, 3 * HOUR, 2 * HOUR, HOUR)
    # A busy cluster: b preempts as often as a; a is not a repeat offender.
    assert effective(a_four + preempting("b", 4 * HOUR, 3 * HOUR, 2 * HOUR, HOUR)) is P.HIGH
    # Exactly twice b's rate: the limit (2 x 2 = 4) is not exceeded.
    assert effective(a_four + preempting("b", 3 * HOUR, HOUR)) is P.HIGH
    # More than twice: demoted. And M still applies on its own when nobody else preempts.
    assert effective(a_four + preempting("b", HOUR)) is P.ABOVE_NORMAL
    assert effective(a_four) is P.ABOVE_NORMAL
    # X = 0: the absolute count alone, as before.
    old = replace(config, fairness=replace(CFG, demote_excess=0.0))
    busy = a_four + preempting("b", 4 * HOUR, 3 * HOUR, 2 * HOUR, HOUR)
    assert compute_priorities([job], [], config=old, cluster=CLUSTER, events=busy,
                              now=NOW).pending[1].effective is P.ABOVE_NORMAL


def test_default_demotion_needs_ten_times_the_others_rate() -> None:
    """The default demote_excess is 10: a team preempting 9x as often per quota GPU as the
    other (equal quotas; 18 events against 2, over demote_after) keeps its HIGH class, as a
    bursty team entitled to HIGH should; at 5 (the default until the victims' measured restart
    made preempting cheaper) and at 2 (the one before) it was demoted."""
    events = (preempting("a", *(h * HOUR for h in range(1, 19)))
              + preempting("b", HOUR, 2 * HOUR))
    job = pending_job(1, P.HIGH, team="a", submit=NOW - 60)
    assert FairnessConfig().demote_excess == 10.0

    def effective(excess: float) -> P:
        config = replace(CONFIG, fairness=replace(CFG, demote_excess=excess))
        return compute_priorities([job], [], config=config, cluster=CLUSTER, events=events,
                                  now=NOW).pending[1].effective

    assert effective(FairnessConfig().demote_excess) is P.HIGH
    assert effective(5.0) is P.ABOVE_NORMAL
    assert effective(2.0) is P.ABOVE_NORMAL


def test_demotion_limit_weighs_quota_shares() -> None:
    """A team with 3/4 of the quotas may preempt 3 times as often as one with 1/4."""
    cfg = replace(CFG, demote_after=0, demote_excess=1.0)
    big = fairness.index_events(preempting("a", 6, 5, 4, 3, 2, 1) + preempting("b", 7, 8))
    times = big.preempting["a"]
    assert not fairness.demoting(times, NOW, cfg, everyone=big.all_preempting, fraction=0.75)
    assert fairness.demoting(times, NOW, cfg, everyone=big.all_preempting, fraction=0.5)
    assert fairness.demote_limit(6, big.all_preempting, 0.75, NOW, cfg) == 6.0


def test_protection_does_not_cover_borrowed_jobs_by_default() -> None:
    """A protected team over its quota (8 GPUs) keeps only its jobs within quota safe: the
    borrowed one can be reclaimed, unless protect_borrowed is set."""
    running = [running_job(1, P.LOW, team="a", gpus=8, start=NOW - 2 * HOUR),
               running_job(2, P.LOW, team="a", gpus=4, start=NOW - HOUR)]
    events = preempted("a", 400, 300, 200, 100)
    result = run([], running, events)
    assert result.protected_teams == frozenset({"a"})
    assert result.running[2].borrowed and not result.running[2].protected
    assert result.running[1].protected and not result.running[1].borrowed
    config = replace(CONFIG, fairness=replace(CFG, protect_borrowed=True))
    both = compute_priorities([], running, config=config, cluster=CLUSTER, events=events, now=NOW)
    assert both.running[1].protected and both.running[2].protected


def test_a_demoted_job_does_not_also_decay() -> None:
    """Demotion is one class down: a HIGH job demoted into ABOVE_NORMAL (decay's source class)
    does not then decay to NORMAL after 30 min of running, pending (requeued) or running."""
    events = preempting("a", 3 * HOUR, 2 * HOUR, HOUR)
    requeued = pending_job(1, P.HIGH, team="a", submit=NOW - 60, run_time=2 * HOUR)
    started = running_job(2, P.HIGH, team="a", start=NOW - 2 * HOUR,
                          start_class=P.ABOVE_NORMAL)
    asked = running_job(3, P.ABOVE_NORMAL, team="b", start=NOW - 2 * HOUR,
                        start_class=P.ABOVE_NORMAL)
    result = run([requeued], [started, asked], events)
    assert result.pending[1].effective is P.ABOVE_NORMAL and result.pending[1].reason.demoted
    assert not result.pending[1].reason.decayed
    assert result.running[2].effective is P.ABOVE_NORMAL and not result.running[2].decayed
    assert result.running[3].effective is P.NORMAL and result.running[3].decayed
