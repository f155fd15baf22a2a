"""How each local daemon is started and when it counts as ready (one function per component).

Every ``start_*`` function takes a :class:`Ctx` (paths, layout, environment), starts one kind of
daemon in the foreground of its own session and returns the :class:`~.procs.ProcRecord` s it
started once they are ready; failures raise :class:`TestbedError` carrying the relevant log lines.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.conf.accounting import SNAPSHOT_QUERIES, harmless, parse_snapshot
from hai_slurm.conf.deployment import DEFAULT_SLURM_VERSION, target_version
from hai_slurm.errors import ConfigError, TestbedError
from hai_slurm.slurm_formats import SlurmVersion

from . import procs
from .layout import Layout, Ports
from .render import accounting_plan
from .shape import ClusterShape
from .waiting import LocalRunner, Runner


@dataclass(frozen=True)
class Ctx:
    """Everything the start functions need about one local testbed."""

    state_dir: Path
    shape: ClusterShape
    ports: Ports
    layout: Layout
    env: dict[str, str]
    bins: dict[str, str]

    @property
    def run(self) -> Runner:
        """Runner for Slurm clients against this testbed."""
        return LocalRunner(self.layout.slurm_conf)

    def path(self, *parts: str) -> Path:
        """A path under the state directory."""
        return self.state_dir.joinpath(*parts)

    def log(self, name: str) -> Path:
        """Where a component's stdout/stderr goes."""
        return self.path("log", f"{name}.out")


def log_tail(path: str | Path, lines: int = 12) -> list[str]:
    """A log's error/fatal lines if it has any, else its last lines (prefixed by file name)."""
    p = Path(path)
    try:
        text = p.read_text(errors="replace").splitlines()
    except OSError:
        return [f"{p.name}: (no log file)"]
    bad = [ln for ln in text if any(w in ln.lower() for w in ("error", "fatal", "unable"))]
    return [f"{p.name}: {ln}" for ln in (bad or text)[-lines:]]


def logs_of(*paths: str | Path) -> list[str]:
    """:func:`log_tail` of several logs, concatenated."""
    return [ln for p in paths for ln in log_tail(p)]


def wait_ready(rec: procs.ProcRecord, probe: Callable[[], bool], *, timeout: float, what: str,
               logs: Sequence[str | Path]) -> None:
    """Poll ``probe()`` until true; fail early if the process died, else at the deadline."""
    deadline = time.monotonic() + timeout
    while not probe():
        if not procs.is_alive(rec):
            raise TestbedError(f"{rec.name} exited during start-up (waited for {what})",
                               log_lines=logs_of(*logs))
        if time.monotonic() >= deadline:
            raise TestbedError(f"{rec.name} did not become ready within {timeout:g} s "
                               f"(waited for {what})", log_lines=logs_of(*logs))
        time.sleep(0.05)


def _quiet(argv: Sequence[str], timeout: float = 10.0,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False, input=stdin,
                              stdin=subprocess.DEVNULL if stdin is None else None)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", "timed out")


def slurm_version(slurmctld: str) -> SlurmVersion:
    """The release of the host's Slurm (``slurmctld -V``); 22.05 when it cannot be read."""
    res = _quiet([slurmctld, "-V"], timeout=10)
    try:
        return target_version(res.stdout)
    except ConfigError:
        return DEFAULT_SLURM_VERSION


def _secret_file(path: Path) -> str:
    """A random secret kept in ``path`` (mode 0600, made once), never put on a command line."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(16))
    path.chmod(0o600)
    return path.read_text().strip()


def redis_password(state_dir: Path) -> str:
    """The testbed Redis's password (``requirepass``): made once per state dir, mode 0600."""
    return _secret_file(state_dir / "redis" / "password")


def redis_url(state_dir: Path, port: int) -> str:
    """The URL clients (the daemon, tests, the demo) reach the testbed's Redis with."""
    return f"redis://:{redis_password(state_dir)}@127.0.0.1:{port}/0"


def redis_config(ctx: Ctx, password: str) -> str:
    """redis.conf of the testbed: its port and directory, no persistence, a password.

    The password is in this file (mode 0600), not in argv: any local user can read
    ``/proc/PID/cmdline``.
    """
    return "\n".join([
        f"port {ctx.ports.redis}", "bind 127.0.0.1", "protected-mode yes",
        f'dir "{ctx.path("redis")}"', 'save ""', "appendonly no", "daemonize no",
        f'pidfile "{ctx.path("run", "redis.pid")}"', f"requirepass {password}", ""])


def start_redis(ctx: Ctx) -> procs.ProcRecord:
    """redis-server on 127.0.0.1 with its own port, directory and password, no persistence."""
    data = ctx.path("redis")
    data.mkdir(parents=True, exist_ok=True)
    conf = data / "redis.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(redis_config(ctx, redis_password(ctx.state_dir)))
    argv = [ctx.bins["redis-server"], str(conf)]
    return procs.start("redis", argv, ctx.log("redis"), env=ctx.env, cwd=ctx.state_dir)


def redis_ready(port: int, password: str) -> bool:
    """Whether Redis on 127.0.0.1:``port`` accepts ``password`` and answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            answer = b""
            while answer.count(b"\r\n") < 2:
                chunk = sock.recv(64)
                if not chunk:
                    break
                answer += chunk
            return answer.startswith(b"+OK\r\n+PONG")
    except OSError:
        return False


def start_munge(ctx: Ctx) -> procs.ProcRecord:
    """munged with its own key (made once), socket, pid and seed files under the state dir."""
    mdir = ctx.path("munge")
    mdir.mkdir(parents=True, exist_ok=True)
    mdir.chmod(0o755)  # munged insists that everyone may reach its socket
    key = mdir / "munge.key"
    if not key.is_file() or key.stat().st_size == 0:
        res = _quiet([ctx.bins["mungekey"], "-c", "-f", "-b", "1024", "-k", str(key)])
        if res.returncode != 0:
            raise TestbedError(f"mungekey could not create {key}: {res.stderr.strip()}")
    key.chmod(0o600)
    sock = ctx.layout.munge_socket or str(mdir / "munge.socket")
    argv = [ctx.bins["munged"], "-F", f"--socket={sock}", f"--key-file={key}",
            f"--pid-file={ctx.path('run', 'munged.pid')}", f"--seed-file={mdir / 'munged.seed'}",
            f"--log-file={ctx.path('log', 'munged.log')}"]
    return procs.start("munged", argv, ctx.log("munged"), env=ctx.env, cwd=ctx.state_dir)


def munge_ready(ctx: Ctx) -> bool:
    """Whether our munged encodes a credential."""
    sock = ctx.layout.munge_socket or ""
    if not Path(sock).exists():
        return False
    return _quiet([ctx.bins["munge"], "-n", "-S", sock], timeout=5).returncode == 0


def _mariadb_socket(ctx: Ctx) -> str:
    return str(ctx.path("mariadb", "mysqld.sock"))


def storage_password(state_dir: Path) -> str:
    """The slurm DB user's password: made once per state dir, kept next to the datadir."""
    return _secret_file(state_dir / "mariadb" / "slurm-password")


_MARIADB_SIZES = ("--innodb-buffer-pool-size=64M", "--innodb-log-file-size=8M")
"""Small buffers: a throwaway accounting DB (the default redo log alone is 96 MB on disk)."""


def init_mariadb(ctx: Ctx) -> None:
    """Create mariadbd's datadir if there is none (once per state dir, then reused).

    It is made in ``data.new`` and renamed to ``data`` only once complete: an install stopped
    half-way (Ctrl-C, a failure) leaves no ``data`` that the next ``up`` would take as made;
    the next call starts it afresh."""
    data = ctx.path("mariadb", "data")
    if (data / "mysql").is_dir():
        return
    fresh = data.with_name("data.new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    res = _quiet([ctx.bins["mariadb-install-db"], "--no-defaults", "--user=root",
                  f"--datadir={fresh}", "--auth-root-authentication-method=socket",
                  "--skip-test-db", *_MARIADB_SIZES], timeout=180)
    if res.returncode != 0 or not (fresh / "mysql").is_dir():
        raise TestbedError(f"mariadb-install-db failed in {fresh}",
                           log_lines=(res.stdout + res.stderr).splitlines()[-12:])
    shutil.rmtree(data, ignore_errors=True)   # a datadir without its tables: not made
    fresh.rename(data)


def start_mariadb(ctx: Ctx) -> procs.ProcRecord:
    """mariadbd on its datadir (:func:`init_mariadb`), its own socket and port."""
    data = ctx.path("mariadb", "data")
    argv = [ctx.bins["mariadbd"], "--no-defaults", "--user=root", f"--datadir={data}",
            f"--socket={_mariadb_socket(ctx)}", f"--pid-file={ctx.path('run', 'mariadbd.pid')}",
            f"--port={ctx.ports.mariadb}", "--bind-address=127.0.0.1", "--skip-name-resolve",
            f"--log-error={ctx.path('log', 'mariadb.log')}", "--skip-log-bin",
            "--innodb-flush-log-at-trx-commit=2", "--max-connections=100", *_MARIADB_SIZES]
    return procs.start("mariadb", argv, ctx.log("mariadb"), env=ctx.env, cwd=ctx.state_dir)


def mariadb_ready(ctx: Ctx) -> bool:
    """Whether mariadbd answers on its socket."""
    return _quiet([ctx.bins["mariadb-admin"], "--no-defaults", f"--socket={_mariadb_socket(ctx)}",
                   "ping"], timeout=5).returncode == 0


def database_setup(ctx: Ctx) -> tuple[list[str], str]:
    """The ``mariadb`` command and the SQL it reads on stdin (the password is in the SQL only:
    any local user can read a process's argv in ``/proc/PID/cmdline``)."""
    lay = ctx.layout
    sql = (f"CREATE DATABASE IF NOT EXISTS `{lay.storage_db}`; "
           f"CREATE USER IF NOT EXISTS '{lay.storage_user}'@'127.0.0.1' "
           f"IDENTIFIED BY '{lay.storage_pass}'; "
           f"ALTER USER '{lay.storage_user}'@'127.0.0.1' IDENTIFIED BY '{lay.storage_pass}'; "
           f"GRANT ALL ON `{lay.storage_db}`.* TO '{lay.storage_user}'@'127.0.0.1';\n")
    return [ctx.bins["mariadb"], "--no-defaults", f"--socket={_mariadb_socket(ctx)}"], sql


def setup_database(ctx: Ctx) -> None:
    """Create the accounting database and the slurm user (idempotent, every `up`)."""
    argv, sql = database_setup(ctx)
    res = _quiet(argv, timeout=30, stdin=sql)
    if res.returncode != 0:
        raise TestbedError("could not create the accounting database and user",
                           log_lines=res.stderr.strip().splitlines()[-8:])


def start_slurmdbd(ctx: Ctx) -> procs.ProcRecord:
    """slurmdbd in the foreground; it finds slurmdbd.conf next to ``SLURM_CONF``."""
    argv = [ctx.bins["slurmdbd"], "-D"]
    return procs.start("slurmdbd", argv, ctx.log("slurmdbd"), env=ctx.env, cwd=ctx.state_dir)


def slurmdbd_ready(ctx: Ctx) -> bool:
    """Whether sacctmgr reaches slurmdbd."""
    return ctx.run(["sacctmgr", "-n", "-P", "show", "cluster"], timeout=10).returncode == 0


def setup_accounting(ctx: Ctx) -> int:
    """Bring the database to what the shape needs; return the number of changes made."""
    outputs = []
    with ThreadPoolExecutor(len(SNAPSHOT_QUERIES)) as pool:  # each query costs ~0.2 s of waiting
        results = list(pool.map(lambda q: ctx.run(q, timeout=30), SNAPSHOT_QUERIES))
    for query, res in zip(SNAPSHOT_QUERIES, results, strict=True):
        if res.returncode != 0:
            raise TestbedError(f"{' '.join(query)} failed (exit {res.returncode})",
                               log_lines=[*res.stderr.strip().splitlines()[-8:],
                                          *log_tail(ctx.layout.slurmdbd_log_file, 6)])
        outputs.append(res.stdout)
    plan = accounting_plan(ctx.shape, parse_snapshot(ctx.shape.cluster_name, *outputs))
    for argv in plan:
        res = ctx.run(argv, timeout=30)
        text = (res.stdout + res.stderr).strip()
        if res.returncode != 0 and not harmless(text):
            raise TestbedError(f"{' '.join(argv)} failed (exit {res.returncode})",
                               log_lines=[*text.splitlines()[-8:],
                                          *log_tail(ctx.layout.slurmdbd_log_file, 6)])
    return len(plan)


def start_slurmctld(ctx: Ctx) -> procs.ProcRecord:
    """slurmctld in the foreground with a clean state directory."""
    argv = [ctx.bins["slurmctld"], "-D", "-f", ctx.layout.slurm_conf]
    return procs.start("slurmctld", argv, ctx.log("slurmctld"), env=ctx.env, cwd=ctx.state_dir)


def slurmctld_ready(ctx: Ctx) -> bool:
    """Whether ``scontrol ping`` reports the controller UP."""
    res = ctx.run(["scontrol", "ping"], timeout=10)
    return res.returncode == 0 and "UP" in res.stdout


def start_slurmd(ctx: Ctx, node: str) -> procs.ProcRecord:
    """One ``slurmd -N node`` in the foreground."""
    ctx.path("spool", f"slurmd-{node}").mkdir(parents=True, exist_ok=True)
    argv = [ctx.bins["slurmd"], "-D", "-N", node, "-f", ctx.layout.slurm_conf]
    return procs.start(f"slurmd-{node}", argv, ctx.log(f"slurmd-{node}"), env=ctx.env,
                       cwd=ctx.state_dir)
