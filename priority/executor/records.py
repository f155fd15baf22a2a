"""What the executor knows and writes about jobs (pure functions): the victims' contexts, the
plan members from a snapshot, and the fairness events and compensation credits a finished plan
commits.

Credits: each requeued victim's team is owed ``gpus x seconds / 3600`` GPU-hours, where seconds
is how long the victim was busy saving (request to acknowledgement) — or, for a victim requeued
without acknowledgement (policy ``force``), request to requeue; the work it did since its last
checkpoint is lost on top and is not known here, so the credit is a lower bound.
"""

from __future__ import annotations

from collections.abc import Mapping

from hai_slurm.checkpoint.protocol import control_dir_of
from hai_slurm.priority.executor.types import ExecutionRequest, VictimContext
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.priority.store import AuditEntry, CreditEntry, CycleWrite, Plan, PlanJob, VictimState
from hai_slurm.slurm_plugins.job_record import job_record
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job, JobFacts


def team_of(job: Job) -> str:
    """The job's team, as the policy counts it (:func:`~hai_slurm.slurm_plugins.job_record.
    job_record`)."""
    return job_record(job).team


def plan_jobs(request: ExecutionRequest, snap: ClusterSnapshot
              ) -> tuple[list[PlanJob], list[PlanJob]]:
    """(beneficiaries, victims) of a request as the store records them."""
    def member(job_id: int, victim: bool) -> PlanJob:
        job = snap.job(job_id)
        if job is None:
            return PlanJob(job_id, team="?", user="?")
        gpus = job.gpus_allocated or job.gpus_requested if victim else job.gpus_requested
        return PlanJob(job_id, team=team_of(job), user=job.user, gpus=gpus)

    return ([member(request.beneficiary, False)],
            [member(j, True) for j in request.victims])


def victim_contexts(request: ExecutionRequest, snap: ClusterSnapshot,
                    facts: Mapping[int, JobFacts], default_deadline: float
                    ) -> tuple[VictimContext, ...] | str:
    """Each victim's uid (from Slurm), control directory, run and deadline — or why the request
    cannot start: the beneficiary no longer waits, or a victim no longer runs. A victim without
    ``#HAI --checkpoint-dir`` cannot acknowledge but stays preemptible: it is requeued at its
    deadline under either miss policy (the planner counted its loss as everything since its
    start or last periodic save)."""
    b = facts.get(request.beneficiary)
    if b is None or not b.pending:
        return (f"beneficiary {request.beneficiary} is not pending any more "
                f"({b.state if b else 'gone'})")
    out = []
    for jid in request.victims:
        job, f = snap.job(jid), facts.get(jid)
        if job is None or f is None or not f.running:
            return f"victim {jid} is not running any more ({f.state if f else 'gone'})"
        checkpoint_dir = job_record(job).checkpoint_dir
        ctl = str(control_dir_of(checkpoint_dir, jid)) if checkpoint_dir else None
        out.append(VictimContext(jid, job.uid, ctl, f.restart_count,
                                 request.deadline(jid, default_deadline)))
    return tuple(out)


def settle_records(plan: Plan, now: float, *, preempting: bool = True) -> CycleWrite:
    """Events, credits and audit lines of a plan that ends (committed with its last step).

    Every requeued victim counts as preempted; the beneficiary counts as preempting only when
    ``preempting`` (a plan that ended ``done``)."""
    requeued = [v for v in plan.victims if v.state is VictimState.REQUEUED]
    events: list[FairnessEvent] = []
    credits: list[CreditEntry] = []
    for v in requeued:
        events.append(FairnessEvent(team=v.team, user=v.user, kind=EventKind.PREEMPTED, time=now,
                                    plan_id=plan.plan_id, job_id=v.job_id))
        start = v.asked_at if v.asked_at is not None else plan.created_at
        end = v.acked_at if v.acked_at is not None else (v.requeued_at or now)
        hours = v.gpus * max(0.0, end - start) / 3600.0
        how = "saving" if v.acked_at is not None else "forced requeue without a checkpoint"
        credits.append(CreditEntry(team=v.team, gpu_hours=hours, at=now, job_id=v.job_id,
                                   plan_id=plan.plan_id,
                                   reason=f"preempted by plan {plan.plan_id} ({how})"))
    if requeued and preempting:
        for b in plan.beneficiaries:
            events.append(FairnessEvent(team=b.team, user=b.user, kind=EventKind.PREEMPTING,
                                        time=now, plan_id=plan.plan_id, job_id=b.job_id))
    audit = tuple(AuditEntry(at=now, kind="preempted", team=v.team, job_id=v.job_id,
                             plan_id=plan.plan_id,
                             message=f"job {v.job_id} ({v.team}) requeued for plan "
                             f"{plan.plan_id}" + (f" after saving at step {v.ack_step}"
                                                  if v.ack_step is not None else ""))
                  for v in requeued)
    return CycleWrite(at=now, events=tuple(events), credits=tuple(credits), audit=audit)


def victim_summary(plan: Plan, ended: Mapping[int, str]) -> str:
    """What happened to each victim, in words, for a plan's final note (``ended``: victims that
    ended without an acknowledgement during the plan -> their Slurm state)."""
    words = []
    for v in plan.victims:
        saved = f"saved at step {v.ack_step}" if v.ack_step is not None else None
        if v.job_id in ended and v.ack_step is None:
            saved = f"ended {ended[v.job_id]} without an acknowledgement"
        what = {VictimState.REQUEUED: "requeued", VictimState.MISSED: "missed its deadline, "
                "left running", VictimState.ACKED: "not requeued",
                VictimState.ENDED: "not requeued yet",
                VictimState.GONE: "not requeued (completed, cancelled or forgotten by Slurm)",
                VictimState.ASKED: "no answer", VictimState.CHOSEN: "never asked"}[v.state]
        words.append(f"{v.job_id} " + (f"{saved}, {what}" if saved else what))
    return "victims: " + "; ".join(words)
