"""The daemon's persistent state: SQLAlchemy models, Alembic migrations, repository, leader lock.

Typical start of a daemon::

    engine = upgrade(config.database_url or default_sqlite_url(state_dir))  # migrate to head
    repo, lock = Repository(engine), LeaderLock(engine)
    if lock.acquire_or_renew(owner, now, ttl):
        for plan in repo.unfinished_plans():
            ...  # finish or roll back what a killed daemon left
        repo.record_cycle(CycleWrite(at=now, jobs=..., events=...))

Everything takes the time as an argument (epoch seconds); nothing here reads a clock or Slurm.
"""

from hai_slurm.priority.store.engine import (
    check_connection,
    current_revision,
    default_sqlite_url,
    downgrade,
    head_revision,
    make_engine,
    masked,
    upgrade,
)
from hai_slurm.priority.store.lock import DEFAULT_LOCK_NAME, LeaderLock, LeaseHolder, default_owner
from hai_slurm.priority.store.records import (
    AuditEntry,
    CreditEntry,
    CycleWrite,
    FairnessEvent,
    JsonValue,
    Plan,
    PlanJob,
    PlanStep,
    PlanVictim,
    Protection,
    TrackedJob,
)
from hai_slurm.priority.store.repository import Repository
from hai_slurm.priority.store.states import (
    FINAL_PLAN_STATES,
    PLAN_TRANSITIONS,
    VICTIM_TRANSITIONS,
    ClassOrigin,
    EventKind,
    MissPolicy,
    PlanState,
    VictimState,
)

__all__ = [
    "DEFAULT_LOCK_NAME",
    "FINAL_PLAN_STATES",
    "PLAN_TRANSITIONS",
    "VICTIM_TRANSITIONS",
    "AuditEntry",
    "ClassOrigin",
    "CreditEntry",
    "CycleWrite",
    "EventKind",
    "FairnessEvent",
    "JsonValue",
    "LeaderLock",
    "LeaseHolder",
    "MissPolicy",
    "Plan",
    "PlanJob",
    "PlanState",
    "PlanStep",
    "PlanVictim",
    "Protection",
    "Repository",
    "TrackedJob",
    "VictimState",
    "check_connection",
    "current_revision",
    "default_owner",
    "default_sqlite_url",
    "downgrade",
    "head_revision",
    "make_engine",
    "masked",
    "upgrade",
]
