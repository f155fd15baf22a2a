"""Conversions between ORM rows and the immutable records the rest of the daemon uses."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from hai_slurm.priority.policy.state import FairnessEvent
from hai_slurm.priority.store.models import (
    AuditRow,
    CreditRow,
    FairnessEventRow,
    PlanRow,
    ProtectionRow,
    TrackedJobRow,
)
from hai_slurm.priority.store.records import (
    AuditEntry,
    CreditEntry,
    JsonValue,
    Plan,
    PlanJob,
    PlanStep,
    PlanVictim,
    Protection,
    TrackedJob,
)

_JOB_FIELDS = tuple(f.name for f in fields(TrackedJob))


def job_values(job: TrackedJob) -> dict[str, Any]:
    """Column values of a tracked job (the dataclass fields are named like the columns).

    Not ``dataclasses.asdict``, which deep-copies every value: 2,000 running jobs' records are
    flushed at once every few minutes."""
    return {name: getattr(job, name) for name in _JOB_FIELDS}


def job_from_row(row: TrackedJobRow) -> TrackedJob:
    """The record of a tracked-job row."""
    return TrackedJob(
        job_id=row.job_id,
        team=row.team,
        user=row.user,
        requested_class=row.requested_class,
        effective_class=row.effective_class,
        class_origin=row.class_origin,
        original_submit_at=row.original_submit_at,
        first_seen_at=row.first_seen_at,
        updated_at=row.updated_at,
        run_seconds=row.run_seconds,
        wait_seconds=row.wait_seconds,
        last_state=row.last_state,
        preemptions=row.preemptions,
        checkpoint_at=row.checkpoint_at,
        checkpoint_step=row.checkpoint_step,
        priority=row.priority,
    )


def event_row(event: FairnessEvent) -> FairnessEventRow:
    """A new fairness-event row."""
    return FairnessEventRow(team=event.team, user=event.user, kind=event.kind, at=event.time,
                            plan_id=event.plan_id, job_id=event.job_id)


def event_from_row(row: FairnessEventRow) -> FairnessEvent:
    """The record of a fairness-event row."""
    return FairnessEvent(kind=row.kind, team=row.team, user=row.user, time=row.at,
                         job_id=row.job_id, plan_id=row.plan_id)


def credit_row(entry: CreditEntry) -> CreditRow:
    """A new ledger row."""
    return CreditRow(**asdict(entry))


def protection_from_row(row: ProtectionRow) -> Protection:
    """The record of a protection row."""
    return Protection(team=row.team, until=row.until, granted_at=row.granted_at, reason=row.reason)


def audit_row(entry: AuditEntry) -> AuditRow:
    """A new audit row; ``data`` is stored as canonical JSON."""
    return AuditRow(
        at=entry.at, kind=entry.kind, message=entry.message, team=entry.team,
        job_id=entry.job_id, plan_id=entry.plan_id,
        data=json.dumps(entry.data, sort_keys=True, allow_nan=False),
    )


def audit_from_row(row: AuditRow) -> AuditEntry:
    """The record of an audit row."""
    data: dict[str, JsonValue] = json.loads(row.data)
    return AuditEntry(
        at=row.at, kind=row.kind, message=row.message, team=row.team, job_id=row.job_id,
        plan_id=row.plan_id, data=data,
    )


def plan_from_row(row: PlanRow) -> Plan:
    """The record of a plan row with its (already loaded) jobs and steps."""
    return Plan(
        plan_id=row.id,
        state=row.state,
        created_at=row.created_at,
        updated_at=row.updated_at,
        reason=row.reason,
        on_miss=row.on_miss,
        deadline_at=row.deadline_at,
        beneficiaries=tuple(
            PlanJob(job_id=b.job_id, team=b.team, user=b.user, gpus=b.gpus)
            for b in row.beneficiaries
        ),
        victims=tuple(
            PlanVictim(
                job_id=v.job_id, team=v.team, user=v.user, gpus=v.gpus, state=v.state,
                asked_at=v.asked_at, acked_at=v.acked_at, ack_step=v.ack_step,
                requeued_at=v.requeued_at,
            )
            for v in row.victims
        ),
        steps=tuple(
            PlanStep(from_state=s.from_state, to_state=s.to_state, at=s.at, note=s.note)
            for s in row.steps
        ),
    )
