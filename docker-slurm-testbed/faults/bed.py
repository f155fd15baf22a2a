"""The testbed as the fault cases see it: toy jobs, daemon processes, components to kill.

:func:`testbed` brings a local testbed up in a slot of its own (``/var/tmp/hai-slurm-faults-K``,
ports from ``21000 + 100*K``; or reuses a running one) and :class:`FaultBed` is one case's view
of it: it submits :mod:`~hai_slurm.priority.demo.toy_train` jobs (remembered, cancelled at the
end), starts ``hai-slurm daemon`` processes (logs in the case's directory), and kills and
restarts the testbed's components.

The slot claim and the daemon process are small copies of ``tests/integration``'s
``claim_slot`` and ``DaemonProcess`` (the package cannot import the tests; the tests' copies
are left alone: duplication to fold later).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hai_slurm.errors import TestbedError
from hai_slurm.priority.demo.scenario import ToyJob, submit_toy, wait_state
from hai_slurm.slurm_plugins.cli_backend import CliSlurmClient
from hai_slurm.slurm_plugins.runner import SubprocessRunner
from hai_slurm.slurm_plugins.types import JobFacts

from .. import local, procs
from ..layout import Ports
from ..services import redis_url
from ..shape import ClusterShape

Echo = Callable[[str], None]
SLOTS = 8
PORT_BASE = 21000
SIGTERM_WAIT = float(os.environ.get("HAI_FAULT_SIGTERM_WAIT", "30"))
"""Seconds a daemon gets to stop after SIGTERM before it is SIGKILLed (and that is reported)."""
DUPLICATE_DRAIN = "Duplicate jobid"
"""The reason slurmctld drains a node with when slurmd refuses a second launch of a job."""
LAUNCH_FAILED_HOLD = "launch failed requeued held"
"""The reason of a job slurmctld requeued and held after its launch failed."""
_STARTED = (re.compile(r"Started JobId=(?P<job>\d+) in \S+ on (?P<node>[\w-]+)"),
            re.compile(r"Allocate JobId=(?P<job>\d+) NodeList=(?P<node>[\w-]+)"))
_DUPLICATE = re.compile(r"Duplicate jobid on nodes (?P<node>[\w-]+)")


@dataclass(frozen=True)
class Testbed:
    """A running local testbed."""

    __test__ = False

    state_dir: Path
    shape: ClusterShape
    slurm_conf: str
    ports: Ports
    started_here: bool


@contextlib.contextmanager
def testbed(state_dir: Path | None = None, echo: Echo = lambda _m: None) -> Iterator[Testbed]:
    """A running testbed: the healthy one in ``state_dir`` (left running), or one brought up in
    a free slot and stopped at the end."""
    if state_dir is not None:
        state = local.load_state(state_dir.resolve())
        if state is None or not local.healthy(state):
            raise TestbedError(f"{state_dir} holds no healthy testbed; start one with "
                               f"`hai-slurm testbed up --state-dir {state_dir}`")
        yield Testbed(state_dir.resolve(), state.shape, state.slurm_conf, state.ports, False)
        return
    for slot in range(SLOTS):
        fd = os.open(f"/var/tmp/hai-slurm-faults-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            base = PORT_BASE + 100 * slot
            ports = Ports(slurmctld=base + 17, slurmdbd=base + 19, mariadb=base + 6,
                          redis=base + 79, slurmd_base=base + 31)
            where = Path(f"/var/tmp/hai-slurm-faults-{slot}")
            echo(f"bringing up a testbed in {where}")
            local.up(ClusterShape(), state_dir=where, ports=ports)
            state = local.load_state(where.resolve())
            if state is None:
                raise TestbedError(f"the testbed in {where} left no state file")
            try:
                yield Testbed(where.resolve(), state.shape, state.slurm_conf, state.ports, True)
            finally:
                local.down(where)
        finally:
            os.close(fd)
        return
    raise TestbedError(f"all {SLOTS} slots /var/tmp/hai-slurm-faults-* are in use")


def _hai_slurm() -> list[str]:
    exe = Path(sys.executable).with_name("hai-slurm")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from hai_slurm.cli import main; main()"]


@dataclass
class DaemonRun:
    """One ``hai-slurm daemon`` child process and its log."""

    proc: subprocess.Popen[bytes]
    log: Path
    sigkilled: bool = False
    term_seconds: float | None = None
    """How long it took to exit after SIGTERM (None: not stopped that way)."""
    term_timeout: bool = False
    """SIGTERM did not stop it within :data:`SIGTERM_WAIT` s (it was SIGKILLed then)."""

    def text(self) -> str:
        """Its log so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        """Still running."""
        return self.proc.poll() is None

    def wait_log(self, needle: str, timeout: float, after: int = 0) -> None:
        """Wait until ``needle`` is in the log past character ``after``."""
        end = time.monotonic() + timeout
        while needle not in self.text()[after:]:
            if time.monotonic() > end or not self.alive():
                state = "running" if self.alive() else f"exited {self.proc.returncode}"
                raise AssertionError(f"{needle!r} not in daemon log {self.log} within "
                                     f"{timeout:g} s ({state}):\n{self.text()[-2000:]}")
            time.sleep(0.1)

    def cycles(self) -> int:
        """Cycles it logged as committed (``cycle: ...`` lines)."""
        return len(re.findall(r"\bcycle: \d+ pending", self.text()))

    def skips(self) -> int:
        """Cycles it logged as skipped."""
        return self.text().count("cycle skipped, nothing written")

    def kill(self) -> None:
        """SIGKILL it (a crash) and reap it."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.sigkilled = True
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, wait up to :data:`SIGTERM_WAIT` s, then SIGKILL (``term_seconds`` None)."""
        if not self.alive():
            return
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=SIGTERM_WAIT)
            self.term_seconds = time.monotonic() - t0
        except subprocess.TimeoutExpired:
            self.term_timeout = True
            self.kill()


@dataclass
class FaultBed:
    """One case's view of the testbed (see the module docstring)."""

    bed: Testbed
    workdir: Path
    echo: Echo = lambda _m: None
    jobs: list[ToyJob] = field(default_factory=list)
    daemons: list[DaemonRun] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    """What :meth:`repair` did, in words (reported in the case's result line)."""
    launch_requeues: dict[int, int] = field(default_factory=dict)
    """Jobs Slurm requeued itself after slurmd refused their launch ("Duplicate jobid" in
    slurmctld's log) -> how many times."""
    _log_seen: int = 0
    _started: dict[str, int] = field(default_factory=dict)
    """Node -> the job slurmctld's log last showed starting there."""

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.run = SubprocessRunner(self.bed.slurm_conf)
        self.slurm = CliSlurmClient(self.run)
        log = self.bed.state_dir / "log" / "slurmctld.log"
        self._log_seen = len(log.read_text(errors="replace")) if log.exists() else 0

    # ---------------------------------------------------------------------------- jobs
    def toy(self, name: str, *, steps: int = 300, step_seconds: float = 0.05,
            priority: str = "LOW", account: str = "team-a", sbatch: Sequence[str] = (),
            train: Sequence[str] = (), grace: int = 30) -> ToyJob:
        """Submit a toy job (remembered, cancelled at the end). Names are unique within a
        case: a second job of the same name would resume from the first one's checkpoints."""
        if any(j.name == name for j in self.jobs):
            raise ValueError(f"toy job name {name!r} used twice in one case")
        job = submit_toy(self.slurm, self.workdir, name, steps=steps, step_seconds=step_seconds,
                         priority=priority, account=account, sbatch_args=sbatch,
                         train_args=train, grace=grace)
        self.jobs.append(job)
        return job

    def steps_of(self, job: ToyJob) -> int:
        """The ``--steps`` the job was submitted with (from its script)."""
        m = re.search(r"--steps (\d+)", (self.workdir / f"{job.name}.sh").read_text())
        return int(m.group(1)) if m else 0

    def facts(self, job: ToyJob | int) -> JobFacts | None:
        """The job's facts now (None once Slurm forgot it)."""
        jid = job if isinstance(job, int) else job.job_id
        return self.slurm.job_facts([jid]).get(jid)

    def wait(self, job: ToyJob, *states: str, timeout: float = 60) -> JobFacts:
        """Wait until the job is in one of ``states``."""
        return wait_state(self.slurm, job.job_id, states, timeout=timeout)[0]

    def wait_saved(self, job: ToyJob, timeout: float = 60) -> int:
        """Wait until the job printed a periodic save; return its step."""
        end = time.monotonic() + timeout
        while True:
            saved = [int(m.group(1)) for m in re.finditer(
                r"^saved (\d+)", job.output.read_text() if job.output.exists() else "", re.M)]
            if saved:
                return max(saved)
            if time.monotonic() > end:
                raise AssertionError(f"{job.name} saved nothing within {timeout:g} s")
            time.sleep(0.2)

    def repair(self) -> list[str]:
        """Do what an admin does after Slurm's own reactions to a slurmctld that lost its
        state (SIGKILLed before its state save): resume a node Slurm drained for "Duplicate
        jobid" (it started a job again where slurmd still knew the first launch), and release
        a job of the case that Slurm held after that failed launch ("launch failed requeued
        held"). Nothing else is touched: any other drain or hold stays and fails the checks.
        Returns what it did now (also kept in :attr:`repairs`)."""
        done: list[str] = []
        nodes = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"]).stdout
        for line in sorted(set(nodes.splitlines())):
            name, _, rest = line.strip().partition("|")
            state, _, reason = rest.partition("|")
            if reason.startswith(DUPLICATE_DRAIN) and "drain" in state:
                self.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"])
                done.append(f"resumed {name} (drained by Slurm: {reason!r})")
        ids = [str(j.job_id) for j in self.jobs]
        if ids:
            res = self.run(["squeue", "-h", "-t", "PD", "-o", "%i|%r", "-j", ",".join(ids)])
            for line in res.stdout.splitlines():
                jid, _, reason = line.strip().partition("|")
                if reason == LAUNCH_FAILED_HOLD and jid.isdigit():
                    self.run(["scontrol", "release", jid])
                    done.append(f"released {jid} (held by Slurm: {reason!r})")
        self._count_refused_launches()
        for what in done:
            self.echo(f"  admin: {what}")
        self.repairs += done
        return done

    def _count_refused_launches(self) -> None:
        """Count, from slurmctld's log, each start of a job that slurmd refused ("Duplicate
        jobid on nodes N" right after the start on N): slurmctld requeues the job itself."""
        log = self.bed.state_dir / "log" / "slurmctld.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if len(text) < self._log_seen:
            self._log_seen = 0  # a new log
        end = text.rfind("\n") + 1   # whole lines only: the last one may be half written
        for line in text[self._log_seen:end].splitlines():
            for pattern in _STARTED:
                m = pattern.search(line)
                if m:
                    self._started[m.group("node")] = int(m.group("job"))
            m = _DUPLICATE.search(line)
            if m and m.group("node") in self._started:
                jid = self._started.pop(m.group("node"))
                self.launch_requeues[jid] = self.launch_requeues.get(jid, 0) + 1
        self._log_seen = max(self._log_seen, end)

    def held(self, *, pending_only: bool = False) -> list[int]:
        """The case's jobs that are held now (``pending_only``: and pending)."""
        facts = self.slurm.job_facts([j.job_id for j in self.jobs]) if self.jobs else {}
        return sorted(j for j, f in facts.items() if f.held and (f.pending or not pending_only))

    def cleanup(self) -> None:
        """Stop the daemons (SIGKILL), cancel every job and wait until none is active; then
        :meth:`repair`, so a case that left a node drained does not fail the next ones."""
        for d in self.daemons:
            d.kill()
        if self.jobs:
            ids = [str(j.job_id) for j in self.jobs]
            self.run(["scancel", *ids])
            end = time.monotonic() + 60
            while time.monotonic() < end:
                facts = self.slurm.job_facts([j.job_id for j in self.jobs])
                if all(f.finished and f.state.value != "COMPLETING" for f in facts.values()):
                    break
                time.sleep(0.3)
        self.repair()

    # ------------------------------------------------------------------------- daemons
    def config(self, name: str = "daemon", *, database_url: str | None = None,
               redis: bool = False, extra: str = "") -> Path:
        """A daemon config for this case: 1-s cycles, 3-s lease, short-job planner settings."""
        path = self.workdir / f"{name}.toml"
        db = database_url or f"sqlite:///{self.workdir}/{name}.db"
        rurl = f'redis_url = "{redis_url(self.bed.state_dir, self.bed.ports.redis)}"\n' \
            if redis else ""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold passwords
        with os.fdopen(fd, "w") as out:
            out.write(f"""state_dir = "{self.workdir}"
database_url = "{db}"
{rurl}metrics_port = 0
[intervals]
cycle = "1s"
lock_ttl = "3s"
backoff_max = "2s"
[teams.team-a]
gpus = 16
[teams.team-b]
gpus = 16
[planner]
min_run_time = "5s"
restart_cost = "10s"
benefit_threshold = 0.1
{extra}
""")
        return path

    def start_daemon(self, config: Path) -> DaemonRun:
        """``hai-slurm daemon --config CONFIG`` in the background, its log in the case dir."""
        log = self.workdir / f"daemon-{len(self.daemons)}.log"
        env = dict(os.environ, SLURM_CONF=self.bed.slurm_conf)
        with log.open("ab") as out:
            proc = subprocess.Popen([*_hai_slurm(), "daemon", "--config", str(config),
                                     "--metrics-addr", "127.0.0.1"], stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        d = DaemonRun(proc, log)
        self.daemons.append(d)
        return d

    # ---------------------------------------------------------------------- components
    def kill_component(self, name: str) -> None:
        """SIGKILL one testbed daemon (``slurmctld``, ``slurmd-n1``, ``mariadb``, ``redis``)."""
        state = local.load_state(self.bed.state_dir)
        rec = next((p for p in state.processes if p.name == name), None) if state else None
        if rec is None:
            raise TestbedError(f"the testbed has no component {name!r}")
        if procs.is_alive(rec):
            os.kill(rec.pid, signal.SIGKILL)
        end = time.monotonic() + 10
        while procs.is_alive(rec) and time.monotonic() < end:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(rec.pid, os.WNOHANG)
            time.sleep(0.05)

    def start_component(self, name: str, timeout: float = 60.0) -> None:
        """Start a killed component again (same command line) and wait until it is ready."""
        local.start_component(self.bed.state_dir, name, timeout=timeout)
