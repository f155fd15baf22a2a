"""The preemption executor: two phases, all or nothing, every step in the database.

:meth:`PreemptionExecutor.run` carries out one
:class:`~hai_slurm.priority.executor.types.ExecutionRequest`: check the jobs afresh, record the
plan, put up the :mod:`~hai_slurm.priority.executor.guard` (competitors held, beneficiary pinned);
**phase 1** asks every victim to checkpoint (``scancel --signal=USR2
--full``, plus Redis when configured) and polls their control directories
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hai_slurm.checkpoint import Ack, JobReport, read_job_report
from hai_slurm.errors import SlurmError, StateError
from hai_slurm.priority.clock import Clock, SystemClock
from hai_slurm.priority.executor import late_acks
from hai_slurm.priority.executor.guard import Guard, PlanContext, context_key
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
from hai_slurm.priority.hooks import CycleExtras, CycleView
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import AuditEntry, Plan, PlanState, VictimState
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.types import (
    ClusterSnapshot,
    JobFacts,
    JobState,
    SignalTarget,
    SlurmClient,
)

log = logging.getLogger("hai_slurm.priority.executor.preemption")

ReportReader = Callable[..., JobReport]
Hook = Callable[[str, int], None]
"""Called at named points (``"asked"``, ``"phase1_done"``, ``"requeued"``) with the plan id."""

_EXIT_WAIT = 3.0
"""Seconds an aborted plan waits for acknowledged victims to exit (they exit at once); one that
is still running then is handed to :mod:`.late_acks`, which requeues it once it has exited."""
_ACK_SETTLE = 1.0
"""Seconds a victim seen ended is still watched for its acknowledgement before it counts as
ended without one (it is requeued either way; this only makes the record true)."""
_REQUEUE_RETRY = 10.0
"""Seconds a requeue refused by a victim in transition is retried."""
_NOT_REQUEUED = frozenset({JobState.COMPLETED, JobState.CANCELLED})
"""End states of a victim that are not requeued: a real completion (exit 0), or a cancel."""


@dataclass
class _Watch:
    """Phase-1 bookkeeping for one plan."""

    ctx: PlanContext
    asked_at: float
    acked: dict[int, float] = field(default_factory=dict)
    ack_steps: dict[int, int | None] = field(default_factory=dict)
    missed: set[int] = field(default_factory=set)
    ended: dict[int, str] = field(default_factory=dict)
    """Victims that ended without an acknowledgement -> their Slurm state."""


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
        self._last_beat = time.monotonic()

    # ------------------------------------------------------------------------ daemon hook
    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        """The daemon's hook: settle unfinished plans, then run what the planner proposed
        (converted with :func:`~hai_slurm.priority.executor.requests.requests_from`), one plan
        after the other."""
        from hai_slurm.priority.executor.requests import requests_from

        self.recover()  # one cheap query when nothing is unfinished
        if plan is None:
            return CycleExtras()
        audit: list[AuditEntry] = []
        for request in requests_from(plan, view.snapshot, view.config,
                                     self.settings.default_deadline):
            victims = self.prepare(request, view.snapshot)
            if isinstance(victims, str):
                log.info("preemption for job %d not started: %s", request.beneficiary, victims)
                audit.append(AuditEntry(at=self._now(), kind="plan-refused",
                                        job_id=request.beneficiary, message=victims))
                continue
            result = self.run(request, view.snapshot, victims)
            log.warning("plan %d for job %d ended %s: %s", result.plan_id, request.beneficiary,
                        result.state, result.note)
        return CycleExtras(audit=tuple(audit))

    # ---------------------------------------------------------------------------- helpers
    def _now(self) -> float:
        return self.clock.time()

    def _sleep(self, seconds: float) -> None:
        self.clock.wait(self.stop, seconds)
        if self.heartbeat is not None and time.monotonic() - self._last_beat > 5.0:
            self._last_beat = time.monotonic()
            if not self.heartbeat():
                raise StateError("lost the leader lease while executing a plan; the new leader "
                                 "finishes it (recover)")

    def _audit(self, plan_id: int, message: str, **data: int | str | None) -> None:
        self.repo.audit(AuditEntry(at=self._now(), kind="plan", plan_id=plan_id,
                                   message=message, data=dict(data)))

    def _report(self, w: _Watch, jid: int) -> JobReport | None:
        v = w.ctx.victim(jid)
        if v.control_dir is None:
            return None
        return self.reader(v.control_dir, str(jid), v.uid, restart_count=v.restart_count,
                           not_before=w.asked_at - self.settings.clock_skew)

    # -------------------------------------------------------------------------- phase 0
    def prepare(self, request: ExecutionRequest, snap: ClusterSnapshot
                ) -> tuple[VictimContext, ...] | str:
        """The victims' contexts, or why the request cannot start (nothing is done then).

        Reads the jobs afresh: the beneficiary must still wait and every victim still run.
        """
        facts = self.slurm.job_facts([request.beneficiary, *request.victims])
        return victim_contexts(request, snap, facts, self.settings.default_deadline)

    def run(self, request: ExecutionRequest, snap: ClusterSnapshot,
            victims: tuple[VictimContext, ...] | None = None) -> ExecutionResult:
        """Carry out ``request`` from start to end (blocks up to the victims' deadlines).

        ``victims`` is what :meth:`prepare` returned (it is called when not given); raises
        StateError, with nothing done, when the request cannot start.
        """
        started = time.monotonic()
        if victims is None:
            prepared = self.prepare(request, snap)
            if isinstance(prepared, str):
                raise StateError(f"preemption for job {request.beneficiary} not started: "
                                 f"{prepared}")
            victims = prepared
        beneficiaries, victim_jobs = plan_jobs(request, snap)
        now = self._now()
        plan = self.repo.create_plan(
            at=now, beneficiaries=beneficiaries, victims=victim_jobs,
            reason=request.reason or f"job {request.beneficiary} needs the GPUs of "
            f"{', '.join(map(str, request.victims))}",
            on_miss=request.on_miss, deadline_at=now + max(v.deadline for v in victims))
        guard = Guard(self.slurm, self.repo)
        ctx = guard.save(PlanContext(plan.plan_id, request.beneficiary, request.nodes, victims,
                                     signal=self.settings.signal), now)
        w = _Watch(ctx, now)
        try:
            ctx = guard.apply(ctx, snap, now)
            w = self._ask(guard, plan.plan_id, [v.job_id for v in victims])
            result = self._continue(guard, self.repo.get_plan(plan.plan_id), w)
        except SlurmError as err:
            if self.repo.get_plan(plan.plan_id).state in (PlanState.ALL_ACKED, PlanState.FORCED,
                                                          PlanState.REQUEUED):
                # The victims saved (or ended): undoing would requeue them all the same, and
                # needs slurmctld just as much. The next cycle's recover() finishes the plan.
                raise
            result = self._undo(guard, plan.plan_id, f"Slurm failed during the plan: {err}",
                                PlanState.ROLLED_BACK, w)
        return replace(result, seconds=time.monotonic() - started)

    # -------------------------------------------------------------------------- phase 1
    def _ask(self, guard: Guard, plan_id: int, job_ids: list[int]) -> _Watch:
        assert guard.context is not None
        now = self._now()
        ctx = guard.save(replace(guard.context, asked_at=now), now)
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
        return _Watch(ctx, now)

    def _acked(self, plan_id: int, w: _Watch, jid: int, ack: Ack, now: float) -> None:
        """Record a trusted acknowledgement at the time the job wrote it (its own clock, kept
        between the request and now: a node clock may lag or lead the daemon's)."""
        at = min(max(ack.time, w.asked_at), now)
        self.repo.update_victims(plan_id, [jid], VictimState.ACKED, at=at, ack_step=ack.step)
        w.acked[jid], w.ack_steps[jid] = at, ack.step

    def _ended(self, plan_id: int, w: _Watch, jid: int, f: JobFacts | None, now: float) -> None:
        """A victim ended without a trusted acknowledgement: requeue it (``ended``) unless it
        completed, was cancelled or is forgotten by slurmctld (``gone``, each with an audit
        line)."""
        if f is not None and f.state not in _NOT_REQUEUED:
            self.repo.update_victims(plan_id, [jid], VictimState.ENDED, at=now)
            w.ended[jid] = f.state.value
            how = ("was requeued by Slurm (RequeueExit) before an acknowledgement was read"
                   if f.pending else f"ended ({f.state}) without an acknowledgement")
            self._audit(plan_id, f"plan {plan_id}: victim {jid} {how}; it is requeued (held) "
                        "and resumes from its newest valid checkpoint", job_id=jid,
                        state=f.state.value)
            return
        self.repo.update_victims(plan_id, [jid], VictimState.GONE, at=now)
        why = ("is no longer known to slurmctld (MinJobAge passed?): it cannot be requeued "
               "and is LOST" if f is None else
               f"{'completed (exit 0)' if f.state is JobState.COMPLETED else 'was cancelled'} "
               "during the plan; not requeued")
        self._audit(plan_id, f"plan {plan_id}: victim {jid} {why}", job_id=jid,
                    state=f.state.value if f else None)

    def _collect(self, plan_id: int, w: _Watch, waiting: set[int]) -> None:
        """Phase 1's wait: until each victim in ``waiting`` acked, ended or missed.

        A victim seen ended is watched ``_ACK_SETTLE`` s more (an ack written just before or
        after the job's end still counts); a Slurm query that fails is retried at the next state
        poll (the acknowledgements on disk are still read, the deadlines still count), so a
        slurmctld restart does not undo a plan whose victims are saving.
        """
        next_states = 0.0
        seen_end: dict[int, float] = {}  # victim -> when it was first seen ended
        last: dict[int, JobFacts | None] = {}
        while waiting:
            now = self._now()
            for jid in sorted(waiting):
                report = self._report(w, jid)
                if report is not None and report.ack is not None:
                    self._acked(plan_id, w, jid, report.ack, now)
                    waiting.discard(jid)
                    continue
                if jid in seen_end:
                    if now - seen_end[jid] >= _ACK_SETTLE:
                        self._ended(plan_id, w, jid, last.get(jid), now)
                        waiting.discard(jid)
                    continue
                due = w.asked_at + w.ctx.victim(jid).deadline
                saving = report is not None and report.saving
                if now >= due and not (saving and now < due + self.settings.saving_extension):
                    self.repo.update_victims(plan_id, [jid], VictimState.MISSED, at=now)
                    w.missed.add(jid)
                    waiting.discard(jid)
                    why = "still saving at the extended deadline" if saving else \
                        "no acknowledgement" + (f" ({'; '.join(report.problems)})"
                                                if report and report.problems else "")
                    self._audit(plan_id, f"plan {plan_id}: victim {jid} missed its deadline "
                                f"of {w.ctx.victim(jid).deadline:g} s: {why}", job_id=jid)
            if waiting and now >= next_states:
                next_states = now + self.settings.state_poll
                try:
                    facts = self.slurm.job_facts(waiting)
                except SlurmError as err:
                    log.warning("plan %d: cannot read the victims' states (%s); retrying in "
                                "%g s", plan_id, err, self.settings.state_poll)
                    facts = None
                for jid in sorted(waiting) if facts is not None else ():
                    f = facts.get(jid) if facts is not None else None
                    if f is None or not f.running:  # pending: Slurm requeued it (RequeueExit)
                        last[jid] = f
                        seen_end.setdefault(jid, now)
            if waiting:
                self._sleep(self.settings.poll)

    # -------------------------------------------------------------------------- phase 2
    def _continue(self, guard: Guard, plan: Plan, w: _Watch | None) -> ExecutionResult:
        """Drive a plan from wherever it is to a final state."""
        assert guard.context is not None
        state = plan.state
        if state is PlanState.SIGNALLED:
            assert w is not None
            self._collect(plan.plan_id, w, {v.job_id for v in plan.victims
                                            if v.state is VictimState.ASKED})
            self.hook("phase1_done", plan.plan_id)
            plan = self.repo.get_plan(plan.plan_id)
            missed = sorted(v.job_id for v in plan.victims if v.state is VictimState.MISSED)
            if missed and plan.on_miss is DeadlineAction.ABORT:
                return self._undo(guard, plan.plan_id,
                                  f"victim(s) {missed} missed the deadline; nobody "
                                  "requeued", PlanState.ABORTED, w)
            ended = sorted(v.job_id for v in plan.victims if v.state is VictimState.ENDED)
            if missed or ended:
                why = [f"victim(s) {missed} missed the deadline (policy force)"] if missed else []
                why += [f"victim(s) {ended} ended without an acknowledgement"] if ended else []
                self.repo.transition_plan(plan.plan_id, PlanState.FORCED, at=self._now(),
                                          note="; ".join(why) + "; requeued anyway, to resume "
                                          "from their newest valid checkpoints")
            else:
                self.repo.transition_plan(plan.plan_id, PlanState.ALL_ACKED, at=self._now(),
                                          note="every victim acknowledged its checkpoint")
            plan = self.repo.get_plan(plan.plan_id)
            state = plan.state
        if state in (PlanState.ALL_ACKED, PlanState.FORCED):
            plan = self._requeue(guard, plan)
        started = self._wait_beneficiary(guard.context.beneficiary)
        guard.release(self._now())
        note = (f"beneficiary {plan.beneficiaries[0].job_id} started" if started else
                f"beneficiary did not start within {self.settings.start_timeout:g} s; guard "
                "released anyway")
        plan = self.repo.get_plan(plan.plan_id)
        also = settle_records(plan, self._now())
        note += "; " + victim_summary(plan, w.ended if w else {})
        self.repo.transition_plan(plan.plan_id, PlanState.DONE, at=self._now(), note=note,
                                  also=also)
        self.repo.put_value(context_key(plan.plan_id), None, at=self._now())
        return self._result(plan.plan_id, note, w, started)

    def _late_acks(self, plan: Plan) -> Plan:
        """Victims recorded ``ended`` whose acknowledgement has landed since become ``acked``."""
        if not any(v.state is VictimState.ENDED for v in plan.victims):
            return plan
        raw = self.repo.get_value(context_key(plan.plan_id))
        if not isinstance(raw, dict):
            return plan
        ctx = PlanContext.from_json(raw)
        w = _Watch(ctx, ctx.asked_at or plan.created_at)
        changed = False
        for v in plan.victims:
            if v.state is VictimState.ENDED:
                report = self._report(w, v.job_id)
                if report is not None and report.ack is not None:
                    self._acked(plan.plan_id, w, v.job_id, report.ack, self._now())
                    changed = True
        return self.repo.get_plan(plan.plan_id) if changed else plan

    def _requeue(self, guard: Guard, plan: Plan) -> Plan:
        assert guard.context is not None
        plan = self._late_acks(plan)
        todo = [v.job_id for v in plan.victims
                if v.state in (VictimState.ACKED, VictimState.MISSED, VictimState.ENDED)]
        now = self._now()
        guard.save(replace(guard.context, victims_held=tuple(todo)), now)
        done = self._requeue_all(todo, hold=True)
        now = self._now()
        if done:
            self.repo.update_victims(plan.plan_id, sorted(done), VictimState.REQUEUED, at=now)
        lost = [j for j in todo if j not in done]
        if lost:
            self.repo.update_victims(plan.plan_id, lost, VictimState.GONE, at=now)
            self._audit(plan.plan_id, f"plan {plan.plan_id}: slurmctld did not requeue "
                        f"victim(s) {lost} (no longer known: MinJobAge passed?); LOST")
        self.repo.transition_plan(plan.plan_id, PlanState.REQUEUED, at=now,
                                  note=f"requeued (held) {sorted(done)}")
        self.hook("requeued", plan.plan_id)
        return self.repo.get_plan(plan.plan_id)

    def _requeue_all(self, job_ids: list[int], *, hold: bool) -> set[int]:
        """``requeue_any``, retried for up to ``_REQUEUE_RETRY`` s for the victims it skipped
        but slurmctld still knows: a job in transition (COMPLETING, or being requeued by
        ``RequeueExit=75``) refuses the requeue and the hold for a moment."""
        done = set(self.slurm.requeue_any(job_ids, hold=hold)) if job_ids else set()
        end = self._now() + _REQUEUE_RETRY
        left = [j for j in job_ids if j not in done]
        while left and self._now() < end:
            self._sleep(self.settings.poll)
            try:
                known = self.slurm.job_facts(left)
                left = [j for j in left if j in known]
                done |= set(self.slurm.requeue_any(left, hold=hold)) if left else set()
            except SlurmError as err:
                log.warning("requeue of %s failed (%s); retrying", left, err)
            left = [j for j in left if j not in done]
        return done

    def _wait_beneficiary(self, job_id: int) -> bool:
        end = self._now() + self.settings.start_timeout
        while True:
            try:
                f = self.slurm.job_facts([job_id]).get(job_id)
            except SlurmError as err:  # slurmctld restarting: ask again until the timeout
                log.warning("cannot read beneficiary %d's state (%s)", job_id, err)
                if self._now() >= end:
                    return False
                self._sleep(self.settings.poll)
                continue
            if f is None or not f.pending:
                return f is not None and (f.running or f.finished)
            if self._now() >= end:
                return False
            self._sleep(self.settings.poll)

    # --------------------------------------------------------------------- abort / undo
    def _undo(self, guard: Guard, plan_id: int, note: str, final: PlanState,
              w: _Watch | None = None) -> ExecutionResult:
        """Abort or roll back: requeue victims that acknowledged and exited, release the guard.

        Victims that were asked but have not answered yet may still save and exit: their
        deadlines are waited out first, so none of them is left exited and not requeued.
        """
        plan = self.repo.get_plan(plan_id)
        if plan.state is PlanState.REQUEUED:
            raise StateError(f"plan {plan_id} already requeued its victims; it can only finish")
        asked = {v.job_id for v in plan.victims if v.state is VictimState.ASKED}
        if asked:
            w = w or _Watch(guard.context or PlanContext(plan_id, 0, (), ()), self._now())
            self._collect(plan_id, w, asked)
            plan = self.repo.get_plan(plan_id)
        plan = self._late_acks(plan)
        acked = [v.job_id for v in plan.victims if v.state is VictimState.ACKED]
        ended = [v.job_id for v in plan.victims if v.state is VictimState.ENDED]
        exited: list[int] = []
        end = self._now() + _EXIT_WAIT
        while acked:
            try:
                facts = self.slurm.job_facts(acked)
            except SlurmError as err:
                log.warning("plan %d: cannot read the victims' states (%s)", plan_id, err)
                facts = {}
            exited = [j for j in acked if j in facts and not facts[j].running]
            if len(exited) == len(acked) or self._now() >= end:
                break
            self._sleep(self.settings.poll)
        todo = [*exited, *ended]
        requeued = tuple(j for j in todo if j in self._requeue_all(todo, hold=False))
        if requeued:
            self.repo.update_victims(plan_id, list(requeued), VictimState.REQUEUED,
                                     at=self._now())
            note += f"; requeued {list(requeued)}, which had already saved or ended"
        lost = [j for j in ended if j not in requeued]
        if lost:
            self.repo.update_victims(plan_id, lost, VictimState.GONE, at=self._now())
            self._audit(plan_id, f"plan {plan_id}: slurmctld did not requeue ended victim(s) "
                        f"{lost} (no longer known: MinJobAge passed?); LOST")
        guard.release(self._now())
        b = self.slurm.job_facts([plan.beneficiaries[0].job_id]).get(
            plan.beneficiaries[0].job_id) if plan.beneficiaries else None
        ran = b is not None and (b.running or (b.finished and b.state is not JobState.CANCELLED))
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
        note += "; " + victim_summary(plan, w.ended if w else {})
        self.repo.transition_plan(plan_id, final, at=self._now(), note=note, also=also)
        if guard.context is not None:
            # Missed victims may still acknowledge; acknowledged ones that have not exited yet
            # (slurmctld slow to see them end) will: both are requeued once they have exited.
            watch = [guard.context.victim(v.job_id) for v in self.repo.get_plan(plan_id).victims
                     if v.state is VictimState.MISSED
                     or (v.state is VictimState.ACKED and v.job_id not in exited)]
            late_acks.remember(self.repo, plan_id, watch, guard.context.asked_at or
                               self._now(), self._now() + self.settings.late_ack_window,
                               self._now())
        self.repo.put_value(context_key(plan_id), None, at=self._now())
        return replace(self._result(plan_id, note, w, ran), requeued=tuple(requeued))

    def _result(self, plan_id: int, note: str, w: _Watch | None, started: bool
                ) -> ExecutionResult:
        plan = self.repo.get_plan(plan_id)
        return ExecutionResult(
            plan_id=plan_id, state=plan.state, note=note,
            requeued=tuple(v.job_id for v in plan.victims if v.state is VictimState.REQUEUED),
            missed=tuple(sorted(w.missed)) if w else (),
            ack_steps=dict(w.ack_steps) if w else {},
            ack_seconds={j: t - w.asked_at for j, t in w.acked.items()} if w else {},
            beneficiary_started=started)

    # -------------------------------------------------------------------------- recovery
    def recover(self) -> list[ExecutionResult]:
        """Finish or roll back every unfinished plan (after a daemon restart); requeue victims
        of aborted plans that acknowledged late."""
        late_acks.sweep(self.repo, self.slurm, self.reader, self._now(),
                        self.settings.clock_skew)
        out = []
        for plan in self.repo.unfinished_plans():
            out.append(self.resume(plan))
            log.warning("recovered plan %d: %s (%s)", plan.plan_id, out[-1].state, out[-1].note)
        return out

    def resume(self, plan: Plan) -> ExecutionResult:
        """Take up one unfinished plan where a killed daemon left it."""
        raw = self.repo.get_value(context_key(plan.plan_id))
        guard = Guard(self.slurm, self.repo)
        if not isinstance(raw, dict):
            if plan.state is PlanState.REQUEUED:  # context already cleared: only DONE missing
                self.repo.transition_plan(plan.plan_id, PlanState.DONE, at=self._now(),
                                          note="recovered", also=settle_records(plan, self._now()))
                return self._result(plan.plan_id, "recovered", None, False)
            self.repo.transition_plan(plan.plan_id, PlanState.ROLLED_BACK, at=self._now(),
                                      note="recovered without a stored context: nothing had "
                                      "been done yet")
            return self._result(plan.plan_id, "rolled back (no context)", None, False)
        ctx = PlanContext.from_json(raw)
        guard.context = ctx
        b = self.slurm.job_facts([ctx.beneficiary]).get(ctx.beneficiary)
        asked = [v.job_id for v in plan.victims if v.state is not VictimState.CHOSEN]
        w = _Watch(ctx, ctx.asked_at or plan.created_at)
        alive = b is not None and (b.pending or b.running)  # running: it got the GPUs already
        if plan.state in (PlanState.PLANNED, PlanState.SIGNALLED) and (not alive or not asked):
            why = "nobody had been asked yet" if not asked else \
                f"beneficiary {ctx.beneficiary} no longer waits ({b.state if b else 'gone'})"
            return self._undo(guard, plan.plan_id, f"recovered: {why}", PlanState.ROLLED_BACK, w)
        if plan.state is PlanState.PLANNED:  # asked some, crashed before the others
            chosen = [v.job_id for v in plan.victims if v.state is VictimState.CHOSEN]
            if chosen:
                self.repo.update_victims(plan.plan_id, chosen, VictimState.ASKED, at=self._now())
                self.slurm.signal(chosen, ctx.signal, target=SignalTarget.WORKLOAD)
            self.repo.transition_plan(plan.plan_id, PlanState.SIGNALLED, at=self._now(),
                                      note="recovered: asked the remaining victims")
            plan = self.repo.get_plan(plan.plan_id)
        return self._continue(guard, plan, w)
