"""The priority daemon: a loop of cycles, one leader at a time, state in the database.

A :class:`Daemon` gets its Slurm client, repository, leader lock and clock injected (unit tests
use FakeSlurm, SQLite and :class:`~hai_slurm.priority.clock.FakeClock`). Each
:meth:`Daemon.run_once`:

1. renews the leader lease; a daemon that does not hold it stays on standby (logs it once, writes
   nothing) until the holder's lease expires;
2. takes one snapshot of Slurm; a failed query (SlurmError), or a snapshot that looks partial or
   stale (:func:`~hai_slurm.priority.daemon.cycle.snapshot_problem`: older than the last one,
   less any step back of the wall clock since, measured against the monotonic clock), skips
   the cycle: nothing is written to Slurm and the next try comes after a capped exponential
   back-off;
3. runs the policy with ``now`` (:func:`~hai_slurm.priority.daemon.cycle.decide`) and writes
   only the priorities that differ from Slurm's, batched (all in one call; the CLI backend runs
   one ``scontrol`` reading one ``update`` line per distinct value);
4. calls the optional preemption :class:`~hai_slurm.priority.hooks.Planner` and
   :class:`~hai_slurm.priority.hooks.Executor` (which steps every open plan once and starts new
   ones, never waiting for a victim); jobs open plans claim are left out of step 3's writes and
   shown to the planner;
5. commits jobs, policy state (round-robin tags, epoch), protections, the executor's events and
   credits, and the counter totals in one transaction.

:meth:`Daemon.run` loops like rq's worker: SIGTERM/SIGINT handlers only set a flag, the first
signal lets the current cycle finish, a second exits at once; waits use ``Event.wait`` and are
measured on the monotonic clock (an NTP step does not lengthen them). If the
cycle has not ended :data:`STOP_GRACE` s after the first signal (a Slurm or database call that
does not return: pyslurm waiting for an absent slurmctld), the process exits, printing where it
was stuck. While
the executor has open plans, the wait between cycles is cut into ``poll_interval`` slices and
each slice steps the open plans (:meth:`Daemon.step_plans`: acks, states, deadlines only);
in between, every ``ack_interval`` (the executor's ``poll``, 0.1 s), the daemon asks the
executor whether a plan has all the acks it waits for (files and the store, no Slurm query)
and steps the plans at once if so. The policy and planner still run once per cycle, so a
plan reacts to its last ack within ``ack_interval`` and the priorities are still written
every cycle.

The urgent path (with a planner and executor, ``[intervals] urgent_poll`` > 0): between cycles
the daemon also reads the pending jobs in brief every ``urgent_poll`` seconds
(:meth:`Daemon.urgent_step`, one cheap ``squeue``); a new job of a class that may preempt is
planned at once and again a few seconds later (:mod:`~hai_slurm.priority.daemon.urgent` decides
which jobs and when) by :meth:`Daemon.look`: a fresh snapshot, the policy's decisions (nothing
written), the planner for those jobs only, and the executor, with the cycle's guards. So urgent
work is planned within about ``urgent_poll`` of its submission, not at the next cycle.
"""

from __future__ import annotations

import enum
import faulthandler
import logging
import math
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from hai_slurm.errors import HaiSlurmError, SlurmError, StateError
from hai_slurm.priority.clock import Clock, SystemClock
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.cycle import (
    POLICY_STATE_KEY,
    CycleMemo,
    Decision,
    catch_up,
    decide,
    requeue_candidates,
    snapshot_problem,
    state_from_json,
    state_to_json,
    with_preemptions,
)
from hai_slurm.priority.daemon.metrics import TOTALS_KEY, DaemonMetrics, Totals
from hai_slurm.priority.daemon.urgent import (
    UrgentState,
    brief_of,
    due_in,
    look_again,
    observe,
    urgent_rule,
    with_jobs_ahead,
)
from hai_slurm.priority.hooks import Claims, CycleExtras, CycleView, Executor, Planner
from hai_slurm.priority.store import AuditEntry, CycleWrite, JsonValue, TrackedJob
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.lock import LeaderLock, default_owner
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.types import ActionResult, ClusterSnapshot, SlurmClient

log = logging.getLogger("hai_slurm.priority.daemon.loop")
_MAX_FAILED_WRITES = 3
CLOCK_STEP_TOLERANCE = 2.0
"""Seconds the wall clock may fall behind the monotonic one between two snapshots before the
daemon calls it a step (an NTP step back, not the drift of a slewed clock)."""
STOP_GRACE = 8.0
"""Seconds after SIGTERM/SIGINT is handled within which the current cycle must end, else the
process exits with the tracebacks of where it was stuck. A call holding the GIL delays the
handler itself by up to slurmctld's MessageTimeout (20 s on the testbed): 20 + 8 stays under
systemd's default 90 s and the 30 s a site's stop script may allow."""


def _arm_exit(seconds: float) -> None:
    faulthandler.dump_traceback_later(seconds, exit=True)


class Outcome(enum.StrEnum):
    """How a cycle ended."""

    OK = "ok"            # decided, wrote what changed, committed
    SKIPPED = "skipped"  # Slurm or the database failed, or the snapshot was unusable
    STANDBY = "standby"  # another daemon holds the leader lease


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did, and how long the daemon should wait before the next."""

    outcome: Outcome
    next_wait: float
    writes: int = 0
    reason: str = ""
    seconds: float = 0.0
    decision: Decision | None = None


class Daemon:
    """One priority daemon (see the module docstring)."""

    def __init__(self, slurm: SlurmClient, repository: Repository, lock: LeaderLock, *,
                 config: DaemonConfig, clock: Clock | None = None,
                 metrics: DaemonMetrics | None = None, planner: Planner | None = None,
                 executor: Executor | None = None, owner: str | None = None,
                 interval: float | None = None) -> None:
        self.slurm = slurm
        self.repository = repository
        self.lock = lock
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or DaemonMetrics()
        self.planner = planner
        self.executor = executor
        self.owner = owner or default_owner()
        self.interval = interval if interval is not None else config.intervals.cycle
        self.failures = 0
        self.leader = False
        self.totals = Totals()
        self.stop_event = threading.Event()
        self._stop_requested = False
        self._signals_handled = 0
        self.stop_grace = STOP_GRACE
        self.arm_exit: Callable[[float], None] = _arm_exit
        self.disarm_exit: Callable[[], None] = faulthandler.cancel_dump_traceback_later
        self._last_snapshot: float | None = None
        self._last_cycle: float | None = None  # ``now`` of the last committed cycle
        self._memo = CycleMemo()
        """What :func:`~.cycle.decide` keeps from cycle to cycle (:class:`~.cycle.CycleMemo`)."""
        self._standby_logged = False
        self._metrics_restored = False
        """Whether the counters were raised to the stored totals (once per process: later,
        on taking the lease, a jump by another leader's cycles would look like a burst)."""
        self._last_renew = -math.inf
        """Monotonic time of the last lease renewal between cycles."""
        self._seen_at: tuple[float, float] | None = None
        """(wall, monotonic) time when the last snapshot was taken in: a later snapshot older
        than that one is stale data unless the wall clock stepped back meanwhile."""
        self.urgent = UrgentState()
        """The urgent path's watch of new pending jobs (:mod:`~.urgent`)."""
        self.urgent_looks = 0
        """Looks the urgent path made since the start (each plans for one or more jobs)."""
        self._urgent_rule = urgent_rule(config.policy.default_class,
                                        config.preempt.planner.class_weights)

    # ------------------------------------------------------------------------ stop requests
    @property
    def stop_requested(self) -> bool:
        """True once a stop was asked for (the current cycle still finishes)."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Warm stop: finish the current cycle, then leave the loop."""
        self._stop_requested = True
        self.stop_event.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only flags here. Event.set takes a lock the interrupted main thread may hold, so it is
        # done by a short-lived thread rather than inside the handler.
        self._signals_handled += 1
        if self._signals_handled > 1:
            log.warning("second %s: exiting at once", signal.Signals(signum).name)
            raise SystemExit(128 + signum)
        self._stop_requested = True
        threading.Thread(target=self.stop_event.set, daemon=True).start()
        log.warning("%s received: finishing the current cycle, then stopping (send it again to "
                    "exit at once; if the cycle has not ended in %g s, the process exits and "
                    "prints where it was stuck)", signal.Signals(signum).name, self.stop_grace)
        # A call that holds the GIL and does not return (pyslurm waiting for an absent
        # slurmctld, MessageTimeout each) would keep even a watcher thread from running; the
        # faulthandler's timer is a C thread. The daemon is safe to kill at any point.
        self.arm_exit(self.stop_grace)

    @contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            if self._signals_handled:
                self.disarm_exit()
            for s, handler in old.items():
                signal.signal(s, handler)

    # ------------------------------------------------------------------------------ waiting
    def backoff(self) -> float:
        """Wait after ``failures`` consecutive failed cycles: doubling from the interval, capped."""
        if self.failures <= 0:
            return self.interval
        return float(min(self.config.intervals.backoff_max,
                         self.interval * 2 ** min(self.failures, 30)))

    # ------------------------------------------------------------------------------- cycles
    def _skip(self, reason: str, started: float, *, slurm_error: bool) -> CycleReport:
        self.failures += 1
        self.totals.add("cycles_skipped")
        self.metrics.cycles.labels("skipped").inc()
        if slurm_error:
            self.totals.add("slurm_errors")
            self.metrics.slurm_errors.inc()
        wait = self.backoff()
        log.warning("cycle skipped, nothing written: %s; next try in %.0f s (failure %d in a row)",
                    reason, wait, self.failures)
        try:
            self.repository.put_value(TOTALS_KEY, self.totals.to_json(), at=self.clock.time())
        except StateError as err:
            log.warning("could not store the counters either: %s", err)
        return CycleReport(Outcome.SKIPPED, wait, reason=reason,
                           seconds=time.monotonic() - started)

    def _take_lead(self, now: float) -> bool:
        leader = self.lock.acquire_or_renew(self.owner, now, self.config.intervals.lock_ttl)
        if leader and not self.leader:
            log.warning("leader lease taken by %s; this daemon is active", self.owner)
            self.repository.forget_kept_jobs()  # another daemon may have led meanwhile
            self.totals = Totals.from_json(self.repository.get_value(TOTALS_KEY))
            self._standby_logged = False
        if not self._metrics_restored:
            # a new process's counters start at the lifetime totals (Prometheus sees a new
            # series there, not a burst); a standby's too, so that taking the lease later
            # adds only its own cycles
            self.metrics.restore(self.totals if leader else
                                 Totals.from_json(self.repository.get_value(TOTALS_KEY)))
            self._metrics_restored = True
        if not leader and self.leader:
            self.metrics.stand_by()   # the leader's figures are not this daemon's any more
        if not leader and (self.leader or not self._standby_logged):
            holder = self.lock.holder(now)
            who = f"{holder.owner} until {holder.expires_at:.0f}" if holder else "another daemon"
            log.warning("standing by: the leader lease is held by %s; this daemon writes nothing "
                        "until that lease expires", who)
            self._standby_logged = True
        self.leader = leader
        self.metrics.leader.set(1 if leader else 0)
        return leader

    def run_once(self) -> CycleReport:
        """One cycle (see the module docstring); never raises for Slurm or database failures."""
        started = time.monotonic()
        now = self.clock.time()
        try:
            if not self._take_lead(now):
                self.totals.add("standby_cycles")
                self.metrics.cycles.labels("standby").inc()
                holder = self.lock.holder(now)
                wait = self.interval if holder is None else min(
                    self.interval, max(0.1, holder.expires_at - now))
                return CycleReport(Outcome.STANDBY, wait, reason="not the leader",
                                   seconds=time.monotonic() - started)
        except StateError as err:
            return self._skip(f"database: {err}", started, slurm_error=False)
        try:
            snap = self.slurm.snapshot()
        except SlurmError as err:
            return self._skip(f"Slurm query failed: {err}", started, slurm_error=True)
        problem = snapshot_problem(snap, self._previous_snapshot())
        if problem is not None:
            return self._skip(f"unusable snapshot: {problem}", started, slurm_error=True)
        now = self.clock.time()
        try:
            return self._cycle(snap, now, started)
        except StateError as err:
            return self._skip(f"database: {err}", started, slurm_error=False)

    def _previous_snapshot(self) -> float | None:
        """The last cycle's snapshot time, moved by as much as the wall clock stepped since
        (measured against the monotonic clock): after an NTP step back, a new snapshot is
        not taken for stale data until the clock catches up (each cycle would be skipped)."""
        if self._last_snapshot is None or self._seen_at is None:
            return self._last_snapshot
        wall, mono = self._seen_at
        step = (self.clock.time() - wall) - (self.clock.monotonic() - mono)
        if step >= -CLOCK_STEP_TOLERANCE:
            return self._last_snapshot
        log.warning("the system clock went back %.1f s since the last cycle (an NTP step?): "
                    "snapshots are compared from the stepped clock", -step)
        return self._last_snapshot + step

    def _decide(self, snap: ClusterSnapshot, now: float
                ) -> tuple[Decision, dict[int, TrackedJob], JsonValue]:
        """The policy's decisions on ``snap`` with the stored jobs, events, protections and
        state; also the tracked jobs it saw and the stored state (reads only)."""
        repo, policy = self.repository, self.config.policy
        loaded = catch_up(repo.tracked_jobs(), snap, self._last_cycle)
        candidates = requeue_candidates(snap, loaded)
        tracked = with_preemptions(loaded, candidates, repo.daemon_requeues(candidates))
        stored_state = repo.get_value(POLICY_STATE_KEY)
        decision = decide(
            snap, tracked=tracked, events=repo.events_since(now - policy.fairness.window),
            state=state_from_json(stored_state), protections=repo.active_protections(now),
            config=policy, now=now, memo=self._memo,
            max_writes=self.config.intervals.writes_per_cycle)
        return decision, tracked, stored_state

    def _cycle(self, snap: ClusterSnapshot, now: float, started: float) -> CycleReport:
        repo = self.repository
        counted_before = dict(self.totals.values)
        decision, tracked, stored_state = self._decide(snap, now)
        if not self._take_lead(self.clock.time()):  # the snapshot took longer than the lease
            self.totals.add("standby_cycles")
            self.metrics.cycles.labels("standby").inc()
            return CycleReport(Outcome.STANDBY, self.interval, reason="lease lost mid-cycle",
                               seconds=time.monotonic() - started)
        claims = self._claims()
        # Open plans' beneficiaries keep the guard's top priority, and jobs a guard holds are
        # left to it (a priority write would release a hold).
        mine = claims.beneficiaries | claims.held
        done, write_error = self._write({j: v for j, v in decision.writes.items()
                                         if j not in mine})
        jobs = tuple(j if j.job_id not in decision.writes or j.job_id in done else replace(
            j, priority=tracked[j.job_id].priority if j.job_id in tracked else None)
            for j in decision.jobs)
        extras = self._hooks(decision, snap, tracked, now, claims)
        self.totals.add("slurm_writes", len(done))
        self.metrics.slurm_writes.inc(len(done))
        ch = decision.changes
        for name, ids in (("promotions", ch.promotions), ("demotions", ch.demotions),
                          ("decays", ch.decays), ("protections", ch.protections)):
            self.totals.add(name, len(ids))
        if write_error:   # counted as the metrics count it: a skipped cycle (see below)
            self.totals.add("slurm_errors")
            self.totals.add("cycles_skipped")
            self.metrics.slurm_errors.inc()
        else:
            self.totals.add("cycles")
        values: list[tuple[str, JsonValue]] = [(TOTALS_KEY, self.totals.to_json())]
        if decision.state_changed or stored_state is None:
            values.append((POLICY_STATE_KEY, state_to_json(decision.state)))
        try:
            repo.record_cycle(CycleWrite(
                at=now, jobs=jobs, forget_jobs=decision.forget, events=extras.events,
                credits=extras.credits, protections=decision.protections,
                audit=_audit(decision, now) + extras.audit, values=tuple(values)))
        except StateError:
            # Not committed: the next cycle decides these changes again and counts them then.
            # Slurm's writes and errors did happen; they stay counted.
            kept = {k: self.totals.values[k] for k in ("slurm_writes", "slurm_errors")}
            self.totals = Totals(Counter(counted_before))
            self.totals.values.update(kept)
            raise
        self._last_snapshot = float(snap.time)
        self._seen_at = (self.clock.time(), self.clock.monotonic())
        self._last_cycle = now
        if self._urgent_on():  # this cycle planned every pending job: the looks due now
            self.urgent, _ = observe(self.urgent, (brief_of(j) for j in snap.pending), now,
                                     urgent=self._urgent_rule, cycle=True)
            self._look_again(now)
        self.metrics.observe(decision, now)
        if write_error:
            self.failures += 1
            self.metrics.cycles.labels("skipped").inc()
            wait = self.backoff()
            log.warning("writing priorities failed: %s; state saved, next try in %.0f s",
                        write_error, wait)
            return CycleReport(Outcome.SKIPPED, wait, len(done), write_error,
                               time.monotonic() - started, decision)
        if self.failures:
            log.warning("Slurm answers again after %d failed cycle(s)", self.failures)
        self.failures = 0
        self.metrics.cycles.labels("ok").inc()
        seconds = time.monotonic() - started
        self.metrics.cycle_seconds.observe(seconds)
        later = (f" ({decision.deferred} left for later cycles, writes_per_cycle "
                 f"{self.config.intervals.writes_per_cycle})" if decision.deferred else "")
        log.info("cycle: %d pending, %d running, %d priorities written%s, %.3f s",
                 len(decision.inputs.pending), len(decision.inputs.running), len(done), later,
                 seconds)
        return CycleReport(Outcome.OK, self.interval, len(done), "", seconds, decision)

    def _write(self, writes: Mapping[int, int]) -> tuple[set[int], str]:
        """Write every priority in one call (the CLI backend then runs one ``scontrol`` for
        all values: the first cycle at 10,000 jobs wrote 2,000 values). If that fails, write
        one distinct value at a time, so a failure (a job that ended between snapshot and write,
        say) costs only its own group; give up after three failed groups (slurmctld itself is
        probably gone). Returns the jobs written and the errors."""
        groups: dict[int, dict[int, int]] = {}
        for job_id, value in writes.items():
            groups.setdefault(value, {})[job_id] = value
        done: set[int] = set()
        errors: list[str] = []
        if len(groups) > 1:
            try:
                result = self.slurm.set_priorities(writes)
            except SlurmError as err:
                log.warning("writing %d priorities at once failed (%s); writing them one value "
                         "at a time", len(writes), err)
            else:
                self._log_skipped(result)
                return set(result.done), ""
        for value in sorted(groups, reverse=True):  # the highest classes first
            try:
                result = self.slurm.set_priorities(groups[value])
            except SlurmError as err:
                errors.append(str(err))
                if len(errors) >= _MAX_FAILED_WRITES:
                    break
                continue
            done.update(result.done)
            self._log_skipped(result)
        return done, "; ".join(errors)

    @staticmethod
    def _log_skipped(result: ActionResult) -> None:
        for s in result.skipped:
            log.info("priority of job %d not written (%s): %s", s.job_id, s.reason.value,
                     s.message)

    def _claims(self) -> Claims:
        """What the executor's open plans claim (empty for an executor without plans)."""
        claims = getattr(self.executor, "claims", None)
        if claims is None:
            return Claims()
        result = claims()
        return result if isinstance(result, Claims) else Claims()

    def _hooks(self, decision: Decision, snap: ClusterSnapshot,
               tracked: Mapping[int, TrackedJob], now: float,
               claims: Claims | None = None, focus: frozenset[int] | None = None
               ) -> CycleExtras:
        if self.planner is None and self.executor is None:
            return CycleExtras()
        view = CycleView(now=now, snapshot=snap, pending=decision.inputs.pending,
                         running=decision.inputs.running, result=decision.result,
                         tracked=tracked, config=self.config.policy,
                         slurm=self.slurm, repository=self.repository,
                         claims=claims or Claims(), focus=focus)
        try:
            plan = self.planner.plan(view) if self.planner is not None else None
            if self.executor is None:
                return CycleExtras()
            return self.executor.execute(plan, view)
        except HaiSlurmError as err:
            log.warning("preemption step failed this cycle: %s", err)
            return CycleExtras()

    # ------------------------------------------------------------------ plans between cycles
    def _plans_open(self) -> bool:
        has_open = getattr(self.executor, "has_open_plans", None)
        return bool(self.leader and has_open is not None and has_open())

    def step_plans(self) -> None:
        """Step the executor's open plans once between two cycles (no policy, no planner):
        the acknowledgements, Slurm states and deadlines of each open plan are looked at, so
        a plan moves on within ``poll_interval`` of its victims' acks, not a whole cycle."""
        reconcile = getattr(self.executor, "reconcile", None)
        if reconcile is None:
            return
        try:   # a database error renewing the lease waits for the next step, as in a look
            if not self._still_leading(self.clock.time()):
                return
            reconcile()
        except HaiSlurmError as err:
            log.warning("stepping the open plans failed: %s", err)

    def _still_leading(self, now: float) -> bool:
        """Between cycles: renew the lease every few seconds; whether this daemon still leads."""
        mono = self.clock.monotonic()
        if mono - self._last_renew >= min(5.0, self.config.intervals.lock_ttl / 3):
            self._last_renew = mono
            return self._take_lead(now)
        return self.leader

    # ------------------------------------------------------------------------ the urgent path
    def _urgent_on(self) -> bool:
        """The urgent path runs: a planner and an executor, and ``urgent_poll`` > 0."""
        return (self.planner is not None and self.executor is not None
                and self.config.intervals.urgent_poll > 0)

    def urgent_step(self) -> tuple[int, ...]:
        """One poll of the urgent path between cycles: read the pending jobs in brief
        (``pending_briefs``); the new jobs of a class that may preempt, and the watched jobs
        whose next look is due, are planned now (:meth:`look`). Returns the jobs looked at."""
        now = self.clock.time()
        try:
            if not self._still_leading(now):
                return ()
        except StateError as err:
            log.warning("urgent path: renewing the leader lease failed: %s", err)
            return ()
        try:
            briefs = self.slurm.pending_briefs()
        except SlurmError as err:
            log.warning("urgent path: reading the pending jobs failed: %s", err)
            return ()
        self.urgent, due = observe(self.urgent, briefs, now, urgent=self._urgent_rule)
        if due:
            self.look(due)
        return due

    def look(self, job_ids: Iterable[int]) -> CycleExtras | None:
        """Plan for ``job_ids``, now: a fresh snapshot (checked like a cycle's), the policy's
        decisions on it (nothing written: no priorities, no job records: the next cycle does
        that), the planner for those jobs and the pending jobs ranked above them
        (:func:`~.urgent.with_jobs_ahead`: a newcomer does not overtake older top-class jobs
        still waiting) and the executor, with every guard
        of a cycle (open plans' claims, held jobs, the planner's ``min_run_time`` and benefit
        test). What the executor returns (audit lines, events) is committed. None when the
        snapshot or the database failed (logged; the next poll or cycle tries again)."""
        focus = frozenset(job_ids)
        started = time.monotonic()
        try:
            snap = self.slurm.snapshot()
        except SlurmError as err:
            log.warning("urgent look at job(s) %s skipped: Slurm query failed: %s",
                        sorted(focus), err)
            self.metrics.urgent_looks.labels("skipped").inc()
            return None
        problem = snapshot_problem(snap, self._previous_snapshot())
        if problem is not None:
            log.warning("urgent look at job(s) %s skipped: unusable snapshot: %s",
                        sorted(focus), problem)
            self.metrics.urgent_looks.labels("skipped").inc()
            return None
        now = self.clock.time()
        try:
            decision, tracked, _ = self._decide(snap, now)
            extras = self._hooks(decision, snap, tracked, now, self._claims(),
                                 focus=with_jobs_ahead(focus, decision.result.priorities))
            if extras.events or extras.credits or extras.audit:
                self.repository.record_cycle(CycleWrite(
                    at=now, events=extras.events, credits=extras.credits, audit=extras.audit))
        except StateError as err:
            log.warning("urgent look at job(s) %s skipped: database: %s", sorted(focus), err)
            self.metrics.urgent_looks.labels("skipped").inc()
            return None
        self.urgent_looks += 1
        self._look_again(now)
        seconds = time.monotonic() - started
        self.metrics.urgent_looks.labels("ok").inc()
        self.metrics.urgent_look_seconds.observe(seconds)
        log.info("urgent look at job(s) %s: %.3f s", ",".join(map(str, sorted(focus))), seconds)
        return extras

    def _look_again(self, now: float) -> None:
        """Watched jobs the planner's latest pass refused get a look when their wait will
        outweigh the loss, or when a victim too young for them is old enough
        (:func:`~.urgent.look_again`)."""
        worth_in = getattr(self.planner, "worth_in", None)
        ripe_in = getattr(self.planner, "ripe_in", None)
        due = due_in(worth_in if isinstance(worth_in, Mapping) else {},
                     ripe_in if isinstance(ripe_in, Mapping) else {}, cycle=self.interval)
        if due:
            self.urgent = look_again(self.urgent, due, now)

    def _wait(self, report: CycleReport) -> None:
        """Wait for the next cycle. Meanwhile, after a cycle that went well and while this
        daemon leads: step the open plans every ``poll_interval`` s (:meth:`step_plans`), and
        sooner when the executor's ``acks_due()``, asked every ``ack_interval`` s, says a plan
        has its acks; poll for urgent work every ``urgent_poll`` s and at each look's time
        (:meth:`urgent_step`)."""
        now = self.clock.monotonic()
        end = now + report.next_wait
        step_every = float(getattr(self.executor, "poll_interval", 0.0) or 0.0)
        ack_every = float(getattr(self.executor, "ack_interval", 0.0) or 0.0)
        acks_due = getattr(self.executor, "acks_due", None)
        if acks_due is None or not 0 < ack_every < step_every:
            ack_every = 0.0
        poll_every = self.config.intervals.urgent_poll if self._urgent_on() else 0.0
        self._last_renew = now
        next_step, next_poll = now + step_every, now + poll_every
        next_ack = now + ack_every
        # Deadlines are monotonic (a wall clock stepped back would lengthen the wait); the
        # urgent path's looks are wall times, turned monotonic at each turn.
        while not self.stop_event.is_set():
            now = self.clock.monotonic()
            left = end - now
            if left <= 0:
                return
            ok = report.outcome is Outcome.OK
            steps = ok and step_every > 0 and self._plans_open()
            polls = ok and poll_every > 0 and self.leader
            if not steps and not polls:
                self.clock.wait(self.stop_event, left)
                return
            wake = end
            if steps:
                wake = min(wake, next_step, next_ack if ack_every else next_step)
            look = self.urgent.next_look() if polls else None
            if look is not None:
                look = now + (look - self.clock.time())
                if look <= now:
                    look = None  # overdue (the poll failed): the next poll takes it
            if polls:
                wake = min(wake, next_poll, *((look,) if look is not None else ()))
            self.clock.wait(self.stop_event, max(0.0, wake - now))
            now = self.clock.monotonic()
            if now >= end or self.stop_event.is_set():
                return
            if steps and now >= next_step:
                self.step_plans()
                next_step, next_ack = now + step_every, now + ack_every
            elif steps and ack_every and now >= next_ack:
                next_ack = now + ack_every
                if self._acks_due(acks_due):
                    self.step_plans()
                    next_step = now + step_every
            if polls and (now >= next_poll or (look is not None and now >= look)):
                self.urgent_step()
                next_poll = now + poll_every

    @staticmethod
    def _acks_due(acks_due: Callable[[], object] | None) -> bool:
        """The executor's ``acks_due()`` (an open plan has all the acks it waits for); a
        store failure is logged and counts as no."""
        if acks_due is None:
            return False
        try:
            return bool(acks_due())
        except StateError as err:
            log.warning("looking for acknowledgements failed: %s", err)
            return False

    # --------------------------------------------------------------------------------- loop
    def run(self, *, once: bool = False) -> CycleReport | None:
        """Cycle until stopped (``once``: a single cycle); releases the lease on the way out.

        Returns the last cycle's report (None if stopped before the first cycle)."""
        report: CycleReport | None = None
        with self._signals():
            try:
                while not self._stop_requested:
                    report = self.run_once()
                    if once or self._stop_requested:
                        break
                    self._wait(report)
            finally:
                if self.leader:
                    try:
                        self.lock.release(self.owner)
                        log.warning("leader lease released by %s", self.owner)
                    except StateError as err:
                        log.warning("could not release the leader lease (it expires on its "
                                    "own): %s", err)
                    self.leader = False
        return report


def _audit(decision: Decision, now: float) -> tuple[AuditEntry, ...]:
    ch, res = decision.changes, decision.result
    out = [AuditEntry(at=now, kind="promotion", job_id=j, message=(
        f"job {j} promoted by aging to {res.pending[j].effective.value}")) for j in ch.promotions]
    out += [AuditEntry(at=now, kind="demotion", job_id=j, message=(
        f"job {j} demoted one class by the fairness rule")) for j in ch.demotions]
    out += [AuditEntry(at=now, kind="decay", job_id=j, message=f"job {j} decayed")
            for j in ch.decays]
    out += [AuditEntry(at=now, kind="protection", team=p.team, message=(
        f"team {p.team} protected until {p.until:.0f}: {p.reason}"))
        for p in decision.protections]
    return tuple(out)


def open_store(config: DaemonConfig) -> tuple[Repository, LeaderLock]:
    """Migrate the configured database to the current schema; its repository and leader lock.

    A SQLite database under the state dir gets that directory created first.
    """
    url = config.database_url
    if url.startswith("sqlite:///") and url != "sqlite://":
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    engine = upgrade(url)
    return Repository(engine), LeaderLock(engine)
