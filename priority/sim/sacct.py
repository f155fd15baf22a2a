"""A site's own history as a trace: ``sacct --json`` (Slurm 22.05 to 26.05) or ``sacct -P``.

:func:`read_sacct` turns a ``sacct`` export into the simulator's :class:`~.trace.Trace`, so
``hai-slurm simulate --sacct FILE`` replays the site's own jobs under each policy. The export
is either of (the format is told by the first character: ``{`` is JSON):

* ``sacct --json``: the documents of Slurm 22.05 (openapi ``dbv0.0.38``), 24.11 (data_parser
  ``v0.0.42``) and 26.05 (``v0.0.45``). Their shapes differ (numbers plain or wrapped as
  ``{"set", "infinite", "number"}``, the state a string or a list); the adapter's tolerant readers
  (:mod:`hai_slurm.slurm_plugins.parse`) read both;
* ``sacct --parsable2`` (``-P``, or ``--parsable``: a trailing ``|``) with its header line and
  the columns :data:`REQUIRED_COLUMNS` (any order, extra columns ignored) plus ``AllocTRES``
  and/or ``ReqTRES``; optional: :data:`OPTIONAL_COLUMNS`. The command the docs give::

      TZ=UTC sacct --allusers --allocations --parsable2 --starttime=2026-11-01 --endtime=now \\
          --format=JobIDRaw,JobName,User,Account,QOS,Submit,Start,End,State,NNodes,ReqTRES,AllocTRES,AdminComment

  (``AdminComment`` last: sacct does not escape the ``|`` an admin comment may hold, so only
  the last column can take it back; times are ISO 8601 as sacct prints them, or POSIX seconds
  with ``SLURM_TIME_FORMAT=%s``; ``TZ=UTC`` keeps daylight-saving jumps out of them).

Each job becomes one :class:`~.trace.TraceJob`:

* id ``job_id`` / ``JobIDRaw`` (array tasks have their own); submit, duration = end - start of
  its last run (a requeue reruns the batch script, so the last run did the whole job), seconds
  from the first submission in the file; the first submission of a requeued job (JSON lists
  every run, ``sacct --duplicates`` too) is its submit time;
* GPUs: ``gres/gpu`` of the allocated TRES (what the job held), else of the requested TRES;
  nodes: the allocated node count (0, "as few as hold it", when it exceeds the GPUs);
* team, class as the daemon reads them: the ``hai:v1:`` record that job_submit.lua wrote into
  the admin comment (:func:`~hai_slurm.slurm_plugins.directives.parse_admin_comment`; for
  ``AUTO`` the class it was given at submission), else the Slurm account and the class whose QOS
  the job ran in (:meth:`~hai_slurm.slurm_plugins.entitlements.Entitlements.class_of_qos`, from
  the cluster description's ``[classes.X] qos``), else the default class (counted in the notes:
  map such a QOS with ``classes.X.qos``). A job without account is team
  :data:`~hai_slurm.slurm_plugins.job_record.FALLBACK_TEAM`, as in the daemon;
* saves on request (``TraceJob.saves``) as the daemon sees it: when its record names a
  checkpoint directory (``#HAI --checkpoint-dir``); a job without one, or without a record,
  loses the work since its last periodic save when asked to give way (counted in the notes);
* left out and counted: CPU-only jobs, jobs that never started, jobs still running (no end), and
  job step rows (``-P`` without ``--allocations``).

A bad file stops the read with a :class:`~hai_slurm.errors.ConfigError` that names the file,
the line (``-P``) or the job (JSON), the field and the value; ``skip_bad=True`` skips and counts
bad jobs instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.description import decode_utf8
from hai_slurm.errors import ConfigError, HaiSlurmError
from hai_slurm.priority.sim.trace import Trace, TraceJob
from hai_slurm.slurm_plugins.directives import AUTO, ascii_lower, parse_admin_comment
from hai_slurm.slurm_plugins.entitlements import Entitlements
from hai_slurm.slurm_plugins.hostlist import tres_gpu_count
from hai_slurm.slurm_plugins.job_record import FALLBACK_TEAM
from hai_slurm.slurm_plugins.parse import number, text, time_or_none

REQUIRED_COLUMNS = ("JobIDRaw", "Account", "QOS", "Submit", "Start", "End", "NNodes")
"""Columns a ``sacct -P`` export must have (and ``AllocTRES`` or ``ReqTRES``)."""
OPTIONAL_COLUMNS = ("JobID", "JobName", "User", "State", "AdminComment")
"""Columns taken when present (JobID tells step rows; the rest name, user and the record).
``State`` is accepted (the docs' command lists it) but not read: every job that ran is
replayed, whatever it ended with."""
TRES_COLUMNS = ("AllocTRES", "ReqTRES")
SACCT_FORMAT = ("JobIDRaw,JobName,User,Account,QOS,Submit,Start,End,State,NNodes,ReqTRES,"
                "AllocTRES,AdminComment")
"""The ``--format`` the docs give (every required and optional column, AdminComment last)."""
LAST_TIME = 253402300799
"""9999-12-31T23:59:59Z: a later "time" is no time a job ran at."""
_NO_TIME = ("", "Unknown", "None", "N/A", "(null)")
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


class _BadJobError(Exception):
    def __init__(self, field: str, value: object, why: str) -> None:
        super().__init__(why)
        self.field, self.value, self.why = field, value, why


@dataclass(frozen=True, slots=True)
class _Run:
    """One record of a job as sacct lists it (a requeued job has one per run)."""

    job_id: int
    where: str           # "line 7" or "jobs[3]", for messages
    name: str
    user: str
    account: str
    qos: str
    admin_comment: str
    submit: int | None
    start: int | None
    end: int | None
    nodes: int
    gpus: int
    step: bool = False

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.end < self.start:
            raise _BadJobError("End", self.end, f"ends {self.start - self.end} s before it "
                               "starts (sacct prints local times: export with TZ=UTC, or a run "
                               "across a clock change reads backwards)")


def _class_of_qos(table: Entitlements | None, qos: str) -> PriorityClass | None:
    if table is None:  # no cluster description: each class's QOS has its default name
        wanted = ascii_lower(qos)
        return next((c for c in PriorityClass if c.qos == wanted), None)
    rule = table.class_of_qos(qos)
    return PriorityClass(rule.name) if rule is not None else None


def _posix(value: str, field: str) -> int | None:
    """A sacct -P time: ISO 8601 (``2026-12-02T00:51:26``, read as UTC), POSIX seconds, or
    none (``Unknown``, ``None``, empty)."""
    value = value.strip()
    if value in _NO_TIME:
        return None
    if value.isascii() and value.isdigit():
        return _checked_time(int(value) or None, field, value)
    if _ISO.fullmatch(value):
        try:
            return int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp())
        except ValueError as err:
            raise _BadJobError(field, value, f"not a valid date and time ({err})") from None
    raise _BadJobError(field, value, "expected a time such as 2026-12-02T00:51:26 (sacct's "
                       "default), POSIX seconds (SLURM_TIME_FORMAT=%s), or Unknown")


def _count(value: str, field: str) -> int:
    value = value.strip()
    if not (value.isascii() and value.isdigit()):
        raise _BadJobError(field, value, "expected a whole number")
    return int(value)


def _job_id(value: object, field: str) -> int:
    raw = value.strip() if isinstance(value, str) else value
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise _BadJobError(field, value, "expected a job id (a whole number from 1; for -P "
                           "use the JobIDRaw column, which array tasks have their own of)")
    return raw


def _split_parsable(line: str, width: int, tail_free: bool) -> list[str] | None:
    """The fields of one ``-P`` line; extra ``|`` go back into the last column when it may hold
    them (``tail_free``); None when the count is wrong."""
    cells = line.split("|")
    if len(cells) == width:
        return cells
    if len(cells) > width and tail_free:
        return [*cells[:width - 1], "|".join(cells[width - 1:])]
    return None


def _parsable_runs(text_: str, source: str) -> Iterator[_Run | tuple[str, _BadJobError]]:
    lines = text_.split("\n")
    header = lines[0].rstrip("\r")
    trailing = header.endswith("|")  # --parsable (not --parsable2) ends every line with |
    names = [h.strip() for h in (header[:-1] if trailing else header).split("|")]
    if not header.strip():
        raise ConfigError("line 1: empty; a sacct -P export starts with its header line "
                          f"(sacct --parsable2 --format={SACCT_FORMAT})", source=source)
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if not any(c in names for c in TRES_COLUMNS):
        missing.append("AllocTRES or ReqTRES")
    if missing:
        raise ConfigError(
            f"line 1: header lacks {', '.join(missing)}; it has {', '.join(names)}. Export with "
            f"sacct --allocations --parsable2 --format={SACCT_FORMAT} (or give sacct --json)",
            source=source, key="header")
    dup = next((n for n in names if n and names.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(f"line 1: column {dup} appears twice", source=source, key="header")
    tail_free = names[-1] == "AdminComment"
    for number_, raw in enumerate(lines[1:], start=2):
        line = raw.rstrip("\r")
        if trailing and line.endswith("|"):
            line = line[:-1]
        if not line.strip():
            continue
        where = f"line {number_}"
        cells = _split_parsable(line, len(names), tail_free)
        if cells is None:
            why = (f"has {len(line.split('|'))} fields, the header {len(names)}"
                   + ("" if tail_free else " (a '|' inside a value, e.g. in AdminComment? put "
                      "AdminComment last in --format)"))
            yield where, _BadJobError("", line, why)
            continue
        row = dict(zip(names, cells, strict=True))
        try:
            yield _parsable_run(row, where)
        except _BadJobError as err:
            yield where, err


def _parsable_run(row: Mapping[str, str], where: str) -> _Run:
    job = row.get("JobID", row["JobIDRaw"]).strip()
    raw_id = row["JobIDRaw"].strip()
    if "." in raw_id or "." in job:  # 12.batch, 12.0, 12.extern: a step of job 12
        return _Run(0, where, "", "", "", "", "", None, None, None, 0, 0, step=True)
    tres = next((row[c] for c in TRES_COLUMNS if row.get(c, "").strip()), "")
    return _Run(
        job_id=_job_id(raw_id, "JobIDRaw"), where=where, name=row.get("JobName", ""),
        user=row.get("User", "").strip(), account=row["Account"].strip(),
        qos=row["QOS"].strip(), admin_comment=row.get("AdminComment", ""),
        submit=_posix(row["Submit"], "Submit"), start=_posix(row["Start"], "Start"),
        end=_posix(row["End"], "End"), nodes=_count(row["NNodes"], "NNodes"),
        gpus=_tres_gpus(tres, "AllocTRES" if row.get("AllocTRES", "").strip() else "ReqTRES"))


def _tres_gpus(spec: str, field: str) -> int:
    for item in spec.split(","):
        key, eq, value = item.strip().partition("=")
        gpu_key = key == "gres/gpu" or key.startswith("gres/gpu:")   # not gres/gpumem
        if gpu_key and eq and not (value.isascii() and value.isdigit()):
            raise _BadJobError(field, spec, f"{key}={value}: expected a whole number of GPUs")
    return tres_gpu_count(spec)


def _get(d: Mapping[str, Any], path: str) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; a missing or mistyped step raises naming the path."""
    value: Any = d
    for part in path.split("."):
        if not isinstance(value, Mapping):
            raise _BadJobError(path, value, "expected an object here")
        if part not in value:
            raise _BadJobError(path, None, "missing (is this a sacct --json export?)")
        value = value[part]
    return value


def _json_number(d: Mapping[str, Any], path: str, *, time: bool = False) -> int | None:
    value = _get(d, path)
    try:
        n = time_or_none(value, path) if time else number(value, path)
    except HaiSlurmError:
        raise _BadJobError(path, value, "expected a number (plain or {set, infinite, number})"
                           ) from None
    return _checked_time(n, path, value) if time else n


def _checked_time(n: int | None, field: str, value: object) -> int | None:
    """A POSIX time before the year 10000 (what a date can show), or None."""
    if n is not None and not 0 < n <= LAST_TIME:
        raise _BadJobError(field, value, "not a POSIX time (seconds since 1970, before the "
                           "year 10000)")
    return n


def _json_text(d: Mapping[str, Any], path: str, *, required: bool = True) -> str:
    try:
        value = _get(d, path)
    except _BadJobError:
        if required:
            raise
        return ""
    if value is not None and not isinstance(value, str | list):
        raise _BadJobError(path, value, "expected a string")
    return text(value)


def _json_tres(d: Mapping[str, Any], path: str) -> int | None:
    """GPUs in a TRES list (``[{"type": "gres", "name": "gpu", "count": 2}, ...]``); None when
    the list is absent or empty."""
    try:
        items = _get(d, path)
    except _BadJobError:
        return None
    if items is None:
        return None
    if not isinstance(items, list):
        raise _BadJobError(path, items, "expected a list of TRES")
    if not items:
        return None
    total: int | None = None
    typed = 0
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _BadJobError(f"{path}[{i}]", item, "expected a TRES object")
        if item.get("type") != "gres" or not isinstance(item.get("name"), str):
            continue
        name = item["name"]
        if name != "gpu" and not name.startswith("gpu:"):
            continue
        count = _json_number(item, "count")
        if count is None or count < 0:
            continue
        if name == "gpu":
            total = count
        else:
            typed += count
    return total if total is not None else typed


def _json_run(job: Any, where: str) -> _Run:
    if not isinstance(job, Mapping):
        raise _BadJobError("", job, "expected a job object")
    job_id = _job_id(_get(job, "job_id"), "job_id")
    where = f"{where} (job {job_id})"
    comment = job.get("comment")
    admin = ""
    if isinstance(comment, Mapping):
        admin = text(comment.get("administrator"))
    elif isinstance(comment, str):
        admin = comment
    account, qos = _json_text(job, "account"), _json_text(job, "qos")
    submit = _json_number(job, "time.submission", time=True)
    start = _json_number(job, "time.start", time=True)
    end = _json_number(job, "time.end", time=True)
    nodes = _json_number(job, "allocation_nodes") or 0
    gpus = _json_tres(job, "tres.allocated")
    if not gpus:
        gpus = _json_tres(job, "tres.requested") or 0
    return _Run(
        job_id=job_id, where=where, name=_json_text(job, "name", required=False),
        user=_json_text(job, "user", required=False), account=account, qos=qos,
        admin_comment=admin, submit=submit, start=start, end=end, nodes=max(0, nodes),
        gpus=max(0, gpus))


def _json_runs(text_: str, source: str) -> tuple[Iterator[_Run | tuple[str, _BadJobError]], str]:
    try:
        doc = json.loads(text_)
    except json.JSONDecodeError as err:
        raise ConfigError(f"line {err.lineno}, column {err.colno}: not valid JSON ({err.msg}); "
                          "give the output of sacct --json unedited, or a sacct --parsable2 "
                          "export", source=source) from None
    except RecursionError:
        raise ConfigError("JSON nested too deeply to be a sacct --json export",
                          source=source) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ConfigError("not a sacct --json export: the document has no 'jobs' list",
                          source=source, key="jobs")
    meta = doc.get("meta")
    version = ""
    if isinstance(meta, Mapping):
        slurm = meta.get("Slurm") or meta.get("slurm")
        if isinstance(slurm, Mapping) and isinstance(slurm.get("release"), str):
            version = f"Slurm {slurm['release']}"

    def runs() -> Iterator[_Run | tuple[str, _BadJobError]]:
        for i, job in enumerate(doc["jobs"]):
            try:
                yield _json_run(job, f"jobs[{i}]")
            except _BadJobError as err:
                where = f"jobs[{i}]"
                if isinstance(job, Mapping) and isinstance(job.get("job_id"), int):
                    where += f" (job {job['job_id']})"
                yield where, err

    return runs(), version


def read_sacct(path: str | Path, *, table: Entitlements | None = None,
               default_class: PriorityClass = PriorityClass.NORMAL,
               skip_bad: bool = False) -> Trace:
    """The jobs of a ``sacct --json`` or ``sacct -P`` export (see the module docstring).

    ``table`` maps QOS to classes (``entitlements_of`` the site's cluster description; None:
    every class's default QOS, the class name in lower case); ``default_class`` is the class of
    a job whose QOS is no class's and that has no ``#HAI`` record (the daemon's default class).
    """
    p = Path(path)
    source = str(p)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the sacct export: {err.strerror}", source=source
                          ) from None
    content = decode_utf8(raw, source, kind="sacct exports")
    if not content.strip():
        raise ConfigError("the sacct export is empty", source=source)
    if content.lstrip().startswith("{"):
        runs, version = _json_runs(content, source)
        kind = f"sacct --json ({version})" if version else "sacct --json"
    else:
        runs, kind = _parsable_runs(content, source), "sacct -P"
    skipped: dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    merged: dict[int, list[_Run]] = {}
    for run in runs:
        if isinstance(run, tuple):
            where, bad = run
            if skip_bad:
                skip("malformed")
                continue
            column = f", field {bad.field!r}" if bad.field else ""
            error = ConfigError(f"{where}{column}: {bad.why} (got {bad.value!r}); fix the job "
                                "or pass --skip-bad to skip malformed jobs", source=source,
                                value=bad.value)
            error.key = bad.field or None  # named in the message already
            raise error
        if run.step:
            skip("job step rows (export with --allocations)")
            continue
        merged.setdefault(run.job_id, []).append(run)
    return _trace(merged, source, kind, skipped, table, default_class)


def _trace(merged: Mapping[int, list[_Run]], source: str, kind: str, skipped: dict[str, int],
           table: Entitlements | None, default_class: PriorityClass) -> Trace:
    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    picked: list[tuple[_Run, int]] = []
    requeued = 0
    for runs in merged.values():
        ran = [r for r in runs if r.start is not None]
        if not ran:
            skip("never started")
            continue
        last = max(ran, key=lambda r: r.start or 0)
        if last.end is None:
            skip("still running (no end time)")
            continue
        if last.gpus == 0:
            skip("cpu-only (no gres/gpu)")
            continue
        submits = [r.submit for r in runs if r.submit is not None]
        submit = min(submits) if submits else last.start or 0
        if len(runs) > 1:
            requeued += 1
        picked.append((last, min(submit, last.start or submit)))
    first = min((s for _, s in picked), default=0)
    jobs: list[TraceJob] = []
    unknown_qos: dict[str, int] = {}
    recorded = clamped = savers = kept = 0
    for run, submit in picked:
        info = parse_admin_comment(run.admin_comment or None)
        team = run.account or FALLBACK_TEAM
        if info is not None:
            recorded += 1
            cls = PriorityClass(info.job_class if info.priority == AUTO else info.priority)
            team = info.team or team
        else:
            found = _class_of_qos(table, run.qos)
            if found is None:
                unknown_qos[run.qos or "(none)"] = unknown_qos.get(run.qos or "(none)", 0) + 1
            cls = found or default_class
        nodes = run.nodes
        if nodes > run.gpus:
            nodes, clamped = 0, clamped + 1
        start, end = run.start or 0, run.end or 0
        # as the daemon sees it: a job saves on request when its record names a checkpoint
        # directory (#HAI --checkpoint-dir), as ``save_estimates`` reads it (an empty one: no)
        saves = info is not None and bool(info.checkpoint_dir)
        savers += saves
        keep = info is not None and info.preemptible is False   # #HAI --preemptible=no
        kept += keep
        jobs.append(TraceJob(run.job_id, submit - first, max(1, end - start), run.gpus, team,
                             cls, nodes, run.user or team, run.name, saves, not keep))
    notes = [f"{kind}: {len(jobs)} GPU jobs replayed; trace starts at "
             + datetime.fromtimestamp(first, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
    if recorded:
        notes.append(f"{recorded} jobs take team and class from their #HAI record")
    notes.append(f"{savers} of {len(jobs)} jobs save on request (#HAI --checkpoint-dir); the "
                 "others, asked to give way, lose the work since their last periodic save")
    if jobs and not recorded:
        notes.append("no job has a #HAI record (job_submit.lua writes it into the admin "
                     "comment), so none counts as saving on request: a sacct -P export needs "
                     f"the AdminComment column (--format={SACCT_FORMAT}); --saves all shows "
                     "preemption's cost if every job saved")
    if unknown_qos:
        listed = ", ".join(f"{q}: {n}" for q, n in sorted(unknown_qos.items()))
        notes.append(f"jobs whose QOS is no class's ({listed}) replayed at the default class "
                     f"{default_class.value}; map a QOS with [classes.X] qos in the cluster "
                     "description")
    if kept:
        notes.append(f"{kept} jobs said #HAI --preemptible=no: no policy takes them")
    if requeued:
        notes.append(f"{requeued} requeued jobs replayed once: first submission, last run")
    if clamped:
        notes.append(f"{clamped} jobs on more nodes than GPUs replayed on as few nodes as hold "
                     "them")
    ordered = tuple(sorted(jobs, key=lambda j: (j.submit, j.job_id)))
    return Trace(ordered, source, dict(skipped), tuple(notes))
