"""The urgent path (issue 16): which new pending jobs are looked at between cycles, and when
(the pure :mod:`hai_slurm.priority.daemon.urgent`), and the daemon loop planning a HIGH job
submitted between two cycles at its next poll, not at the next cycle (FakeSlurm + SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_helpers import record
from executor_world import Behaviour, World, make_world

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.config.loader import DaemonConfig, parse_config
from hai_slurm.priority.daemon.factory import build_daemon
from hai_slurm.priority.daemon.loop import Daemon, Outcome
from hai_slurm.priority.daemon.urgent import (
    LOOK_MARGIN,
    NEW_WITHIN,
    RIPE_GAP,
    URGENT_LOOKS,
    UrgentState,
    due_in,
    look_again,
    may_preempt,
    observe,
    urgent_rule,
    with_jobs_ahead,
)
from hai_slurm.priority.planner.types import DEFAULT_WEIGHTS
from hai_slurm.priority.policy.state import AUTO
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.lock import LeaderLock
from hai_slurm.slurm_plugins.types import PendingBrief

NOW = 1_800_000_000.0
RULE = urgent_rule(PriorityClass.NORMAL, DEFAULT_WEIGHTS)


def brief(job_id: int, cls: str | None = "HIGH", *, submit: float = NOW, restarts: int = 0,
          account: str = "vision") -> PendingBrief:
    """A pending job in brief, with the ``#HAI`` record of ``cls`` (None: no record)."""
    return PendingBrief(job_id, "alice", account, "normal", int(submit), restarts, True,
                        record(cls) if cls is not None else "")


def run_polls(times: list[float], briefs: list[PendingBrief],
              state: UrgentState | None = None) -> list[tuple[float, tuple[int, ...]]]:
    """Poll at each of ``times`` with the same pending jobs; the looks each poll asks for."""
    state = state or UrgentState()
    out = []
    for t in times:
        state, due = observe(state, briefs, t, urgent=RULE)
        out.append((t, due))
    return out


def test_a_new_high_job_is_looked_at_when_first_seen_then_2_5_10_15_and_20_s_later() -> None:
    """Polls every second for 25 s: job 7 (HIGH, new) is looked at on the first poll and at
    +2, +5, +10, +15 and +20 s; then never again."""
    got = [(t - NOW, due) for t, due in run_polls([NOW + i for i in range(26)], [brief(7)])]
    assert [t for t, due in got if due] == list(URGENT_LOOKS) == [0.0, 2.0, 5.0, 10.0, 15.0, 20.0]
    assert all(due == (7,) for _, due in got if due)


def test_a_late_poll_takes_the_looks_due_once() -> None:
    """Polls at +0, +6, +12, +21 and +30 s: the looks of +2 and +5 s are taken once at +6,
    +10's at +12, +15's and +20's once at +21, none at +30."""
    got = run_polls([NOW, NOW + 6, NOW + 12, NOW + 21, NOW + 30], [brief(7)])
    assert [due for _, due in got] == [(7,), (7,), (7,), (7,), ()]


def test_only_classes_that_may_preempt_get_looks() -> None:
    """HIGH and above, and AUTO (the policy resolves it at the look); not ABOVE_NORMAL or
    NORMAL, not a job without a record (the default class, NORMAL), not a class weighted 0."""
    assert [c.value for c in PriorityClass if may_preempt(c, DEFAULT_WEIGHTS)] == [
        "EXTREME_HIGH", "VERY_HIGH", "HIGH"]
    assert may_preempt(AUTO, DEFAULT_WEIGHTS)
    assert not may_preempt(PriorityClass.HIGH, {**DEFAULT_WEIGHTS, PriorityClass.HIGH: 0.0})
    jobs = [brief(1, "EXTREME_HIGH"), brief(2, "VERY_HIGH"), brief(3, "HIGH"),
            brief(4, "ABOVE_NORMAL"), brief(5, "NORMAL"), brief(6, None), brief(7, "LOW"),
            brief(8, "AUTO")]
    _, due = observe(UrgentState(), jobs, NOW, urgent=RULE)
    assert due == (1, 2, 3, 8)
    high_default = urgent_rule(PriorityClass.HIGH, DEFAULT_WEIGHTS)
    assert observe(UrgentState(), [brief(6, None)], NOW, urgent=high_default)[1] == (6,)


def test_jobs_that_are_not_new_get_no_looks() -> None:
    """Seen at the previous poll, requeued (a victim coming back), or submitted longer than
    NEW_WITHIN ago (a daemon that just took the lead): no looks."""
    seen = UrgentState(seen=frozenset({1}))
    jobs = [brief(1), brief(2, restarts=1), brief(3, submit=NOW - NEW_WITHIN - 1),
            brief(4, submit=NOW - NEW_WITHIN + 1)]
    state, due = observe(seen, jobs, NOW, urgent=RULE)
    assert due == (4,)
    assert state.seen == {1, 2, 3, 4} and set(state.due) == {4}


def test_a_job_that_is_no_longer_pending_is_dropped() -> None:
    """Job 7 starts after its first look: it is no longer in the briefs, so its looks go."""
    state, due = observe(UrgentState(), [brief(7)], NOW, urgent=RULE)
    assert due == (7,) and state.next_look() == NOW + 2
    state, due = observe(state, [], NOW + 1, urgent=RULE)
    assert due == () and state.due == {} and state.next_look() is None


def test_a_cycle_that_sees_a_new_job_first_is_its_first_look() -> None:
    """A full cycle planned every pending job: a new job it shows has its first look done
    (none returned); the later looks still come, at +2, +5, +10 s from that cycle."""
    state, due = observe(UrgentState(), [brief(7)], NOW, urgent=RULE, cycle=True)
    assert due == ()
    got = run_polls([NOW + i for i in range(1, 12)], [brief(7)], state)
    assert [t - NOW for t, due in got if due] == [2.0, 5.0, 10.0]


# ------------------------------------------------------------------------ the daemon's loop
def _config(tmp: Path, urgent_poll: str, threshold: float = 0.01,
            urgent_wait: str = "7s", no_save_wait: str = "7s") -> DaemonConfig:
    """The default 30-s cycle; a benefit threshold low enough for the first look to plan."""
    return parse_config(f"""
state_dir = "{tmp}"
database_url = "sqlite:///{tmp / 'state.db'}"
[intervals]
urgent_poll = "{urgent_poll}"
[planner]
min_run_time = "60s"
benefit_threshold = {threshold}
urgent_benefit_wait = "{urgent_wait}"
urgent_no_save_wait = "{no_save_wait}"
""", source=str(tmp / "daemon.toml"))


def _daemon(world: World, cfg: DaemonConfig) -> Daemon:
    lock = LeaderLock(upgrade(cfg.database_url))
    return build_daemon(cfg, slurm=world.fake, store=(world.repo, lock), clock=world.clock)


def _between_cycles(tmp: Path, urgent_poll: str, threshold: float = 0.01,
                    looks: list[float] | None = None, age: int = 3600,
                    urgent_wait: str = "7s", no_save_wait: str = "7s",
                    checkpoint: bool = True) -> tuple[World, Daemon, int, float]:
    """Four LOW jobs fill 4 x 8 GPUs for ``age`` seconds (an hour): with a checkpoint
    directory, acking 0.5 s after a request, or (not ``checkpoint``) without one, ended by
    the request 1 s later; a cycle runs; 0.5 s later a HIGH job of 8 GPUs is submitted; the
    daemon then waits for its next cycle (30 s) as ``run`` does."""
    world = make_world(tmp)
    for i in range(4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5) if checkpoint else
                     Behaviour(ack_after=None, dies_after=1.0), checkpoint=checkpoint)
    world.fake.advance(world.fake.now + age)
    world.clock.now = float(world.fake.now)
    daemon = _daemon(world, _config(tmp, urgent_poll, threshold, urgent_wait, no_save_wait))
    assert daemon.interval == 30.0
    if looks is not None:
        look = daemon.look
        daemon.look = lambda ids: (looks.append(world.clock.now), look(ids))[1]  # type: ignore
    report = daemon.run_once()
    assert report.outcome is Outcome.OK, report.reason
    assert world.repo.history() == []
    world.clock.advance(0.5)
    world.fake.advance(int(world.clock.now))
    submitted = world.clock.now
    high = world.pending("high", gpus=8)
    daemon._wait(report)
    return world, daemon, high, submitted


def test_a_high_job_submitted_between_cycles_is_planned_at_the_next_poll(tmp_path: Path
                                                                       ) -> None:
    """With urgent_poll = 1 s the HIGH job's plan starts at the first poll after its
    submission, within 1 s, long before the next cycle (30 s); the plan is carried out
    while the daemon still waits (its victim acked and was requeued, the job runs)."""
    world, daemon, high, submitted = _between_cycles(tmp_path, "1s")
    (plan,) = world.repo.history()
    assert [b.job_id for b in plan.beneficiaries] == [high]
    assert plan.created_at - submitted <= 1.0, plan.created_at - submitted
    assert daemon.urgent_looks >= 1
    assert world.fake.jobs[high].state.value == "RUNNING"


def test_without_the_urgent_path_the_job_waits_for_the_next_cycle(tmp_path: Path) -> None:
    """urgent_poll = 0: nothing is planned while the daemon waits; the next cycle plans."""
    world, daemon, high, submitted = _between_cycles(tmp_path, "0")
    assert world.repo.history() == []
    assert daemon.urgent_looks == 0
    assert daemon.run_once().outcome is Outcome.OK
    (plan,) = world.repo.history()
    assert [b.job_id for b in plan.beneficiaries] == [high]
    assert plan.created_at - submitted >= 29.0


def test_a_look_whose_snapshot_fails_is_counted_as_skipped(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The metrics tell looks that went through from looks the snapshot stopped."""
    from hai_slurm.errors import SlurmError

    _world, daemon, high, _submitted = _between_cycles(tmp_path, "1s")
    sample = daemon.metrics.registry.get_sample_value
    ok = sample("hai_urgent_looks_total", {"outcome": "ok"})
    assert ok is not None and ok >= 1

    def down() -> None:
        raise SlurmError("squeue: error: Unable to contact slurm controller")

    monkeypatch.setattr(daemon.slurm, "snapshot", down)
    assert daemon.look([high]) is None
    assert sample("hai_urgent_looks_total", {"outcome": "skipped"}) == 1
    assert sample("hai_urgent_looks_total", {"outcome": "ok"}) == ok


def test_urgent_poll_is_read_and_validated() -> None:
    """Default 1 s; "0" turns it off; a negative or non-duration value is refused."""
    from hai_slurm.errors import ConfigError

    assert parse_config("").intervals.urgent_poll == 1.0
    assert parse_config('[intervals]\nurgent_poll = "0"\n').intervals.urgent_poll == 0.0
    assert parse_config('[intervals]\nurgent_poll = "2s"\n').intervals.urgent_poll == 2.0
    for bad in ("-1", '"soon"'):
        with pytest.raises(ConfigError, match="urgent_poll"):
            parse_config(f"[intervals]\nurgent_poll = {bad}\n")


def test_config_check_says_how_the_urgent_path_runs() -> None:
    """`hai-slurm config check` names the poll and the looks, or that the path is off, and the
    waits after which urgent work preempts whatever the benefit."""
    from hai_slurm.priority.cli.admin import summary

    on = [line for line in summary(parse_config("")) if line.startswith("urgent path")]
    assert on == ["urgent path: pending jobs polled every 1s between cycles; a new job of HIGH "
                  "or above is planned 0, 2, 5, 10, 15, 20 s after it is first seen; urgent "
                  "work preempts whatever the benefit once it waited 7s (victims that save on "
                  "request), 7s (a victim that cannot); a job below HIGH past its bound never "
                  "takes a victim that cannot save"]
    off = summary(parse_config('[intervals]\nurgent_poll = 0\n'))
    assert any(line.startswith("urgent path: off") for line in off)
    (fair,) = [line for line in summary(parse_config("")) if line.startswith("fairness")]
    assert "(not from HIGH+ jobs or jobs past their bound)" in fair


def test_a_failed_poll_is_logged_and_the_next_poll_tries_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first three polls fail (slurmctld busy): the daemon logs them, keeps waiting for its
    cycle, and the fourth poll, 4 s after the submission at most, plans the job."""
    from hai_slurm.errors import SlurmError
    from hai_slurm.slurm_plugins.fake import FakeSlurm

    calls = {"n": 0}
    real = FakeSlurm.pending_briefs

    def flaky(self: FakeSlurm) -> tuple[PendingBrief, ...]:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise SlurmError("squeue: error: slurm_load_jobs error: Socket timed out")
        return real(self)

    monkeypatch.setattr(FakeSlurm, "pending_briefs", flaky)
    with caplog.at_level("WARNING", logger="hai_slurm.priority.daemon.loop"):
        world, _daemon, high, submitted = _between_cycles(tmp_path, "1s")
    assert sum("reading the pending jobs failed" in r.message for r in caplog.records) == 3
    (plan,) = world.repo.history()
    assert [b.job_id for b in plan.beneficiaries] == [high]
    assert 3.0 <= plan.created_at - submitted <= 4.0, plan.created_at - submitted


def test_a_job_the_benefit_test_refuses_is_looked_at_again_until_20_s_later(
        tmp_path: Path) -> None:
    """A benefit threshold no look can pass (and an urgent_benefit_wait of an hour): the job
    is looked at when first seen (the poll after its submission) and 2, 5, 10, 15 and 20 s
    later, six looks, no plan, until the cycle."""
    times: list[float] = []
    world, daemon, _high, submitted = _between_cycles(tmp_path, "1s", threshold=1e6,
                                                      looks=times, urgent_wait="1h")
    assert world.repo.history() == []
    assert daemon.urgent_looks == 6
    sample = daemon.metrics.registry.get_sample_value
    assert sample("hai_urgent_looks_total", {"outcome": "ok"}) == 6
    assert sample("hai_urgent_look_seconds_count") == 6
    seen = times[0]
    assert 0 < seen - submitted <= 1.0
    assert [t - seen for t in times] == list(URGENT_LOOKS)


def test_victims_that_cannot_save_give_way_once_urgent_no_save_wait_passed(
        tmp_path: Path) -> None:
    """The LOW jobs have no checkpoint directory (they cannot save on request) and no look
    passes the benefit test. With urgent_no_save_wait 7 s the HIGH job's refusal says when,
    it gets a look just then and is planned once it waited 7 s by Slurm's submit time (whole
    seconds: 0.5 s before the submission here), long before the cycle. With it off: six
    looks and no plan (urgent_benefit_wait, for victims that save, does not apply)."""
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    world, _daemon, high, submitted = _between_cycles(tmp_path / "on", "1s", threshold=1e6,
                                                      urgent_wait="1h", checkpoint=False)
    (plan,) = world.repo.history()
    assert [b.job_id for b in plan.beneficiaries] == [high]
    assert 6.5 <= plan.created_at - submitted <= 8.5, plan.created_at - submitted
    off, daemon, _high, _ = _between_cycles(tmp_path / "off", "1s", threshold=1e6,
                                            urgent_wait="7s", no_save_wait="off",
                                            checkpoint=False)
    assert off.repo.history() == []
    assert daemon.urgent_looks == 6


def test_a_look_also_plans_for_the_jobs_ranked_above_the_newcomer() -> None:
    """The newcomer 9 (priority 500) is planned with the jobs the policy ranks at or above it
    (older HIGH 3 at 600, VERY_HIGH 4 at 900, 5 tied at 500), not the ones below (1, 2), so
    it cannot take victims before them; a job the policy does not rank stays alone."""
    prio = {1: 100, 2: 499, 3: 600, 4: 900, 5: 500, 9: 500}
    assert with_jobs_ahead(frozenset({9}), prio) == {3, 4, 5, 9}
    assert with_jobs_ahead(frozenset({4}), prio) == {4}
    assert with_jobs_ahead(frozenset({42}), prio) == {42}


def test_look_again_adds_a_look_before_the_next_one_only() -> None:
    """The planner says job 7's wait outweighs the loss in 1.5 s: a look at +1.7 s comes
    before its next fixed look (+2 s); 3 s would come after it (the fixed look covers it); a
    job that is not watched gets nothing."""
    state, due = observe(UrgentState(), [brief(7)], NOW, urgent=RULE)
    assert due == (7,)
    again = look_again(state, {7: 1.5, 8: 0.5}, NOW)
    assert again.due[7] == pytest.approx((NOW + 1.5 + LOOK_MARGIN, *state.due[7]))
    assert 8 not in again.due
    assert look_again(state, {7: 3.0}, NOW) is state
    got = run_polls([NOW + 1, NOW + 1.7, NOW + 1.8, NOW + 2], [brief(7)], again)
    assert [(round(t - NOW, 1), d) for t, d in got] == [(1, ()), (1.7, (7,)), (1.8, ()),
                                                         (2, (7,))]


def test_look_again_after_the_last_fixed_look_for_watched_jobs_only() -> None:
    """Job 7 (HIGH) has taken all its fixed looks; the planner (a look or a cycle) says its wait
    outweighs the loss in 4 s: it gets one more look then, not the next cycle up to 30 s
    later. Job 8 (NORMAL: never watched) and a job no longer pending get none."""
    briefs = [brief(7), brief(8, "NORMAL")]
    state = UrgentState()
    for offset in URGENT_LOOKS:
        state, _ = observe(state, briefs, NOW + offset, urgent=RULE)
    assert 7 not in state.due and state.watched == {7}
    now = NOW + URGENT_LOOKS[-1] + 1
    again = look_again(state, {7: 4.0, 8: 1.0}, now)
    assert again.due == {7: pytest.approx((now + 4.0 + LOOK_MARGIN,))}
    got = run_polls([now + 4, now + 4.2, now + 5], briefs, again)
    assert [(round(t - now, 1), d) for t, d in got] == [(4, ()), (4.2, (7,)), (5, ())]
    gone, _ = observe(state, [brief(8, "NORMAL")], now, urgent=RULE)
    assert gone.watched == frozenset()
    assert look_again(gone, {7: 4.0}, now) is gone


def test_a_job_is_planned_as_soon_as_its_wait_outweighs_the_loss(tmp_path: Path) -> None:
    """A threshold whose benefit test passes a few seconds into the wait: the fixed looks
    before that say when, and the job is planned at one more look then, between two fixed
    looks (before look_again it was planned at the next fixed look)."""
    times: list[float] = []
    world, _daemon, high, _submitted = _between_cycles(tmp_path, "1s", threshold=2.0,
                                                       looks=times)
    (plan,) = world.repo.history()
    assert [b.job_id for b in plan.beneficiaries] == [high]
    seen = times[0]
    offsets = [round(t - seen, 2) for t in times]
    *fixed, extra = offsets
    assert fixed == list(URGENT_LOOKS[:len(fixed)]) and len(fixed) >= 2, offsets
    assert fixed[-1] < extra < URGENT_LOOKS[len(fixed)], offsets
    assert plan.created_at == pytest.approx(times[-1], abs=0.01)


def test_a_job_waiting_for_young_victims_is_planned_when_they_are_old_enough(
        tmp_path: Path) -> None:
    """The LOW jobs are 35 s old at the cycle: every fixed look (up to 20 s after the HIGH job
    was seen, about 21.5 s after the cycle) finds no victim, all being younger than the
    minimum run time (1 min). The last one says they are old enough 25 s after the cycle, so
    the job gets one more look then (at least RIPE_GAP after that look) and is planned before
    the next cycle (before, that cycle planned it, 29.5 s after its submission)."""
    times: list[float] = []
    world, _daemon, high, submitted = _between_cycles(tmp_path, "1s", looks=times, age=35)
    (plan,) = world.repo.history()
    assert [b.job_id for b in plan.beneficiaries] == [high]
    assert len(times) == len(URGENT_LOOKS) + 1, [round(t - submitted, 1) for t in times]
    assert 24.5 <= plan.created_at - submitted < 29.0, plan.created_at - submitted
    assert plan.created_at == pytest.approx(times[-1], abs=0.01)


def test_due_in_takes_the_sooner_look_and_spaces_looks_for_young_victims() -> None:
    """A job refused as not worth it yet is due when its wait will outweigh the loss; one
    refused for want of victims while a young one ages, when that one is old enough, but not
    sooner than RIPE_GAP after the pass (young jobs may come of age every few seconds) and
    not when the next cycle comes first (it plans the job anyway)."""
    assert due_in({1: 3.0, 2: 9.0}, {2: 6.0, 3: 1.0, 4: 45.0}, cycle=30.0) == {
        1: 3.0, 2: 6.0, 3: RIPE_GAP}
    assert due_in({2: 4.0}, {2: 6.0}) == {2: 4.0}
    assert due_in({}, {4: 45.0}) == {4: 45.0}
