"""Shared pieces of the executor tests on the real testbed: toy jobs that clean up after
themselves, an executor on the testbed with its own SQLite store, and state checks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import Testbed

from hai_slurm.priority.demo.scenario import ToyJob, submit_toy, toy_runs, wait_state
from hai_slurm.priority.demo.toy_train import reference
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutorSettings
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.adapter import CliSlurmClient
from hai_slurm.slurm_plugins.runner import SubprocessRunner
from hai_slurm.slurm_plugins.types import JobFacts


@dataclass
class Bed:
    """The testbed through the executor's eyes; cancels every job it submitted at the end."""

    testbed: Testbed
    workdir: Path
    jobs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run = SubprocessRunner(self.testbed.slurm_conf)
        self.slurm = CliSlurmClient(self.run)
        self.repo = Repository(upgrade(f"sqlite:///{self.workdir / 'state.db'}"))

    def toy(self, name: str, *, steps: int = 4000, step_seconds: float = 0.05,
            priority: str = "LOW", account: str = "team-a", sbatch: Sequence[str] = (),
            train: Sequence[str] = (), grace: int = 30) -> ToyJob:
        """Submit a toy job (remembered for cleanup)."""
        job = submit_toy(self.slurm, self.workdir, name, steps=steps, step_seconds=step_seconds,
                         priority=priority, account=account, sbatch_args=sbatch,
                         train_args=train, grace=grace)
        self.jobs.append(job.job_id)
        return job

    def fill(self, count: int = 4) -> list[ToyJob]:
        """``count`` LOW toy jobs of 8 GPUs on one node each (4: the whole testbed), running
        and past their first 20 steps (team-a)."""
        lows = [self.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"]) for i in range(count)]
        for job in lows:
            self.wait(job, "RUNNING", timeout=60)
        for job in lows:
            self.wait_progress(job, 20, timeout=60)
        return lows

    def executor(self, **settings: float) -> PreemptionExecutor:
        """An executor on this testbed."""
        return PreemptionExecutor(self.slurm, self.repo,
                                  settings=ExecutorSettings(**settings))  # type: ignore[arg-type]

    def wait(self, job: ToyJob | int, *states: str, timeout: float = 30) -> JobFacts:
        """Wait for a state; return the job's facts."""
        jid = job if isinstance(job, int) else job.job_id
        return wait_state(self.slurm, jid, states, timeout=timeout)[0]

    def facts(self, job: ToyJob | int) -> JobFacts:
        """The job's facts now."""
        jid = job if isinstance(job, int) else job.job_id
        return self.slurm.job_facts([jid])[jid]

    def nodes_of(self, job: ToyJob) -> set[str]:
        """Nodes the job runs on (from the snapshot)."""
        j = self.slurm.snapshot().job(job.job_id)
        return set(j.nodes) if j is not None else set()

    def wait_progress(self, job: ToyJob, steps: int, timeout: float = 30,
                      run: int | None = None) -> None:
        """Wait until the job's run ``run`` (default: the latest) has done ``steps`` steps."""
        end = time.monotonic() + timeout
        while True:
            runs = [r for r in toy_runs(job) if run is None or r.number == run]
            if runs and runs[-1].last_step - runs[-1].start_step >= steps:
                return
            assert time.monotonic() < end, (f"{job.name} run {run} did not do {steps} steps in "
                                            f"{timeout} s: {toy_runs(job)}")
            time.sleep(0.1)

    def held_jobs(self) -> list[int]:
        """Our jobs that are held now."""
        facts = self.slurm.job_facts(self.jobs)
        return [j for j, f in facts.items() if f.held]

    def cleanup(self) -> None:
        """Remove the guard reservations a failed test left (a new executor would), cancel
        every job and wait until none is active. A job cancelled while it was being requeued
        (a victim that exited 75 as a plan stopped) can come back pending and start again:
        whatever is still active is cancelled again every 2 s.

        Running jobs' steps get SIGHUP at first instead of a cancel (the others are
        cancelled): a cancel sends the toy's step SIGTERM, on which it saves (20 s with
        ``--save-seconds 20``) before the job ends, while SIGHUP, which the toy does not catch,
        ends its job within a second (FAILED). Not SIGKILL: a step's SIGKILL can bring its
        slurmstepd a second terminate request some milliseconds after slurmctld's (by its
        timing, the step's srun's), and a 22.05 slurmstepd that gets it just as its task exits
        hangs until UnkillableStepTimeout (60 s), then drains the node "Kill task failed"
        (once in CI, where every later test that needed the node failed, and twice here)."""
        for r in self.slurm.reservations("hai-plan-"):
            self.slurm.end_reservation(r.name)
        if not self.jobs:
            return
        running = [j for j, f in self.slurm.job_facts(self.jobs).items()
                   if f.state == "RUNNING"]
        listed = self.run(["squeue", "-h", "-s", "-j", ",".join(map(str, running)), "-o", "%i"]
                          ) if running else None
        steps = ([s for s in listed.stdout.split() if s.partition(".")[2].isdigit()]
                 if listed is not None else [])
        if steps:
            self.run(["scancel", "--signal=HUP", *steps])
        # (an array task's step reads JOB_TASK.STEP: that task is cancelled as well)
        killed = {int(job) for s in steps if (job := s.partition(".")[0]).isdigit()}
        others = [j for j in self.jobs if j not in killed]
        if others:
            self.run(["scancel", *map(str, others)])
        end = time.monotonic() + 60
        again = time.monotonic() + 2
        active: list[int] = []
        while time.monotonic() < end:
            facts = self.slurm.job_facts(self.jobs)
            active = [j for j, f in facts.items() if not f.finished or f.state == "COMPLETING"]
            if not active:
                return
            if time.monotonic() >= again:
                self.run(["scancel", *map(str, active)])
                again = time.monotonic() + 2
            time.sleep(0.2)
        raise AssertionError(f"jobs still active 60 s after scancel: {active}")


def bit_identical(job: ToyJob, steps: int) -> bool:
    """The job's result equals an uninterrupted run's."""
    return json.loads(job.result.read_text()) == json.loads(json.dumps(reference(steps)))


def bed_for(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """A Bed in a fresh directory; everything it submitted is cancelled afterwards (the body
    of each test module's ``bed`` fixture)."""
    work = Path(tmp_path_factory.mktemp("preempt"))
    b = Bed(testbed, work)
    try:
        yield b
    finally:
        b.cleanup()


def daemon_config(tmp: Path, testbed: Testbed, *, extra: str = "", lock_ttl: str = "30s",
                  database_url: str | None = None, shipped_intervals: bool = False) -> Path:
    """A daemon config for the preemption tests: the testbed's Redis, SQLite under ``tmp``
    (unless ``database_url``), a 1-s cycle (the shipped intervals with ``shipped_intervals``:
    no [intervals] table), team quotas of 16 GPUs, and a planner that preempts seconds-old toy
    jobs. These are test settings for a feature, not the README path (the demo and the
    README-path tests use only what the README shows). Mode 0600: it holds the Redis
    password."""
    intervals = "" if shipped_intervals else f"""[intervals]
cycle = "1s"
lock_ttl = "{lock_ttl}"
backoff_max = "4s"
"""
    path = tmp / "daemon.toml"
    path.write_text(f"""
state_dir = "{tmp}"
database_url = "{database_url or f'sqlite:///{tmp}/hai-slurm.db'}"
redis_url = "{testbed.redis_url}"
metrics_port = 0
{intervals}[teams.team-a]
gpus = 16
[teams.team-b]
gpus = 16
[planner]
min_run_time = "5s"
restart_cost = "10s"
benefit_threshold = 0.1
{extra}
""")
    path.chmod(0o600)
    return path
