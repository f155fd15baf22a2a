"""A bad or unreachable database gives a StateError naming the URL (password masked), what
failed and what to check."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hai_slurm.errors import StateError
from hai_slurm.priority.store.engine import check_connection, make_engine, masked, upgrade


def closed_port() -> int:
    """A loopback port nobody listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("", "database URL is empty; set it"),
        ("   ", "database URL is empty"),
        ("not a url", "is not a URL .*expected 'sqlite:///PATH' or 'mysql\\+pymysql://"),
        ("mysql+pymysql//u:s3cret@db/x", "'mysql\\+pymysql//u:\\*\\*\\*@db/x' is not a URL"),
        ("postgresql://u:pw@db/x", "unsupported backend 'postgresql'; use 'sqlite:///PATH'"),
        ("mysql+nosuchdriver://u:s3cret@db/x", "cannot create an engine: .*nosuchdriver"),
    ],
)
def test_bad_urls(url: str, expected: str) -> None:
    """Malformed, unsupported or driverless URLs are refused before any connection."""
    with pytest.raises(StateError, match=expected) as err:
        make_engine(url)
    assert "s3cret" not in str(err.value)


def test_missing_sqlite_directory(tmp_path: Path) -> None:
    """A database file in a directory that does not exist says which directory to create."""
    url = f"sqlite:///{tmp_path / 'nope' / 'hai.db'}"
    with pytest.raises(StateError, match=f"directory {tmp_path / 'nope'} does not exist; create"):
        make_engine(url)


def test_not_a_database_file(tmp_path: Path) -> None:
    """A file that is not SQLite fails the migration with what to check."""
    path = tmp_path / "hai.db"
    path.write_bytes(b"this is a text file, not a database\n" * 100)
    pattern = r"database sqlite:///.*hai\.db: .* failed: .*not a database; check"
    with pytest.raises(StateError, match=pattern):
        upgrade(f"sqlite:///{path}")


def test_unreachable_server_masks_the_password() -> None:
    """Nobody listening: the message names host:port, user and database, never the password."""
    port = closed_port()
    url = f"mysql+pymysql://hai:s3cret@127.0.0.1:{port}/hai_slurm"
    engine = make_engine(url)
    with pytest.raises(StateError) as err:
        check_connection(engine)
    text = str(err.value)
    assert "s3cret" not in text
    assert f"database mysql+pymysql://hai:***@127.0.0.1:{port}/hai_slurm" in text
    assert "connecting failed" in text and "Can't connect" in text
    assert f"check that the server is running and reachable at 127.0.0.1:{port}" in text
    assert "user 'hai'" in text and "database 'hai_slurm' exists" in text
    with pytest.raises(StateError, match=r"reading the schema revision failed"):
        upgrade(engine)


def test_plain_mysql_url_uses_pymysql() -> None:
    """'mysql://' gets the PyMySQL driver (the only one we install), not MySQLdb."""
    engine = make_engine("mysql://u:pw@127.0.0.1:1/x")
    assert engine.dialect.driver == "pymysql"
    assert masked(engine.url).startswith("mysql+pymysql://u:***@127.0.0.1:1/x")
