"""Shadow plans: what ``hai-slurm daemon --shadow`` would have preempted (a table of its own).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Additive only: a daemon of the previous version ignores the new table, so a rollback of the
package needs no downgrade (``downgrade`` drops the table and its shadow history).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create ``shadow_plans``."""
    op.create_table(
        "shadow_plans",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("beneficiary", sa.BigInteger(), nullable=False),
        sa.Column("beneficiary_class", sa.String(64), nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("teams", sa.Text(), nullable=False),
        sa.Column("nodes", sa.Text(), nullable=False),
        sa.Column("victims", sa.Text(), nullable=False),
        sa.Column("actions", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("on_miss", sa.Enum("abort", "force", name="deadlineaction", native_enum=False,
                                     create_constraint=False, length=16), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shadow_plans")),
    )
    op.create_index(op.f("ix_shadow_plans_created_at"), "shadow_plans", ["created_at"])
    op.create_index(op.f("ix_shadow_plans_beneficiary"), "shadow_plans", ["beneficiary"])


def downgrade() -> None:
    """Drop ``shadow_plans`` (the shadow history goes with it)."""
    op.drop_index(op.f("ix_shadow_plans_beneficiary"), table_name="shadow_plans")
    op.drop_index(op.f("ix_shadow_plans_created_at"), table_name="shadow_plans")
    op.drop_table("shadow_plans")
