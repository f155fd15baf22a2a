"""The compact job listing (``squeue -O``) plus the details it lacks, kept per job.

A full job record (``squeue --json``'s, or pyslurm's) costs far more to fetch and read than a
compact line: at 12,000 jobs, ``squeue --json`` prints 38 MB and pyslurm's ``Jobs.load()`` plus
reading its records takes 0.4-0.6 s of CPU, where the compact listing takes 0.2 s and a line
equal to last cycle's is not parsed again. What the listing lacks (name, ``admin_comment``,
per-node GPUs, excluded nodes, constraint: :data:`~.parse.DETAIL_KEYS`) is kept from the last
full record of each job, valid while the job's node list and restart count stay the same
(:func:`~.parse.detail_signature`) and for at most :data:`DETAIL_REFRESH` seconds.

Jobs without kept details are read per job (``fetch``): the pyslurm backend reads their records
(``Job.load``); the CLI backend reads pending ones with two ``squeue --jobs`` whose fields end in
a fresh random delimiter (:meth:`~.cli_backend.CliSlurmClient.job_details`) and leaves out a job
with nodes, whose per-node GPUs it has no safe per-job source of: the snapshot then reads
``squeue --json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hai_slurm.slurm_plugins.parse import (
    DETAIL_KEYS,
    compact_job_record,
    detail_signature,
    parse_job,
)
from hai_slurm.slurm_plugins.types import Job

DETAIL_REFRESH = 600.0
"""Seconds kept details stay trusted: after that, every job's full record is read again (a job's
owner may change its name, comment, excluded nodes or constraint while it waits, and an admin
its AdminComment by hand)."""

Fetch = Callable[[Sequence[int]], Iterable[Mapping[str, Any]]]
"""Full records of the given job ids (a job that ended meanwhile is left out)."""


def fresh(at: float | None, now: float, ttl: float) -> bool:
    """True when something read at ``at`` is younger than ``ttl`` seconds at ``now`` (never
    when it was not read, nor when the clock went back past it)."""
    return at is not None and 0 <= now - at < ttl


class CompactListing:
    """Details kept per job, and the previous listing's lines with the Jobs parsed from them."""

    def __init__(self) -> None:
        self.details: dict[int, tuple[tuple[str, int], dict[str, Any]]] = {}
        """Per job: (its :func:`~.parse.detail_signature`, its :data:`~.parse.DETAIL_KEYS`)."""
        self.details_at: float | None = None
        """When every active job's details were last read in full."""
        self.parsed: dict[str, tuple[str, Job | None]] = {}
        """The previous compact listing: job id -> (its line, the Job parsed from it)."""

    def usable(self, now: float) -> bool:
        """True when details were read in full less than :data:`DETAIL_REFRESH` ago."""
        return bool(self.details) and fresh(self.details_at, now, DETAIL_REFRESH)

    def reset(self, records: Iterable[Mapping[str, Any]], now: float) -> None:
        """Keep the details of ``records``, every active job's full record read at ``now``."""
        self.parsed = {}
        self.details = {}
        self._keep(records)
        self.details_at = now

    def forget(self, job_id: int) -> None:
        """Read this job's full record again before listing it compactly (its details changed)."""
        self.details.pop(job_id, None)
        self.parsed.pop(str(job_id), None)

    def _keep(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            job_id = r.get("job_id")
            if isinstance(job_id, int):
                self.details[job_id] = (detail_signature(r), {k: r.get(k) for k in DETAIL_KEYS})

    def jobs(self, output: str, fetch: Fetch | None = None) -> tuple[Job, ...] | None:
        """The Jobs of a compact listing, in its order, or None when they cannot all be had
        from it: a job's details are missing or no longer hold and ``fetch`` is None, or the
        records ``fetch`` gave still do not match the listing (the job changed in between).
        A line equal to the job's line in the previous listing gives the same Job again."""
        before = self.parsed
        rows: list[tuple[str, str, Job | dict[str, Any] | None]] = []
        wanted: list[int] = []
        for lineno, line in enumerate(output.splitlines(), 1):
            if not line.strip():
                continue
            key = line[:line.find("|")].strip()
            hit = before.get(key)
            if hit is not None and hit[0] == line:
                rows.append((key, line, hit[1]))
                continue
            rec = compact_job_record(line, lineno)
            kept = self.details.get(rec["job_id"])
            if kept is None or kept[0] != detail_signature(rec):
                if fetch is None:
                    return None
                wanted.append(rec["job_id"])
            rows.append((key, line, rec))
        if wanted:
            assert fetch is not None
            self._keep(fetch(wanted))
        parsed: dict[str, tuple[str, Job | None]] = {}
        out: list[Job] = []
        for key, line, item in rows:
            if isinstance(item, dict):
                kept = self.details.get(item["job_id"])
                if kept is None or kept[0] != detail_signature(item):
                    return None
                job = parse_job({**item, **kept[1]})
            else:
                job = item
            parsed[key] = (line, job)
            if job is not None:
                out.append(job)
        self.parsed = parsed
        return tuple(out)
