"""Toy training jobs on a real cluster, and the figures of a preemption (for demo, tests, bench).

:func:`submit_toy` submits :mod:`~hai_slurm.priority.demo.toy_train` as a batch job with ``#HAI``
directives; :func:`toy_runs` reads back what each run of it did (from its output and progress
files), from which :func:`steps_lost` and the restart times come. :func:`wait_state` polls Slurm
with a monotonic deadline and a message naming the state it saw.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.cli_backend import CliSlurmClient
from hai_slurm.slurm_plugins.types import JobFacts, SlurmClient


@dataclass(frozen=True)
class ToyJob:
    """A submitted toy job and its files."""

    name: str
    job_id: int
    workdir: Path

    @property
    def output(self) -> Path:
        """Slurm's output file (all runs appended)."""
        return self.workdir / f"{self.name}.out"

    @property
    def progress(self) -> Path:
        """``<run> <step>`` per step."""
        return self.workdir / f"{self.name}.progress"

    @property
    def result(self) -> Path:
        """The result JSON written at the end."""
        return self.workdir / f"{self.name}.result.json"

    @property
    def checkpoints(self) -> Path:
        """The checkpoint directory."""
        return self.workdir / f"{self.name}.ck"


def toy_script(job: ToyJob, *, steps: int, step_seconds: float, priority: str, team: str,
               grace: int = 30, train_args: Sequence[str] = ()) -> str:
    """The batch script, shaped like the README's example: ``#HAI`` directives, then
    ``srun python ...`` (the toy gets its checkpoint settings from the directives, through
    job_submit.lua, nothing else). One task per node: only rank 0 writes the toy's files."""
    args = " ".join([f"--steps {steps}", f"--step-seconds {step_seconds}",
                     f"--out {job.result}", f"--progress {job.progress}", *train_args])
    return (f"#!/bin/bash\n#HAI --priority={priority} --team={team} --grace={grace}\n"
            f"#HAI --checkpoint-dir={job.checkpoints}\n"
            f"srun {sys.executable} -m hai_slurm.priority.demo.toy_train {args}\n")


def submit_toy(slurm: CliSlurmClient, workdir: Path, name: str, *, steps: int,
               step_seconds: float, priority: str, account: str, team: str | None = None,
               sbatch_args: Sequence[str] = (), grace: int = 30,
               train_args: Sequence[str] = ()) -> ToyJob:
    """sbatch the toy as ``name`` (output appended across runs); return the job."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = ToyJob(name, 0, workdir)
    script = workdir / f"{name}.sh"
    script.write_text(toy_script(job, steps=steps, step_seconds=step_seconds, priority=priority,
                                 team=team or account, grace=grace, train_args=train_args))
    job_id = slurm.submit_script(script, [f"--job-name={name}", f"--account={account}",
                                          f"--chdir={workdir}", f"--output={job.output}",
                                          "--open-mode=append", *sbatch_args])
    return ToyJob(name, job_id, workdir)


@dataclass(frozen=True)
class Run:
    """One run of a toy job: where it started and the highest step it reached."""

    number: int
    start_step: int
    last_step: int


def toy_runs(job: ToyJob) -> list[Run]:
    """The runs of ``job`` so far, in order (from its output and progress files)."""
    starts: dict[int, int] = {}
    if job.output.exists():
        for line in job.output.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "start" and parts[2] == "run":
                starts[int(parts[3])] = int(parts[1])
    last: dict[int, int] = {}
    if job.progress.exists():
        for line in job.progress.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                run, step = int(parts[0]), int(parts[1])
                last[run] = max(last.get(run, 0), step)
    return [Run(r, starts[r], last.get(r, starts[r])) for r in sorted(starts)]


def steps_lost(runs: Sequence[Run]) -> list[int]:
    """Per restart: steps the previous run had done that the next one has to redo."""
    return [max(0, prev.last_step - nxt.start_step) for prev, nxt in itertools.pairwise(runs)]


def wait_state(slurm: SlurmClient, job_id: int, want: Sequence[str], *,
               timeout: float, poll: float = 0.1) -> tuple[JobFacts, float]:
    """Wait until the job's state is in ``want``; return its facts and the time (epoch) seen.

    Raises SlurmError "job 12 did not reach RUNNING within 30 s (now PENDING, restarts 1)".
    """
    end = time.monotonic() + timeout
    facts: JobFacts | None = None
    while True:
        facts = slurm.job_facts([job_id]).get(job_id)
        if facts is not None and facts.state in want:
            return facts, time.time()
        if time.monotonic() >= end:
            now = (f"now {facts.state}, restarts {facts.restart_count}" if facts
                   else "unknown to Slurm")
            raise SlurmError(f"job {job_id} did not reach {'/'.join(want)} within "
                             f"{timeout:g} s ({now})")
        time.sleep(poll)
