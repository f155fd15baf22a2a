"""The executor of ``hai-slurm daemon --shadow``: records and logs the plans it would carry out,
and carries out none.

For each request the planner proposes, :class:`ShadowExecutor` runs the same start checks as the
real executor (beneficiary still pending, every victim still running, a checkpoint directory
where the miss policy needs one; those are reads), then stores a
:class:`~hai_slurm.priority.store.ShadowPlan` with the Slurm commands the real executor would
issue, in order, and logs it. Nothing is signalled, held, pinned or requeued, and no unfinished
real plan is recovered (that would write). It returns no fairness events and no credits: the
policy must not demote or protect a team for a preemption that never happened.

In shadow mode Slurm keeps running its queue, so the same beneficiary meets the same victims
cycle after cycle: a plan is recorded again only when its victims differ from the newest shadow
plan for that beneficiary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hai_slurm.priority.executor.guard import TOP_PRIORITY, Guard
from hai_slurm.priority.executor.records import plan_jobs, victim_contexts
from hai_slurm.priority.executor.requests import requests_from
from hai_slurm.priority.executor.types import ExecutionRequest, ExecutorSettings
from hai_slurm.priority.hooks import CycleExtras, CycleView
from hai_slurm.priority.store import AuditEntry, ShadowPlan, ShadowVictim
from hai_slurm.priority.store.shadow import ShadowPlans
from hai_slurm.slurm_plugins.types import SlurmClient

log = logging.getLogger("hai_slurm.priority.shadow")


def would_do(request: ExecutionRequest, competitors: tuple[int, ...], signal: str,
             deadline: float) -> tuple[str, ...]:
    """The real executor's Slurm commands for ``request``, in order, in words."""
    victims = ",".join(map(str, request.victims))
    out = []
    if request.nodes:
        out.append(f"scontrol create reservation ReservationName=hai-plan-<id> "
                   f"Nodes={','.join(request.nodes)} Users=<job {request.beneficiary}'s user> "
                   "StartTime=now Flags=IGNORE_JOBS,FLEX; scontrol update "
                   f"JobId={request.beneficiary} Reservation=hai-plan-<id>"
                   + (f" (if Slurm refuses it: scontrol hold "
                      f"{','.join(map(str, competitors))})" if competitors else ""))
    elif competitors:
        out.append(f"scontrol hold {','.join(map(str, competitors))} (competitors for the "
                   "freed GPUs)")
    if request.nodes:
        out.append(f"scontrol update JobId={request.beneficiary} "
                   f"ReqNodeList={','.join(request.nodes)}")
    out.append(f"scontrol update JobId={request.beneficiary} Priority={TOP_PRIORITY}")
    out.append(f"scancel --signal={signal} {victims} (checkpoint request; up to {deadline:g} s "
               "to acknowledge)")
    out.append(f"scontrol requeuehold {victims} (after their acknowledgements)")
    out.append(f"wait for job {request.beneficiary} to start, then end the reservation and "
               "scontrol release the held jobs")
    return tuple(out)


class ShadowExecutor:
    """See the module docstring. ``slurm`` is only read (it is a ShadowSlurm in the daemon)."""

    def __init__(self, slurm: SlurmClient, plans: ShadowPlans, *,
                 settings: ExecutorSettings | None = None,
                 on_plan: Callable[[ShadowPlan], None] | None = None) -> None:
        self.slurm = slurm
        self.plans = plans
        self.settings = settings or ExecutorSettings()
        self.on_plan = on_plan
        self._left_alone: set[int] = set()

    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        """Record (and log) every proposed plan that can start and is new."""
        for real in view.repository.unfinished_plans():
            if real.plan_id not in self._left_alone:
                self._left_alone.add(real.plan_id)
                log.warning("shadow: unfinished plan %d (%s, left by a real daemon) is left "
                            "alone: recovering it would write to Slurm; jobs it holds stay "
                            "held until a daemon without --shadow finishes it", real.plan_id,
                            real.state.value)
        if plan is None:
            return CycleExtras()
        audit: list[AuditEntry] = []
        busy: set[int] = set()
        for request in requests_from(plan, view.snapshot, view.config,
                                     self.settings.default_deadline):
            if busy & {request.beneficiary, *request.victims}:
                continue  # the real executor would have run the earlier plan first
            facts = self.slurm.job_facts([request.beneficiary, *request.victims])
            victims = victim_contexts(request, view.snapshot, facts,
                                      self.settings.default_deadline)
            if isinstance(victims, str):
                log.info("shadow: preemption for job %d would not start: %s",
                         request.beneficiary, victims)
                continue
            busy |= {request.beneficiary, *request.victims}
            shadow = self._shadow(request, view, max(v.deadline for v in victims))
            last = self.plans.latest_for(request.beneficiary)
            if last is not None and {v.job_id for v in last.victims} == set(request.victims):
                continue  # the same would-be plan as before: recorded and logged already
            shadow = self.plans.record(shadow)
            log.warning(
                "shadow plan %d: would preempt %s for job %d (%s, team %s, %d GPUs): %s; "
                "nothing done", shadow.plan_id,
                ", ".join(f"job {v.job_id} ({v.priority_class}, team {v.team}, {v.gpus} GPUs)"
                          for v in shadow.victims),
                request.beneficiary, shadow.beneficiary_class, shadow.beneficiary.team,
                shadow.beneficiary.gpus, shadow.reason)
            audit.append(AuditEntry(
                at=view.now, kind="shadow-plan", job_id=request.beneficiary,
                team=shadow.beneficiary.team,
                message=f"shadow plan {shadow.plan_id}: would preempt "
                        f"{', '.join(str(v) for v in request.victims)} for job "
                        f"{request.beneficiary} (nothing done)",
                data={"shadow_plan": shadow.plan_id, "victims": list(request.victims)}))
            if self.on_plan is not None:
                self.on_plan(shadow)
        return CycleExtras(audit=tuple(audit))

    def _shadow(self, request: ExecutionRequest, view: CycleView, deadline: float
                ) -> ShadowPlan:
        beneficiaries, members = plan_jobs(request, view.snapshot)
        pending = view.result.pending.get(request.beneficiary)
        competitors = Guard.competitors(view.snapshot, request.beneficiary, request.nodes)
        victims = tuple(ShadowVictim(
            job_id=m.job_id, team=m.team, user=m.user, gpus=m.gpus,
            priority_class=(view.result.running[m.job_id].effective.value
                            if m.job_id in view.result.running else "?"),
            deadline=request.deadline(m.job_id, self.settings.default_deadline))
            for m in members)
        return ShadowPlan(
            created_at=view.now, beneficiary=beneficiaries[0],
            beneficiary_class=pending.effective.value if pending is not None else "?",
            victims=victims, nodes=request.nodes,
            actions=would_do(request, competitors, self.settings.signal, deadline),
            reason=request.reason or f"job {request.beneficiary} needs the GPUs of "
            f"{', '.join(map(str, request.victims))}", on_miss=request.on_miss)
