"""Helpers for the daemon's tests on the real testbed: configs, scripts, daemon processes.

Jobs are submitted as root with ``--account=team-a|team-b`` (the testbed's demo accounts) and
``#HAI`` lines, so slurmctld's job_submit.lua writes the ``hai:v1:`` record the daemon reads.
A "whole cluster" job needs all 4 nodes x 8 GPUs, so such jobs start one at a time, in Slurm's
priority order.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hai_slurm.priority.config.loader import DaemonConfig, parse_config
from hai_slurm.priority.daemon.loop import Daemon, open_store
from hai_slurm.priority.daemon.metrics import TOTALS_KEY
from hai_slurm.priority.policy.ladder import RANK
from hai_slurm.priority.policy.scoring import class_rank_of
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.adapter import make_client
from hai_slurm.testbed.waiting import check

if TYPE_CHECKING:
    from conftest import Submitter, Testbed

T = TypeVar("T")
WHOLE = ("-N4", "--gres=gpu:8")
ONE_NODE = ("-N1", "--gres=gpu:8")
HAI_SLURM = str(Path(sys.executable).with_name("hai-slurm"))


def config_text(tmp: Path, extra: str = "", *, metrics_port: int = 0,
                database_url: str | None = None) -> str:
    """A daemon config with short intervals, SQLite under ``tmp`` (unless ``database_url``),
    team quotas of 16 GPUs."""
    return f"""
state_dir = "{tmp}"
database_url = "{database_url or f'sqlite:///{tmp}/hai-slurm.db'}"
metrics_port = {metrics_port}
[intervals]
cycle = "1s"
lock_ttl = "3s"
backoff_max = "4s"
[teams.team-a]
gpus = 16
[teams.team-b]
gpus = 16
{extra}
"""


def write_config(tmp: Path, extra: str = "", *, metrics_port: int = 0,
                 database_url: str | None = None) -> tuple[Path, DaemonConfig]:
    """Write the config file; return its path and parsed value."""
    path = tmp / "daemon.toml"
    path.write_text(config_text(tmp, extra, metrics_port=metrics_port,
                                database_url=database_url))
    return path, parse_config(path.read_text(), source=str(path))


def in_process(cfg: DaemonConfig, owner: str = "pytest") -> Daemon:
    """A daemon in this process against the testbed (the fixture exported SLURM_CONF)."""
    repo, lock = open_store(cfg)
    return Daemon(make_client(), repo, lock, config=cfg, owner=owner)


def script(cls: str, body: str = "sleep 300") -> str:
    """A batch script asking for ``cls``."""
    return f"#!/bin/bash\n#HAI --priority={cls}\n{body}\n"


def job(submit: Submitter, cls: str, team: str, shape: tuple[str, ...] = WHOLE,
        body: str = "sleep 300") -> str:
    """Submit a job of ``cls`` in ``team``'s account; return its id."""
    return submit(script(cls, body), args=[f"--account={team}", *shape])


def priority(bed: Testbed, job_id: str) -> int:
    """The job's priority as Slurm has it now."""
    out = check(bed.run, ["squeue", "-h", "-j", job_id, "-o", "%Q"])
    return int(out.strip())


def band(bed: Testbed, job_id: str) -> str:
    """The class band the job's Slurm priority falls in ("none" for Slurm's own values)."""
    rank = class_rank_of(priority(bed, job_id))
    return next((c.value for c, r in RANK.items() if r == rank), "none")


def wait_until(what: Callable[[], T | None], timeout: float, message: str) -> T:
    """Poll every 0.2 s until ``what()`` is truthy; AssertionError with ``message`` if not."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} (waited {timeout:g} s)")
        time.sleep(0.2)


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def totals(cfg: DaemonConfig) -> dict[str, int]:
    """The daemon's persisted counter totals."""
    value = Repository(make_engine(cfg.database_url)).get_value(TOTALS_KEY)
    return {k: int(v) for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass
class DaemonProcess:
    """``hai-slurm daemon`` as a child process, its log in a file."""

    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, config: Path, log: Path, bed: Testbed, *extra: str) -> DaemonProcess:
        """Start it with ``--config`` (and ``--metrics-addr 127.0.0.1``)."""
        env = dict(os.environ, SLURM_CONF=bed.slurm_conf)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [HAI_SLURM, "daemon", "--config", str(config), "--metrics-addr", "127.0.0.1",
                 *extra], stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        return cls(proc, log)

    def text(self) -> str:
        """The log so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def owner(self) -> str:
        """The owner id it announced."""
        m = wait_until(lambda: re.search(r"daemon (\S+) starting", self.text()), 20,
                       f"daemon did not announce itself; log:\n{self.text()}")
        return m.group(1)

    def wait_log(self, needle: str, timeout: float = 20.0, after: int = 0) -> None:
        """Wait until ``needle`` appears in the log (past character ``after``); fail at once
        when the daemon exits without writing it."""
        try:
            wait_until(lambda: needle in self.text()[after:] or self.proc.poll() is not None,
                       timeout, "")
            if needle not in self.text()[after:]:
                raise AssertionError
        except AssertionError:
            code = self.proc.poll()
            state = "still running" if code is None else f"exited with {code}"
            raise AssertionError(f"{needle!r} not in the log of daemon pid {self.proc.pid} "
                                 f"({state}) within {timeout:g} s; log:\n"
                                 f"{self.text()[-3000:]}") from None

    def kill(self, sig: int = signal.SIGKILL) -> int:
        """Signal it and reap it; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)
