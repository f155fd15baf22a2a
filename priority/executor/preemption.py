"""The preemption executor: two phases, all or nothing, every step in the database.

A state machine: :meth:`PreemptionExecutor.start` records a plan, puts up its guard and asks its
victims; each :meth:`~PreemptionExecutor.step` looks at an open plan once and moves it on; the
daemon's :meth:`~PreemptionExecutor.execute` steps every open plan once per cycle (and
:meth:`~PreemptionExecutor.reconcile` between cycles) and never waits; :meth:`run` and
:meth:`recover` step until the end, for scripts and tests. Stepped or not, a plan goes the
same way:

:meth:`PreemptionExecutor.run` carries out one
:class:`~hai_slurm.priority.executor.types.ExecutionRequest`: check the jobs afresh, record the
plan, put up the :mod:`~hai_slurm.priority.executor.guard` (a Slurm reservation of the target
nodes for the beneficiary, or competitors held when Slurm refuses it; beneficiary pinned);
**phase 1** asks every victim to checkpoint (``scancel --signal=USR2 --full``, plus Redis
when configured) and polls their control directories
(:func:`~hai_slurm.checkpoint.read_job_report`, trusting only the job owner's files) until each
acknowledged, ended, or missed its deadline (a victim still ``saving`` gets ``saving_extension``
more); **phase 2**, unless one missed (policy ``abort``), requeues them held — acknowledged ones
and ones that ended without an ack alike (a victim is never lost: only a completed, cancelled or
forgotten one is not requeued) — waits for the beneficiary to start, releases the guard and
commits ``done`` with the fairness events and credits (save times from the jobs' own acks).
Policy ``abort`` requeues nobody but the victims that already saved or ended.
:meth:`PreemptionExecutor.recover` finishes or rolls back what a killed daemon left. The full
description, with the state table, is ``PREEMPTION.md`` next to this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from hai_slurm.checkpoint import Ack, JobReport, Phase, ReportReader, read_job_report
from hai_slurm.errors import PlanRefusedError, SlurmError, StateError
from hai_slurm.priority.clock import Clock, SystemClock
from hai_slurm.priority.executor import late_acks
from hai_slurm.priority.executor.guard import (
    RESERVATION_PREFIX,
    Guard,
    PlanContext,
    context_key,
    open_contexts,
    reservation_plan,
    sweep_releases,
    sweep_unpins,
)
from hai_slurm.priority.executor.notify import CheckpointNotifier, NoNotifier
from hai_slurm.priority.executor.records import (
    plan_jobs,
    settle_records,
    victim_contexts,
    victim_summary,
)
from hai_slurm.priority.executor.types import (
    ExecutionRequest,
    ExecutionResult,
    ExecutorSettings,
    VictimContext,
)
from hai_slurm.priority.hooks import Claims, CycleExtras, CycleView
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import AuditEntry, Plan, PlanState, VictimState
from hai_slurm.priority.store.repository import Repository
from hai_slurm.priority.store.states import FINAL_PLAN_STATES
from hai_slurm.slurm_plugins.types import (
    ClusterSnapshot,
    JobFacts,
    JobIds,
    JobState,
    SignalTarget,
    SlurmClient,
)

log = logging.getLogger("hai_slurm.priority.executor.preemption")

Hook = Callable[[str, int], None]
"""Called at named points (``"planned"``, ``"asked"``, ``"phase1_done"``, ``"requeued"``) with
the plan id."""

_EXIT_WAIT = 3.0
"""Seconds an aborted plan waits for acknowledged victims to exit (they exit at once); one that
is still running then is handed to :mod:`.late_acks`, which requeues it once it has exited."""
_ACK_SETTLE = 1.0
"""Seconds a victim seen ended is still watched for its acknowledgement before it counts as
ended without one (it is requeued either way; this only makes the record true)."""
_REQUEUE_RETRY = 10.0
"""Seconds a requeue refused by a victim in transition is retried."""
MISSED_KEY = "executor.missed"
"""Named value: victims that missed an aborted plan -> the restart count they missed with."""
_NOT_REQUEUED = frozenset({JobState.COMPLETED, JobState.CANCELLED})
"""End states of a victim that are not requeued: a real completion (exit 0), or a cancel."""


def _heard(report: JobReport | None, since: float) -> bool:
    """Whether what the job wrote at or after ``since`` shows it heard a request: a phase of
    ``saving``, ``saved`` or ``exiting``, or a pending request named in its phase record."""
    phase = report.phase if report is not None else None
    return phase is not None and phase.time >= since and (
        phase.phase is not Phase.COMPUTING or phase.request_signal is not None)


def _ran(b: JobFacts) -> bool:
    """The beneficiary ended after it ran (any end but a cancel, which may come before a
    start): it took the GPUs, so the preemption happened even if a look missed it running (a
    short job can start and end between two state polls)."""
    return b.finished and b.state is not JobState.CANCELLED


@dataclass(frozen=True, slots=True)
class _NotRequeued:
    """Victims slurmctld did not requeue for good: ``refused`` it still knows (it will not
    requeue them: ``--no-requeue``, ``Requeue=0`` set since), ``forgotten`` it no longer
    knows (``MinJobAge`` passed)."""

    refused: tuple[int, ...] = ()
    forgotten: tuple[int, ...] = ()

    @property
    def ids(self) -> tuple[int, ...]:
        """All of them."""
        return (*self.refused, *self.forgotten)

    def words(self) -> str:
        """Them, with why, for the audit."""
        parts = ([f"{list(self.refused)} (Slurm refuses to requeue them: --no-requeue, or "
                  "Requeue=0 set after the plan chose them)"] if self.refused else [])
        parts += ([f"{list(self.forgotten)} (no longer known: MinJobAge passed?)"]
                  if self.forgotten else [])
        return " and ".join(parts)


class _CompetitorsFromSnapshot:
    """The Slurm client a step's :meth:`Guard.check` sees: every call goes to ``slurm``, except
    that :meth:`job_facts` answers for the pending competitors the guard holds (``ctx.held``,
    which may be most of the queue) from the cycle's snapshot instead of asking slurmctld; a
    competitor not pending in it has ended or started and needs no hold. Without a snapshot
    (a step between two cycles) they are left out: the next cycle's step re-holds them. The
    beneficiary and the requeued victims are always read from Slurm."""

    def __init__(self, slurm: SlurmClient, snap: ClusterSnapshot | None,
                 ctx: PlanContext) -> None:
        self._slurm = slurm
        self._competitors = set(ctx.held) - {ctx.beneficiary, *ctx.victims_held}
        self._pending = {j.job_id: j for j in snap.pending} if snap is not None else {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._slurm, name)

    def job_facts(self, job_ids: JobIds) -> dict[int, JobFacts]:
        ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)
        out = self._slurm.job_facts([j for j in ids if j not in self._competitors])
        for jid in ids:
            job = self._pending.get(jid) if jid in self._competitors else None
            if job is not None:
                out[jid] = JobFacts(jid, job.state, job.restart_count, job.held)
        return out


class PreemptionExecutor:
    """Carries out preemption plans (see the module docstring). Not thread-safe."""

    def __init__(self, slurm: SlurmClient, repo: Repository, *,
                 notifier: CheckpointNotifier | None = None,
                 settings: ExecutorSettings | None = None, clock: Clock | None = None,
                 stop: threading.Event | None = None,
                 heartbeat: Callable[[], bool] | None = None,
                 reader: ReportReader = read_job_report, hook: Hook | None = None) -> None:
        self.slurm = slurm
        self.repo = repo
        self.notifier: CheckpointNotifier = notifier or NoNotifier()
        self.settings = settings or ExecutorSettings()
        self.clock: Clock = clock or SystemClock()
        self.stop = stop or threading.Event()
        self.heartbeat = heartbeat
        self.reader = reader
        self.hook = hook or (lambda _point, _plan: None)
        self._last_beat = self.clock.monotonic()
        self._next_states: dict[int, float] = {}
        """Plan -> monotonic time of its next Slurm state query (:meth:`_look`)."""
        self._verified: dict[int, float] = {}
        """Plan -> monotonic time its reservation was last looked up (:meth:`step`)."""
        self._resent: dict[int, set[int]] = {}
        """Plan -> victims asked a second time (:meth:`_resend_if_unheard`)."""
        self._anchors: dict[int, dict[str, tuple[float, float]]] = {}
        """Plan -> what -> (a wall time stored in its context, the monotonic time it stands
        for in this process) (:meth:`_elapsed`)."""
        self._swept = False
        self._open = True  # unknown until the first reconcile: look once

    # ------------------------------------------------------------------------ daemon hook
    @property
    def poll_interval(self) -> float:
        """Seconds between two steps of the open plans the daemon makes between its cycles
        (the executor's Slurm state poll: each step reads Slurm once per open plan)."""
        return self.settings.state_poll

    def has_open_plans(self) -> bool:
        """True when the latest look found a plan still open (cheap: no query)."""
        return self._open

    @property
    def ack_interval(self) -> float:
        """Seconds between two :meth:`acks_due` looks the daemon makes while plans are open
        (the ``poll`` setting: reading the victims' control directories is cheap)."""
        return self.settings.poll

    def acks_due(self) -> bool:
        """Whether an open plan that waits for acknowledgements now has one from every victim
        it still waits for (the store and the control directories are read, Slurm is not).
        The daemon then steps the plans at once, so the victims are requeued and the
        beneficiary starts within ``poll`` of the last ack, not at the next state poll."""
        for plan in self.repo.unfinished_plans():
            asked = [v.job_id for v in plan.victims if v.state is VictimState.ASKED]
            if plan.state is not PlanState.SIGNALLED or not asked:
                continue
            ctx = self._context(plan.plan_id)
            if ctx is None or ctx.undo is not None:
                continue
            asked_at = ctx.asked_at or plan.created_at
            reports = [self._report(plan.plan_id, ctx, asked_at, jid) for jid in asked]
            if all(r is not None and r.ack is not None for r in reports):
                return True
        return False

    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        """The daemon's hook: step every open plan once (:meth:`reconcile`), then start what
        the planner proposed (converted with
        :func:`~hai_slurm.priority.executor.requests.requests_from`) and is not claimed by an
        open plan. Never waits: the plans move on at the next steps."""
        from hai_slurm.priority.executor.requests import requests_from

        late_acks.sweep(self.repo, self.slurm, self.reader, self._now(),
                        self.settings.clock_skew)
        self.sweep_leftovers(view.snapshot)
        self.reconcile(view.snapshot)
        if plan is None:
            return CycleExtras()
        audit: list[AuditEntry] = []
        claims = self.claims()
        for request in requests_from(plan, view.snapshot, view.config,
                                     self.settings.default_deadline):
            busy = sorted({request.beneficiary, *request.victims} & claims.jobs)
            if busy:
                log.info("preemption for job %d not started: jobs %s are claimed by open "
                         "plans", request.beneficiary, busy)
                continue
            victims = self.prepare(request, view.snapshot)
            if isinstance(victims, str):
                log.info("preemption for job %d not started: %s", request.beneficiary, victims)
                audit.append(AuditEntry(at=self._now(), kind="plan-refused",
                                        job_id=request.beneficiary, message=victims))
                continue
            try:
                self.start(request, view.snapshot, victims)
            except PlanRefusedError as err:
                log.warning("%s", err)
                audit.append(AuditEntry(at=self._now(), kind="plan-refused",
                                        job_id=request.beneficiary, message=str(err)))
                continue
            claims = self.claims()
        return CycleExtras(audit=tuple(audit))

    def claims(self) -> Claims:
        """Beneficiaries, victims and held jobs of the open plans (the store's plan records
        and guard contexts), plus victims that missed an aborted plan and still run (one
        query when nothing is open)."""
        bene: set[int] = set()
        victims: set[int] = set(self._missed())
        held: set[int] = set()
        closed: set[str] = set()
        for plan in self.repo.unfinished_plans():
            bene.update(b.job_id for b in plan.beneficiaries)
            victims.update(v.job_id for v in plan.victims)
            ctx = self._context(plan.plan_id)
            if ctx is not None and not ctx.released:
                held.update(ctx.held)
                held.update(ctx.victims_held)
                if ctx.reservation is not None:
                    closed.update(ctx.nodes)
        return Claims(frozenset(bene), frozenset(victims), frozenset(held), frozenset(closed))

    # ---------------------------------------------------------------------------- helpers
    def _now(self) -> float:
        return self.clock.time()

    def _elapsed(self, plan_id: int, what: str, at: float) -> float:
        """Seconds since ``at``, a wall time stored for plan ``plan_id`` (``what``: its
        request, a victim seen ended, its requeue, ...), measured on the monotonic clock: a
        step of the wall clock (NTP) neither shortens a victim's deadline, which would requeue
        a victim still saving without its acknowledgement, nor lengthens any wait.

        The stored wall times are what a restarted daemon or a new leader finishes a plan
        from; the elapsed time of one stored by another process can only come from the wall
        clock. So each is anchored once, when this process first looks at it
        (:meth:`_anchor`; at once for the times it stores itself), and from then on only the
        monotonic clock counts."""
        anchor = self._anchors.get(plan_id, {}).get(what)
        if anchor is None or anchor[0] != at:
            anchor = self._anchor(plan_id, what, at)
        return self.clock.monotonic() - anchor[1]

    def _anchor(self, plan_id: int, what: str, at: float) -> tuple[float, float]:
        """Anchor the stored wall time ``at`` (see :meth:`_elapsed`) at the monotonic time
        now less what the wall clock says has passed since ``at``: nothing for a time stored
        just now, and never less than nothing (a time ahead of the wall clock, which stepped
        back since, counts from now)."""
        anchor = (at, self.clock.monotonic() - max(0.0, self._now() - at))
        self._anchors.setdefault(plan_id, {})[what] = anchor
        return anchor

    def _heard_since(self, plan_id: int, asked_at: float) -> float:
        """The earliest time a victim's records may bear and still count as written after
        the request (stored at ``asked_at``): the request's time on the wall clock as it reads
        now (:meth:`_elapsed` ago), less ``clock_skew``. After a step back, the victims'
        clocks, stepped with the daemon's, date what they write before the stored time: an
        acknowledgement would be refused as stale and a saving victim asked again."""
        now = self._now() - self._elapsed(plan_id, "asked", asked_at)
        return min(asked_at, now) - self.settings.clock_skew

    def _sleep(self, seconds: float) -> None:
        self.clock.wait(self.stop, seconds)
        if self.heartbeat is not None and self.clock.monotonic() - self._last_beat > 5.0:
            self._last_beat = self.clock.monotonic()
            if not self.heartbeat():
                raise StateError("lost the leader lease while executing a plan; the new leader "
                                 "finishes it (recover)")

    def _audit(self, plan_id: int, message: str, **data: int | str | None) -> None:
        self.repo.audit(AuditEntry(at=self._now(), kind="plan", plan_id=plan_id,
                                   message=message, data=dict(data)))

    def _context(self, plan_id: int) -> PlanContext | None:
        raw = self.repo.get_value(context_key(plan_id))
        return PlanContext.from_json(raw) if isinstance(raw, dict) else None

    def _report(self, plan_id: int, ctx: PlanContext, asked_at: float, jid: int
                ) -> JobReport | None:
        v = ctx.victim(jid)
        if v.control_dir is None:
            return None
        return self.reader(v.control_dir, str(jid), v.uid, restart_count=v.restart_count,
                           not_before=self._heard_since(plan_id, asked_at))

    # ---------------------------------------------------------- shunned (missed) victims
    def _missed(self) -> dict[int, int]:
        raw = self.repo.get_value(MISSED_KEY)
        if not isinstance(raw, dict):
            return {}
        return {int(k): v for k, v in raw.items() if isinstance(v, int)}

    def _remember_missed(self, restart_counts: Mapping[int, int]) -> None:
        if restart_counts:
            kept = {**self._missed(), **restart_counts}
            self.repo.put_value(MISSED_KEY, {str(k): v for k, v in kept.items()},
                                at=self._now())

    def _prune_missed(self, snap: ClusterSnapshot) -> None:
        """Forget missed victims that no longer run at the restart count they missed with."""
        missed = self._missed()
        if not missed:
            return
        running = {j.job_id: j.restart_count for j in snap.running}
        kept = {j: rc for j, rc in missed.items() if running.get(j) == rc}
        if kept != missed:
            self.repo.put_value(MISSED_KEY, {str(k): v for k, v in kept.items()},
                                at=self._now())

    # -------------------------------------------------------------------------- phase 0
    def prepare(self, request: ExecutionRequest, snap: ClusterSnapshot
                ) -> tuple[VictimContext, ...] | str:
        """The victims' contexts, or why the request cannot start (nothing is done then).

        Reads the jobs afresh: the beneficiary must still wait and every victim still run.
        """
        facts = self.slurm.job_facts([request.beneficiary, *request.victims])
        return victim_contexts(request, snap, facts, self.settings.default_deadline)

    def start(self, request: ExecutionRequest, snap: ClusterSnapshot,
              victims: tuple[VictimContext, ...] | None = None) -> int:
        """Record the plan, put up the guard and ask the victims; return the plan id at once
        (the plan moves on at each :meth:`step`). ``victims`` is what :meth:`prepare` returned
        (it is called when not given); raises PlanRefusedError, with nothing done, when the
        request cannot start. A Slurm failure here starts the plan's roll-back."""
        if victims is None:
            prepared = self.prepare(request, snap)
            if isinstance(prepared, str):
                raise PlanRefusedError(f"preemption for job {request.beneficiary} not "
                                       f"started: {prepared}")
            victims = prepared
        request, snap = self._own_job(request, snap)
        beneficiaries, victim_jobs = plan_jobs(request, snap)
        now = self._now()
        plan = self.repo.create_plan(
            at=now, beneficiaries=beneficiaries, victims=victim_jobs,
            reason=request.reason or f"job {request.beneficiary} needs the GPUs of "
            f"{', '.join(map(str, request.victims))}",
            on_miss=request.on_miss, deadline_at=now + max(v.deadline for v in victims))
        others = self.claims()
        guard = Guard(self.slurm, self.repo)
        ctx = guard.save(PlanContext(plan.plan_id, request.beneficiary, request.nodes, victims,
                                     signal=self.settings.signal), now)
        self._open = True
        try:
            self.hook("planned", plan.plan_id)
            ctx = guard.apply(ctx, snap, now, sorted(others.beneficiaries),
                              minutes=self._reservation_minutes(victims))
            self._ask(guard, plan.plan_id, [v.job_id for v in victims])
            log.warning("plan %d for job %d started: victims %s", plan.plan_id,
                        request.beneficiary, list(request.victims))
        except SlurmError as err:
            self._begin_undo(guard, self.repo.get_plan(plan.plan_id),
                             f"Slurm failed during the plan: {err}", PlanState.ROLLED_BACK)
        return plan.plan_id

    def _own_job(self, request: ExecutionRequest, snap: ClusterSnapshot
                 ) -> tuple[ExecutionRequest, ClusterSnapshot]:
        """The request and snapshot with an array's own pending record as beneficiary replaced
        by its first task, made a job of its own (:meth:`SlurmClient.split_array_task`):
        Slurm pins and links such a record only as a whole, or refuses once one of its tasks
        has started, so the guard could not stand for it. The array's other tasks wait as
        before (a later plan may help the next). Raises PlanRefusedError, with nothing else
        done, when Slurm refuses the split or the split-off task no longer waits."""
        job = snap.job(request.beneficiary)
        if job is None or job.array_job_id != job.job_id or job.array_task_id is not None \
                or not job.array_tasks:
            return request, snap
        try:
            task = self.slurm.split_array_task(job.job_id)
            if task == job.job_id:
                return request, snap
            facts = self.slurm.job_facts([task]).get(task)
        except SlurmError as err:
            raise PlanRefusedError(f"preemption for job {job.job_id} not started: its first "
                                   f"array task could not be made a job of its own: {err}"
                                   ) from err
        if facts is None or not facts.pending:
            raise PlanRefusedError(f"preemption for job {job.job_id} not started: its first "
                                   f"array task, job {task}, does not wait any more "
                                   f"({facts.state if facts else 'gone'})")
        log.info("job %d is an array's pending record (tasks %s): its first task is job %d "
                 "now, the plan's beneficiary", job.job_id, job.array_tasks, task)
        # the task as the plan records it (its user, account, GPUs); which task it is, is
        # Slurm's to say in the next snapshot
        split = replace(job, job_id=task, array_tasks="")
        return replace(request, beneficiary=task), replace(snap, jobs=(*snap.jobs, split))

    def _reservation_minutes(self, victims: Sequence[VictimContext]) -> int:
        """How long a plan's reservation is made for: the longest deadline, its saving
        extension, the requeue retries and the start wait, plus 5 min, in whole minutes. A
        plan that outlives it (a daemon down meanwhile) gets it again at its next step."""
        longest = max((v.deadline for v in victims), default=self.settings.default_deadline)
        seconds = (longest + self.settings.saving_extension + _REQUEUE_RETRY
                   + self.settings.start_timeout)
        return int(-(-seconds // 60)) + 5

    def sweep_reservations(self) -> list[str]:
        """End every ``hai-plan-*`` reservation that no open plan's guard stands on (left by
        a daemon killed between making one and storing the plan's end); the names ended."""
        try:
            found = self.slurm.reservations(RESERVATION_PREFIX)
        except SlurmError as err:
            log.warning("cannot list the guard's reservations (%s); looking again later", err)
            return []
        self._swept = True
        if not found:
            return []
        kept = {c.reservation for c in open_contexts(self.repo) if c.reservation is not None}
        out = []
        for r in found:
            if reservation_plan(r.name) is None or r.name in kept:
                continue
            try:
                if self.slurm.end_reservation(r.name):
                    out.append(r.name)
                    log.warning("reservation %s belonged to no open plan: removed", r.name)
            except SlurmError as err:
                log.warning("could not remove leftover reservation %s: %s", r.name, err)
        return out

    def run(self, request: ExecutionRequest, snap: ClusterSnapshot,
            victims: tuple[VictimContext, ...] | None = None) -> ExecutionResult:
        """:meth:`start`, then :meth:`step` every ``poll`` s until the plan ends (blocks up to
        the victims' deadlines; for scripts and tests, the daemon steps instead).

        A Slurm failure before phase 2 rolls the plan back; one after (the victims saved or
        ended: undoing would requeue them all the same) is raised, and the next
        :meth:`reconcile` or :meth:`recover` finishes the plan.
        """
        started = self.clock.monotonic()
        plan_id = self.start(request, snap, victims)
        while True:
            plan = self.repo.get_plan(plan_id)
            if plan.state in FINAL_PLAN_STATES:
                final = self._result(plan_id, plan.steps[-1].note if plan.steps else "", False)
                return replace(final, seconds=self.clock.monotonic() - started)
            result: ExecutionResult | None
            try:
                result = self.step(plan)
            except SlurmError as err:
                plan = self.repo.get_plan(plan_id)
                if plan.state in (PlanState.ALL_ACKED, PlanState.FORCED, PlanState.REQUEUED):
                    raise
                ctx = self._context(plan_id)
                if ctx is None or ctx.undo is not None:
                    raise
                result = self._begin_undo(Guard(self.slurm, self.repo, ctx), plan,
                                          f"Slurm failed during the plan: {err}",
                                          PlanState.ROLLED_BACK)
            if result is not None:
                return replace(result, seconds=self.clock.monotonic() - started)
            self._sleep(self.settings.poll)

    # ------------------------------------------------------------------ the reconcile step
    def reconcile(self, snap: ClusterSnapshot | None = None) -> list[ExecutionResult]:
        """Step every open plan once (the daemon calls this each cycle with its snapshot, and
        every :attr:`poll_interval` between cycles while plans are open); returns the plans
        that ended. A Slurm or state-store failure in one plan's step leaves it for the next
        step; the other plans are stepped."""
        out = []
        if not self._swept:
            self.sweep_reservations()
        plans = self.repo.unfinished_plans()
        beneficiaries = sorted({b.job_id for p in plans for b in p.beneficiaries})
        for plan in plans:
            try:
                result = self.step(plan, snap, beneficiaries)
            except SlurmError as err:
                log.warning("plan %d: Slurm failed in this step (%s); the next step retries",
                            plan.plan_id, err)
                continue
            except StateError as err:   # the store failed, or refused a transition: this
                # plan waits for the next step, the others go on
                log.error("plan %d: this step failed in the state store (%s); the next step "
                          "retries", plan.plan_id, err)
                continue
            if result is not None:
                out.append(result)
                log.warning("plan %d for job %d ended %s: %s", result.plan_id,
                            plan.beneficiaries[0].job_id if plan.beneficiaries else 0,
                            result.state, result.note)
        self._open = len(plans) > len(out)
        if snap is not None:
            self._prune_missed(snap)
        return out

    def sweep_leftovers(self, snap: ClusterSnapshot) -> None:
        """What ended plans leave to later cycles (each :meth:`execute` runs it): release
        victims requeued held that became pending after their guard's release
        (:func:`sweep_releases`), and clean up after beneficiaries pending again
        (:func:`sweep_unpins`)."""
        sweep_releases(self.repo, self.slurm, self._now())
        sweep_unpins(self.repo, self.slurm, snap, self._now())

    def recover(self) -> list[ExecutionResult]:
        """Finish every open plan (after a daemon restart, or for a script): requeue victims of
        aborted plans that acknowledged late, then :meth:`reconcile` every ``poll`` s until no
        plan is open (or the stop event is set). The daemon does not call this: it reconciles
        once per step and never waits."""
        late_acks.sweep(self.repo, self.slurm, self.reader, self._now(),
                        self.settings.clock_skew)
        self._swept = False   # look for leftover reservations (again)
        out = self.reconcile()
        while self._open and not self.stop.is_set():
            self._sleep(self.settings.poll)
            out += self.reconcile()
        sweep_releases(self.repo, self.slurm, self._now())
        return out

    def resume(self, plan: Plan) -> ExecutionResult:
        """Take up one unfinished plan and step it until it ends."""
        while True:
            result = self.step(self.repo.get_plan(plan.plan_id))
            if result is not None:
                return result
            self._sleep(self.settings.poll)

    def step(self, plan: Plan, snap: ClusterSnapshot | None = None,
             others: Sequence[int] = ()) -> ExecutionResult | None:
        """Look at one open plan once (acks, Slurm states, deadlines), move it on as far as
        that look allows, and return its result when it ended (else None).

        A standing guard is checked first and what a slurmctld restart lost is re-applied
        (:meth:`Guard.check`; with ``snap``, the beneficiary's priority, and jobs submitted
        since are held; ``others``: open plans' beneficiaries, never held). Slurm is asked for
        the beneficiary's and the victims' states only: the held competitors' come from
        ``snap``, and a step without one leaves them to the next cycle's."""
        ctx = self._context(plan.plan_id)
        if ctx is None:
            return self._without_context(plan)
        guard = Guard(self.slurm, self.repo, ctx)
        now = self._now()
        mono = self.clock.monotonic()
        last = self._verified.get(plan.plan_id)
        verify = snap is not None or last is None or mono >= last + 5.0
        if snap is not None and ctx.pinned_from is not None and not ctx.released:
            self._unpin_if_down(guard, plan.plan_id, snap, now)
            ctx = guard.context or ctx   # unpinned (and its reservation ended): check that
        try:
            # The check reads the held competitors' states from the cycle's snapshot (between
            # cycles it leaves them to the next cycle): a query of every held job cost 50
            # squeue calls per step at 10,000 pending (bench/load).
            view = cast(SlurmClient, _CompetitorsFromSnapshot(self.slurm, snap, ctx))
            guard.context = Guard(view, self.repo, ctx).check(now, snap, others,
                                                              verify=verify) or ctx
            if verify:
                self._verified[plan.plan_id] = mono
        except SlurmError as err:  # slurmctld restarting: the acks are still read
            log.warning("plan %d: cannot check the guard (%s)", plan.plan_id, err)
        if ctx.undo is not None:
            return self._step_undo(guard, plan)
        if plan.state is PlanState.PLANNED:
            asked = [v.job_id for v in plan.victims if v.state is not VictimState.CHOSEN]
            b = self.slurm.job_facts([ctx.beneficiary]).get(ctx.beneficiary)
            alive = b is not None and (b.pending or b.running)
            if not asked or not alive:
                why = "nobody had been asked yet" if not asked else \
                    f"beneficiary {ctx.beneficiary} no longer waits ({b.state if b else 'gone'})"
                return self._begin_undo(guard, plan, f"recovered: {why}", PlanState.ROLLED_BACK)
            chosen = [v.job_id for v in plan.victims if v.state is VictimState.CHOSEN]
            self.repo.update_victims(plan.plan_id, chosen, VictimState.ASKED, at=now)
            self.slurm.signal(chosen, ctx.signal, target=SignalTarget.WORKLOAD)
            self.repo.transition_plan(plan.plan_id, PlanState.SIGNALLED, at=self._now(),
                                      note="recovered: asked the remaining victims")
            plan = self.repo.get_plan(plan.plan_id)
        if plan.state is PlanState.SIGNALLED:
            waiting = {v.job_id for v in plan.victims if v.state is VictimState.ASKED}
            b = self._look(guard, plan, waiting) if waiting else None
            if b is not None and not (b.pending or b.running or _ran(b)):
                return self._begin_undo(guard, self.repo.get_plan(plan.plan_id),
                                        f"beneficiary {ctx.beneficiary} no longer waits "
                                        f"({b.state})", PlanState.ROLLED_BACK)
            plan = self.repo.get_plan(plan.plan_id)
            if any(v.state is VictimState.ASKED for v in plan.victims):
                return None
            self.hook("phase1_done", plan.plan_id)
            ctx = guard.context or ctx
            missed = [v.job_id for v in plan.victims if v.state is VictimState.MISSED]
            could_ack = [j for j in missed if ctx.victim(j).control_dir is not None]
            if could_ack and plan.on_miss is DeadlineAction.ABORT:
                return self._begin_undo(guard, plan, f"victim(s) {sorted(could_ack)} missed the "
                                        "deadline; nobody requeued", PlanState.ABORTED)
            ended = sorted(v.job_id for v in plan.victims if v.state is VictimState.ENDED)
            if missed or ended:
                parts = [f"victim(s) {sorted(missed)} missed the deadline (requeued without an "
                       "acknowledgement: policy force, or they cannot acknowledge)"] \
                    if missed else []
                parts += [f"victim(s) {ended} ended without an acknowledgement"] if ended else []
                self.repo.transition_plan(plan.plan_id, PlanState.FORCED, at=self._now(),
                                          note="; ".join(parts) + "; requeued anyway, to resume "
                                          "from their newest valid checkpoints")
            else:
                self.repo.transition_plan(plan.plan_id, PlanState.ALL_ACKED, at=self._now(),
                                          note="every victim acknowledged its checkpoint")
            plan = self.repo.get_plan(plan.plan_id)
        if plan.state in (PlanState.ALL_ACKED, PlanState.FORCED):
            requeued = self._requeue(guard, plan)
            if requeued is None:
                return None
            plan = requeued
        return self._step_requeued(guard, plan)

    def _unpin_if_down(self, guard: Guard, plan_id: int, snap: ClusterSnapshot,
                       now: float) -> None:
        """A target node that Slurm no longer offers (down, not responding, drained): unpin
        the beneficiary so it can start elsewhere; the victims are still handled as planned."""
        assert guard.context is not None
        ctx = guard.context
        # RESERVED: the plan's own reservation; a node awaiting its registration after a
        # slurmctld restart shows a stale state (UNKNOWN when idle): not lost, it keeps the pin
        down = {n.name: "+".join([n.state, *n.state_flags]) for n in snap.nodes
                if n.name in ctx.nodes and n.lost and not n.awaiting_registration}
        if not down:
            return
        try:
            guard.unpin(now)
        except SlurmError as err:
            log.warning("plan %d: cannot unpin beneficiary %d (%s)", plan_id, ctx.beneficiary,
                        err)
            return
        what = ", ".join(f"{n} {s}" for n, s in sorted(down.items()))
        log.warning("plan %d: target node(s) %s; beneficiary %d unpinned so it can start "
                    "elsewhere", plan_id, what, ctx.beneficiary)
        self._audit(plan_id, f"plan {plan_id}: target node(s) {what}: beneficiary "
                    f"{ctx.beneficiary} unpinned so it can start elsewhere",
                    job_id=ctx.beneficiary)

    def _without_context(self, plan: Plan) -> ExecutionResult:
        if plan.state is PlanState.REQUEUED:  # context already cleared: only DONE missing
            self.repo.transition_plan(plan.plan_id, PlanState.DONE, at=self._now(),
                                      note="recovered", also=settle_records(plan, self._now()))
            return self._result(plan.plan_id, "recovered", False)
        self.repo.transition_plan(plan.plan_id, PlanState.ROLLED_BACK, at=self._now(),
                                  note="recovered without a stored context: nothing had "
                                  "been done yet")
        return self._result(plan.plan_id, "rolled back (no context)", False)

    # -------------------------------------------------------------------------- phase 1
    def _ask(self, guard: Guard, plan_id: int, job_ids: list[int]) -> None:
        assert guard.context is not None
        now = self._now()
        ctx = guard.save(replace(guard.context, asked_at=now), now)
        self._anchor(plan_id, "asked", now)
        self.repo.update_victims(plan_id, job_ids, VictimState.ASKED, at=now)
        result = self.slurm.signal(job_ids, ctx.signal, target=SignalTarget.WORKLOAD)
        for v in ctx.victims:
            if v.job_id in job_ids:
                self.notifier.notify(v.job_id, plan_id=plan_id, signal=ctx.signal,
                                     deadline=now + v.deadline)
        self.repo.transition_plan(plan_id, PlanState.SIGNALLED, at=self._now(),
                                  note=f"asked {len(result.done)} victim(s) to checkpoint with "
                                  f"SIG{ctx.signal}")
        self.hook("asked", plan_id)

    def _acked(self, plan_id: int, asked_at: float, jid: int, ack: Ack, now: float) -> None:
        """Record a trusted acknowledgement at the time the job wrote it (its own clock, kept
        between the request and now: a node clock may lag or lead the daemon's)."""
        at = min(max(ack.time, asked_at), now)
        self.repo.update_victims(plan_id, [jid], VictimState.ACKED, at=at, ack_step=ack.step)

    def _ended(self, guard: Guard, plan_id: int, jid: int, state: JobState | None,
               now: float) -> None:
        """A victim ended without a trusted acknowledgement: requeue it (``ended``) unless it
        completed, was cancelled or is forgotten by slurmctld (``gone``, each with an audit
        line)."""
        if state is not None and state not in _NOT_REQUEUED:
            self.repo.update_victims(plan_id, [jid], VictimState.ENDED, at=now)
            assert guard.context is not None
            guard.save(replace(guard.context,
                               ended={**guard.context.ended, jid: state.value}), now)
            how = ("was requeued by Slurm (RequeueExit) before an acknowledgement was read"
                   if state is JobState.PENDING else
                   f"ended ({state}) without an acknowledgement")
            self._audit(plan_id, f"plan {plan_id}: victim {jid} {how}; it is requeued (held) "
                        "and resumes from its newest valid checkpoint", job_id=jid,
                        state=state.value)
            return
        self.repo.update_victims(plan_id, [jid], VictimState.GONE, at=now)
        why = ("is no longer known to slurmctld (MinJobAge passed?): it cannot be requeued "
               "and is LOST" if state is None else
               f"{'completed (exit 0)' if state is JobState.COMPLETED else 'was cancelled'} "
               "during the plan; not requeued")
        self._audit(plan_id, f"plan {plan_id}: victim {jid} {why}", job_id=jid,
                    state=state.value if state else None)

    def _look(self, guard: Guard, plan: Plan, waiting: set[int]) -> JobFacts | None:
        """One look at the victims in ``waiting`` (each acked, ended, missed, or still asked),
        and at most every ``state_poll`` s one Slurm query of their states and the
        beneficiary's (returned; None when not queried or the query failed).

        A victim seen ended is watched ``_ACK_SETTLE`` s more (an ack written just before or
        after the job's end still counts); a Slurm query that fails is retried at the next
        state poll (the acknowledgements on disk are still read, the deadlines still count), so
        a slurmctld restart does not undo a plan whose victims are saving.
        """
        assert guard.context is not None
        ctx = guard.context
        plan_id = plan.plan_id
        asked_at = ctx.asked_at or plan.created_at
        now = self._now()
        waited = self._elapsed(plan_id, "asked", asked_at)
        for jid in sorted(waiting):
            report = self._report(plan_id, ctx, asked_at, jid)
            if report is not None and report.ack is not None:
                self._acked(plan_id, asked_at, jid, report.ack, now)
                waiting.discard(jid)
                continue
            if jid in ctx.seen_end:
                if self._elapsed(plan_id, f"seen-end {jid}", ctx.seen_end[jid]) >= _ACK_SETTLE:
                    raw = ctx.end_states.get(jid, "")
                    self._ended(guard, plan_id, jid, JobState(raw) if raw else None, now)
                    waiting.discard(jid)
                continue
            v = ctx.victim(jid)
            self._resend_if_unheard(plan_id, ctx, v, report, asked_at, waited)
            saving = report is not None and report.saving
            if waited >= v.deadline and not (
                    saving and waited < v.deadline + self.settings.saving_extension):
                self.repo.update_victims(plan_id, [jid], VictimState.MISSED, at=now)
                ctx = guard.save(replace(guard.context, missed=(*guard.context.missed, jid)),
                                 now)
                waiting.discard(jid)
                why = ("it cannot acknowledge (no #HAI --checkpoint-dir)"
                       if v.control_dir is None else "still saving at the extended deadline"
                       if saving else "no acknowledgement" + (
                           f" ({'; '.join(report.problems)})"
                           if report and report.problems else ""))
                self._audit(plan_id, f"plan {plan_id}: victim {jid} missed its deadline "
                            f"of {v.deadline:g} s: {why}", job_id=jid)
        mono = self.clock.monotonic()
        next_states = self._next_states.get(plan_id)
        if next_states is not None and mono < next_states:
            return None
        self._next_states[plan_id] = mono + self.settings.state_poll
        query = sorted(j for j in waiting if j not in ctx.seen_end)
        try:
            facts = self.slurm.job_facts([*query, ctx.beneficiary])
        except SlurmError as err:
            log.warning("plan %d: cannot read the victims' states (%s); retrying in %g s",
                        plan_id, err, self.settings.state_poll)
            return None
        seen = {}
        for jid in query:
            f = facts.get(jid)
            if f is None or not f.running:  # pending: Slurm requeued it (RequeueExit)
                seen[jid] = f.state.value if f is not None else ""
        if seen:
            assert guard.context is not None
            guard.save(replace(guard.context,
                               seen_end={**guard.context.seen_end, **dict.fromkeys(seen, now)},
                               end_states={**guard.context.end_states, **seen}), now)
            for jid in seen:
                self._anchor(plan_id, f"seen-end {jid}", now)
        return facts.get(ctx.beneficiary)

    def _resend_if_unheard(self, plan_id: int, ctx: PlanContext, v: VictimContext,
                           report: JobReport | None, asked_at: float, waited: float) -> None:
        """Ask victim ``v`` once more when it can acknowledge but, ``resend_after`` s (or half
        its deadline) after the request (``waited`` s ago, :meth:`_elapsed`), nothing it wrote
        shows the request: a request sent while its step was listed but its task not started
        reached no process (:attr:`~.types.ExecutorSettings.resend_after`). Once per victim
        and daemon."""
        after = min(self.settings.resend_after, v.deadline / 2)
        resent = self._resent.setdefault(plan_id, set())
        if (v.control_dir is None or after <= 0 or waited < after
                or v.job_id in resent or _heard(report, self._heard_since(plan_id, asked_at))):
            return
        resent.add(v.job_id)
        try:
            self.slurm.signal([v.job_id], ctx.signal, target=SignalTarget.WORKLOAD)
        except SlurmError as err:
            log.warning("plan %d: asking victim %d again failed: %s", plan_id, v.job_id, err)
            return
        self._audit(plan_id, f"plan {plan_id}: victim {v.job_id} showed no sign of the "
                    f"request after {waited:.1f} s; asked again with SIG{ctx.signal}",
                    job_id=v.job_id)

    # -------------------------------------------------------------------------- phase 2
    def _late_acks(self, plan: Plan, ctx: PlanContext) -> Plan:
        """Victims recorded ``ended`` whose acknowledgement has landed since become ``acked``."""
        if not any(v.state is VictimState.ENDED for v in plan.victims):
            return plan
        asked_at = ctx.asked_at or plan.created_at
        changed = False
        for v in plan.victims:
            if v.state is VictimState.ENDED:
                report = self._report(plan.plan_id, ctx, asked_at, v.job_id)
                if report is not None and report.ack is not None:
                    self._acked(plan.plan_id, asked_at, v.job_id, report.ack, self._now())
                    changed = True
        return self.repo.get_plan(plan.plan_id) if changed else plan

    def _requeue_some(self, guard: Guard, plan_id: int, todo: list[int], *, hold: bool
                      ) -> _NotRequeued | None:
        """Requeue ``todo`` (recording each one done ``requeued``); the ones slurmctld does not
        requeue for good, or None while some it still knows are retried: a job in transition
        (COMPLETING, or being requeued by ``RequeueExit=75``) refuses the requeue and the hold
        for a moment, so refusals are retried at each step for up to ``_REQUEUE_RETRY`` s. A
        job Slurm will never requeue (``--no-requeue``, or ``Requeue=0`` set after the plan
        chose it) is among them once that time has passed, not retried for ever."""
        assert guard.context is not None
        now = self._now()
        if guard.context.requeue_from is None:
            guard.save(replace(guard.context, requeue_from=now), now)
            self._anchor(plan_id, "requeue", now)
        assert guard.context.requeue_from is not None
        done = set(self.slurm.requeue_any(todo, hold=hold)) if todo else set()
        if done:
            self.repo.update_victims(plan_id, sorted(done), VictimState.REQUEUED,
                                     at=self._now())
        left = [j for j in todo if j not in done]
        if not left:
            return _NotRequeued()
        known = self.slurm.job_facts(left)
        if any(j in known for j in left) and self._elapsed(
                plan_id, "requeue", guard.context.requeue_from) < _REQUEUE_RETRY:
            return None
        return _NotRequeued(refused=tuple(j for j in left if j in known),
                            forgotten=tuple(j for j in left if j not in known))

    def _requeue(self, guard: Guard, plan: Plan) -> Plan | None:
        """Phase 2: requeue held every acked, ended and missed victim; None while retrying."""
        assert guard.context is not None
        plan = self._late_acks(plan, guard.context)
        todo = [v.job_id for v in plan.victims
                if v.state in (VictimState.ACKED, VictimState.MISSED, VictimState.ENDED)]
        now = self._now()
        held = tuple(dict.fromkeys([*guard.context.victims_held, *todo]))
        if held != guard.context.victims_held:
            guard.save(replace(guard.context, victims_held=held), now)
        lost = self._requeue_some(guard, plan.plan_id, todo, hold=True)
        if lost is None:
            return None
        now = self._now()
        if lost.ids:
            self.repo.update_victims(plan.plan_id, list(lost.ids), VictimState.GONE, at=now)
            self._audit(plan.plan_id, f"plan {plan.plan_id}: slurmctld did not requeue "
                        f"victim(s) {lost.words()}; LOST")
        done = sorted(v.job_id for v in self.repo.get_plan(plan.plan_id).victims
                      if v.state is VictimState.REQUEUED)
        self.repo.transition_plan(plan.plan_id, PlanState.REQUEUED, at=now,
                                  note=f"requeued (held) {done}")
        assert guard.context is not None
        guard.save(replace(guard.context, requeued_at=now), now)
        self._anchor(plan.plan_id, "requeued", now)
        self.hook("requeued", plan.plan_id)
        return self.repo.get_plan(plan.plan_id)

    def _step_requeued(self, guard: Guard, plan: Plan) -> ExecutionResult | None:
        """The start wait: done once the beneficiary runs (or after ``start_timeout``)."""
        assert guard.context is not None
        ctx = guard.context
        now = self._now()
        if ctx.requeued_at is None:  # a plan requeued by an older daemon
            ctx = guard.save(replace(ctx, requeued_at=now), now)
        assert ctx.requeued_at is not None
        waited = self._elapsed(plan.plan_id, "requeued", ctx.requeued_at)
        try:
            f = self.slurm.job_facts([ctx.beneficiary]).get(ctx.beneficiary)
        except SlurmError as err:  # slurmctld restarting: ask again until the timeout
            log.warning("cannot read beneficiary %d's state (%s)", ctx.beneficiary, err)
            if waited < self.settings.start_timeout:
                return None
            raise
        # Held: Slurm requeues a job whose launch failed held ("launch failed requeued held"),
        # or its owner or an admin held it. It cannot start: the freed GPUs go back to the
        # queue now instead of staying closed until start_timeout.
        held = f is not None and f.pending and f.held
        if held:
            log.warning("plan %d: beneficiary %d is held (by Slurm after a failed launch, its "
                        "owner or an admin); it cannot start: guard released", plan.plan_id,
                        ctx.beneficiary)
        elif f is not None and f.pending and waited < self.settings.start_timeout:
            return None
        started = f is not None and (f.running or f.finished)
        guard.release(self._now())
        note = (f"beneficiary {ctx.beneficiary} started" if started else
                f"beneficiary {ctx.beneficiary} is held (by Slurm after a failed launch, its "
                "owner or an admin): it cannot start; guard released" if held else
                f"beneficiary did not start within {self.settings.start_timeout:g} s; guard "
                "released anyway")
        plan = self.repo.get_plan(plan.plan_id)
        also = settle_records(plan, self._now())
        note += "; " + victim_summary(plan, ctx.ended)
        self.repo.transition_plan(plan.plan_id, PlanState.DONE, at=self._now(), note=note,
                                  also=also)
        self.repo.put_value(context_key(plan.plan_id), None, at=self._now())
        self._forget(plan.plan_id)
        return self._result(plan.plan_id, note, started, ctx)

    # --------------------------------------------------------------------- abort / undo
    def _begin_undo(self, guard: Guard, plan: Plan, note: str, final: PlanState
                    ) -> ExecutionResult | None:
        """Start an abort or roll-back (stored, so a restarted daemon carries it on) and take
        its first step."""
        if plan.state is PlanState.REQUEUED:
            raise StateError(f"plan {plan.plan_id} already requeued its victims; it can only "
                             "finish")
        assert guard.context is not None
        guard.save(replace(guard.context, undo={"final": final.value, "note": note,
                                                "settled_at": None}), self._now())
        return self._step_undo(guard, plan)

    def _step_undo(self, guard: Guard, plan: Plan) -> ExecutionResult | None:
        """One step of an abort or roll-back: requeue victims that acknowledged and exited,
        and those that ended, release the guard, end the plan.

        Victims that were asked but have not answered yet may still save and exit: their
        deadlines are waited out first (one look per step), so none of them is left exited
        and not requeued; acknowledged ones get ``_EXIT_WAIT`` s to exit.
        """
        assert guard.context is not None and guard.context.undo is not None
        plan_id = plan.plan_id
        undo = dict(guard.context.undo)
        note, final = str(undo.get("note") or ""), PlanState(str(undo.get("final")))
        asked = {v.job_id for v in plan.victims if v.state is VictimState.ASKED}
        if asked:
            self._look(guard, plan, asked)
            plan = self.repo.get_plan(plan_id)
            if any(v.state is VictimState.ASKED for v in plan.victims):
                return None
        assert guard.context is not None
        plan = self._late_acks(plan, guard.context)
        now = self._now()
        settled = undo.get("settled_at")
        if not isinstance(settled, int | float):
            settled = now
            guard.save(replace(guard.context, undo={**undo, "settled_at": now}), now)
            self._anchor(plan_id, "settled", now)
        acked = [v.job_id for v in plan.victims if v.state is VictimState.ACKED]
        ended = [v.job_id for v in plan.victims if v.state is VictimState.ENDED]
        try:
            facts = self.slurm.job_facts(acked) if acked else {}
        except SlurmError as err:
            log.warning("plan %d: cannot read the victims' states (%s)", plan_id, err)
            facts = {}
        exited = [j for j in acked if j in facts and not facts[j].running]
        if len(exited) < len(acked) and self._elapsed(plan_id, "settled", settled) < _EXIT_WAIT:
            return None
        todo = [*exited, *ended]
        not_requeued = self._requeue_some(guard, plan_id, todo, hold=False)
        if not_requeued is None:
            return None
        plan = self.repo.get_plan(plan_id)
        requeued = [j for j in todo if j not in not_requeued.ids]
        if requeued:
            note += f"; requeued {requeued}, which had already saved or ended"
        if not_requeued.ids:
            lost = [j for j in ended if j in not_requeued.ids]
            if lost:
                self.repo.update_victims(plan_id, lost, VictimState.GONE, at=self._now())
            self._audit(plan_id, f"plan {plan_id}: slurmctld did not requeue victim(s) "
                        f"{not_requeued.words()}, which had saved or ended; LOST")
        guard.release(self._now())
        b = self.slurm.job_facts([plan.beneficiaries[0].job_id]).get(
            plan.beneficiaries[0].job_id) if plan.beneficiaries else None
        ran = b is not None and (b.running or _ran(b))
        if ran and plan.state is PlanState.PLANNED:
            # nobody was asked: it started on GPUs that came free without this plan
            ran = False
            note += f"; beneficiary {plan.beneficiaries[0].job_id} started without it"
        if ran:  # it took the GPUs the victims freed: the preemption happened after all
            final = PlanState.DONE
            note += f"; beneficiary {plan.beneficiaries[0].job_id} runs on the freed GPUs"
        elif final is PlanState.ABORTED and plan.state not in (PlanState.PLANNED,
                                                                PlanState.SIGNALLED):
            final = PlanState.ROLLED_BACK
        # Victims requeued after saving count as preempted (and are credited); the beneficiary
        # counts as preempting only when it got the GPUs.
        plan = self.repo.get_plan(plan_id)
        also = settle_records(plan, self._now(), preempting=ran)
        assert guard.context is not None
        ctx = guard.context
        note += "; " + victim_summary(plan, ctx.ended)
        self.repo.transition_plan(plan_id, final, at=self._now(), note=note, also=also)
        # Missed victims may still acknowledge; acknowledged ones that have not exited yet
        # (slurmctld slow to see them end) will: both are requeued once they have exited.
        plan = self.repo.get_plan(plan_id)
        watch = [ctx.victim(v.job_id) for v in plan.victims
                 if v.state is VictimState.MISSED
                 or (v.state is VictimState.ACKED and v.job_id not in exited)]
        late_acks.remember(self.repo, plan_id, watch, ctx.asked_at or self._now(),
                           self._now() + self.settings.late_ack_window, self._now())
        # A victim that missed is not chosen again until it has been requeued (no gaming).
        self._remember_missed({v.job_id: v.restart_count for v in ctx.victims
                               if v.job_id in {m.job_id for m in plan.victims
                                               if m.state is VictimState.MISSED}})
        self.repo.put_value(context_key(plan_id), None, at=self._now())
        self._forget(plan_id)
        return self._result(plan_id, note, ran, ctx)

    def _forget(self, plan_id: int) -> None:
        """Drop what this executor kept in memory about a plan that ended."""
        self._next_states.pop(plan_id, None)
        self._verified.pop(plan_id, None)
        self._resent.pop(plan_id, None)
        self._anchors.pop(plan_id, None)

    def _result(self, plan_id: int, note: str, started: bool,
                ctx: PlanContext | None = None) -> ExecutionResult:
        """The plan's result, from the store's records (the source of truth) and its context
        (``ctx``, or the stored one)."""
        plan = self.repo.get_plan(plan_id)
        ctx = ctx or self._context(plan_id)
        missed = ctx.missed if ctx is not None else tuple(
            v.job_id for v in plan.victims if v.state is VictimState.MISSED)
        return ExecutionResult(
            plan_id=plan_id, state=plan.state, note=note,
            requeued=tuple(v.job_id for v in plan.victims if v.state is VictimState.REQUEUED),
            missed=tuple(sorted(missed)),
            ack_steps={v.job_id: v.ack_step for v in plan.victims if v.acked_at is not None},
            ack_seconds={v.job_id: v.acked_at - (v.asked_at if v.asked_at is not None
                                                 else plan.created_at)
                         for v in plan.victims if v.acked_at is not None},
            beneficiary_started=started)
