"""Preemption-plan lifecycle inside one session: creation, validated transitions, victim updates.

Each function runs inside the caller's transaction (see :class:`~.repository.Repository`), so a
plan step and the counters it changes are committed together or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Select, exists, or_, select
from sqlalchemy.orm import Session, selectinload

from hai_slurm.errors import StateError
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store.convert import audit_row
from hai_slurm.priority.store.models import (
    PlanBeneficiaryRow,
    PlanRow,
    PlanStepRow,
    PlanVictimRow,
)
from hai_slurm.priority.store.records import AuditEntry, PlanJob
from hai_slurm.priority.store.states import (
    FINAL_PLAN_STATES,
    PlanState,
    VictimState,
    check_plan_transition,
    check_victim_transition,
)

UNFINISHED = tuple(s for s in PlanState if s not in FINAL_PLAN_STATES)

# What must be true of every victim before a plan may enter a state.
_VICTIMS_REQUIRED: dict[PlanState, frozenset[VictimState]] = {
    PlanState.SIGNALLED: frozenset(VictimState) - {VictimState.CHOSEN},
    PlanState.ALL_ACKED: frozenset({VictimState.ACKED, VictimState.GONE}),
    PlanState.REQUEUED: frozenset({VictimState.REQUEUED, VictimState.GONE}),
}


def plans_query() -> Select[PlanRow]:
    """Plans with their jobs and steps loaded in a few queries."""
    return select(PlanRow).options(
        selectinload(PlanRow.beneficiaries),
        selectinload(PlanRow.victims),
        selectinload(PlanRow.steps),
    )


def _busy_jobs(session: Session, job_ids: Sequence[int]) -> dict[int, int]:
    """Job id -> id of the unfinished plan it already takes part in."""
    busy: dict[int, int] = {}
    for table in (PlanVictimRow, PlanBeneficiaryRow):
        query = (
            select(table.job_id, table.plan_id)
            .join(PlanRow, PlanRow.id == table.plan_id)
            .where(table.job_id.in_(job_ids), PlanRow.state.in_(UNFINISHED))
        )
        busy.update({job_id: plan_id for job_id, plan_id in session.execute(query)})
    return busy


def create_plan(
    session: Session,
    *,
    at: float,
    beneficiaries: Sequence[PlanJob],
    victims: Sequence[PlanJob],
    reason: str,
    on_miss: DeadlineAction,
    deadline_at: float | None,
) -> PlanRow:
    """Insert a plan in state ``planned``, its victims ``chosen``; return the row (id assigned)."""
    if not beneficiaries or not victims:
        raise StateError(
            f"a preemption plan needs at least one beneficiary and one victim "
            f"(got {len(beneficiaries)} beneficiaries, {len(victims)} victims)"
        )
    ids = [j.job_id for j in (*beneficiaries, *victims)]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise StateError(f"jobs {duplicates} appear twice in one plan (as victim and beneficiary?)")
    busy = _busy_jobs(session, ids)
    if busy:
        taken = ", ".join(f"job {j} in plan {p}" for j, p in sorted(busy.items()))
        raise StateError(
            f"cannot plan: {taken} already (unfinished); finish or roll back that plan first"
        )
    plan = PlanRow(
        state=PlanState.PLANNED, created_at=at, updated_at=at, reason=reason, on_miss=on_miss,
        deadline_at=deadline_at,
    )
    plan.beneficiaries = [
        PlanBeneficiaryRow(job_id=j.job_id, team=j.team, user=j.user, gpus=j.gpus)
        for j in beneficiaries
    ]
    plan.victims = [
        PlanVictimRow(job_id=j.job_id, team=j.team, user=j.user, gpus=j.gpus,
                      state=VictimState.CHOSEN)
        for j in victims
    ]
    plan.steps = [PlanStepRow(from_state=None, to_state=PlanState.PLANNED, at=at, note=reason)]
    session.add(plan)
    session.flush()
    session.add(audit_row(AuditEntry(
        at=at, kind="plan", plan_id=plan.id,
        message=f"plan {plan.id} planned: {reason}",
        data={"beneficiaries": [j.job_id for j in beneficiaries],
              "victims": [j.job_id for j in victims], "on_miss": str(on_miss)},
    )))
    return plan


def load_plan(session: Session, plan_id: int, *, for_update: bool = False) -> PlanRow:
    """The plan row (locked for update if asked); :class:`StateError` if there is none."""
    query = plans_query().where(PlanRow.id == plan_id)
    if for_update:
        query = query.with_for_update()
    row = session.scalars(query).one_or_none()
    if row is None:
        raise StateError(f"plan {plan_id} does not exist in the database")
    return row


def transition(
    session: Session, plan_id: int, target: PlanState, *, at: float, note: str
) -> PlanRow:
    """Move a plan to ``target`` after checking the state machine and its victims' states."""
    plan = load_plan(session, plan_id, for_update=True)
    current = plan.state
    check_plan_transition(plan_id, current, target)
    required = _VICTIMS_REQUIRED.get(target)
    if required is not None:
        lagging = [f"{v.job_id} ({v.state})" for v in plan.victims if v.state not in required]
        if lagging:
            raise StateError(
                f"plan {plan_id}: cannot go {current} -> {target} while victims "
                f"{', '.join(lagging)} are not {'/'.join(sorted(required))}"
            )
    plan.state = target
    plan.updated_at = at
    plan.steps.append(PlanStepRow(from_state=current, to_state=target, at=at, note=note))
    session.add(audit_row(AuditEntry(
        at=at, kind="plan", plan_id=plan_id,
        message=f"plan {plan_id}: {current} -> {target}" + (f": {note}" if note else ""),
    )))
    session.flush()
    return plan


_STAMP = {
    VictimState.ASKED: "asked_at",
    VictimState.ACKED: "acked_at",
    VictimState.REQUEUED: "requeued_at",
}


def update_victims(
    session: Session,
    plan_id: int,
    job_ids: Iterable[int],
    target: VictimState,
    *,
    at: float,
    ack_step: int | None = None,
) -> PlanRow:
    """Move victims of a plan to ``target`` (stamping the time), all validated before any change."""
    plan = load_plan(session, plan_id, for_update=True)
    if plan.state in FINAL_PLAN_STATES:
        raise StateError(
            f"plan {plan_id} is {plan.state} (final); its victims can no longer change"
        )
    by_job = {v.job_id: v for v in plan.victims}
    wanted = list(job_ids)
    unknown = [j for j in wanted if j not in by_job]
    if unknown:
        raise StateError(
            f"jobs {unknown} are not victims of plan {plan_id} (its victims: {sorted(by_job)})"
        )
    for job_id in wanted:
        check_victim_transition(plan_id, job_id, by_job[job_id].state, target)
    for job_id in wanted:
        victim = by_job[job_id]
        victim.state = target
        stamp = _STAMP.get(target)
        if stamp is not None:
            setattr(victim, stamp, at)
        if target is VictimState.ACKED and ack_step is not None:
            victim.ack_step = ack_step
    plan.updated_at = at
    session.flush()
    return plan


def history_query(team: str | None, limit: int) -> Select[PlanRow]:
    """Newest plans first, optionally only those where ``team`` gained or lost a job."""
    query = plans_query().order_by(PlanRow.created_at.desc(), PlanRow.id.desc()).limit(limit)
    if team is not None:
        query = query.where(or_(
            exists().where(PlanVictimRow.plan_id == PlanRow.id, PlanVictimRow.team == team),
            exists().where(
                PlanBeneficiaryRow.plan_id == PlanRow.id, PlanBeneficiaryRow.team == team
            ),
        ))
    return query
