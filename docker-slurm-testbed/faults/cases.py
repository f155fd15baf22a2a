"""The fault cases. Each injects one fault into real runs of the toy training job on the
testbed, then ends with :func:`.checks.end_checks` (plus checks of its own).

=================  ================================================================================
case               what
=================  ================================================================================
``slurmctld``      slurmctld SIGKILLed in one plan phase (planned, signalled, acked, requeued) and
                   restarted after :data:`OUTAGE` s (longer than MessageTimeout, so Slurm commands
                   fail meanwhile); the executor is stepped like the daemon steps it
``daemon-kill``    ``hai-slurm daemon`` SIGKILLed at seeded random points of N cycles while urgent
                   jobs keep arriving (preemptions), restarted each time
``mariadb-down``   the daemon's MariaDB SIGKILLed while a plan waits for a save, back after 8 s
``redis-down``     Redis down when the checkpoint request goes out (the signal still reaches the
                   job), back afterwards
``hung-victim``    a victim that never answers the request: missed, requeued anyway (policy force),
                   resumes from its newest periodic checkpoint
``slurmd-dies``    the victim's slurmd SIGKILLed while it saves; started again once plans ended
``disk-full``      the victim's checkpoint file system (a real tmpfs of 1 MiB) fills as the
                   requested save starts: the save fails, the previous checkpoint stays valid and
                   the job says so; it is requeued and resumes from it once space is freed
=================  ================================================================================
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hai_slurm.checkpoint.store import CheckpointStore
from hai_slurm.errors import HaiSlurmError
from hai_slurm.priority.demo.scenario import ToyJob
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutionRequest, ExecutorSettings
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.priority.store.engine import make_engine, upgrade
from hai_slurm.priority.store.repository import Repository

from .bed import SIGTERM_WAIT, Echo, FaultBed, Testbed
from .checks import Check, end_checks

PHASES = ("planned", "signalled", "acked", "requeued")
"""Plan phases the slurmctld case can hit (the executor's hook points)."""
_HOOK = {"planned": "planned", "signalled": "asked", "acked": "phase1_done",
         "requeued": "requeued"}
OUTAGE = 25.0
"""Seconds slurmctld stays down (clients wait out shorter outages: MessageTimeout is 20 s)."""


@dataclass(frozen=True)
class Options:
    """What a run covers: ``cycles`` of the daemon-kill case, the slurmctld ``phases``, the
    ``seed`` of every random choice."""

    cycles: int = 50
    phases: tuple[str, ...] = PHASES
    seed: int = 0


@dataclass
class Outcome:
    """What a case did (``covered``), its own checks, and how to read its end."""

    covered: str = ""
    repos: list[Repository] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    strict_restarts: bool = True
    after: list[Callable[[], None]] = field(default_factory=list)
    """Run once the end checks are done and the jobs cancelled (e.g. unmount a file system)."""


@dataclass(frozen=True)
class CaseResult:
    """One case's result: its checks and what it covered."""

    name: str
    covered: str
    checks: tuple[Check, ...]
    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        """Every check passed and nothing raised."""
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)

    def line(self) -> str:
        """One line: the verdict, the time, what it covered and each check."""
        head = f"{self.name}: {'PASS' if self.ok else 'FAIL'} in {self.seconds:.0f} s"
        parts = [f"covered: {self.covered}"] if self.covered else []
        parts += [f"{'ok' if c.ok else 'FAILED'} {c.name} ({c.detail})" for c in self.checks]
        if self.error:
            parts.append(f"ERROR {self.error}")
        return head + "; " + "; ".join(parts)


# ----------------------------------------------------------------------------- helpers
def _fill(fb: FaultBed, *, steps: int = 240, train: tuple[str, ...] = (), grace: int = 30,
          pinned: bool = False, every: int = 60, prefix: str = "low") -> list[ToyJob]:
    """Four LOW 8-GPU toy jobs (one per node, saving every ``every`` steps), running, past a
    save. (``--save-seconds`` slows every save, the periodic ones too.)"""
    lows = [fb.toy(f"{prefix}{i}", steps=steps, grace=grace,
                   sbatch=["-N1", "--gres=gpu:8", *([f"--nodelist=n{i}"] if pinned else [])],
                   train=["--save-every", str(every), *train]) for i in range(1, 5)]
    for job in lows:
        fb.wait(job, "RUNNING", timeout=60)
    for job in lows:
        fb.wait_saved(job, timeout=60)
    return lows


def _urgent(fb: FaultBed, name: str = "urgent", steps: int = 40) -> ToyJob:
    return fb.toy(name, steps=steps, priority="HIGH", account="team-b",
                  sbatch=["-N1", "--gres=gpu:8"])


def _wait(what: Callable[[], object], timeout: float, message: str) -> object:
    end = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{message} (waited {timeout:g} s)")
        time.sleep(0.2)


def _plans(repo: Repository) -> list[str]:
    return [p.state.value for p in repo.history(limit=1000)]


def _step_like_the_daemon(ex: PreemptionExecutor, repo: Repository, timeout: float) -> None:
    """Step the open plans every 0.5 s until none is open, as the daemon's loop does (an error
    of one step is logged there and retried at the next)."""
    end = time.monotonic() + timeout
    while repo.unfinished_plans():
        if time.monotonic() > end:
            raise AssertionError(f"plans still open after {timeout:g} s: "
                                 f"{[(p.plan_id, p.state.value) for p in repo.unfinished_plans()]}")
        with contextlib.suppress(HaiSlurmError):
            ex.reconcile()
        time.sleep(0.5)


def _sweep_like_the_daemon(fb: FaultBed, ex: PreemptionExecutor, jobs: list[ToyJob],
                           timeout: float) -> None:
    """After the plans: what the daemon's cycles do about them until ``jobs`` ended (every
    second, :meth:`PreemptionExecutor.sweep_leftovers`), with the admin's
    :meth:`FaultBed.repair` of Slurm's own reactions."""
    end = time.monotonic() + timeout
    ids = [j.job_id for j in jobs]
    while time.monotonic() < end:
        with contextlib.suppress(HaiSlurmError):
            facts = fb.slurm.job_facts(ids)
            if all(f.finished and f.state.value != "COMPLETING" for f in facts.values()):
                return
            ex.sweep_leftovers(fb.slurm.snapshot())
            fb.repair()
        time.sleep(1.0)


def _sqlite_repo(fb: FaultBed, name: str = "state") -> Repository:
    return Repository(upgrade(f"sqlite:///{fb.workdir / (name + '.db')}"))


# ------------------------------------------------------------------------------- cases
def case_slurmctld(fb: FaultBed, opts: Options) -> Outcome:
    """slurmctld SIGKILLed in each of ``opts.phases`` (one plan per phase), back after
    :data:`OUTAGE` s."""
    out = Outcome(covered=f"phases {','.join(opts.phases)}, {OUTAGE:g}-s outages")
    for i, phase in enumerate(opts.phases):
        jobs = _slurmctld_in(fb, phase, out)
        if i + 1 < len(opts.phases):  # the next phase needs the nodes back
            for job in jobs:
                fb.wait(job, "COMPLETED", "FAILED", "CANCELLED", timeout=180)
    return out


def _slurmctld_in(fb: FaultBed, phase: str, out: Outcome) -> list[ToyJob]:
    """One plan whose phase ``phase`` meets a slurmctld SIGKILL; returns its jobs."""
    repo = _sqlite_repo(fb, f"state-{phase}")
    out.repos.append(repo)
    # long enough to outlive the outage: the victim must still run when it is asked
    lows = _fill(fb, steps=int((OUTAGE + 20) / 0.05), every=300, pinned=True,
                 train=("--save-seconds", "2"), prefix=f"low-{phase}-")
    victim = lows[0]
    bene = _urgent(fb, f"urgent-{phase}")
    restarted = threading.Event()
    fired: list[int] = []

    def outage() -> None:
        time.sleep(OUTAGE)
        try:
            fb.start_component("slurmctld")
        finally:
            restarted.set()

    def hook(point: str, plan_id: int) -> None:
        if point == _HOOK[phase] and not fired:
            fired.append(plan_id)
            fb.echo(f"  slurmctld SIGKILLed in phase {phase} of plan {plan_id}")
            fb.kill_component("slurmctld")
            threading.Thread(target=outage, daemon=True).start()

    ex = PreemptionExecutor(fb.slurm, repo, hook=hook, settings=ExecutorSettings(
        start_timeout=120.0, saving_extension=60.0))
    request = ExecutionRequest(bene.job_id, (victim.job_id,), nodes=("n1",),
                               deadlines={victim.job_id: 40.0})
    try:
        ex.start(request, fb.slurm.snapshot())
    except HaiSlurmError as err:  # the daemon logs it; the next step carries the plan on
        fb.echo(f"  start raised (the next steps go on): {err}")
    try:
        _step_like_the_daemon(ex, repo, timeout=OUTAGE + 200)
    finally:
        restarted.wait(OUTAGE + 60)
    _sweep_like_the_daemon(fb, ex, [*lows, bene], timeout=240)
    out.checks.append(Check(f"fault hit in phase {phase}", bool(fired),
                            f"plan {fired[0]} ended {repo.get_plan(fired[0]).state.value}"
                            if fired else "the hook point was never reached"))
    return [*lows, bene]


def case_daemon_kill(fb: FaultBed, opts: Options) -> Outcome:
    """The daemon SIGKILLed at seeded random points of ``opts.cycles`` cycles with preemptions."""
    rng = random.Random(opts.seed)  # noqa: S311 - reproducible fault points, not secrets
    kills = max(1, opts.cycles // 10)
    points = sorted(rng.sample(range(3, max(4, opts.cycles)), min(kills, opts.cycles - 3)))
    config = fb.config()
    repo_url = f"sqlite:///{fb.workdir}/daemon.db"
    daemon = fb.start_daemon(config)
    daemon.wait_log("preemption on", timeout=60)
    repo = Repository(make_engine(repo_url))
    # the LOW jobs outlive the cycles (about 1.4 s each), so each urgent job needs a victim
    _fill(fb, steps=max(300, 25 * opts.cycles), every=200, train=("--save-seconds", "1"))
    urgent = 0
    next_urgent = 2
    done_kills: list[str] = []

    def total() -> int:
        return sum(d.cycles() for d in fb.daemons)

    # counted from here: the cycles run while the LOW jobs start and save are not the case's
    # (on a slow run they were all of them, and no urgent job was ever submitted)
    start = total()
    while total() - start < opts.cycles:
        cycles = total() - start
        if cycles >= next_urgent:
            urgent += 1
            _urgent(fb, f"urgent{urgent}")
            next_urgent = cycles + rng.randint(5, 9)
        if points and cycles >= points[0]:
            points.pop(0)
            time.sleep(rng.uniform(0.0, 1.0))  # anywhere inside the cycle or a plan step
            open_ = [p.state.value for p in repo.unfinished_plans()]
            daemon.kill()
            done_kills.append(f"cycle {cycles}" + (f" ({'/'.join(open_)} plan open)"
                                                  if open_ else ""))
            daemon = fb.start_daemon(config)
        if not daemon.alive():
            raise AssertionError(f"the daemon exited: {daemon.text()[-2000:]}")
        time.sleep(0.2)
    plans = repo.history(limit=1000)
    out = Outcome(covered=f"{total() - start} cycles, {len(done_kills)} SIGKILLs at "
                  f"{', '.join(done_kills)}; {urgent} urgent jobs, {len(plans)} plans "
                  f"(seed {opts.seed})", repos=[repo])
    out.checks.append(Check("preemptions happened", len(plans) > 0, f"{len(plans)} plan(s)"))
    return out


def _mariadb_url(fb: FaultBed) -> str:
    import pymysql  # type: ignore[import-untyped]

    sock = fb.bed.state_dir / "mariadb" / "mysqld.sock"
    name = f"hai_faults_{uuid.uuid4().hex[:10]}"
    conn = pymysql.connect(unix_socket=str(sock), user="root", connect_timeout=5,
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()
    return f"mysql+pymysql://root@localhost/{name}?unix_socket={sock}"


def _mariadb_answers(fb: FaultBed) -> bool:
    import pymysql

    try:
        pymysql.connect(unix_socket=str(fb.bed.state_dir / "mariadb" / "mysqld.sock"),
                        user="root", connect_timeout=2).close()
    except pymysql.err.MySQLError:
        return False
    return True


def _signalled(repo: Repository) -> bool:
    with contextlib.suppress(HaiSlurmError):
        return any(p.state is PlanState.SIGNALLED for p in repo.unfinished_plans())
    return False


def case_mariadb_down(fb: FaultBed, opts: Options) -> Outcome:
    """MariaDB SIGKILLed during a plan's cycles, back 8 s later."""
    url = _mariadb_url(fb)
    daemon = fb.start_daemon(fb.config(database_url=url))
    daemon.wait_log("preemption on", timeout=60)
    repo = Repository(make_engine(url))
    _fill(fb, train=("--save-seconds", "6"), grace=40, every=100)
    _urgent(fb)
    _wait(lambda: _signalled(repo), 30, "no plan reached signalled")
    mark = len(daemon.text())
    fb.kill_component("mariadb")
    try:
        time.sleep(8.0)
        skipped = daemon.text()[mark:].count("cycle skipped, nothing written: database")
        daemon.stop()  # SIGTERM while the database is down: it must still stop
    finally:
        fb.start_component("mariadb")
        _wait(lambda: _mariadb_answers(fb), 60, "MariaDB did not answer after its restart")
    fb.start_daemon(fb.config(database_url=url))  # takes the plan up where it was left
    out = Outcome(covered=f"MariaDB down 8 s during a signalled plan, {skipped} cycle(s) "
                  "skipped, the daemon SIGTERMed meanwhile and replaced", repos=[repo])
    out.checks.append(Check("cycles skipped while it was down", skipped >= 1,
                            f"{skipped} skipped"))
    term = daemon.term_seconds
    out.checks.append(Check("SIGTERM stopped the daemon while the database was down",
                            term is not None, f"in {term:.1f} s" if term is not None else
                            f"not within {SIGTERM_WAIT:g} s (SIGKILLed)"))
    return out


def case_redis_down(fb: FaultBed, opts: Options) -> Outcome:
    """Redis down when the checkpoint request goes out; back once the plan ended."""
    daemon = fb.start_daemon(fb.config(redis=True))
    daemon.wait_log("preemption on", timeout=60)
    repo = Repository(make_engine(f"sqlite:///{fb.workdir}/daemon.db"))
    _fill(fb)
    fb.kill_component("redis")
    try:
        _urgent(fb)
        _wait(lambda: repo.history() and not repo.unfinished_plans(), 90,
              "the plan did not end while Redis was down")
    finally:
        fb.start_component("redis")
    failed = daemon.text().count("could not publish the checkpoint request")
    out = Outcome(covered=f"Redis down for a whole plan, {failed} publish(es) failed",
                  repos=[repo])
    out.checks.append(Check("the publish failed and the signal carried the request",
                            failed >= 1 and _plans(repo) == [PlanState.DONE.value],
                            f"{failed} failed publish(es), plans {_plans(repo)}"))
    return out


def case_hung_victim(fb: FaultBed, opts: Options) -> Outcome:
    """Victims that never answer the request (8-s grace): missed, requeued all the same."""
    daemon = fb.start_daemon(fb.config())
    daemon.wait_log("preemption on", timeout=60)
    repo = Repository(make_engine(f"sqlite:///{fb.workdir}/daemon.db"))
    _fill(fb, steps=500, train=("--ignore-requests",), grace=8)  # outlives the grace
    _urgent(fb)
    _wait(lambda: repo.history() and not repo.unfinished_plans(), 90, "the plan did not end")
    plans = repo.history()
    forced = [p for p in plans if PlanState.FORCED in {s.to_state for s in p.steps}]
    unacked = [v for p in plans for v in p.victims
               if v.state is VictimState.REQUEUED and v.ack_step is None]
    out = Outcome(covered="an 8-s grace missed by a victim that ignores USR2", repos=[repo])
    out.checks.append(Check("missed, forced and requeued", bool(forced and unacked),
                            f"{len(forced)} forced plan(s), {len(unacked)} victim(s) requeued "
                            "without an ack"))
    return out


def case_slurmd_dies(fb: FaultBed, opts: Options) -> Outcome:
    """The victim's slurmd SIGKILLed while it saves; started again once every plan ended."""
    daemon = fb.start_daemon(fb.config())
    daemon.wait_log("preemption on", timeout=60)
    repo = Repository(make_engine(f"sqlite:///{fb.workdir}/daemon.db"))
    _fill(fb, train=("--save-seconds", "4"))
    bene = _urgent(fb)
    _wait(lambda: _signalled(repo), 30, "no plan reached signalled")
    (plan,) = repo.unfinished_plans()
    snap = fb.slurm.snapshot()
    job = snap.job(plan.victims[0].job_id)
    node = job.nodes[0] if job is not None and job.nodes else "n1"
    t0 = time.monotonic()
    fb.kill_component(f"slurmd-{node}")
    try:
        fb.wait(bene, "RUNNING", "COMPLETED", timeout=240)
        started = time.monotonic() - t0
        _wait(lambda: not repo.unfinished_plans(), 120, "plans still open")
    finally:
        fb.start_component(f"slurmd-{node}")
    where = _nodes_of(fb, bene)
    out = Outcome(covered=f"slurmd of {node} SIGKILLed while its victim saved; the urgent job "
                  f"started {started:.0f} s later on {where or '?'}", repos=[repo],
                  strict_restarts=False)
    limit = ExecutorSettings().start_timeout - 5
    out.checks.append(Check(
        "the urgent job started elsewhere before the guard's start timeout",
        started < limit and bool(where) and node not in where.split(","),
        f"after {started:.0f} s (limit {limit:g} s) on {where or '?'}; plans {_plans(repo)}"))
    return out


def _nodes_of(fb: FaultBed, job: ToyJob) -> str:
    """Where the job ran (``sacct``, so a job that already ended is found too)."""
    res = fb.run(["sacct", "-n", "-X", "-P", "-j", str(job.job_id), "-o", "NodeList"])
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _fill_disk(mount: Path) -> Path:
    """Fill the file system at ``mount`` to the last byte; return the filler file."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return filler


def case_disk_full(fb: FaultBed, opts: Options) -> Outcome:
    """The victim's checkpoint dir on a 1-MiB tmpfs that fills as its requested save starts."""
    lows = [fb.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8", f"--nodelist=n{i}"],
                   train=("--save-every", "60")) for i in (2, 3, 4)]
    mount = fb.workdir / "victim.ck"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount)],
                   check=True, capture_output=True, timeout=30)

    def unmount() -> None:
        for _ in range(20):
            res = subprocess.run(["umount", str(mount)], capture_output=True, timeout=30,
                                 check=False)
            if res.returncode == 0:
                return
            time.sleep(0.5)

    try:
        out = _disk_full(fb, mount, lows)
    except BaseException:
        fb.cleanup()
        unmount()
        raise
    out.after.append(unmount)  # the victim's next run reads its checkpoint from this tmpfs
    return out


def _disk_full(fb: FaultBed, mount: Path, lows: list[ToyJob]) -> Outcome:
    victim = fb.toy("victim", steps=240, sbatch=["-N1", "--gres=gpu:8", "--nodelist=n1"],
                    train=("--save-every", "60", "--save-seconds", "3"))
    for job in [*lows, victim]:
        fb.wait(job, "RUNNING", timeout=60)
    fb.wait_saved(victim)
    repo = _sqlite_repo(fb)
    filled: list[Path] = []

    def hook(point: str, _plan: int) -> None:
        if point == "asked" and not filled:
            filled.append(_fill_disk(mount))

    bene = _urgent(fb)
    ex = PreemptionExecutor(fb.slurm, repo, hook=hook)
    result = ex.run(ExecutionRequest(bene.job_id, (victim.job_id,), nodes=("n1",),
                                     deadlines={victim.job_id: 30.0}), fb.slurm.snapshot())
    store = CheckpointStore(mount, keep=3, log=lambda _m: None)
    entries = store.entries()
    newest = entries[-1] if entries else None
    valid = newest is not None and store.verify(newest)[0] is not None
    saved = fb.wait_saved(victim, timeout=1)
    text = victim.output.read_text(errors="replace")
    said = [ln for ln in text.splitlines() if ln.startswith("save failed")]
    for f in filled:  # the admin frees the space; the job's next run resumes
        f.unlink()
    out = Outcome(covered=f"tmpfs of 1 MiB filled at the request; plan {result.state}",
                  repos=[repo])
    out.checks.append(Check(
        "the previous checkpoint stayed valid", valid and newest is not None
        and newest.step == saved, f"newest on disk step {newest.step if newest else None} "
        f"({'valid' if valid else 'INVALID'}), newest the job reported saved: {saved}"))
    kept = said[0][said[0].find("; the previous"):].lstrip("; ") if said else ""
    out.checks.append(Check("the job said so", "still valid" in kept,
                            f"'save failed at step ... {kept}'" if said
                            else "no 'save failed' line in its output"))
    if not filled:
        out.checks.append(Check("the disk was filled", False, "the request was never sent"))
    return out


CASES: dict[str, Callable[[FaultBed, Options], Outcome]] = {
    "slurmctld": case_slurmctld,
    "daemon-kill": case_daemon_kill,
    "mariadb-down": case_mariadb_down,
    "redis-down": case_redis_down,
    "hung-victim": case_hung_victim,
    "slurmd-dies": case_slurmd_dies,
    "disk-full": case_disk_full,
}


def run_case(name: str, bed: Testbed, opts: Options, workdir: Path,
             echo: Echo = lambda _m: None) -> CaseResult:
    """Run one case in ``workdir`` and its end checks; never raises for a failing case."""
    t0 = time.monotonic()
    fb = FaultBed(bed, workdir, echo)
    outcome = Outcome()
    checks: list[Check] = []
    error = ""
    try:
        outcome = CASES[name](fb, opts)
        checks = [*outcome.checks, *end_checks(fb, outcome.repos,
                                               restarts_by_plans_only=outcome.strict_restarts)]
    except Exception as err:  # reported as the case's failure, with where it happened
        tb = traceback.extract_tb(err.__traceback__)[-1]
        error = f"{type(err).__name__}: {err} (at {Path(tb.filename).name}:{tb.lineno})"
        checks = list(outcome.checks)
    finally:
        fb.cleanup()
        for step in outcome.after:
            step()
    return CaseResult(name, outcome.covered, tuple(checks), time.monotonic() - t0, error)
