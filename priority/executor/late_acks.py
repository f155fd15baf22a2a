"""Victims that acknowledge *after* an aborted plan gave up on them are still requeued.

A job's own request validity (``HAI_CHECKPOINT_GRACE``) can be longer than the executor's
deadline (its ``#HAI --grace`` capped by the class's ``grace_cap``). Such a victim may save,
acknowledge and exit 75 after the plan was aborted; without help it would stay FAILED. The
executor therefore remembers the missed victims of an aborted plan for ``window`` seconds (one
named value, ``executor.late_acks``), and the acknowledged ones slurmctld had not yet seen exit
when the plan ended (a slurmctld restart delays that), and :func:`sweep` — called every daemon
cycle — requeues any of them that has acknowledged and exited since (not held: the plan is
over). ``RequeueExit=75``
in slurm.conf is the other safety net.
"""

from __future__ import annotations

from collections.abc import Sequence

from hai_slurm.checkpoint import ReportReader
from hai_slurm.priority.executor.types import VictimContext
from hai_slurm.priority.store import AuditEntry
from hai_slurm.priority.store.records import JsonValue
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.types import JobState, SlurmClient

KEY = "executor.late_acks"
_NOT_REQUEUED = frozenset({JobState.COMPLETED, JobState.CANCELLED})
"""A watched job that then completed (it acknowledged, kept running and finished) or was
cancelled is left alone."""


def _entries(repo: Repository) -> list[dict[str, JsonValue]]:
    raw = repo.get_value(KEY)
    return [e for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []


def remember(repo: Repository, plan_id: int, victims: Sequence[VictimContext], asked_at: float,
             until: float, now: float) -> None:
    """Watch ``victims`` (missed in an aborted plan) for a late acknowledgement until ``until``."""
    if not victims:
        return
    entries = _entries(repo)
    entries.append({"plan_id": plan_id, "asked_at": asked_at, "until": until,
                    "victims": [v.to_json() for v in victims]})
    repo.put_value(KEY, list(entries), at=now)


def sweep(repo: Repository, slurm: SlurmClient, reader: ReportReader,
          now: float, skew: float) -> list[AuditEntry]:
    """Requeue remembered victims that acknowledged and exited; forget expired entries."""
    entries = _entries(repo)
    if not entries:
        return []
    audit: list[AuditEntry] = []
    kept: list[dict[str, JsonValue]] = []
    for entry in entries:
        until, asked = entry.get("until"), entry.get("asked_at")
        raw = entry.get("victims")
        if not isinstance(until, int | float) or not isinstance(asked, int | float) \
                or not isinstance(raw, list) or now > until:
            continue
        victims = [VictimContext.from_json(v) for v in raw if isinstance(v, dict)]
        waiting = []
        facts = slurm.job_facts([v.job_id for v in victims])
        for v in victims:
            f = facts.get(v.job_id)
            if f is None or v.control_dir is None:
                continue  # gone for good, or cannot acknowledge
            report = reader(v.control_dir, str(v.job_id), v.uid, restart_count=v.restart_count,
                            not_before=float(asked) - skew)
            if report.ack is not None and f.finished and f.state not in _NOT_REQUEUED:
                done = slurm.requeue_any([v.job_id], hold=False)
                what = (f"requeued so it resumes from step {report.ack.step}" if done else
                        "not requeued: Slurm refuses to (--no-requeue, or Requeue=0 set since)")
                audit.append(AuditEntry(
                    at=now, kind="late-ack", job_id=v.job_id, plan_id=int(str(entry["plan_id"])),
                    message=f"job {v.job_id} acknowledged after plan {entry['plan_id']} was "
                    f"aborted and exited; {what}"))
            elif f.running:
                waiting.append(v)
        if waiting:
            kept.append({**entry, "victims": [v.to_json() for v in waiting]})
    if kept != entries:
        repo.put_value(KEY, list(kept), at=now)
    for a in audit:
        repo.audit(a)
    return audit
