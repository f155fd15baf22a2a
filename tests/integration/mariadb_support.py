"""MariaDB servers for integration tests: ``mariadb_server`` (session) and ``mariadb_url`` (a
fresh database per test). Imported by conftest.py so every integration module can use them.

Which server:
- by default the session testbed's MariaDB (the ``testbed`` fixture; root through its socket);
- ``HAI_TEST_MARIADB_URL=mysql+pymysql://USER:PW@127.0.0.1:3306/``: that server (the user must be
  allowed to create and drop databases);
- ``HAI_TEST_MARIADB_URL=throwaway``: a ``mariadbd`` of our own under this session's temporary
  directory, on a free loopback port, stopped at the end (no Slurm needed; about 5 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from sqlalchemy.engine import URL, make_url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_connect(url: URL) -> pymysql.connections.Connection[Any]:
    """A root connection to the server (socket or TCP, as the URL says), autocommit on."""
    socket_path = url.query.get("unix_socket")
    if socket_path:
        return pymysql.connect(unix_socket=str(socket_path), user=url.username or "root",
                               password=url.password or "", connect_timeout=5, autocommit=True)
    return pymysql.connect(host=url.host or "127.0.0.1", port=url.port or 3306,
                           user=url.username or "root", password=url.password or "",
                           connect_timeout=5, autocommit=True)


def _start_throwaway_mariadb(base: Path) -> tuple[subprocess.Popen[bytes], URL]:
    """mariadb-install-db + mariadbd under ``base``; returns the process and a root URL."""
    for tool in ("mariadbd", "mariadb-install-db"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: install mariadb-server, or set HAI_TEST_MARIADB_URL")
    data, log = base / "data", base / "mariadb.log"
    install = subprocess.run(
        ["mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={data}",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    if install.returncode != 0:
        pytest.fail(f"mariadb-install-db failed in {data}:\n{install.stdout}\n{install.stderr}")
    port = _free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", "--user=root", f"--datadir={data}",
             f"--socket={base / 'mysqld.sock'}", f"--pid-file={base / 'mysqld.pid'}",
             f"--port={port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
             "--skip-log-bin", "--innodb-buffer-pool-size=32M", f"--log-error={log}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    url = make_url(f"mysql+pymysql://root@127.0.0.1:{port}/")
    deadline = time.monotonic() + 60
    while True:
        try:
            server_connect(url).close()
            return proc, url
        except pymysql.err.OperationalError as err:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = log.read_text(errors="replace").splitlines()[-15:]
                pytest.fail(f"throwaway mariadbd on port {port} did not answer within 60 s "
                            f"({err}); last log lines:\n" + "\n".join(tail))
            time.sleep(0.2)


@pytest.fixture(scope="session")
def mariadb_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[URL]:
    """A MariaDB server URL without a database (see the module docstring for the source)."""
    env = os.environ.get("HAI_TEST_MARIADB_URL", "")
    if env and env != "throwaway":
        yield make_url(env).set(database=None)
        return
    if not env:
        bed = request.getfixturevalue("testbed")
        sock = Path(bed.state_dir) / "mariadb" / "mysqld.sock"
        if not sock.exists():
            pytest.fail(f"the testbed in {bed.state_dir} runs no MariaDB ({sock} is missing); "
                        "bring it up with accounting, or set HAI_TEST_MARIADB_URL")
        yield URL.create("mysql+pymysql", username="root", host="localhost",
                         query={"unix_socket": str(sock)})
        return
    proc, url = _start_throwaway_mariadb(tmp_path_factory.mktemp("store-mariadb"))
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def mariadb_url(mariadb_server: URL) -> Iterator[str]:
    """A fresh, empty database on the server, dropped after the test."""
    name = f"hai_store_{uuid.uuid4().hex[:12]}"
    conn = server_connect(mariadb_server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        yield mariadb_server.set(drivername="mysql+pymysql", database=name).render_as_string(
            hide_password=False)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()
