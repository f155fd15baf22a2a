"""Engines for the daemon's database, schema migrations at start, and actionable DB errors.

SQLite (default: a file under the daemon's state dir) runs in WAL mode with foreign keys on and
``BEGIN IMMEDIATE`` transactions, so two processes never interleave writes; MariaDB/MySQL goes
through PyMySQL (``mysql+pymysql://user:pass@host:port/db``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from hai_slurm.errors import StateError
from hai_slurm.urls import mask_password

DB_FILE_NAME = "hai-slurm.db"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 10_000
MYSQL_CONNECT_TIMEOUT_S = 10


def default_sqlite_url(state_dir: Path) -> str:
    """The default database: ``hai-slurm.db`` under the daemon's state directory."""
    return f"sqlite:///{Path(state_dir).resolve() / DB_FILE_NAME}"


def masked(url: str | URL) -> str:
    """The URL with its password replaced by ``***``, fit for messages and logs
    (:func:`hai_slurm.urls.mask_password`, the suite's one masking function)."""
    return mask_password(url if isinstance(url, str) else url.render_as_string(
        hide_password=False))


def _hint(url: URL, reason: str) -> str:
    if url.get_backend_name() == "sqlite" and "locked" in reason:
        return (
            "another process held the write lock longer than the busy timeout "
            f"(a second daemon, or an open sqlite3 shell?); find it with `fuser {url.database}`"
        )
    if url.get_backend_name() == "sqlite":
        return (
            "check that the file's directory exists and is writable by the daemon's user, "
            "and that the file is an SQLite database"
        )
    return (
        f"check that the server is running and reachable at {url.host or 'localhost'}:"
        f"{url.port or 3306}, that user {url.username!r} and its password are right, and that "
        f"database {url.database!r} exists and the user may create tables in it"
    )


def db_error(url: str | URL, doing: str, err: BaseException) -> StateError:
    """A :class:`StateError` saying which database (password masked), what failed, what to check."""
    reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
    try:
        parsed = make_url(url) if isinstance(url, str) else url
        hint = _hint(parsed, reason)
    except ArgumentError:
        hint = "check the database URL"
    return StateError(f"database {masked(url)}: {doing} failed: {reason}; {hint}")


def _parse(url: str) -> URL:
    if not url or not url.strip():
        raise StateError(
            "database URL is empty; set it in the daemon's config, e.g. "
            "'sqlite:////var/lib/hai-slurm/hai-slurm.db' or "
            "'mysql+pymysql://hai:PASSWORD@db-host:3306/hai_slurm'"
        )
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise StateError(
            f"database URL {masked(url)!r} is not a URL ({err}); expected "
            "'sqlite:///PATH' or 'mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE'"
        ) from err
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "mysql", "mariadb"):
        raise StateError(
            f"database URL {masked(url)}: unsupported backend {backend!r}; "
            "use 'sqlite:///PATH' or 'mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE'"
        )
    if backend == "sqlite":
        path = parsed.database
        if not path or path == ":memory:" or path.startswith("file:"):
            return parsed  # in-memory databases are for tests; they need no directory
        directory = Path(path).resolve().parent
        if not directory.is_dir():
            raise StateError(
                f"database {masked(url)}: directory {directory} does not exist; "
                "create it (it is the daemon's state dir) or point the URL elsewhere"
            )
        if not os.access(directory, os.W_OK):
            raise StateError(
                f"database {masked(url)}: directory {directory} is not writable by this user; "
                "SQLite in WAL mode needs to create files next to the database"
            )
    elif parsed.drivername in ("mysql", "mariadb"):
        parsed = parsed.set(drivername=f"{backend}+pymysql")
    return parsed


def _sqlite_on_connect(busy_timeout_ms: int) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (see _sqlite_on_begin), not pysqlite's lazy BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        finally:
            cursor.close()

    return on_connect


READ_ONLY = "hai_read_only"  # execution option: this transaction only reads


def _sqlite_on_begin(connection: Any) -> None:
    # IMMEDIATE takes the write lock at BEGIN: read-then-write transactions never hit BUSY midway.
    # Readers (e.g. `hai-slurm preempt history` while the daemon writes) take no lock in WAL mode.
    read_only = connection.get_execution_options().get(READ_ONLY, False)
    connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_engine(
    url: str, *, echo: bool = False, sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS
) -> Engine:
    """An engine for ``url``; raises :class:`StateError` for a bad URL or a missing driver.

    With SQLite, a writer waits up to ``sqlite_busy_timeout_ms`` for another writer's lock.

    Connects lazily: use :func:`check_connection` or :func:`upgrade` to find out whether the
    database is reachable.
    """
    parsed = _parse(url)
    kwargs: dict[str, Any] = {"echo": echo}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": sqlite_busy_timeout_ms / 1000}
    else:
        if "charset" not in parsed.query:
            parsed = parsed.update_query_dict({"charset": "utf8mb4"})
        kwargs["pool_pre_ping"] = True
        kwargs["pool_recycle"] = 3600
        kwargs["connect_args"] = {"connect_timeout": MYSQL_CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(parsed, **kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError) as err:
        raise StateError(
            f"database {masked(parsed)}: cannot create an engine: {err}; for MariaDB/MySQL "
            "install PyMySQL (pip install 'hai-slurm[daemon]') and use 'mysql+pymysql://'"
        ) from err
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect(sqlite_busy_timeout_ms))
        event.listen(engine, "begin", _sqlite_on_begin)
    return engine


@contextmanager
def translate_errors(engine: Engine, doing: str) -> Iterator[None]:
    """Turn driver-level failures (server gone, file unreadable) into :class:`StateError`."""
    try:
        yield
    except DBAPIError as err:
        raise db_error(engine.url, doing, err) from err


def check_connection(engine: Engine) -> None:
    """Connect once and run ``SELECT 1``; :class:`StateError` with what to check on failure."""
    with translate_errors(engine, "connecting"), engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def alembic_config() -> Config:
    """Alembic's configuration for our migrations, without any alembic.ini."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Module names must be identifiers (ruff N999); revision ids are sequence numbers.
    config.set_main_option("file_template", "v%%(rev)s_%%(slug)s")
    return config


def head_revision() -> str:
    """The newest migration this version of hai-slurm knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise StateError(f"no migrations found under {MIGRATIONS_DIR}; reinstall hai-slurm")
    return head


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at (None for an empty database)."""
    with translate_errors(engine, "reading the schema revision"), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(target: str | Engine, revision: str = "head") -> Engine:
    """Bring the database's schema up to ``revision`` (run at daemon start); returns the engine.

    Raises :class:`StateError` when the database is unreachable or is at a revision this version
    of hai-slurm does not know (written by a newer version).
    """
    engine = make_engine(target) if isinstance(target, str) else target
    config = alembic_config()
    known = {s.revision for s in ScriptDirectory.from_config(config).walk_revisions()}
    at = current_revision(engine)
    if at is not None and at not in known:
        raise StateError(
            f"database {masked(engine.url)} is at schema revision {at!r}, which this hai-slurm "
            f"does not know (it knows up to {head_revision()!r}); a newer hai-slurm wrote it: "
            "upgrade hai-slurm, or point the daemon at another database"
        )
    try:
        with translate_errors(engine, "migrating the schema"), engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except CommandError as err:
        raise StateError(f"database {masked(engine.url)}: migration failed: {err}") from err
    except SQLAlchemyError as err:
        raise db_error(engine.url, "migrating the schema", err) from err
    return engine


def downgrade(engine: Engine, revision: str) -> None:
    """Take the schema back to ``revision`` (``"base"`` drops every table); for admins and tests."""
    config = alembic_config()
    with translate_errors(engine, "downgrading the schema"), engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
