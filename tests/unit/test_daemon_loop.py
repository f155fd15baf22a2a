"""The daemon's loop: stop flag and signals, leader lease hand-over, restart keeps counters."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from daemon_helpers import T0, Broken, rig

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import SlurmError, StateError
from hai_slurm.priority.clock import FakeClock
from hai_slurm.priority.daemon.cycle import POLICY_STATE_KEY
from hai_slurm.priority.daemon.loop import Daemon, Outcome, open_store
from hai_slurm.priority.daemon.metrics import TOTALS_KEY, sample
from hai_slurm.priority.hooks import CycleExtras, CycleView
from hai_slurm.priority.policy.settings import ClassPolicy, FairnessConfig, PolicyConfig
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.slurm_plugins.types import ClusterSnapshot


def test_loop_waits_the_interval_and_stops_on_request(tmp_path: Path) -> None:
    """run() waits `interval` between cycles; a stop requested mid-cycle lets that cycle finish."""
    r = rig(tmp_path, cycle=10)
    job = r.submit(PriorityClass.HIGH)
    calls = {"n": 0}

    def doctor(s: ClusterSnapshot) -> ClusterSnapshot:
        calls["n"] += 1
        if calls["n"] == 3:
            d.request_stop()
        return s

    d = r.daemon(client=Broken(r.slurm, doctor))
    d.run()
    assert calls["n"] == 3 and r.clock.waits == [10, 10]
    assert r.slurm.jobs[job].priority > 1  # the first cycle wrote it
    assert sample(d.metrics, "hai_priority_cycles_total", {"outcome": "ok"}) == 3
    assert d.lock.holder(r.clock.now) is None  # released on the way out


def test_first_sigterm_finishes_the_cycle_second_exits_at_once(tmp_path: Path) -> None:
    """Real signals: one SIGTERM mid-cycle completes it; two in one cycle exit immediately."""
    r = rig(tmp_path)
    job = r.submit(PriorityClass.HIGH)
    kills = {"n": 1}

    def doctor(s: ClusterSnapshot) -> ClusterSnapshot:
        for _ in range(kills["n"]):
            os.kill(os.getpid(), signal.SIGTERM)
        return s

    before = signal.getsignal(signal.SIGTERM)
    d = r.daemon(client=Broken(r.slurm, doctor))
    d.run()
    assert d.stop_requested and r.slurm.jobs[job].priority > 1
    assert d.repository.get_job(job) is not None  # the cycle was committed
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored

    kills["n"] = 2
    second = r.submit(PriorityClass.HIGH)
    r.tick(10)
    d2 = r.daemon(owner="d2")
    d2.slurm = Broken(r.slurm, doctor)
    with pytest.raises(SystemExit) as exc:
        d2.run()
    assert exc.value.code == 128 + signal.SIGTERM
    assert r.slurm.jobs[second].priority == 1  # nothing written: the cycle was cut short
    assert d2.repository.get_job(second) is None


def test_second_daemon_stands_by_until_the_lease_expires(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """One leader at a time: B writes nothing while A renews; B takes over once A is gone."""
    r = rig(tmp_path, cycle=10, lock_ttl=30)
    r.submit(PriorityClass.HIGH)
    a, b = r.daemon("A"), r.daemon("B")
    assert a.run_once().outcome is Outcome.OK
    n = len(r.slurm.writes)
    r.submit(PriorityClass.NORMAL)
    caplog.set_level(logging.WARNING, logger="hai_slurm.priority.daemon.loop")
    for _ in range(3):
        r.tick(10)
        rep = b.run_once()
        assert rep.outcome is Outcome.STANDBY and rep.next_wait <= 10
        assert len(r.slurm.writes) == n
        assert a.run_once().outcome is Outcome.OK  # A keeps renewing
        n = len(r.slurm.writes)
    assert sum("standing by" in m and "held by A" in m for m in caplog.messages) == 1
    # A dies without releasing (SIGKILL): B waits out the lease, then leads.
    r.tick(29)
    assert b.run_once().outcome is Outcome.STANDBY
    r.tick(2)
    assert b.run_once().outcome is Outcome.OK
    assert a.run_once().outcome is Outcome.STANDBY


def test_a_daemon_that_loses_the_lease_clears_its_figures_and_the_new_leader_does_not_jump(
        tmp_path: Path) -> None:
    """A leads and exports the queue's figures; B, standing by, starts its counters at the
    stored totals. When A's lease runs out and B takes over, B counts only its own cycles on
    top (raising them to A's totals then looked like a burst of cycles), and A, standing by,
    no longer exports the jobs and waits it saw (alerts over every daemon fired on them)."""
    r = rig(tmp_path, cycle=10, lock_ttl=30)
    r.submit(PriorityClass.HIGH)
    a, b = r.daemon("A"), r.daemon("B")
    assert a.run_once().outcome is Outcome.OK
    assert b.run_once().outcome is Outcome.STANDBY
    started = sample(b.metrics, "hai_priority_cycles_total", {"outcome": "ok"})
    assert started == 1
    for _ in range(3):
        r.tick(10)
        assert a.run_once().outcome is Outcome.OK
    high = {"priority_class": "HIGH", "state": "pending"}
    assert sample(a.metrics, "hai_priority_jobs", high) == 1
    r.tick(31)
    assert b.run_once().outcome is Outcome.OK
    assert sample(b.metrics, "hai_priority_cycles_total", {"outcome": "ok"}) == started + 1
    assert b.totals.values["cycles"] == 5   # the stored lifetime totals go on
    assert a.run_once().outcome is Outcome.STANDBY
    assert a.metrics.registry.get_sample_value("hai_priority_jobs", high) is None   # gone
    assert sample(a.metrics, "hai_priority_leader") == 0
    assert sample(b.metrics, "hai_priority_jobs", high) == 1


def test_restart_keeps_every_counter(tmp_path: Path) -> None:
    """A daemon replaced without clean shutdown: totals, tags, tracked jobs and events survive."""
    classes = dict(PolicyConfig().classes)
    classes[PriorityClass.LOW] = ClassPolicy(60, 120, False)
    policy = PolicyConfig(classes=classes, fairness=FairnessConfig(protect_after=1))
    r = rig(tmp_path, policy, cycle=10, lock_ttl=30)
    lows = [r.submit(PriorityClass.LOW, team=t) for t in ("a", "b", "a")]
    d = r.daemon("first")
    d.repository.add_events(FairnessEvent(EventKind.PREEMPTED, "a", "u", T0 - 10 * i)
                            for i in range(3))
    for _ in range(8):
        d.run_once()
        r.tick(10)
    totals = {name: sample(d.metrics, f"hai_priority_{name}_total")
              for name in ("promotions", "protections", "slurm_writes")}
    assert totals["promotions"] == 3 and totals["protections"] == 1
    cycles = sample(d.metrics, "hai_priority_cycles_total", {"outcome": "ok"})
    state = d.repository.get_value(POLICY_STATE_KEY)
    prios = {j: r.slurm.jobs[j].priority for j in lows}

    r.tick(30)  # the killed daemon's lease runs out
    e = r.daemon("second")
    rep = e.run_once()
    assert rep.outcome is Outcome.OK and rep.writes == 0  # same tags, same priorities
    assert {j: r.slurm.jobs[j].priority for j in lows} == prios
    assert e.repository.get_value(POLICY_STATE_KEY) == state
    for name, value in totals.items():
        assert sample(e.metrics, f"hai_priority_{name}_total") == value
    assert sample(e.metrics, "hai_priority_cycles_total", {"outcome": "ok"}) == cycles + 1
    assert e.repository.active_protections(r.clock.now).keys() == {"a"}
    tracked = e.repository.get_job(lows[0])
    assert tracked is not None and tracked.original_submit_at == T0


def test_lease_lost_during_a_slow_snapshot_means_no_writes(tmp_path: Path) -> None:
    """A snapshot slower than the lease: another daemon took over meanwhile, so A writes nothing."""
    r = rig(tmp_path, cycle=10, lock_ttl=30)
    r.submit(PriorityClass.HIGH)
    b = r.daemon("B")

    def slow(s: ClusterSnapshot) -> ClusterSnapshot:
        r.tick(31)  # A's lease runs out while it waits for Slurm ...
        assert b.run_once().outcome is Outcome.OK  # ... and B takes over and writes
        return s

    a = r.daemon("A", client=Broken(r.slurm, slow))
    n_before = len(r.slurm.writes)
    rep = a.run_once()
    assert rep.outcome is Outcome.STANDBY and rep.reason == "lease lost mid-cycle"
    assert len(r.slurm.writes) == n_before + 1  # B's write only
    assert a.repository.get_value("daemon.totals") == b.totals.to_json()
    # counted as a standby cycle in A's totals as in its metrics (as a cycle that finds the
    # lease held at its start is)
    assert a.totals.values["standby_cycles"] == 1
    assert sample(a.metrics, "hai_priority_cycles_total", {"outcome": "standby"}) == 1


def test_running_jobs_are_not_rewritten_each_cycle_yet_their_run_time_is_kept(
        tmp_path: Path) -> None:
    """A job that only runs on is not written to the store every cycle (at 2,000 running jobs
    that was most of a cycle); its stored run time is caught up when it stops, so a requeue
    still counts every second it ran, and it is flushed every RUN_FLUSH seconds anyway."""
    from hai_slurm.priority.daemon.cycle import RUN_FLUSH

    r = rig(tmp_path)
    job = r.submit(PriorityClass.NORMAL)
    d = r.daemon()
    r.slurm.schedule()
    assert d.run_once().outcome is Outcome.OK   # first seen running: written
    first = d.repository.get_job(job)
    assert first is not None and first.last_state == "RUNNING"
    for _ in range(3):
        r.tick(30)
        rep = d.run_once()
        assert rep.decision is not None and job not in {j.job_id for j in rep.decision.jobs}
    stored = d.repository.get_job(job)
    assert stored == first                        # nothing rewritten meanwhile
    r.slurm.requeue(job)                          # ran 90 s up to the last cycle
    r.tick(30)
    d.run_once()
    after = d.repository.get_job(job)
    assert after is not None and after.last_state == "PENDING"
    assert after.run_seconds == pytest.approx(first.run_seconds + 90)
    # A long run is flushed every RUN_FLUSH seconds.
    r.slurm.schedule()
    r.tick(1)
    d.run_once()
    began = d.repository.get_job(job)
    assert began is not None and began.last_state == "RUNNING"
    r.tick(RUN_FLUSH + 1)
    rep = d.run_once()
    assert rep.decision is not None and job in {j.job_id for j in rep.decision.jobs}


def test_a_cycle_whose_commit_fails_is_not_counted(tmp_path: Path) -> None:
    """The database fails at the cycle's commit (MariaDB down): that cycle counts as skipped
    only, and the promotions it decided are counted once, when the next cycle commits them.
    (Before: it counted as a committed cycle too, and its promotions twice.)"""
    classes = dict(PolicyConfig().classes)
    classes[PriorityClass.LOW] = ClassPolicy(60, 120, False)
    r = rig(tmp_path, PolicyConfig(classes=classes), cycle=10, lock_ttl=30)
    lows = [r.submit(PriorityClass.LOW, team=t) for t in ("a", "b")]
    d = r.daemon()
    assert d.run_once().outcome is Outcome.OK
    r.tick(70)  # past LOW's max wait: the next cycle promotes both
    real = d.repository.record_cycle
    calls = {"n": 0}

    def failing(write: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StateError("database unreachable: (2013, 'Lost connection')")
        real(write)  # type: ignore[arg-type]

    d.repository.record_cycle = failing  # type: ignore[method-assign]
    assert d.run_once().outcome is Outcome.SKIPPED
    r.tick(10)
    assert d.run_once().outcome is Outcome.OK
    stored = d.repository.get_value(TOTALS_KEY)
    assert isinstance(stored, dict)
    assert stored["cycles"] == 2 and stored["cycles_skipped"] == 1
    assert stored["promotions"] == len(lows)
    assert sample(d.metrics, "hai_priority_promotions_total") == len(lows)


def test_sigterm_ends_the_process_when_the_cycle_hangs(tmp_path: Path) -> None:
    """SIGTERM arrives while the cycle is stuck in a call that does not return (pyslurm waiting
    for an absent slurmctld). The handler arms an exit ``stop_grace`` s later (faulthandler's C
    timer for real; a Python timer here), which ends the stuck process; a cycle that ends in
    time disarms it. (Before: the daemon stayed until the calls returned, past 30 s.)"""
    r = rig(tmp_path)
    r.submit(PriorityClass.HIGH)
    stuck = threading.Event()
    exits: list[float] = []
    armed: list[float] = []

    def doctor(s: ClusterSnapshot) -> ClusterSnapshot:
        os.kill(os.getpid(), signal.SIGTERM)
        stuck.wait(10)  # the handler runs meanwhile, the call still does not return
        return s

    def arm(seconds: float) -> None:
        armed.append(seconds)
        threading.Timer(seconds, lambda: (exits.append(time.monotonic()), stuck.set())).start()

    d = r.daemon(client=Broken(r.slurm, doctor))
    d.stop_grace, d.arm_exit, d.disarm_exit = 0.5, arm, lambda: None
    t0 = time.monotonic()
    d.run()
    assert armed == [0.5] and len(exits) == 1 and exits[0] - t0 < 5

    disarmed: list[bool] = []
    quick = r.daemon(owner="d2", client=Broken(r.slurm, lambda s: (
        os.kill(os.getpid(), signal.SIGTERM), s)[1]))
    quick.arm_exit, quick.disarm_exit = armed.append, lambda: disarmed.append(True)
    r.tick(60)
    quick.run()
    assert armed == [0.5, 8.0] and disarmed == [True]  # ended in time: the exit is called off


def test_a_cycle_whose_priority_writes_fail_is_counted_skipped_in_the_stored_totals(
        tmp_path: Path) -> None:
    """Slurm refuses every priority write (slurmctld gone between the snapshot and the
    writes): the metrics count a skipped cycle, and so do the stored totals, which a restarted
    (or newly leading) daemon restores its metrics from. (Before: the totals counted neither a
    cycle nor a skipped one, and the restored skipped count was lower than it had been.)"""
    r = rig(tmp_path)
    r.submit(PriorityClass.HIGH)
    d = r.daemon()

    def refuse(priorities: object) -> object:
        raise SlurmError("slurm_update error: Unable to contact slurm controller")

    d.slurm.set_priorities = refuse   # type: ignore[method-assign]
    assert d.run_once().outcome is Outcome.SKIPPED
    stored = d.repository.get_value(TOTALS_KEY)
    assert isinstance(stored, dict)
    assert stored.get("cycles", 0) == 0 and stored["cycles_skipped"] == 1
    assert sample(d.metrics, "hai_priority_cycles_total", {"outcome": "skipped"}) == 1


class _OpenPlan:
    """An executor stand-in with one plan open: the daemon steps it every ``poll_interval``
    seconds while it waits; each step's monotonic time is kept."""

    poll_interval = 5.0

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.steps: list[float] = []

    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        return CycleExtras()

    def has_open_plans(self) -> bool:
        return True

    def reconcile(self) -> None:
        self.steps.append(self.clock.monotonic())


def test_a_wall_clock_stepped_back_neither_lengthens_the_wait_nor_stales_the_snapshots(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The wall clock is stepped back 10 min (an NTP step) at the start of the wait between
    two cycles: the wait still lasts the 30-s interval, with the open plan stepped every 5 s
    (measured on the monotonic clock), and the next snapshot, stamped from the stepped clock,
    is not taken for stale data. (Before: the wait lasted 630 s, and every cycle was skipped
    as stale until the wall clock caught up.) A snapshot older than the last with no step is
    still stale."""
    r = rig(tmp_path, cycle=30)
    r.submit(PriorityClass.HIGH)
    shift = {"by": 0}
    client = Broken(r.slurm, lambda s: dataclasses.replace(s, time=s.time + shift["by"]))
    plan = _OpenPlan(r.clock)
    repo, lock = open_store(r.cfg)
    d = Daemon(client, repo, lock, config=r.cfg, clock=r.clock, owner="d1", executor=plan)
    report = d.run_once()
    assert report.outcome is Outcome.OK and report.next_wait == 30
    wait = r.clock.wait

    def stepped_once(stop: threading.Event, seconds: float) -> bool:
        if not r.clock.waits:
            r.clock.step(-600)
            shift["by"] = -600  # the backend stamps snapshots with the same system clock
        return wait(stop, seconds)

    r.clock.wait = stepped_once  # type: ignore[method-assign]
    start = r.clock.monotonic()
    d._wait(report)
    assert r.clock.monotonic() - start == 30
    assert [t - start for t in plan.steps] == [5, 10, 15, 20, 25]
    r.slurm.advance(int(r.clock.now) + 600)  # the cluster's own clock did not step
    with caplog.at_level(logging.WARNING, logger="hai_slurm.priority.daemon.loop"):
        assert d.run_once().outcome is Outcome.OK
    assert "the system clock went back 600.0 s" in caplog.text
    shift["by"] -= 100  # stale data: older than the last snapshot, and no step
    r.clock.advance(10)
    r.slurm.advance(r.slurm.now + 10)
    rep = d.run_once()
    assert rep.outcome is Outcome.SKIPPED and "stale" in rep.reason
