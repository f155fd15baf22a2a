"""Start, check and stop the local testbed's daemons by PID, and check ports before starting.

A :class:`ProcRecord` remembers a PID *and* the process's start time (from ``/proc``), so a PID
that the kernel has reused for some other program is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.errors import TestbedError


@dataclass(frozen=True)
class ProcRecord:
    """One daemon the testbed started."""

    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]
    log: str

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict for the state file."""
        return {"name": self.name, "pid": self.pid, "start_ticks": self.start_ticks,
                "argv": list(self.argv), "log": self.log}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcRecord:
        """Inverse of :meth:`to_json`."""
        argv = data.get("argv", [])
        return cls(name=str(data["name"]), pid=int(str(data["pid"])),
                   start_ticks=int(str(data["start_ticks"])),
                   argv=tuple(str(a) for a in argv) if isinstance(argv, list) else (),
                   log=str(data.get("log", "")))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    return text[text.rfind(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it does not exist."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def parent_pid(pid: int) -> int | None:
    """The parent PID, or None if the process does not exist."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def pid_alive(pid: int, ticks: int | None = None) -> bool:
    """Whether ``pid`` runs (zombies count as gone) and, if given, started at ``ticks``."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return ticks is None or int(fields[19]) == ticks


def is_alive(rec: ProcRecord) -> bool:
    """Whether the recorded process still runs (and is the same process, not a reused PID)."""
    return pid_alive(rec.pid, rec.start_ticks)


def start(name: str, argv: Sequence[str], log: Path, *, env: Mapping[str, str],
          cwd: Path) -> ProcRecord:
    """Start ``argv`` in its own session, stdout and stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                    start_new_session=True, close_fds=True)
        except OSError as err:
            raise TestbedError(f"cannot start {name} ({argv[0]}): {err}") from err
    ticks = start_ticks(proc.pid)
    # Popen keeps the child; we reap it ourselves in stop() when it is ours.
    proc.returncode = 0
    return ProcRecord(name, proc.pid, ticks if ticks is not None else -1, tuple(argv), str(log))


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def descendants(pids: Iterable[int]) -> set[int]:
    """All live descendants of ``pids`` (by walking /proc once)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = parent_pid(int(entry.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


MARK = "HAI_TESTBED_STATE_DIR"
"""The environment variable that names a testbed's state dir in every process it starts
(its daemons and, through slurmd, their job processes)."""


def marked(state_dirs: Iterable[str], comm: str | None = None) -> set[int]:
    """PIDs of the processes marked (:data:`MARK`) with one of ``state_dirs``, only those named
    ``comm`` if given; read from /proc (a process that ends meanwhile is left out)."""
    wanted = {f"{MARK}={d}".encode() for d in state_dirs}
    out: set[int] = set()
    if not wanted:
        return out
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if comm is not None and (entry / "comm").read_text().strip() != comm:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if not wanted.isdisjoint(environ):
            out.add(int(entry.name))
    return out


def stop(targets: Mapping[int, int | None], *, timeout: float = 10.0) -> list[int]:
    """SIGTERM each ``pid -> start ticks`` still alive, wait, then SIGKILL; return survivors."""
    live = {pid: t for pid, t in targets.items() if pid_alive(pid, t)}
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in live:
            _reap(pid)
        live = {pid: t for pid, t in live.items() if pid_alive(pid, t)}
        if not live:
            return []
        time.sleep(0.05)
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while live and time.monotonic() < deadline:
        for pid in live:
            _reap(pid)
        live = {pid: t for pid, t in live.items() if pid_alive(pid, t)}
        time.sleep(0.05)
    return sorted(live)


def port_in_use(port: int) -> bool:
    """Whether something already listens on (or holds) ``port`` on any local address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))  # noqa: S104 - only probing; closed at once, never listens
    except OSError as err:
        if err.errno in (errno.EADDRINUSE, errno.EACCES):
            return True
        raise
    finally:
        sock.close()
    return False


def check_ports(wanted: Iterable[tuple[int, str, str]]) -> None:
    """Fail on the first port in use, naming the port, its component and the option to change."""
    for port, component, option in wanted:
        if port_in_use(port):
            raise TestbedError(
                f"port {port} (for {component}) is already in use; free it or choose another "
                f"port with {option}")
