"""The daemon's persistent state: SQLAlchemy models, Alembic migrations, repository, leader lock.

Typical start of a daemon::

    engine = upgrade(config.database_url or default_sqlite_url(state_dir))  # migrate to head
    repo, lock = Repository(engine), LeaderLock(engine)
    if lock.acquire_or_renew(owner, now, ttl):
        for plan in repo.unfinished_plans():
            ...  # finish or roll back what a killed daemon left
        repo.record_cycle(CycleWrite(at=now, jobs=..., events=...))

Everything takes the time as an argument (epoch seconds); nothing here reads a clock or Slurm.
The package itself exports only the plain values (records and states), so code that passes them
around imports no database library; the engine, lock and repository are imported from their
modules (``store.engine``, ``store.lock``, ``store.repository``).
"""

from hai_slurm.priority.store.records import (
    AuditEntry,
    CreditEntry,
    CycleWrite,
    JsonValue,
    Plan,
    PlanJob,
    PlanStep,
    PlanVictim,
    Protection,
    ShadowPlan,
    ShadowVictim,
    TrackedJob,
)
from hai_slurm.priority.store.states import (
    FINAL_PLAN_STATES,
    PLAN_TRANSITIONS,
    VICTIM_TRANSITIONS,
    PlanState,
    VictimState,
)

__all__ = [
    "FINAL_PLAN_STATES",
    "PLAN_TRANSITIONS",
    "VICTIM_TRANSITIONS",
    "AuditEntry",
    "CreditEntry",
    "CycleWrite",
    "JsonValue",
    "Plan",
    "PlanJob",
    "PlanState",
    "PlanStep",
    "PlanVictim",
    "Protection",
    "ShadowPlan",
    "ShadowVictim",
    "TrackedJob",
    "VictimState",
]
