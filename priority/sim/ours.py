"""The ``hai-slurm`` policy in the simulator: the daemon's own cycle and planner, unchanged.

Each cycle does what :class:`hai_slurm.priority.daemon.loop.Daemon` does, without its database: one
snapshot of the (simulated) Slurm, :func:`hai_slurm.priority.daemon.cycle.decide` with the tracked
jobs,
fairness events, protections and policy state kept in memory, priority writes through
``set_priorities``; then the planner's inputs are built with
:mod:`~hai_slurm.priority.planner.inputs`
and :func:`~hai_slurm.priority.planner.search.plan_preemptions` chooses victims. Executing a plan
is the
executor's protocol as a cost: victims are signalled, checkpoint (the cost model's time for their
size; the plan waits for the slowest), are requeued, and the beneficiary is pinned to the plan's
nodes. The planner charges each victim the cost model's save and restart times, as the daemon
charges the times a job measured itself (:mod:`hai_slurm.priority.daemon.save_times`; a restart
never above the configured ``restart_cost``). Fairness events (preempted / preempting) and the
victims' checkpoint times go back into the tracked state, as the executor records them.

Two rules of issue 16 are modelled here as well:

* **Urgent path**, as the daemon's (:mod:`hai_slurm.priority.daemon.urgent`): a new job of a
  class that may preempt (:func:`~hai_slurm.priority.daemon.urgent.may_preempt`: HIGH and
  above) is seen by the daemon's poll ``[intervals] urgent_poll`` seconds after its submission
  (the worst case, rounded up to whole seconds; 0: no urgent path), then planned alone at each
  of :data:`~hai_slurm.priority.daemon.urgent.URGENT_LOOKS` seconds after that (0, 2, 5, 10,
  15, 20 s: the benefit test needs a few seconds of wait to outweigh a victim's save +
  restart), and once more in the first whole second after the planner says its wait will
  outweigh the loss (:func:`~hai_slurm.priority.daemon.urgent.look_again`; also after its
  fixed looks are all taken, rather than at the next cycle): the policy's decisions on a fresh
  snapshot, nothing written, the planner for that job only.
* **The executor's guard.** While a plan is open (until ``start_timeout`` of the executor's
  settings after the victims' requeue) the plan's nodes are closed to every job but the
  beneficiary, as the reservation of :mod:`hai_slurm.priority.executor.guard` closes them
  (``guard=False``: no guard, the beneficiary is only pinned).
* **Reservations.** A pending job of HIGH or above that has waited ``reserve_after`` x its
  class's ``max_wait`` holds a backfill reservation in the simulated Slurm
  (:meth:`~hai_slurm.priority.sim.slurm.SimSlurm.reserve`). Off by default (``reserve_after``
  0), as in the daemon, which makes no reservations; the planner does not see them (it counts
  the closed GPUs as free for lower classes).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from operator import attrgetter, is_

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.conf.topology import GpuRef
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.cycle import CycleMemo, decide, policy_decisions
from hai_slurm.priority.daemon.urgent import (
    LOOK_MARGIN,
    URGENT_LOOKS,
    due_in,
    may_preempt,
    with_jobs_ahead,
)
from hai_slurm.priority.planner.inputs import (
    HolderMemo,
    holders_from_policy,
    waiting_from_policy,
)
from hai_slurm.priority.planner.search import may_plan, may_plan_pending, plan_preemptions
from hai_slurm.priority.planner.types import Holder, PlannerConfig, PlanSnapshot
from hai_slurm.priority.policy.state import (
    EventKind,
    FairnessEvent,
    PendingJob,
    PolicyResult,
    PolicyState,
    RunningDecision,
    RunningJob,
)
from hai_slurm.priority.sim.engine import Engine, Mode, SimJob
from hai_slurm.priority.store import Protection, TrackedJob
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.types import ClusterSnapshot

_job_id = attrgetter("job_id")


@dataclass(frozen=True, slots=True)
class HolderPass:
    """One pass's planner holders and what they were made from (see
    :meth:`HaiSlurm._holders_for`): valid from ``since`` until ``until`` (the first periodic
    checkpoint of a running job after ``since``) while the running jobs and decisions are the
    same objects and ``signals`` is the engine's count of preemptions."""

    running: tuple[RunningJob, ...]
    decisions: list[RunningDecision | None]
    signals: int
    since: int
    until: float
    holders: tuple[Holder, ...]


class HaiSlurm:
    """Our policy: the daemon's cycle (policy + planner) every ``intervals.cycle`` seconds."""

    name = "hai-slurm"
    mode = Mode.CHECKPOINT

    def __init__(self, config: DaemonConfig, planner: PlannerConfig, *,
                 urgent_poll: float | None = None, guard: bool = True) -> None:
        self.config = config
        self.planner = planner
        poll = config.intervals.urgent_poll if urgent_poll is None else urgent_poll
        self.urgent_after: tuple[int, ...] = () if poll <= 0 else tuple(
            math.ceil(poll) + round(look) for look in URGENT_LOOKS)
        """Seconds after a submission at which the job is looked at (): no urgent path)."""
        self.guard_for = max(1, round(config.preempt.executor.start_timeout)) if guard else None
        self._urgent: dict[int, list[SimJob]] = {}
        self._watched: set[int] = set()
        """Trace ids of the jobs given looks (:func:`look_again` may add one after the last)."""
        self.cycle: int | None = max(1, round(config.intervals.cycle))
        self.engine: Engine | None = None
        self.tracked: dict[int, TrackedJob] = {}
        self.events: deque[FairnessEvent] = deque()
        self.protections: dict[str, Protection] = {}
        self.state = PolicyState()
        self._memo = CycleMemo()
        """What :func:`decide` keeps from one call to the next, as the daemon keeps it."""
        self.inflight: dict[int, int] = {}
        self._holders = HolderMemo()
        """The holders of the last planner pass (reused when unchanged)."""
        self._pass: HolderPass | None = None
        """The last pass's holders with what they were made from (see :meth:`_holders_for`)."""
        self._checkpoints: dict[int, tuple[int, float, float | None]] = {}
        """Each running job's periodic checkpoint as last worked out, with the run (token) and
        until when it holds (:meth:`~hai_slurm.priority.sim.engine.Engine.checkpoint_until`;
        time never goes back)."""
        self.reuse_holders = True
        """False: every pass builds its holders (for tests: the result must not change)."""
        self.plan_every_pass = False
        """True: the planner is asked whenever a job waits, also when none :func:`may_plan`
        (for tests: the result must not change)."""
        self._saves: dict[int, float | None] = {}
        self._restarts: dict[int, float] = {}
        """:meth:`_charge` of each Slurm job id planned with (save, restart seconds; a job that
        cannot save on request has no save: ``Holder.can_ack`` False): kept for the whole run,
        as they never change for a job (the planner reads the running ones)."""
        self.counts: Counter[str] = Counter()

    def attach(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def eng(self) -> Engine:
        assert self.engine is not None, "attach() first"
        return self.engine

    def submit_args(self, job: SimJob) -> dict[str, str | int]:
        """What job_submit.lua would have recorded for the job: class, team, grace."""
        cls = job.trace.cls
        if self.urgent_after and may_preempt(cls, self.planner.class_weights):
            self._watched.add(job.trace.job_id)
            for after in self.urgent_after:
                at = self.eng.now + after
                self._urgent.setdefault(at, []).append(job)
                self.eng.wake(at)
        info = HaiJobInfo(priority=cls.value, job_class=cls.value, team=job.trace.team,
                          preemptible=job.trace.preemptible,
                          grace=self.eng.costs.checkpoint_time(job.gpus),
                          source=ClassOrigin.DIRECTIVE)
        return {"qos": cls.qos, "priority": 1, "admin_comment": format_admin_comment(info)}

    def on_step(self, now: int) -> None:
        """The urgent path: a look ``urgent_after`` s after a job of a class that may preempt
        arrived, at the jobs still pending."""
        jobs = self._urgent.pop(now, None)
        if not jobs:
            return
        pending = self.eng.slurm.pending_ids()
        focus = frozenset(j.slurm_id for j in jobs if j.slurm_id in pending)
        if focus:
            self.counts["urgent_looks"] += 1
            self.look(now, focus)

    def _look_again(self, now: int, due: Mapping[int, float]) -> None:
        """As the daemon's :func:`~hai_slurm.priority.daemon.urgent.look_again`: a job with looks
        that the planner refused gets one more, in the first whole second after a look may find
        what it lacked (``due``, :func:`~hai_slurm.priority.daemon.urgent.due_in`: its wait
        outweighs the loss, or a victim too young for it is old enough), when that comes
        before its next look or it has none left (a job given looks that never started: the
        daemon's watched jobs)."""
        if not due or not self._watched:
            return
        nxt: dict[int, int] = {}
        for at, jobs in self._urgent.items():
            for job in jobs:
                if job.slurm_id in due and at < nxt.get(job.slurm_id, at + 1):
                    nxt[job.slurm_id] = at
        for jid, secs in due.items():
            job = self.eng.by_slurm[jid]
            if job.trace.job_id not in self._watched or job.first_start is not None:
                continue
            at = math.ceil(now + secs + LOOK_MARGIN)
            first = nxt.get(jid)
            if first is None or at < first:
                self._urgent.setdefault(at, []).append(job)
                self.eng.wake(at)

    def look(self, now: int, focus: frozenset[int]) -> None:
        """The daemon's urgent look (:meth:`hai_slurm.priority.daemon.loop.Daemon.look`): the
        policy's decisions on a fresh snapshot, nothing written or kept, then the planner for
        the ``focus`` jobs and the pending jobs ranked above them."""
        snap = self.eng.slurm.snapshot()
        window = now - self.config.policy.fairness.window
        events = tuple(e for e in self.events if e.time >= window)
        # The daemon's look runs decide() and uses only its inputs and result (the writes and
        # records it also works out are dropped: a look writes nothing), so only those are
        # worked out here.
        inputs, result = policy_decisions(snap, tracked=self.tracked, events=events,
                                          state=self.state, config=self.config.policy,
                                          now=float(now), memo=self._memo)
        self._plan(inputs.pending, inputs.running, result, snap, now,
                   focus=with_jobs_ahead(focus, result.priorities))

    def on_cycle(self, now: int) -> None:
        """One daemon cycle at ``now`` (see the module docstring)."""
        eng = self.eng
        slurm = eng.slurm
        policy = self.config.policy
        snap = slurm.snapshot()
        window = now - policy.fairness.window
        while self.events and self.events[0].time < window:
            self.events.popleft()
        protections = {t: p for t, p in self.protections.items() if p.until > now}
        d = decide(snap, tracked=self.tracked, events=tuple(self.events), state=self.state,
                   protections=protections, config=policy, now=float(now), memo=self._memo)
        if d.writes:
            slurm.set_priorities(d.writes)
        for rec in d.jobs:
            self.tracked[rec.job_id] = rec
        for jid in d.forget:
            self.tracked.pop(jid, None)
        for p in d.protections:
            self.protections[p.team] = p
        self.state = d.state
        self._reserve(d.result, now)
        ch = d.changes
        self.counts.update({"promotions": len(ch.promotions), "demotions": len(ch.demotions),
                            "decays": len(ch.decays), "protections": len(ch.protections)})
        self._plan(d.inputs.pending, d.inputs.running, d.result, snap, now)

    def _reserve(self, result: PolicyResult, now: int) -> None:
        """Reservations for top-class jobs that waited ``reserve_after`` of their bound."""
        frac = self.planner.reserve_after
        if frac <= 0:
            return
        classes = self.config.policy.classes
        top = PriorityClass.HIGH.weight
        keep = [jid for jid, d in result.pending.items()
                if d.effective.weight >= top
                and d.reason.wait >= frac * classes[d.effective].max_wait]
        self.eng.slurm.reserve(keep)
        self.counts["reserved_job_cycles"] += len(keep)

    def _charge(self, job: SimJob) -> tuple[float | None, float]:
        """(save, restart) seconds the planner charges ``job`` as a victim: its checkpoint time
        by the cost model (None: it cannot save on request), and its restart as it measured
        it (the daemon's SaveTimes), never above the configured restart cost. Functions of the
        job's size only (fixed for a trace job), so worked out once per job (see
        ``_saves``)."""
        costs, n = self.eng.costs, job.nodes
        return (float(costs.checkpoint_time(job.gpus)) if job.trace.saves else None,
                float(min(costs.restart_time(n), self.planner.restart_for(n))))

    def _holders_for(self, running: tuple[RunningJob, ...], result: PolicyResult,
                     now: int) -> tuple[Holder, ...]:
        """The planner's holders: a running job saves on request when its trace job does
        (``TraceJob.saves``), its checkpoints are the engine's, and a job already asked to
        save is no victim again.

        The last pass's holders are given again (:class:`HolderPass`) when nothing they are
        made from can have changed: the very same running jobs (the same run of each: a job
        that starts again is a new ``RunningJob``, as its Slurm job has a new start time and
        restart count, so its GPUs are the same) and decisions, no victim signalled since (the
        engine's preemptions), and ``now`` before the first job's next periodic checkpoint
        (:meth:`~hai_slurm.priority.sim.engine.Engine.checkpoint_until`). Otherwise one walk
        over the running jobs (each one's checkpoint kept while its run is the same and that
        time has not come: ``_checkpoints``), and :func:`holders_from_policy` with its own
        memo."""
        eng = self.eng
        slurm = eng.slurm
        decisions = list(map(result.running.get, map(_job_id, running)))
        last = self._pass
        if (self.reuse_holders and last is not None and last.since <= now < last.until
                and last.signals == len(eng.preemptions)
                and len(running) == len(last.running) and all(map(is_, running, last.running))
                and all(map(is_, decisions, last.decisions))):
            return last.holders
        by_slurm, gpus_of, checkpoint = eng.by_slurm, slurm.gpus_of, eng.periodic_checkpoint
        until_of = eng.checkpoint_until
        saves, restarts = self._saves, self._restarts
        gpus: dict[int, tuple[GpuRef, ...]] = {}
        ckpts: dict[int, float | None] = {}
        asked: set[int] = set()
        until = math.inf
        kept = self._checkpoints if self.reuse_holders else {}
        for r in running:
            jid = r.job_id
            job = by_slurm[jid]
            if jid not in restarts:
                save, restarts[jid] = self._charge(job)
                if save is not None:
                    saves[jid] = save
            gpus[jid] = gpus_of(jid)
            c = kept.get(jid)
            if c is not None and c[0] == job.token and now < c[1]:
                at, ckpts[jid] = c[1], c[2]
            else:
                ckpt = ckpts[jid] = checkpoint(job, now)
                at = until_of(job, now)
                kept[jid] = (job.token, at, ckpt)
            if at < until:
                until = at
            if job.signalled is not None:
                asked.add(jid)
        holders = holders_from_policy(running, result.running, gpus, saves=saves,
                                      restart_costs=restarts, checkpoints=ckpts, victims=asked,
                                      memo=self._holders)
        self._pass = HolderPass(running, decisions, len(eng.preemptions), now, until, holders)
        return holders

    def _plan(self, pending: tuple[PendingJob, ...], running: tuple[RunningJob, ...],
              result: PolicyResult, snap: ClusterSnapshot, now: int,
              focus: frozenset[int] | None = None) -> None:
        eng = self.eng
        slurm = eng.slurm
        self.inflight = {b: t for b, t in self.inflight.items() if t > now}
        if not pending:
            return
        if (not self.plan_every_pass and snap.time == now
                and not any(may_plan_pending(d, self.planner) for d in result.pending.values())):
            return   # no job may plan: see below (checked before the waiting jobs are built)
        # as the daemon's planner: no plan for a job Slurm holds or keeps back (a requeued
        # victim's begin time, its requeue delay away, is soon enough)
        taken_at, listed, soon = float(snap.time), snap.job, self.planner.save_cost
        waiting_jobs = [p for p in pending if p.job_id not in self.inflight
                        and (focus is None or p.job_id in focus)
                        and (job := listed(p.job_id)) is not None
                        and job.waits_for_gpus(taken_at, soon)]
        nodes = {p.job_id: eng.by_slurm[p.job_id].nodes for p in waiting_jobs
                 if eng.by_slurm[p.job_id].trace.nodes > 0}
        waiting = waiting_from_policy(waiting_jobs, result.pending, nodes=nodes,
                                      aged_preempt=self.planner.aged_preempt)
        if taken_at == now and not (waiting and (
                self.plan_every_pass or any(may_plan(w, self.planner) for w in waiting))):
            # Nothing to plan for (no job waits, or none :func:`may_plan`: each is of a class
            # weighing 0, LOW and the middle classes by default, and not past its bound; most
            # passes): the planner would make no plan, find no job worth a later look and
            # refuse nothing (it refuses a stale snapshot, not one of now, or an inconsistent
            # one: two running jobs on one GPU, or a GPU outside the topology, which
            # SimSlurm's placements never give), so it is not asked.
            return
        holders = self._holders_for(running, result, now)
        plans = plan_preemptions(PlanSnapshot(slurm.topology, holders, waiting, taken_at,
                                              slurm.guarded_nodes()),
                                 config=self.planner, now=float(now))
        if plans.refused:
            self.counts["plans_refused"] += 1
        self._look_again(now, due_in(plans.worth_in, plans.ripe_in, cycle=self.cycle))
        for plan in plans.plans:
            delay = max(eng.victim_wait(eng.by_slurm[v]) for v in plan.victim_ids)
            eng.preempt(plan.victim_ids, plan.beneficiary, nodes=plan.nodes, delay=delay,
                        guard_for=self.guard_for)
            self.inflight[plan.beneficiary] = now + delay + eng.costs.requeue_delay + 1
            self.counts["plans"] += 1
            ben = eng.by_slurm[plan.beneficiary]
            self.events.append(FairnessEvent(EventKind.PREEMPTING, ben.trace.team,
                                             ben.trace.user or ben.trace.team, float(now),
                                             job_id=plan.beneficiary))
            for v in plan.victims:
                vj = eng.by_slurm[v.job_id]
                self.events.append(FairnessEvent(EventKind.PREEMPTED, v.team,
                                                 vj.trace.user or v.team, float(now),
                                                 job_id=v.job_id))
                t = self.tracked.get(v.job_id)
                if t is not None:
                    self.tracked[v.job_id] = replace(t, preemptions=t.preemptions + 1,
                                                     checkpoint_at=float(now))
