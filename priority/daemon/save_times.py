"""What preempting each running job costs, as the job measured it (its ``phase.json``).

The planner charges a victim that saves on request its save time plus its restart. Without a
measurement the save time is the job's ``#HAI --grace`` (what it said it may need: an upper
bound; a job that declares a 300-s grace for a 20-s save looks 15 times dearer than it is, and
an urgent job waits until its benefit outweighs that) and the restart is the configured
``restart_cost``. The checkpoint library publishes how long its newest durable save took
(:attr:`~hai_slurm.checkpoint.protocol.PhaseRecord.save_seconds`, periodic saves included) and
how long its run took from process start to its first step
(:attr:`~hai_slurm.checkpoint.protocol.PhaseRecord.restart_seconds`), so the daemon reads them
back: the planner uses ``min(grace, measured save)``
(:func:`~hai_slurm.priority.planner.inputs.save_estimates`) and ``min(restart_cost, measured
restart)``.

Read like the executor reads acknowledgements (:func:`~hai_slurm.checkpoint.read_job_report`:
only files the job's owner wrote, in a directory nobody else may write; the uid comes from
Slurm). A figure can only make a job look cheaper than its declared grace and the configured
restart: a job may claim less, which only gets itself preempted sooner, never more. The reads
are bounded: each job's file is read again at most every :data:`REFRESH` seconds, and at most
:data:`READS_PER_PASS` files a pass (never-read jobs first), so a cycle at 2,000 running jobs
reads a few dozen small files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from hai_slurm.checkpoint import ReportReader, read_job_report
from hai_slurm.checkpoint.protocol import control_dir_of

REFRESH = 300.0
"""Seconds before a job's ``phase.json`` is read again (a periodic save every few minutes or
more is what it would show)."""

READS_PER_PASS = 64
"""Most files read in one pass; the rest wait for later passes (oldest reads first)."""

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


class Measured(NamedTuple):
    """A job's own figures (None: not measured): its newest save, its restart."""

    save: float | None
    restart: float | None


class SaveTimes:
    """Measured save and restart times per job id, kept between passes (see the module
    docstring)."""

    def __init__(self, reader: ReportReader = read_job_report, *, refresh: float = REFRESH,
                 reads_per_pass: int = READS_PER_PASS) -> None:
        self.reader = reader
        self.refresh = refresh
        self.reads_per_pass = reads_per_pass
        self._read_at: dict[int, float] = {}
        self._measured: dict[int, Measured] = {}
        self.reads = 0
        """Files read so far (for tests and metrics)."""
        self.denied: set[int] = set()
        """Running jobs whose control directory the daemon may not open (its user lacks the
        permission): their acknowledgements would never be seen, so the planner weighs them
        as jobs that cannot save on request (``SnapshotPlanner``)."""

    def update(self, sources: Iterable[SaveSource], now: float) -> dict[int, Measured]:
        """Read the due jobs of ``sources`` (the running jobs that save on request) and return
        the figures of those that have any. A figure the file no longer has (a new run before
        its first save) keeps the job's last one. Jobs no longer among ``sources`` are
        forgotten."""
        wanted = {s.job_id: s for s in sources}
        for gone in [j for j in self._read_at if j not in wanted]:
            del self._read_at[gone]
            self._measured.pop(gone, None)
            self.denied.discard(gone)
        never = float("-inf")
        due = sorted((self._read_at.get(j, never), j) for j in wanted
                     if not 0 <= now - self._read_at.get(j, never) < self.refresh)
        for _, jid in due[:self.reads_per_pass]:
            src = wanted[jid]
            self._read_at[jid] = now
            self.reads += 1
            report = self.reader(src.control_dir, str(jid), src.uid)
            if report.denied:
                self.denied.add(jid)
            else:
                self.denied.discard(jid)
            phase = report.phase
            if phase is None:
                continue
            old = self._measured.get(jid, Measured(None, None))
            new = Measured(old.save if phase.save_seconds is None else phase.save_seconds,
                           old.restart if phase.restart_seconds is None
                           else phase.restart_seconds)
            if new != (None, None):
                self._measured[jid] = new
        return {j: self._measured[j] for j in wanted if j in self._measured}
