"""The one reader of what a job's ``#HAI`` record says, with the fallbacks applied.

job_submit.lua writes the record into ``admin_comment`` (only admins can write it; the
user-writable ``comment`` is never read). Everything the daemon needs from it (class, team,
preemptible, grace, checkpoint directory) comes through :func:`job_record`, so every part applies
the same fallbacks:

* no valid record (a job submitted before the plugin, or by a path that skipped it): the
  configured default class, not preemptible unless Slurm may requeue it, no grace, no
  checkpoint directory;
* team: the record's ``--team``, else the Slurm account, else :data:`FALLBACK_TEAM` (a job never
  becomes a team of its own by lacking an account, which would give it a fresh quota);
* preemptible: the record says yes *and* Slurm may requeue the job (``--no-requeue`` wins).
"""

from __future__ import annotations

from dataclasses import dataclass

from hai_slurm.classes import ClassOrigin
from hai_slurm.slurm_plugins.directives import HaiJobInfo, parse_admin_comment
from hai_slurm.slurm_plugins.types import Job

FALLBACK_TEAM = "default"
"""The team of a job with neither a ``#HAI --team`` record nor a Slurm account."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job's ``#HAI`` facts, fallbacks applied (see the module docstring)."""

    priority: str | None
    """The class name (or ``AUTO``) the job asked for; None without a record (the default)."""
    source: ClassOrigin
    team: str
    preemptible: bool
    grace: int | None
    """Seconds the job asked for to save (``#HAI --grace``); None without a record."""
    checkpoint_dir: str | None
    info: HaiJobInfo | None
    """The parsed record itself, or None."""


def job_record(job: Job) -> JobRecord:
    """What ``job``'s ``admin_comment`` record says, with the fallbacks applied."""
    return record_of(job.admin_comment, job.account, job.requeue)


def record_of(admin_comment: str, account: str, requeue: bool) -> JobRecord:
    """:func:`job_record` from the three fields of a job it reads."""
    info = parse_admin_comment(admin_comment)
    if info is None:
        return JobRecord(priority=None, source=ClassOrigin.DEFAULT,
                         team=account or FALLBACK_TEAM, preemptible=requeue,
                         grace=None, checkpoint_dir=None, info=None)
    return JobRecord(priority=info.priority, source=info.source,
                     team=info.team or account or FALLBACK_TEAM,
                     preemptible=info.preemptible and requeue, grace=info.grace,
                     checkpoint_dir=info.checkpoint_dir, info=info)
