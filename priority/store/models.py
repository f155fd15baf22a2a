"""SQLAlchemy 2 ORM models of every table the daemon keeps, so a restart loses nothing.

Times are epoch seconds in DOUBLE columns (exact round trip, portable between SQLite and MariaDB).
Enums are stored as their string values in VARCHAR columns (no native ENUM: migrations stay simple).
Any change here needs a new Alembic revision under ``migrations/versions``; a unit test compares
these models with the migrated schema and fails on any difference.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import EventKind
from hai_slurm.priority.store.states import PlanState, VictimState

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an INTEGER PRIMARY KEY; MariaDB gets a BIGINT.
_Id = BigInteger().with_variant(Integer(), "sqlite")

NAME = 64  # team, user and class names
SHORT = 255


def _enum(cls: type[StrEnum]) -> Enum:
    """A VARCHAR column holding the enum's values (not its member names)."""
    return Enum(
        cls,
        native_enum=False,
        create_constraint=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so constraint names match in migrations."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TrackedJobRow(Base):
    """A Slurm job the daemon tracks, with what Slurm forgets (original submit time, runs)."""

    __tablename__ = "tracked_jobs"

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    team: Mapped[str] = mapped_column(String(NAME), index=True)
    user: Mapped[str] = mapped_column(String(NAME))
    requested_class: Mapped[str] = mapped_column(String(NAME))
    effective_class: Mapped[str] = mapped_column(String(NAME))
    class_origin: Mapped[ClassOrigin] = mapped_column(_enum(ClassOrigin))
    original_submit_at: Mapped[float] = mapped_column(Double)
    first_seen_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    run_seconds: Mapped[float] = mapped_column(Double, default=0.0)
    wait_seconds: Mapped[float] = mapped_column(Double, default=0.0)
    last_state: Mapped[str] = mapped_column(String(32))
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    checkpoint_at: Mapped[float | None] = mapped_column(Double)
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger)
    priority: Mapped[int | None] = mapped_column(BigInteger)


class PlanRow(Base):
    """A two-phase preemption plan."""

    __tablename__ = "preemption_plans"

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    state: Mapped[PlanState] = mapped_column(_enum(PlanState), index=True)
    created_at: Mapped[float] = mapped_column(Double, index=True)
    updated_at: Mapped[float] = mapped_column(Double)
    reason: Mapped[str] = mapped_column(Text)
    on_miss: Mapped[DeadlineAction] = mapped_column(_enum(DeadlineAction))
    deadline_at: Mapped[float | None] = mapped_column(Double)

    beneficiaries: Mapped[list[PlanBeneficiaryRow]] = relationship(
        back_populates="plan", cascade="all, delete-orphan", order_by="PlanBeneficiaryRow.job_id"
    )
    victims: Mapped[list[PlanVictimRow]] = relationship(
        back_populates="plan", cascade="all, delete-orphan", order_by="PlanVictimRow.job_id"
    )
    steps: Mapped[list[PlanStepRow]] = relationship(
        back_populates="plan", cascade="all, delete-orphan", order_by="PlanStepRow.id"
    )


class PlanBeneficiaryRow(Base):
    """A waiting job a plan frees resources for."""

    __tablename__ = "plan_beneficiaries"

    plan_id: Mapped[int] = mapped_column(
        ForeignKey("preemption_plans.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    team: Mapped[str] = mapped_column(String(NAME), index=True)
    user: Mapped[str] = mapped_column(String(NAME))
    gpus: Mapped[int] = mapped_column(Integer, default=0)

    plan: Mapped[PlanRow] = relationship(back_populates="beneficiaries")


class PlanVictimRow(Base):
    """A running job a plan asks to checkpoint and then requeues."""

    __tablename__ = "plan_victims"

    plan_id: Mapped[int] = mapped_column(
        ForeignKey("preemption_plans.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    team: Mapped[str] = mapped_column(String(NAME), index=True)
    user: Mapped[str] = mapped_column(String(NAME))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[VictimState] = mapped_column(_enum(VictimState))
    asked_at: Mapped[float | None] = mapped_column(Double)
    acked_at: Mapped[float | None] = mapped_column(Double)
    ack_step: Mapped[int | None] = mapped_column(BigInteger)
    requeued_at: Mapped[float | None] = mapped_column(Double)

    plan: Mapped[PlanRow] = relationship(back_populates="victims")


class PlanStepRow(Base):
    """One recorded transition of a plan (every step the executor takes is written here)."""

    __tablename__ = "plan_steps"

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    plan_id: Mapped[int] = mapped_column(
        ForeignKey("preemption_plans.id", ondelete="CASCADE"), index=True
    )
    from_state: Mapped[PlanState | None] = mapped_column(_enum(PlanState))
    to_state: Mapped[PlanState] = mapped_column(_enum(PlanState))
    at: Mapped[float] = mapped_column(Double)
    note: Mapped[str] = mapped_column(Text)

    plan: Mapped[PlanRow] = relationship(back_populates="steps")


class FairnessEventRow(Base):
    """A preempted/preempting event, counted over a rolling window per team and per user."""

    __tablename__ = "fairness_events"
    __table_args__ = (
        Index("ix_fairness_events_team_kind_at", "team", "kind", "at"),
        Index("ix_fairness_events_user_kind_at", "user", "kind", "at"),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    team: Mapped[str] = mapped_column(String(NAME))
    user: Mapped[str] = mapped_column(String(NAME))
    kind: Mapped[EventKind] = mapped_column(_enum(EventKind))
    at: Mapped[float] = mapped_column(Double)
    plan_id: Mapped[int | None] = mapped_column(
        ForeignKey("preemption_plans.id", ondelete="SET NULL")
    )
    job_id: Mapped[int | None] = mapped_column(BigInteger)


class ProtectionRow(Base):
    """A team protected from being preempted until ``until``."""

    __tablename__ = "protections"

    team: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    until: Mapped[float] = mapped_column(Double)
    granted_at: Mapped[float] = mapped_column(Double)
    reason: Mapped[str] = mapped_column(String(SHORT))


class CreditRow(Base):
    """Ledger of GPU-hours a team lost to preemption (positive) or got back (negative)."""

    __tablename__ = "team_credits"

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    team: Mapped[str] = mapped_column(String(NAME), index=True)
    gpu_hours: Mapped[float] = mapped_column(Double)
    at: Mapped[float] = mapped_column(Double)
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    plan_id: Mapped[int | None] = mapped_column(
        ForeignKey("preemption_plans.id", ondelete="SET NULL")
    )
    reason: Mapped[str] = mapped_column(String(SHORT))


class AuditRow(Base):
    """The daemon's audit log: what it decided and did, and why."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Double, index=True)
    kind: Mapped[str] = mapped_column(String(NAME))
    message: Mapped[str] = mapped_column(Text)
    team: Mapped[str | None] = mapped_column(String(NAME))
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    plan_id: Mapped[int | None] = mapped_column(BigInteger)
    data: Mapped[str] = mapped_column(Text)  # JSON object


class ValueRow(Base):
    """Small named values the policy carries between cycles (JSON), e.g. a round-robin cursor."""

    __tablename__ = "daemon_values"

    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[str] = mapped_column(Text)  # JSON
    updated_at: Mapped[float] = mapped_column(Double)


class LeaderLockRow(Base):
    """The leader lease: one active daemon at a time (see :mod:`.lock`)."""

    __tablename__ = "leader_lock"

    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    owner: Mapped[str] = mapped_column(String(SHORT))
    acquired_at: Mapped[float] = mapped_column(Double)
    renewed_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float] = mapped_column(Double)


class ShadowPlanRow(Base):
    """A plan ``hai-slurm daemon --shadow`` would have carried out (nothing was done).

    A table of its own, not a flag on ``preemption_plans``: recovery, the requeue count that
    compensation reads and the busy-job check only ever see real plans, so a shadow run can never
    be taken for (or resumed as) a real preemption by a daemon that later runs for real.
    """

    __tablename__ = "shadow_plans"

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    created_at: Mapped[float] = mapped_column(Double, index=True)
    beneficiary: Mapped[int] = mapped_column(BigInteger, index=True)
    beneficiary_class: Mapped[str] = mapped_column(String(NAME))
    team: Mapped[str] = mapped_column(String(NAME))
    user: Mapped[str] = mapped_column(String(NAME))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    teams: Mapped[str] = mapped_column(Text)  # ",team-a,team-b,": every team involved
    nodes: Mapped[str] = mapped_column(Text)
    victims: Mapped[str] = mapped_column(Text)  # JSON list of objects
    actions: Mapped[str] = mapped_column(Text)  # JSON list of the Slurm commands it would issue
    reason: Mapped[str] = mapped_column(Text)
    on_miss: Mapped[DeadlineAction] = mapped_column(_enum(DeadlineAction))
