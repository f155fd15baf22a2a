"""Migrations: upgrade from empty creates the schema the models describe, and nothing else.

The class runs on MariaDB too (tests/integration/test_store_mariadb.py); SQLite-only checks
(WAL, foreign keys) are module-level functions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from test_store_repository import StoreCase

from hai_slurm.errors import StateError
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.priority.store.engine import (
    current_revision,
    default_sqlite_url,
    downgrade,
    head_revision,
    make_engine,
    upgrade,
)
from hai_slurm.priority.store.models import Base
from hai_slurm.priority.store.repository import Repository


def schema_diff(engine: Engine) -> list[object]:
    """What alembic's autogenerate would change to make the database match the models."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


class TestSchema(StoreCase):
    """Upgrade, compare, downgrade."""

    def test_upgrade_from_empty_creates_every_table(self, engine: Engine) -> None:
        """After upgrade the database is at head and holds exactly the models' tables."""
        assert current_revision(engine) == head_revision() == "0002"
        tables = set(inspect(engine).get_table_names())
        assert tables == set(Base.metadata.tables) | {"alembic_version"}

    def test_models_and_migrations_agree(self, engine: Engine) -> None:
        """compare_metadata finds no difference between the migrated schema and the models."""
        assert schema_diff(engine) == []

    def test_upgrade_twice_is_harmless(self, engine: Engine, store_url: str) -> None:
        """A daemon restart runs upgrade again: nothing changes, nothing fails."""
        again = upgrade(store_url)
        assert current_revision(again) == head_revision()
        assert schema_diff(again) == []
        again.dispose()

    def test_downgrade_to_base_and_back(self, engine: Engine) -> None:
        """Downgrade drops every table; upgrading again restores the same schema."""
        downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        assert current_revision(engine) is None
        upgrade(engine)
        assert schema_diff(engine) == []

    def test_unknown_revision_is_refused(self, engine: Engine) -> None:
        """A database written by a newer hai-slurm is not touched; the message says why."""
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        with pytest.raises(StateError, match="revision '9999', which this hai-slurm does not know"):
            upgrade(engine)


def test_sqlite_runs_in_wal_mode_with_foreign_keys(tmp_path: Path) -> None:
    """Every SQLite connection has WAL journaling, foreign keys on and a busy timeout."""
    engine = upgrade(default_sqlite_url(tmp_path))
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 10_000
    engine.dispose()
    assert (tmp_path / "hai-slurm.db").is_file()


def test_writer_locked_out_says_what_to_look_for(tmp_path: Path) -> None:
    """A write blocked by another process's transaction past the busy timeout names the cause."""
    url = default_sqlite_url(tmp_path)
    upgrade(url).dispose()
    impatient = Repository(make_engine(url, sqlite_busy_timeout_ms=200))
    other = make_engine(url)
    try:
        with other.begin() as conn:  # holds the write lock (BEGIN IMMEDIATE)
            conn.execute(text("SELECT 1"))
            expected = r"adding fairness events failed: database is locked; another .*fuser "
            with pytest.raises(StateError, match=expected):
                impatient.add_events([FairnessEvent(EventKind.PREEMPTED, "t", "u", 1.0)])
    finally:
        other.dispose()


def test_default_url_is_a_file_in_the_state_dir(tmp_path: Path) -> None:
    """The default database lives in the state dir, by absolute path."""
    url = default_sqlite_url(tmp_path / "." / "state")
    assert url == f"sqlite:///{tmp_path / 'state' / 'hai-slurm.db'}"
    (tmp_path / "state").mkdir()
    make_engine(url).dispose()
