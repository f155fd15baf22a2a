"""compute_priorities with a PolicyMemo gives what it gives without one: the running jobs'
decisions are reused only while nothing they depend on changed (the very same jobs, config and
protected teams, no decay threshold near, no demotion that moves with ``now``)."""

from __future__ import annotations

import random
from dataclasses import replace
from types import MappingProxyType

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.policy import fairness
from hai_slurm.priority.policy.priorities import PolicyMemo, compute_priorities
from hai_slurm.priority.policy.settings import (
    CompensationConfig,
    FairnessConfig,
    PolicyConfig,
    TeamQuota,
)
from hai_slurm.priority.policy.state import (
    AUTO,
    EventKind,
    FairnessEvent,
    PendingJob,
    PolicyResult,
    PolicyState,
    Resources,
    RunningJob,
)
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

CLUSTER = Resources(64, 64 * 16, 64 * 1024 * 1024)
CONFIG = PolicyConfig(
    teams={t: TeamQuota(gpus=4) for t in ("a", "b", "c", "t1", "t2")},
    fairness=FairnessConfig(protect_after=1, demote_after=1, protect_excess=0, demote_excess=0))


def _both(memo: PolicyMemo, running: list[RunningJob], now: float,
          events: tuple[FairnessEvent, ...] = (), config: PolicyConfig = CONFIG,
          pending: tuple[PendingJob, ...] = ()) -> PolicyResult:
    """The result with the memo, checked equal to the one without."""
    got = compute_priorities(pending, running, config=config, cluster=CLUSTER, events=events,
                             now=now, memo=memo)
    fresh = compute_priorities(pending, running, config=config, cluster=CLUSTER,
                               events=events, now=now)
    assert got == fresh
    return got


def test_kept_decisions_are_reused_only_for_the_same_jobs_and_config() -> None:
    running = [running_job(1, P.NORMAL, start_class=P.NORMAL),
               running_job(2, P.LOW, team="t2", start_class=P.LOW)]
    memo = PolicyMemo()
    _both(memo, running, NOW)
    kept = memo.decisions
    assert kept is not None
    _both(memo, running, NOW + 10)
    assert memo.decisions is kept   # reused, not decided again
    _both(memo, list(running), NOW + 20)   # the same objects in a new list: reused
    assert memo.decisions is kept
    other = [running[0], running_job(2, P.LOW, team="t2", start_class=P.LOW)]  # equal, new
    _both(memo, other, NOW + 30)
    assert memo.decisions is not kept
    kept = memo.decisions
    _both(memo, other, NOW + 40, config=PolicyConfig())   # another config: decided again
    assert memo.decisions is not kept


def test_decay_is_never_missed_by_a_kept_decision() -> None:
    """A job of the decay's source class decays in the first pass past ``decay.after``, with
    the same job object in every pass (its run time moves with ``now``), and a job that started
    a stretch later too."""
    after = CONFIG.decay.after
    src = CONFIG.decay.source
    job = running_job(1, src, start_class=src, run_time=100.0, running_since=NOW)
    late = running_job(2, src, team="t2", start_class=src, run_time=0.0,
                       running_since=NOW + 600)
    memo = PolicyMemo()
    times = [NOW + k * 7.0 for k in range(0, int((after + 700) / 7))]
    times += [NOW + after - 100.0, NOW + after - 100.5, NOW + after - 99.9]
    for now in sorted(times):
        res = _both(memo, [job, late], now)
        assert res.running[1].decayed is (job.run_time_at(now) >= after)
        assert res.running[2].decayed is (late.run_time_at(now) >= after)
        assert (1 in res.decays) is res.running[1].decayed


def test_protection_and_demotion_changes_are_seen() -> None:
    """A team that becomes protected (preempted in the window) or stops being so, and a team
    with a job without a start class that becomes demoting (it preempted others), get fresh
    decisions."""
    running = [running_job(1, P.NORMAL, team="a", start_class=P.NORMAL),
               running_job(2, P.HIGH, team="b", submit_time=NOW - 100)]  # no start class
    memo = PolicyMemo()
    preempted = tuple(FairnessEvent(EventKind.PREEMPTED, "a", "u1", NOW - 60 * k)
                      for k in (1, 2))
    preempting = tuple(FairnessEvent(EventKind.PREEMPTING, "b", "u1", NOW - 300 - 60 * k)
                       for k in (1, 2, 3))
    assert not _both(memo, running, NOW).running[1].protected
    assert _both(memo, running, NOW + 1, preempted).running[1].protected
    assert not _both(memo, running, NOW + 2).running[1].protected
    demoted = _both(memo, running, NOW + 3, preempting)
    assert memo.decisions is None or not demoted.teams["b"].demoting
    _both(memo, running, NOW + 4, preempting)
    _both(memo, running, NOW + 5)


def test_random_passes_with_and_without_the_memo_agree() -> None:
    """Passes over a changing set of running jobs (some start, end, requeue), events and
    times: with the memo, every result equals the one computed afresh."""
    rng = random.Random(7)
    classes = [P.HIGH, P.ABOVE_NORMAL, P.NORMAL, P.LOW, None]
    jobs: dict[int, RunningJob] = {}
    events: list[FairnessEvent] = []
    memo = PolicyMemo()
    now = NOW
    next_id = 1
    reused = 0
    for _ in range(400):
        now += rng.choice([0.0, 1.0, 5.0, 30.0, 400.0])
        roll = rng.random()
        if roll < 0.15 or not jobs:
            cls = rng.choice(classes)
            jobs[next_id] = running_job(
                next_id, cls or P.ABOVE_NORMAL, team=rng.choice("abc"), start_class=cls,
                run_time=rng.choice([0.0, 1000.0, 1790.0]), running_since=now,
                submit_time=now - rng.choice([10.0, 5000.0]))
            next_id += 1
        elif roll < 0.25:
            del jobs[rng.choice(sorted(jobs))]
        elif roll < 0.32:
            kind = rng.choice([EventKind.PREEMPTED, EventKind.PREEMPTING])
            events.append(FairnessEvent(kind, rng.choice("abc"), "u1", now))
        window = tuple(e for e in events if e.time >= now - CONFIG.fairness.window)
        before = memo.decisions
        pending = (pending_job(9999, P.HIGH, team="c", submit=now - 30),)
        _both(memo, list(jobs.values()), now, window, pending=pending)
        reused += before is not None and memo.decisions is before
    assert reused > 50   # the memo was used, not only filled


def test_kept_event_index_follows_the_events() -> None:
    """The memo's event index is the kept one only for equal events; other events give their
    own index, equal to index_events'."""
    memo = PolicyMemo()
    one = (FairnessEvent(EventKind.PREEMPTED, "a", "u1", NOW - 60),)
    two = (*one, FairnessEvent(EventKind.PREEMPTING, "b", "u2", NOW - 30))
    first = memo.index_of(one)
    assert memo.index_of(list(one)) is first   # equal events, another container
    second = memo.index_of(two)
    assert second == fairness.index_events(two) and second != first
    assert memo.index_of(one) == first


def test_kept_protecting_events_follow_times_config_others_and_quotas() -> None:
    """The memo's protecting events of a team are the kept ones only for the very same times,
    config, everyone's times and quota fraction; each change gives what computing afresh gives
    (protection on or off)."""
    running = [running_job(1, P.NORMAL, team="a", start_class=P.NORMAL),
               running_job(2, P.NORMAL, team="b", start_class=P.NORMAL)]
    relative = replace(CONFIG, fairness=replace(CONFIG.fairness, protect_excess=2.0))

    def hit(team: str, count: int) -> tuple[FairnessEvent, ...]:
        return tuple(FairnessEvent(EventKind.PREEMPTED, team, "u1", NOW - 60 * (k + 1))
                     for k in range(count))

    def protected(memo: PolicyMemo, now: float, events: tuple[FairnessEvent, ...],
                  config: PolicyConfig) -> bool:
        return "a" in _both(memo, running, now, events, config).protected_teams

    memo = PolicyMemo()
    assert not protected(memo, NOW, hit("a", 1), CONFIG)          # 1: not over N = 1
    assert protected(memo, NOW + 1, hit("a", 2), CONFIG)          # other times: over it
    stricter = replace(CONFIG, fairness=replace(CONFIG.fairness, protect_after=2))
    assert not protected(memo, NOW + 2, hit("a", 2), stricter)    # another config
    assert protected(memo, NOW + 3, hit("a", 3), relative)        # b has none: a is over
    assert not protected(memo, NOW + 4, hit("a", 3) + hit("b", 12), relative)  # b more often
    both = hit("a", 3) + hit("b", 3)
    assert protected(memo, NOW + 5, both, relative)               # a over 2 x b's per quota
    teams = dict(relative.teams)
    teams["a"] = TeamQuota(gpus=40)                               # a's fraction of quotas up
    assert not protected(memo, NOW + 6, both, replace(relative, teams=teams))


def test_kept_protecting_events_are_asked_again_for_other_values() -> None:
    """PolicyMemo.protecting_events, asked directly: any one of its values changed (the
    others the very same objects) gives fairness.protecting_events' answer."""
    cfg = replace(CONFIG.fairness, protect_excess=2.0)
    times = (NOW - 180, NOW - 120, NOW - 60)
    few = (*times, NOW - 100)
    many = tuple(sorted((*times, *(NOW - 10 * k for k in range(1, 30)))))
    memo = PolicyMemo()

    def check(t: tuple[float, ...], c: FairnessConfig, everyone: tuple[float, ...],
              fraction: float) -> tuple[float, ...]:
        got = memo.protecting_events("a", t, c, everyone, fraction)
        assert got == fairness.protecting_events(t, c, everyone, fraction)
        return got

    first = check(times, cfg, few, 0.2)
    assert first and check(times, cfg, few, 0.2) is first
    assert check(times, cfg, many, 0.2) != first                     # others preempted more
    assert check(times, cfg, few, 0.2) == first
    assert check(times, cfg, few, 0.9) != first                      # a larger quota part
    assert check(times, cfg, few, 0.2) == first
    assert check(times, replace(cfg, protect_after=5), few, 0.2) != first   # another config
    assert check(times, cfg, few, 0.2) == first
    assert check(times[:1], cfg, few, 0.2) != first                  # other times


def test_kept_pending_decisions_equal_fresh_ones_in_random_passes() -> None:
    """Pending jobs of every rule (FCFS, fair share, round robin with and without a tag in
    the state), AUTO jobs whose team's usage moves, preempted jobs whose boost grows, delayed
    jobs, jobs replaced by a changed value, teams that start and stop demoting, waits crossing
    their class's bound (aging), queue depths and shares that move, the state fed back (a
    cycle), kept (a look) or lost, another config and a new epoch now and then: with the memo
    every result equals the one computed afresh, and kept rows were used."""
    rng = random.Random(11)
    fair = replace(CONFIG.fairness, window=900.0)
    comp = CompensationConfig(step=10.0)
    quota = TeamQuota(gpus=4, class_gpus={P.HIGH: 2, P.NORMAL: 4})   # AUTO: HIGH while it can
    teams = MappingProxyType({"a": quota, "b": quota})

    def config_with(scale: float) -> PolicyConfig:
        return replace(CONFIG, fairness=fair, compensation=comp, teams=teams,
                       classes=MappingProxyType(
            {c: replace(p, max_wait=scale * (1 + i % 4)) for i, (c, p) in enumerate(
                CONFIG.classes.items())}))

    configs = [config_with(120.0), config_with(150.0)]
    config = configs[0]
    classes: list[P | str] = [P.HIGH, P.VERY_HIGH, P.ABOVE_NORMAL, P.NORMAL, P.BELOW_NORMAL,
                              P.LOW, P.LOW, P.BELOW_NORMAL, AUTO, AUTO]
    pending: dict[int, PendingJob] = {}
    running: dict[int, RunningJob] = {}
    events: list[FairnessEvent] = []
    memo = PolicyMemo()
    state = PolicyState()
    now = NOW
    next_id = 1
    reused = 0
    for step in range(1500):
        now += rng.choice([0.0, 1.0, 2.0, 5.0, 15.0, 60.0])
        roll = rng.random()
        if roll < 0.15 or not pending:
            preempted = rng.random() < 0.3
            pending[next_id] = pending_job(
                next_id, rng.choice(classes), team=rng.choice("ab"), submit=now - rng.choice(
                    [0.0, 10.0, 100.0]), preemptions=1 if preempted else 0,
                first_submit_time=now - 900.0 if preempted else None,
                eligible_time=now + 20.0 if rng.random() < 0.2 else None)
            next_id += 1
        elif roll < 0.22:
            job = pending.pop(rng.choice(sorted(pending)))
            cls = rng.choice([P.HIGH, P.NORMAL])
            running[job.job_id] = running_job(job.job_id, cls, team=job.team, start_class=cls,
                                              gpus=rng.choice([1, 2]))
        elif roll < 0.3 and running:
            del running[rng.choice(sorted(running))]
        elif roll < 0.33:
            events.append(FairnessEvent(EventKind.PREEMPTING, rng.choice("ab"), "u1", now))
        elif roll < 0.45:
            job_id = rng.choice(sorted(pending))
            pending[job_id] = replace(pending[job_id],
                                      submit_time=pending[job_id].submit_time - 30.0)
        elif roll < 0.47:
            config = rng.choice(configs)
        elif roll < 0.48:
            now += 4e6   # past a quarter of the priority range: a new epoch
        elif roll < 0.5:
            state = replace(state, rr_tags={})   # tags lost: round-robin jobs tagged anew
        window = tuple(e for e in events if e.time >= now - config.fairness.window)
        jobs = tuple(pending.values())
        before = memo.rows
        got = compute_priorities(jobs, list(running.values()), config=config, cluster=CLUSTER,
                                 events=window, state=state, now=now, memo=memo)
        fresh = compute_priorities(jobs, list(running.values()), config=config,
                                   cluster=CLUSTER, events=window, state=state, now=now)
        assert got == fresh, step
        reused += sum(1 for j, k in memo.rows.items() if before.get(j) is k)   # kept rows
        if rng.random() < 0.5:
            state = got.state
    assert reused > 1000


def test_kept_pending_decision_follows_its_class_at_the_same_depth() -> None:
    """An AUTO job alone in the queue (depth 1 in whichever class) whose team's usage moves
    it from HIGH to NORMAL and back gets the decision of its class every pass."""
    quota = TeamQuota(gpus=4, class_gpus={P.HIGH: 2, P.NORMAL: 4})
    config = replace(CONFIG, teams=MappingProxyType({"a": quota}))
    job = pending_job(1, AUTO, team="a", submit=NOW - 10)
    high = [running_job(2, P.HIGH, team="a", start_class=P.HIGH, gpus=2)]
    state = PolicyState(epoch=int(NOW) - 100)   # the same epoch every pass
    memo = PolicyMemo()
    kept = 0
    for k, running in enumerate(([], [], high, high, [], high)):
        before = memo.rows.get(1)
        got = compute_priorities((job,), running, config=config, cluster=CLUSTER, state=state,
                                 now=NOW + k, memo=memo)
        assert got == compute_priorities((job,), running, config=config, cluster=CLUSTER,
                                         state=state, now=NOW + k)
        assert got.pending[1].effective is (P.NORMAL if running else P.HIGH)
        kept += memo.rows[1] is before
    assert kept == 2   # the second pass of each class
