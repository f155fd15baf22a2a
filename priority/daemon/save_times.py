"""How long each running job's saves take, as the job measured them (its ``phase.json``).

The planner charges a victim that saves on request its save time plus its restart. Without a
measurement the save time is the job's ``#HAI --grace``: what it said it may need, an upper bound
(a job that declares a 300-s grace for a 20-s save looks 15 times dearer than it is, and an urgent
job waits until its benefit outweighs that). The checkpoint library publishes how long its newest
durable save took (:attr:`~hai_slurm.checkpoint.protocol.PhaseRecord.save_seconds`, periodic
saves included), so the daemon reads it back and the planner uses ``min(grace, measured)``
(:func:`~hai_slurm.priority.planner.inputs.save_estimates`).

Read like the executor reads acknowledgements (:func:`~hai_slurm.checkpoint.read_job_report`:
only files the job's owner wrote, in a directory nobody else may write; the uid comes from
Slurm). A job may claim a short save to make itself look cheap to preempt, which only hurts
itself, and never a longer one than its grace. The reads are bounded: each job's file is read
again at most every :data:`REFRESH` seconds, and at most :data:`READS_PER_PASS` files a pass
(never-read jobs first), so a cycle at 2,000 running jobs reads a few dozen small files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.checkpoint import JobReport, read_job_report
from hai_slurm.checkpoint.protocol import control_dir_of

REFRESH = 300.0
"""Seconds before a job's ``phase.json`` is read again (a periodic save every few minutes or
more is what it would show)."""

READS_PER_PASS = 64
"""Most files read in one pass; the rest wait for later passes (oldest reads first)."""

ReportReader = Callable[..., JobReport]


@dataclass(frozen=True)
class SaveSource:
    """Where a running job that saves on request publishes its phase, and who may write it."""

    job_id: int
    checkpoint_dir: str
    uid: int

    @property
    def control_dir(self) -> Path:
        """The job's control directory (where the executor reads its acknowledgement)."""
        return control_dir_of(self.checkpoint_dir, self.job_id)


class SaveTimes:
    """Measured save times per job id, kept between passes (see the module docstring)."""

    def __init__(self, reader: ReportReader = read_job_report, *, refresh: float = REFRESH,
                 reads_per_pass: int = READS_PER_PASS) -> None:
        self.reader = reader
        self.refresh = refresh
        self.reads_per_pass = reads_per_pass
        self._read_at: dict[int, float] = {}
        self._seconds: dict[int, float] = {}
        self.reads = 0
        """Files read so far (for tests and metrics)."""

    def update(self, sources: Iterable[SaveSource], now: float) -> dict[int, float]:
        """Read the due jobs of ``sources`` (the running jobs that save on request) and return
        the measured save time of each of them that has one. Jobs no longer among ``sources``
        are forgotten."""
        wanted = {s.job_id: s for s in sources}
        for gone in [j for j in self._read_at if j not in wanted]:
            del self._read_at[gone]
            self._seconds.pop(gone, None)
        due = sorted((self._read_at.get(j, float("-inf")), j) for j in wanted
                     if not 0 <= now - self._read_at.get(j, float("-inf")) < self.refresh)
        for _, jid in due[:self.reads_per_pass]:
            src = wanted[jid]
            self._read_at[jid] = now
            self.reads += 1
            report = self.reader(src.control_dir, str(jid), src.uid)
            phase = report.phase
            if phase is not None and phase.save_seconds is not None:
                self._seconds[jid] = phase.save_seconds
        return {j: self._seconds[j] for j in wanted if j in self._seconds}
