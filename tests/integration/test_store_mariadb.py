"""The whole store suite (repository, lock, schema, kill-and-restart) on a real MariaDB.

Which server: see ``mariadb_support`` (the testbed's by default, ``HAI_TEST_MARIADB_URL``
otherwise). Every test gets its own freshly created database ``hai_store_<random>``, dropped
afterwards.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from mariadb_support import server_connect
from sqlalchemy.engine import URL, make_url

from hai_slurm.errors import StateError
from hai_slurm.priority.store.engine import check_connection, make_engine, upgrade
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.integration

# The contract classes live with the unit tests; import them as modules (not their classes by
# name, which pytest would collect a second time here, on SQLite).
_UNIT_DIR = str(Path(__file__).resolve().parents[1] / "unit")
if _UNIT_DIR not in sys.path:
    sys.path.insert(0, _UNIT_DIR)
repository_tests: Any = importlib.import_module("test_store_repository")
lock_tests: Any = importlib.import_module("test_store_lock")
schema_tests: Any = importlib.import_module("test_store_schema")
restart_tests: Any = importlib.import_module("test_store_restart")


class OnMariaDB:
    """Mixin: the inherited contract tests run against a fresh MariaDB database."""

    @pytest.fixture
    def store_url(self, mariadb_url: str) -> str:
        """Overrides StoreCase.store_url (SQLite) with a MariaDB database."""
        return mariadb_url


class TestJobsOnMariaDB(OnMariaDB, repository_tests.TestJobs):
    """Tracked jobs on MariaDB."""


class TestFairnessOnMariaDB(OnMariaDB, repository_tests.TestFairness):
    """Fairness windows on MariaDB."""


class TestProtectionsAndCreditsOnMariaDB(OnMariaDB, repository_tests.TestProtectionsAndCredits):
    """Protections and credits on MariaDB."""


class TestAuditAndValuesOnMariaDB(OnMariaDB, repository_tests.TestAuditAndValues):
    """Audit log and values on MariaDB."""


class TestPlansOnMariaDB(OnMariaDB, repository_tests.TestPlans):
    """Plan lifecycle on MariaDB."""


class TestHistoryOnMariaDB(OnMariaDB, repository_tests.TestHistory):
    """Plan history on MariaDB."""


class TestLeaderLockOnMariaDB(OnMariaDB, lock_tests.TestLeaderLock):
    """Leader lease on MariaDB (row locks, matched-rows count)."""


class TestSchemaOnMariaDB(OnMariaDB, schema_tests.TestSchema):
    """Migrations on MariaDB: same schema as the models."""


class TestRestartOnMariaDB(OnMariaDB, restart_tests.TestRestart):
    """SIGKILL mid-plan and restart on MariaDB."""


def test_wrong_password_and_missing_database(mariadb_server: URL) -> None:
    """A real server refusing the login, or lacking the database, gives an actionable error."""
    good = mariadb_server.set(drivername="mysql+pymysql")
    wrong = good.set(username="hai_no_such_user", password="definitely-wrong", database="x")
    with pytest.raises(StateError) as err:
        check_connection(make_engine(wrong.render_as_string(hide_password=False)))
    assert "definitely-wrong" not in str(err.value)
    assert "Access denied" in str(err.value) and "its password are right" in str(err.value)
    missing = good.set(database="no_such_db_hai").render_as_string(hide_password=False)
    with pytest.raises(StateError, match=r"Unknown database 'no_such_db_hai'.*database "
                                         r"'no_such_db_hai' exists"):
        check_connection(make_engine(missing))


def test_database_gone_mid_run_is_a_state_error(mariadb_url: str) -> None:
    """A database dropped under a running daemon turns its next call into a StateError."""
    engine = upgrade(mariadb_url)
    repo = Repository(engine)
    assert repo.load_jobs() == {}
    url = make_url(mariadb_url)
    admin = server_connect(url)
    try:
        with admin.cursor() as cur:  # drop the database under the daemon's feet
            cur.execute(f"DROP DATABASE `{url.database}`")
    finally:
        admin.close()
    with pytest.raises(StateError, match=r"loading tracked jobs failed: .*doesn't exist.*; check"):
        repo.load_jobs()
    engine.dispose()
    admin = server_connect(url)  # let the fixture's DROP find something to drop
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{url.database}`")
    finally:
        admin.close()
