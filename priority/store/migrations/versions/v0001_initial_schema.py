"""Initial schema: tracked jobs, plans and victims, fairness events, credits, audit, leader lock.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Enum values are spelled out here on purpose: a migration describes the schema as it was, and must
not change when the Python enums grow later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

PLAN_STATES = (
    "planned", "signalled", "all_acked", "forced", "requeued", "done", "aborted", "rolled_back",
)


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=False, length=16)


def _plan_fk(table: str, ondelete: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["plan_id"], ["preemption_plans.id"],
        name=op.f(f"fk_{table}_plan_id_preemption_plans"), ondelete=ondelete,
    )


def upgrade() -> None:
    """Create every table."""
    op.create_table(
        "tracked_jobs",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("requested_class", sa.String(64), nullable=False),
        sa.Column("effective_class", sa.String(64), nullable=False),
        sa.Column(
            "class_origin",
            _enum("classorigin", "directive", "default", "aging", "decay", "demotion"),
            nullable=False,
        ),
        sa.Column("original_submit_at", sa.Double(), nullable=False),
        sa.Column("first_seen_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("run_seconds", sa.Double(), nullable=False),
        sa.Column("wait_seconds", sa.Double(), nullable=False),
        sa.Column("last_state", sa.String(32), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("checkpoint_at", sa.Double(), nullable=True),
        sa.Column("checkpoint_step", sa.BigInteger(), nullable=True),
        sa.Column("priority", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_tracked_jobs")),
    )
    op.create_index(op.f("ix_tracked_jobs_team"), "tracked_jobs", ["team"])

    op.create_table(
        "preemption_plans",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("state", _enum("planstate", *PLAN_STATES), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("on_miss", _enum("misspolicy", "abort", "force"), nullable=False),
        sa.Column("deadline_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_preemption_plans")),
    )
    op.create_index(op.f("ix_preemption_plans_created_at"), "preemption_plans", ["created_at"])
    op.create_index(op.f("ix_preemption_plans_state"), "preemption_plans", ["state"])

    for table in ("plan_beneficiaries", "plan_victims"):
        victim_columns = (
            [
                sa.Column(
                    "state",
                    _enum("victimstate", "chosen", "asked", "acked", "missed", "requeued",
                          "gone"),
                    nullable=False,
                ),
                sa.Column("asked_at", sa.Double(), nullable=True),
                sa.Column("acked_at", sa.Double(), nullable=True),
                sa.Column("ack_step", sa.BigInteger(), nullable=True),
                sa.Column("requeued_at", sa.Double(), nullable=True),
            ]
            if table == "plan_victims"
            else []
        )
        op.create_table(
            table,
            sa.Column("plan_id", _id(), nullable=False),
            sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
            sa.Column("team", sa.String(64), nullable=False),
            sa.Column("user", sa.String(64), nullable=False),
            sa.Column("gpus", sa.Integer(), nullable=False),
            *victim_columns,
            _plan_fk(table, "CASCADE"),
            sa.PrimaryKeyConstraint("plan_id", "job_id", name=op.f(f"pk_{table}")),
        )
        op.create_index(op.f(f"ix_{table}_team"), table, ["team"])

    op.create_table(
        "plan_steps",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("plan_id", _id(), nullable=False),
        sa.Column("from_state", _enum("planstate", *PLAN_STATES), nullable=True),
        sa.Column("to_state", _enum("planstate", *PLAN_STATES), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        _plan_fk("plan_steps", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plan_steps")),
    )
    op.create_index(op.f("ix_plan_steps_plan_id"), "plan_steps", ["plan_id"])

    op.create_table(
        "fairness_events",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("kind", _enum("eventkind", "preempted", "preempting"), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("plan_id", _id(), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        _plan_fk("fairness_events", "SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fairness_events")),
    )
    op.create_index("ix_fairness_events_team_kind_at", "fairness_events", ["team", "kind", "at"])
    op.create_index("ix_fairness_events_user_kind_at", "fairness_events", ["user", "kind", "at"])

    op.create_table(
        "protections",
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("until", sa.Double(), nullable=False),
        sa.Column("granted_at", sa.Double(), nullable=False),
        sa.Column("reason", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("team", name=op.f("pk_protections")),
    )

    op.create_table(
        "team_credits",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("gpu_hours", sa.Double(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("plan_id", _id(), nullable=True),
        sa.Column("reason", sa.String(255), nullable=False),
        _plan_fk("team_credits", "SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_team_credits")),
    )
    op.create_index(op.f("ix_team_credits_team"), "team_credits", ["team"])

    op.create_table(
        "audit_log",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("plan_id", sa.BigInteger(), nullable=True),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"])

    op.create_table(
        "daemon_values",
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_daemon_values")),
    )

    op.create_table(
        "leader_lock",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("acquired_at", sa.Double(), nullable=False),
        sa.Column("renewed_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leader_lock")),
    )


def downgrade() -> None:
    """Drop every table (children before the plans they reference)."""
    for table in (
        "leader_lock", "daemon_values", "audit_log", "team_credits", "protections",
        "fairness_events", "plan_steps", "plan_victims", "plan_beneficiaries",
        "preemption_plans", "tracked_jobs",
    ):
        op.drop_table(table)  # indexes go with their table
