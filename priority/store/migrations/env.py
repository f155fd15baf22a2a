"""Alembic environment: runs on the connection ``hai_slurm.priority.store.upgrade`` hands over.

No alembic.ini is needed. For ``alembic revision --autogenerate`` during development, run
``python -m hai_slurm.priority.store.migrations.revision "message"`` (see revision.py), which sets
up the same configuration.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from hai_slurm.errors import StateError
from hai_slurm.priority.store.models import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    """Entry point Alembic calls when it loads this file."""
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise StateError(
            "the hai-slurm migrations run only through hai_slurm.priority.store.upgrade(), "
            "which passes an open connection; offline (SQL script) mode is not supported"
        )
    _run(connection)


main()
