"""The SlurmClient that drives Slurm through its own commands.

Reads: jobs from ``squeue --json`` or, once every active job's details are known, from a compact
``squeue -O`` listing (:data:`~.parse.COMPACT_JOBS_FORMAT`, about a tenth of the work at 10,000
jobs) with new pending jobs' details read per job (see :meth:`CliSlurmClient.snapshot`), plus
the node/partition commands of :mod:`.version`'s plan, and ``sacctmgr`` for QOS when accounting
is on. Writes: ``scontrol`` and ``scancel``, batched (comma-separated job lists, chunked to keep
argv short; priorities go as one ``scontrol`` process reading one ``update`` line per distinct
value from its stdin; an array's own pending record is named by its tasks, ``A_[1-2]``, since
``A`` names the whole array: see :meth:`CliSlurmClient.set_priorities`).
Per-job messages Slurm prints (``"<message> for job <id>"``) are sorted into harmless races,
reported as ``skipped``, and real failures, raised as SlurmError.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.slurm_plugins.compact_listing import CompactListing, fresh
from hai_slurm.slurm_plugins.parse import (
    BRIEF_FORMAT,
    COMPACT_JOBS_FORMAT,
    EXCLUSIVE_FORMAT,
    JOB_FACTS_FORMAT,
    STEPS_FORMAT,
    SWITCHES_FORMAT,
    detail_formats,
    job_messages,
    parse_exclusive_column,
    parse_job_details,
    parse_job_facts,
    parse_jobs,
    parse_nodes,
    parse_partitions_json,
    parse_partitions_text,
    parse_pending_briefs,
    parse_qos,
    parse_reservations,
    parse_srun_steps,
    parse_switch_requests,
    parse_switches,
)
from hai_slurm.slurm_plugins.runner import (
    CommandRunner,
    Completed,
    SubprocessRunner,
    check,
)
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobIds,
    JobState,
    Node,
    Partition,
    PendingBrief,
    Qos,
    Reservation,
    SignalTarget,
    Skipped,
    SkipReason,
    SwitchInfo,
    job_id_tuple,
)
from hai_slurm.slurm_plugins.version import (
    QOS_COMMAND,
    QOS_FIELDS,
    PartitionSource,
    QueryPlan,
    parse_version,
    query_plan,
)

CHUNK = 200
"""Job ids per command: keeps argument lists far below the kernel's limit."""
WRITERS = 4
"""``scontrol`` processes that write priorities side by side (see ``_priorities_stdin``)."""
DETAIL_FETCH_MAX = 5000
"""Most jobs whose details one snapshot reads per job (:meth:`CliSlurmClient.job_details`);
with more, one ``squeue --json`` is read instead. Measured on 22.05.8 with 12,000 jobs (2
cores): 1 id 13 ms (squeue asks slurmctld for that job alone), 10-100 ids 170 ms (it loads
every job), 1,000 ids 0.27 s, 5,000 0.67 s, 10,000 2.1 s (it matches each job against each
id), where ``squeue --json`` took 1.6 s to print and 1.9 s with ``json.loads``, and a whole
JSON snapshot 3.5-4.9 s."""
QOS_REFRESH = 300.0
"""Seconds a client keeps the QOS it read with ``sacctmgr show qos`` (0.2-0.3 s per read on
the testbed, the largest fixed cost of a pyslurm snapshot). Nothing in a daemon cycle depends
on them; an admin's QOS change shows in snapshots within this long."""

log = logging.getLogger(__name__)

# The one table of harmless races: per-job messages Slurm prints that mean "nothing to do"
# rather than "failed". Each write names the rows that apply to it.
_GONE = ("invalid job id specified", SkipReason.GONE)
# 22.05 says "already completing or completed" or, when the job ended between snapshot and
# write, "Job has already finished".
_DONE = (("already completing or completed", "has already finished"), SkipReason.FINISHED)
_PENDING = ("job is pending execution", SkipReason.PENDING)
_HELD = ("job is in held state", SkipReason.HELD)
_NOT_NOW = ("job can not be altered now", SkipReason.PENDING)
_NOT_PENDING = (("no longer pending", "is not pending"), SkipReason.NOT_PENDING)
# scontrol requeue of a --no-requeue (or Requeue=0) job, and of an interactive one
_REFUSED = (("operation is presently disabled", "only batch jobs are accepted"),
            SkipReason.REFUSED)
_NO_TASK_LEFT = ("no task of the array is pending in its own record any more (started, split "
                 "off or ended since the snapshot)")
_SIGNAL_RE = re.compile(r"(SIG)?[A-Z0-9]+")
_RESV_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_RESV_INVALID = "requested reservation is invalid"
"""What 22.05 says for a reservation name it does not know."""
RESV_FLAGS = ("IGNORE_JOBS", "FLEX")
"""Flags of the guard's reservations. ``IGNORE_JOBS``: it is created over the victims, which
still run on its nodes. ``FLEX``: a job in it may run past its end (measured on 22.05 with
``ResvOverRun=0``: when a reservation ends, a job running in it *without* FLEX is killed,
TIMEOUT, "Reservation ended"; with FLEX it goes on and slurmctld clears its link)."""


_Harmless = tuple[str | tuple[str, ...], SkipReason]

_TASK_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
_THROTTLE = re.compile(r"%\d+$")
_NAMED_TASKS = re.compile(r"(\d+)_\[(.+)\]")
def task_expression(text: str) -> str | None:
    """The task expression of an array's own record (its ``array_tasks``: ``"1-2"``,
    ``"0-118:2"``, ``"0,3-5"``, ``"[0-9%2]"``) without brackets and throttle (``%2``), ready
    for ``JobId=A_[EXPR]``; None when it is not a whole expression (squeue and ``squeue
    --json`` cut it at 64 characters and end it in ``...``, 22.05.8)."""
    expr = _THROTTLE.sub("", text.strip().removeprefix("[").removesuffix("]"))
    return expr if expr and all(_TASK_RANGE.fullmatch(p) for p in expr.split(",")) else None


def task_ids(expr: str) -> frozenset[int] | None:
    """The task ids a task expression names (``"0-4:2"`` is 0, 2, 4); None when it is none."""
    whole = task_expression(expr)
    if whole is None:
        return None
    ids: set[int] = set()
    for part in whole.split(","):
        m = _TASK_RANGE.fullmatch(part)
        assert m is not None  # checked by task_expression
        low = int(m[1])
        ids.update(range(low, int(m[2] or low) + 1, int(m[3] or 1)))
    return frozenset(ids)


def _classify(message: str, harmless: Sequence[_Harmless]) -> SkipReason | None:
    low = message.lower()
    for texts, reason in harmless:
        if any(text in low for text in ((texts,) if isinstance(texts, str) else texts)):
            return reason
    return None


class CliSlurmClient:
    """SlurmClient over ``squeue``/``sinfo``/``scontrol``/``scancel``/``sacctmgr``.

    ``runner`` runs the commands (default: :class:`SubprocessRunner` with ``slurm_conf`` or
    ``$SLURM_CONF`` and ``timeout``). ``accounting`` forces QOS reading on or off; by default it
    follows ``AccountingStorageType`` from ``scontrol show config``. ``clock`` stamps snapshots.
    """

    def __init__(self, runner: CommandRunner | None = None, *, slurm_conf: str | None = None,
                 timeout: float = 30.0, accounting: bool | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._run: CommandRunner = runner or SubprocessRunner(slurm_conf, timeout=timeout)
        self._accounting = accounting
        self._clock = clock
        self._version: SlurmVersion | None = None
        self._plan: QueryPlan | None = None
        self.listing = CompactListing()
        """Details per job from the last ``squeue --json``; lets a snapshot use the compact
        listing (:mod:`~.compact_listing`)."""
        self.json_snapshots = 0
        """Snapshots that read ``squeue --json`` (the others read the compact listing)."""
        self._qos: tuple[float, tuple[Qos, ...]] | None = None
        """When the QOS were read, and what they were (see :data:`QOS_REFRESH`)."""
        self._aliases: dict[int, str] = {}
        """Array tasks whose own id equals the array's id: Slurm reads that id as the whole
        array, so they are addressed as ``ARRAY_TASK`` (filled from the latest snapshot)."""
        self._column_refused = False
        """Set once this release refused ``squeue -O Exclusive`` (see :meth:`with_exclusive`)."""
        self._arrays: dict[int, str] = {}
        """The task expressions (``array_tasks``) of the arrays' own pending records in the
        latest snapshot, by the array's id: a priority is written to ``ID_[TASKS]`` (see
        :meth:`set_priorities`)."""

    # -- reads ------------------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        """Detect the release once (``scontrol version``) and remember it."""
        if self._version is None:
            res = check(self._run(["scontrol", "version"]), "scontrol version")
            self._version = parse_version(res.stdout)
            self._plan = query_plan(self._version)
        return self._version

    def each_record(self) -> tuple[str, ...]:
        """The option that makes ``squeue`` list one line per job record here
        (:attr:`~.version.QueryPlan.each_record` of the detected release)."""
        return self.plan.each_record

    @property
    def plan(self) -> QueryPlan:
        """The read commands for the detected release."""
        if self._plan is None:
            self._plan = query_plan(self.version())
        return self._plan

    def accounting(self) -> bool:
        """True when the cluster has an accounting database (QOS are read from it)."""
        if self._accounting is None:
            out = check(self._run(["scontrol", "show", "config"]), "scontrol show config").stdout
            m = re.search(r"^AccountingStorageType\s*=\s*(\S+)", out, re.MULTILINE)
            self._accounting = m is not None and m.group(1) != "accounting_storage/none"
        return self._accounting

    def qos(self) -> tuple[Qos, ...]:
        """The accounting database's QOS (none without accounting), read again at most every
        :data:`QOS_REFRESH` seconds."""
        if not self.accounting():
            return ()
        now = self._clock()
        if self._qos is None or not fresh(self._qos[0], now, QOS_REFRESH):
            out = check(self._run(QOS_COMMAND), "sacctmgr show qos").stdout
            self._qos = (now, parse_qos(out, QOS_FIELDS))
        return self._qos[1]

    def _json(self, argv: Sequence[str]) -> Any:
        res = check(self._run(argv), " ".join(argv))
        try:
            return json.loads(res.stdout)
        except json.JSONDecodeError as exc:
            raise SlurmError(f"{' '.join(argv)} printed invalid JSON ({exc}); first bytes: "
                             f"{res.stdout[:120]!r}", command=list(argv)) from exc

    def snapshot(self) -> ClusterSnapshot:
        """Jobs, nodes, partitions and QOS; any failed query raises, nothing partial returns.

        Jobs come from the compact ``squeue -O`` listing when the details it lacks (name,
        admin_comment, per-node GPUs: :data:`~.parse.DETAIL_KEYS`) are known for every job in
        it, kept from an earlier read and still holding (same node list and restart count), or
        read for just the jobs that lack them (:meth:`job_details`: pending jobs, at most
        :data:`DETAIL_FETCH_MAX`); else, and at least every :data:`DETAIL_REFRESH` seconds,
        from ``squeue --json``, which then refreshes those details. The details are never read
        from text a job's owner can shape (``scontrol show job`` prints names and paths with
        their newlines, so a job could forge an ``AdminComment=`` line there).
        """
        plan = self.plan
        now = int(self._clock())
        jobs = self._jobs(plan, now)
        nodes, partitions, qos = self.cluster_parts()
        self._aliases = {j.job_id: f"{j.job_id}_{j.array_task_id}" for j in jobs
                         if j.array_job_id == j.job_id and j.array_task_id is not None}
        self._arrays = {j.job_id: j.array_tasks for j in jobs if j.array_job_id == j.job_id
                        and j.array_task_id is None and j.array_tasks}
        return ClusterSnapshot(time=now, version=plan.version, jobs=jobs, nodes=nodes,
                               partitions=partitions, qos=qos)

    def cluster_parts(self) -> tuple[tuple[Node, ...], tuple[Partition, ...], tuple[Qos, ...]]:
        """The snapshot's nodes, partitions and QOS (the pyslurm backend reads them here
        too, beside its job listing)."""
        plan = self.plan
        nodes = parse_nodes(self._json(plan.nodes), " ".join(plan.nodes))
        if plan.partition_source is PartitionSource.SCONTROL_TEXT:
            out = check(self._run(plan.partitions), " ".join(plan.partitions)).stdout
            partitions = parse_partitions_text(out)
        else:
            partitions = parse_partitions_json(self._json(plan.partitions))
        return nodes, partitions, self.qos()

    def read(self, argv: Sequence[str]) -> str:
        """The output of a read-only Slurm command (``squeue``, ``sinfo``...) run as this
        backend runs them; SlurmError when it fails."""
        return check(self._run(list(argv)), " ".join(argv[:2])).stdout

    def is_array_alias(self, job_id: int) -> bool:
        """Whether the last snapshot showed ``job_id`` as a running array task whose own id
        is its array's (written ``ARRAY_TASK`` then)."""
        return job_id in self._aliases

    def is_array_record(self, job_id: int) -> bool:
        """Whether the last snapshot showed ``job_id`` as an array's own pending record
        (written ``ID_[TASKS]`` then)."""
        return job_id in self._arrays

    def _jobs(self, plan: QueryPlan, now: int) -> tuple[Job, ...]:
        if self.listing.usable(now) and self.has_compact_listing():
            jobs = self.listing.jobs(self.compact_listing(), fetch=self.job_details)
            if jobs is not None:
                return jobs
        doc = self._json(plan.jobs)
        self.json_snapshots += 1
        records_json = doc.get("jobs") if isinstance(doc, dict) else None
        jobs = self.with_exclusive(self._with_switches(parse_jobs(doc)))
        if isinstance(records_json, list):
            self.listing.reset((r for r in records_json if isinstance(r, dict)), now)
        return jobs

    def compact_listing(self) -> str:
        """The compact ``squeue -O`` of every active job (:data:`~.parse.COMPACT_JOBS_FORMAT`;
        times as POSIX seconds)."""
        assert isinstance(self._run, SubprocessRunner)
        return check(self._run(["squeue", "--noheader", f"--Format={COMPACT_JOBS_FORMAT}",
                                *self.each_record()], env={"SLURM_TIME_FORMAT": "%s"}),
                     "squeue -O").stdout

    def job_details(self, job_ids: Sequence[int]) -> list[dict[str, Any]]:
        """The :data:`~.parse.DETAIL_KEYS` of pending jobs among ``job_ids``, read per job for
        the compact listing (:meth:`~.compact_listing.CompactListing.jobs`): one
        ``squeue --jobs=IDS -o`` (name, comment, constraint, excluded nodes) and one
        ``squeue --jobs=IDS -O`` (admin_comment, node list, restart count), side by side.

        Every field ends in a delimiter made afresh for each call (``"Q"`` and 32 random hex
        digits, :func:`~.parse.detail_formats`): a job's owner writes its name and comment
        before the delimiter exists, so cannot make text that reads as a field or a record
        boundary; output that does not parse raises SlurmError. The output is read with its
        ``\\r`` as printed (the runner's ``exact``), so the values equal ``squeue --json``'s.

        Left out, so the snapshot reads ``squeue --json`` (22.05's ``squeue --json`` ignores
        ``--jobs``): a job with nodes (its per-node GPU indices have no per-job source that a
        job's owner cannot forge: no squeue column has them, ``scontrol show job -d`` prints
        them among the owner's text), a job that ended meanwhile, every job when there are more
        than :data:`DETAIL_FETCH_MAX`. Both list one line per job record
        (:meth:`each_record`), so a task split off its array is read beside its array's record
        (squeue would merge the two)."""
        ids = sorted(set(job_ids))
        if not ids or len(ids) > DETAIL_FETCH_MAX:
            return []
        delimiter = "Q" + secrets.token_hex(16)
        text_format, fact_format = detail_formats(delimiter)
        base = ["squeue", "--noheader", "--jobs=" + ",".join(map(str, ids))]
        assert isinstance(self._run, SubprocessRunner)
        run = self._run
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda fmt: run([*base, fmt, *self.each_record()], exact=True),
                                 [f"--format={text_format}", f"--Format={fact_format}"]))
        for res in done:
            if res.returncode != 0:
                if _classify(res.stderr + res.stdout, (_GONE,)) is not None:
                    return []   # the one job asked for ended
                check(res, "squeue --jobs (job details)")
        wanted = set(ids)
        return [r for r in parse_job_details(done[0].stdout, done[1].stdout, delimiter)
                if r["job_id"] in wanted]

    def has_compact_listing(self) -> bool:
        """The compact listing needs the subprocess runner (it sets ``SLURM_TIME_FORMAT`` for
        the one command) and 22.05, whose listing was checked against its JSON field by field
        (ReqSwitch/Wait4Switch there match what :meth:`_with_switches` reads)."""
        return isinstance(self._run, SubprocessRunner) and self.plan.version.major == 22

    def _with_switches(self, jobs: tuple[Job, ...]) -> tuple[Job, ...]:
        """Fill ``switches`` where the JSON lacked it (22.05): one compact ``squeue -O`` of the
        pending jobs, only when a pending multi-node job needs it."""
        if not any(j.switches is None and j.state is JobState.PENDING and j.node_count > 1
                   for j in jobs):
            return tuple(j if j.switches is not None else replace(j, switches=0) for j in jobs)
        out = check(self._run(["squeue", "--noheader", "--states=PENDING",
                               f"--Format={SWITCHES_FORMAT}", *self.each_record()]),
                    "squeue -O ReqSwitch").stdout
        asked = parse_switch_requests(out)
        filled = []
        for j in jobs:
            if j.switches is None:
                count, wait = asked.get(j.job_id, (0, 0))
                j = replace(j, switches=count, switch_wait=wait)
            filled.append(j)
        return tuple(filled)

    def with_exclusive(self, jobs: tuple[Job, ...]) -> tuple[Job, ...]:
        """``jobs`` with ``exclusive`` read from ``squeue -O JobID,Exclusive`` where the JSON
        (or pyslurm's ``resource_sharing``) does not tell it (Slurm 25.05+,
        :data:`~.version.EXCLUSIVE_COLUMN_SINCE`), for the waiting jobs (only they are
        planned by it; a running one has its GPUs already), when a job waits. A task split
        off its array, which squeue folds into the array's line there, takes its array's
        value (the tasks share their options). A release that refuses the column keeps the
        value read, and is not asked again."""
        if (not self.plan.exclusive_column or self._column_refused
                or not any(j.state is JobState.PENDING for j in jobs)):
            return jobs
        res = self._run(["squeue", "--noheader", "--states=PENDING",
                         f"--Format={EXCLUSIVE_FORMAT}", *self.each_record()])
        if res.returncode != 0 and "format specification" in (res.stderr + res.stdout):
            log.warning("squeue -O Exclusive refused (%s): jobs' --exclusive is read from "
                        "squeue --json", (res.stderr or res.stdout).strip())
            self._column_refused = True
            return jobs
        told = parse_exclusive_column(check(res, "squeue -O Exclusive").stdout)
        out = []
        for j in jobs:
            value = told.get(j.job_id)
            if value is None and j.array_job_id is not None:
                value = told.get(j.array_job_id)
            out.append(j if value is None or value == j.exclusive else
                       replace(j, exclusive=value))
        return tuple(out)

    def _ref(self, job_id: int) -> str:
        return self._aliases.get(job_id, str(job_id))

    def job_facts(self, job_ids: JobIds) -> dict[int, JobFacts]:
        """One ``squeue --states=all -O ...`` per :data:`CHUNK` ids, finished jobs included.

        The job's own id is asked for (never the array alias): squeue lists an array id that
        names a whole array as all its tasks, and only the asked-for ids are kept.
        """
        ids = job_id_tuple(job_ids)
        out: dict[int, JobFacts] = {}
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            res = self._run(["squeue", "--noheader", "--states=all",
                             "--jobs=" + ",".join(map(str, chunk)),
                             f"--Format={JOB_FACTS_FORMAT}", *self.each_record()])
            if res.returncode != 0:
                if _classify(res.stderr + res.stdout, (_GONE,)) is not None:
                    continue        # every id in the chunk is gone
                check(res, "squeue --jobs")
            for line in res.stdout.splitlines():
                facts = parse_job_facts(line)
                if facts is not None and facts.job_id in chunk:
                    out[facts.job_id] = facts
        return out

    def switches(self) -> tuple[SwitchInfo, ...]:
        """``scontrol show topology``; ``()`` when Slurm has no topology plugin."""
        res = check(self._run(["scontrol", "show", "topology"]), "scontrol show topology")
        return parse_switches(res.stdout)

    def submit_script(self, script: Path, options: Sequence[str] = ()) -> int:
        """``sbatch --parsable OPTIONS SCRIPT``; the new job's id. For tools and tests: the
        daemon itself never submits jobs."""
        res = check(self._run(["sbatch", "--parsable", *options, str(script)]), "sbatch")
        first = res.stdout.strip().split(";")[0]
        if not first.isdigit():
            raise SlurmError(f"sbatch printed no job id: {res.stdout.strip()[:200]!r}",
                             command=list(res.argv))
        return int(first)

    # -- writes -----------------------------------------------------------------------------
    def _per_job(self, argv: Sequence[str], ids: tuple[int, ...], what: str,
                 harmless: Sequence[_Harmless], *, stdin: str | None = None,
                 timeout: float | None = None,
                 refs: Mapping[int, str] | None = None) -> ActionResult:
        """Run one write and sort the jobs Slurm names into races and failures. ``refs``: how
        the write named some of ``ids`` (an array's own record as ``A_[TASKS]``)."""
        if stdin is not None:
            assert isinstance(self._run, SubprocessRunner)
            res: Completed = self._run(argv, stdin=stdin, timeout=timeout)
        else:
            res = self._run(argv)
        messages, other = job_messages(res.stderr)
        by_ref = {(refs or {}).get(j) or self._ref(j): j for j in ids}
        skipped: list[Skipped] = []
        failures: list[str] = []
        for ref, msg in messages.items():
            if msg.lower() == "no error":
                continue   # scontrol lists the tasks it changed beside those it could not
            jid = by_ref.get(ref)
            if jid is None:
                jid = _record_named(ref, by_ref)
            reason = _classify(msg, harmless)
            if jid is None:     # another record, e.g. one task of an array we addressed whole
                if reason is None:
                    failures.append(f"job {ref}: {msg}")
                continue
            if reason is None:
                failures.append(f"job {jid}: {msg}")
            else:
                skipped.append(Skipped(jid, reason, msg))
        if res.returncode != 0 and not messages:
            check(res, what)
        if failures:
            raise SlurmError(f"{what} failed: " + "; ".join(failures + other),
                             command=list(res.argv), returncode=res.returncode,
                             stderr=res.stderr)
        gone = {s.job_id for s in skipped}
        return ActionResult(tuple(j for j in ids if j not in gone), tuple(skipped), 1)

    def _scontrol_ids(self, verb: Sequence[str], job_ids: JobIds, what: str,
                      harmless: Sequence[_Harmless], suffix: Sequence[str] = (),
                      refs: Mapping[int, str] | None = None) -> ActionResult:
        ids = job_id_tuple(job_ids)
        ref = (lambda j: refs.get(j) or self._ref(j)) if refs else self._ref
        result = ActionResult()
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            joined = ",".join(map(ref, chunk))
            argv = ["scontrol", *verb, f"JobId={joined}" if suffix else joined, *suffix]
            result = result.merged(self._per_job(argv, chunk, what, harmless, refs=refs))
        return result

    def set_priority(self, job_id: int, value: int) -> ActionResult:
        """``scontrol update JobId=ID Priority=VALUE``."""
        return self.set_priorities({job_id: value})

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        """One ``scontrol update`` per distinct value (scontrol takes id lists per value).

        Each write reaches the one record it is for, as pyslurm's ``Job.modify`` (the job's
        number, no id string) does. To scontrol, ``JobId=A`` is the whole array: the array's
        own pending record, its running tasks and the tasks split off it (own job id, still
        pending: after ``scontrol release A_0`` or an update of ``A_0``) all get the value
        (22.05.8), so a split task ended with its array's value whenever the array's line ran
        after its own. So the array's own record of the last snapshot is written as
        ``A_[TASKS]``, its task expression (``array_tasks``, without a ``%`` throttle). Checked
        on 22.05.8: Slurm updates that one record in place when the expression names every
        task in it (``1-2``, ``0-9%2``, ``1,3-4,6-7``), also when it names more (tasks that
        left the record since the snapshot: a finished one is reported as an invalid id and
        skipped, a started one gets the value too, which is harmless); an array whose record
        has one task left is listed as that task (``A_T``, an alias, see :meth:`_ref`). An
        expression naming only some of the record's tasks would split them off into records
        of their own, so for an expression squeue cut (past 64 characters, ending in ``...``)
        the record's tasks are read one by one (:meth:`_array_refs`), one ``squeue`` for all
        such arrays.

        Not chosen: writing the arrays in an earlier ``scontrol`` than the other jobs. It puts
        the right value on split tasks written in the same call, but an array's write still
        reaches its split tasks that are not in the call (e.g. the daemon's one-value-at-a-time
        retry, or the preemption guard's single write) and its running tasks, which pyslurm's
        does not, and it costs a second process per call.

        An id the last snapshot did not list as an array's own record is written as ``ID``
        (the whole array if it is one). Without arrays nothing of this costs anything."""
        by_value: dict[int, list[int]] = defaultdict(list)
        for jid, value in priorities.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 2:
                raise ValueError(f"priority for job {jid} must be an integer in "
                                 f"[0, 4294967293], got {value!r}")
            by_value[value].append(jid)
        ids, found, result = self._to_records(priorities, fresh=False)
        refs = found or {}
        if result.skipped:
            kept = set(ids)
            by_value = {v: [j for j in js if j in kept] for v, js in by_value.items()}
            by_value = {v: js for v, js in by_value.items() if js}
        if isinstance(self._run, SubprocessRunner) and len(by_value) > 1:
            return result.merged(self._priorities_stdin(by_value, refs))
        for value in sorted(by_value):
            result = result.merged(self._scontrol_ids(
                ["update"], by_value[value], f"scontrol update Priority={value}",
                (_GONE, _DONE, _HELD), suffix=[f"Priority={value}"], refs=refs))
        return result

    def _array_refs(self, job_ids: Iterable[int], *, fresh: bool = False
                    ) -> tuple[dict[int, str], set[int]]:
        """``A_[TASKS]`` for each of ``job_ids`` that the last snapshot listed as an array's
        own record (see :meth:`set_priorities`), and the records read again that have no
        pending task left. A cut task expression (every one with ``fresh``) is read again: the
        pending tasks still under the array's own id (``squeue --array``, a line per task;
        record lines would not do: since 23.02 squeue folds split-off tasks into the array's
        line)."""
        refs: dict[int, str] = {}
        empty: set[int] = set()
        cut: list[int] = []
        for jid in job_ids:
            tasks = self._arrays.get(jid)
            if tasks is not None:
                expr = None if fresh else task_expression(tasks)
                if expr is None:
                    cut.append(jid)
                else:
                    refs[jid] = f"{jid}_[{expr}]"
        for i in range(0, len(cut), CHUNK):
            chunk = cut[i:i + CHUNK]
            res = self._run(["squeue", "--noheader", "--array", "--states=PENDING",
                             "--jobs=" + ",".join(map(str, chunk)),
                             "--Format=JobID:|,ArrayJobID:|,ArrayTaskID:|"])
            if res.returncode != 0 and _classify(res.stderr + res.stdout, (_GONE,)) is not None:
                continue   # the arrays ended: written as ID, Slurm says so
            own = _record_tasks(check(res, "squeue --array -O ArrayTaskID").stdout)
            for jid in chunk:
                found = sorted(own.get(jid, ()))
                if len(found) == 1:            # one task left: the record is that task now
                    refs[jid] = f"{jid}_{found[0]}"
                elif found:
                    refs[jid] = f"{jid}_[{ranges(found)}]"
                else:   # all started, split off or ended: "A" would be the whole array
                    empty.add(jid)
        return refs, empty

    def _priorities_stdin(self, by_value: Mapping[int, list[int]],
                          refs: Mapping[int, str]) -> ActionResult:
        """Several values in few ``scontrol`` processes (up to :data:`WRITERS`, side by side),
        one ``update JobId=IDS Priority=N`` line per value (and :data:`CHUNK` of ids) on stdin.
        scontrol goes on after a failed line and names each job it could not change
        (``"<message> for job <id>"``), so the per-job
        sorting into races and failures is the same as for one command per value."""
        assert isinstance(self._run, SubprocessRunner)
        lines: list[str] = []
        chunks: list[list[int]] = []
        ids: list[int] = []
        for value in sorted(by_value):
            group = by_value[value]
            for i in range(0, len(group), CHUNK):
                chunk = group[i:i + CHUNK]
                joined = ",".join(refs.get(j) or self._ref(j) for j in chunk)
                lines.append(f"update JobId={joined} Priority={value}")
                chunks.append(chunk)
                ids += chunk
        # Spread over WRITERS processes: slurmctld takes each update in well under a ms, but
        # an update that arrives while the scheduler or backfill holds the job lock waits for
        # it (p99 0.5 s at 10,000 pending jobs); waiting side by side, the queued updates go
        # through together when the lock is released.
        parts = min(WRITERS, max(1, len(lines) // 4))
        batches: list[tuple[list[str], list[int]]] = [([], []) for _ in range(parts)]
        for k, (line, chunk) in enumerate(zip(lines, chunks, strict=True)):
            batches[k % parts][0].append(line)
            batches[k % parts][1].extend(chunk)
        # slurmctld took 0.3 ms per update at the median but 30 ms on average at 12,000 jobs
        # on a loaded 2-core machine (lock waits); a timeout here would cost a rewrite of all.
        timeout = max(self._run.timeout, 0.25 * len(ids) / parts)

        def write(batch: tuple[list[str], list[int]]) -> ActionResult:
            return self._per_job(["scontrol"], tuple(batch[1]), "scontrol update Priority",
                                 (_GONE, _DONE, _HELD), stdin="\n".join(batch[0]) + "\n",
                                 timeout=timeout, refs=refs)

        result = ActionResult()
        with ThreadPoolExecutor(parts) as pool:
            for part in pool.map(write, batches):
                result = result.merged(part)
        return replace(result, commands=len(lines))  # scontrol commands, in `parts` processes

    def signal(self, job_ids: JobIds, signal: str = "USR2", *,
               target: SignalTarget = SignalTarget.FULL) -> ActionResult:
        """``scancel --signal=SIG [--full|--batch] IDS``; a job not running is skipped."""
        if not _SIGNAL_RE.fullmatch(signal):
            raise ValueError(f"signal must be a name like USR2 or a number, got {signal!r}")
        ids = job_id_tuple(job_ids)
        if target is SignalTarget.WORKLOAD:
            stepped = self._with_srun_steps(ids)
            steps = [j for j in ids if j in stepped]
            shells = [j for j in ids if j not in stepped]
            result = ActionResult()
            if steps:
                result = result.merged(self.signal(steps, signal, target=SignalTarget.STEPS))
            if shells:
                result = result.merged(self.signal(shells, signal, target=SignalTarget.BATCH))
            return result
        flags = {SignalTarget.FULL: ["--full"], SignalTarget.BATCH: ["--batch"],
                 SignalTarget.STEPS: []}[target]
        result = ActionResult()
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            argv = ["scancel", f"--signal={signal}", *flags, *map(self._ref, chunk)]
            result = result.merged(self._per_job(argv, chunk, f"scancel --signal={signal}",
                                                 (_GONE, _DONE, _NOT_NOW)))
        return result

    def _with_srun_steps(self, ids: tuple[int, ...]) -> frozenset[int]:
        """The jobs among ``ids`` that run an ``srun`` step now (``squeue --steps``)."""
        found: set[int] = set()
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            res = self._run(["squeue", "--noheader", "--steps",
                             "--jobs=" + ",".join(map(str, chunk)), f"--Format={STEPS_FORMAT}"])
            if res.returncode != 0:
                if _classify(res.stderr + res.stdout, (_GONE,)) is not None:
                    continue
                check(res, "squeue --steps")
            found |= parse_srun_steps(res.stdout) & set(chunk)
        return frozenset(found)

    def _running_only(self, ids: tuple[int, ...]) -> tuple[tuple[int, ...], list[Skipped]]:
        # `scontrol requeue` also re-runs jobs that already COMPLETED; never do that by accident.
        return running_only(ids, self.job_facts(ids))

    def _requeue(self, verb: str, job_ids: JobIds) -> ActionResult:
        keep, skipped = self._running_only(job_id_tuple(job_ids))
        result = ActionResult(skipped=tuple(skipped))
        if keep:
            result = result.merged(self._scontrol_ids([verb], keep, f"scontrol {verb}",
                                                      (_GONE, _DONE, _PENDING)))
        return result

    def requeue(self, job_ids: JobIds) -> ActionResult:
        """``scontrol requeue IDS`` for the jobs that are running now (others are skipped)."""
        return self._requeue("requeue", job_ids)

    def requeue_hold(self, job_ids: JobIds) -> ActionResult:
        """``scontrol requeuehold IDS`` for the jobs that are running now."""
        return self._requeue("requeuehold", job_ids)

    def _to_records(self, job_ids: JobIds, *, fresh: bool
                    ) -> tuple[tuple[int, ...], dict[int, str] | None, ActionResult]:
        """``(ids to write, refs, skipped)`` for a write to ``job_ids``. ``refs`` names each
        that the last snapshot listed as an array's own pending record: ``A_[TASKS]`` (see
        :meth:`set_priorities`; ``JobId=A`` is the whole array, split-off and running tasks
        too); None without such records. With ``fresh`` the records' tasks are read again
        (:meth:`_array_refs`), for a write that a task gone from the record since the snapshot
        must not get (a hold, a release, a reservation, scancel). A record read again with no
        pending task left is not written (``NOT_PENDING``): as ``A`` the write would reach
        the whole array."""
        ids = job_id_tuple(job_ids)
        if not self._arrays:
            return ids, None, ActionResult()
        refs, empty = self._array_refs(ids, fresh=fresh)
        if not empty:
            return ids, refs or None, ActionResult()
        skipped = tuple(Skipped(j, SkipReason.NOT_PENDING, _NO_TASK_LEFT) for j in ids
                        if j in empty)
        return tuple(j for j in ids if j not in empty), refs or None, ActionResult(
            skipped=skipped)

    def hold(self, job_ids: JobIds) -> ActionResult:
        """``scontrol hold IDS`` (admin hold); an array's own record as ``A_[TASKS]``, its
        tasks read afresh, so the tasks split off it (also since the snapshot) keep their
        state."""
        ids, refs, result = self._to_records(job_ids, fresh=True)
        return result.merged(self._scontrol_ids(["hold"], ids, "scontrol hold", (_GONE, _DONE),
                                                refs=refs))

    def release(self, job_ids: JobIds) -> ActionResult:
        """``scontrol release IDS``; an array's own record as ``A_[TASKS]``, its tasks read
        afresh (a task split off it that its user held stays held, also one split off since
        the snapshot)."""
        ids, refs, result = self._to_records(job_ids, fresh=True)
        return result.merged(self._scontrol_ids(["release"], ids, "scontrol release",
                                                (_GONE, _DONE), refs=refs))

    def set_admin_comment(self, job_id: int, text: str) -> ActionResult:
        """``scontrol update JobId=ID AdminComment=TEXT`` (one argv element, spaces allowed);
        an array's own record as ``A_[TASKS]``."""
        if "\n" in text or "\0" in text:
            raise ValueError("admin_comment must be a single line without NUL bytes")
        self.listing.forget(job_id)  # the next snapshot reads it again (squeue --json)
        ids, refs, result = self._to_records(job_id, fresh=False)
        return result.merged(self._scontrol_ids(["update"], ids, "scontrol update AdminComment",
                                                (_GONE, _DONE), suffix=[f"AdminComment={text}"],
                                                refs=refs))

    def cancel(self, job_ids: JobIds) -> ActionResult:
        """``scancel IDS``; an array's own record as ``A_[TASKS]`` (its split-off and running
        tasks are other jobs), its tasks read afresh: one started since the snapshot is
        another job now, and is not cancelled with the record."""
        ids, found, result = self._to_records(job_ids, fresh=True)
        refs = found or {}
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i:i + CHUNK]
            named = [refs.get(j) or self._ref(j) for j in chunk]
            result = result.merged(self._per_job(["scancel", *named], chunk, "scancel",
                                                 (_GONE, _DONE), refs=refs))
        return result

    def requeue_any(self, job_ids: JobIds, *, hold: bool) -> tuple[int, ...]:
        """``scontrol requeue[hold]`` for running and finished jobs; pending ones are counted as
        requeued (and held with ``hold``); forgotten ones, and those Slurm refuses to requeue
        (``--no-requeue``, ``Requeue=0``, not a batch job), are left out."""
        ids = job_id_tuple(job_ids)
        facts = self.job_facts(ids)
        to_requeue = [j for j in ids if j in facts and not facts[j].pending]
        to_hold = [j for j in ids if j in facts and facts[j].pending and hold
                   and not facts[j].held]
        done = {j for j in ids if j in facts and facts[j].pending and j not in to_hold}
        verb = "requeuehold" if hold else "requeue"
        if to_requeue:
            res = self._scontrol_ids([verb], to_requeue, f"scontrol {verb}",
                                     (_GONE, _PENDING, _REFUSED))
            done.update(res.done)
            # pending now: Slurm requeued it since the query (RequeueExit): as pending above
            meanwhile = [s.job_id for s in res.skipped if s.reason is SkipReason.PENDING]
            if hold:
                to_hold.extend(meanwhile)
            else:
                done.update(meanwhile)
        if to_hold:
            done.update(self._scontrol_ids(["hold"], to_hold, "scontrol hold",
                                           (_GONE, _DONE)).done)
        return tuple(j for j in ids if j in done)

    def split_array_task(self, job_id: int) -> int:
        """The job that stands for the first pending task of ``job_id`` when that is an
        array's own pending record naming several tasks: the task is made a job of its own
        and its new id returned. Any other job's id (one task left, no array, ended) is
        returned as it is, with nothing written.

        Slurm pins such a record only as a whole, and not at all once one of the array's tasks
        has started or been split off (22.05.8: ``JobId=A ReqNodeList=...`` "Job resizing not
        supported for job arrays", ``JobId=A_[1-3] ...`` "Invalid job ID"), so the guard could
        not stand for it. The record's tasks are the pending ones still listed under the
        array's own id (``squeue --array``, one line per task: since 23.02 squeue's record
        lines fold split-off tasks into the array's). Slurm splits a task off its record on
        any update of that task alone: ``scontrol update JobId=A_T Priority=P`` with P the
        record's priority now (the guard raises it next; the daemon writes pending jobs'
        priorities each cycle anyway); the new id is read back with ``squeue --jobs=A_T``."""
        listed = check(self._run(
            ["squeue", "--noheader", "--array", "--states=PENDING", f"--jobs={job_id}",
             "--Format=JobID:|,ArrayJobID:|,ArrayTaskID:|,PriorityLong:|"]),
            "squeue --array -O ArrayTaskID")
        tasks = _record_tasks(listed.stdout).get(job_id, {})
        if len(tasks) < 2:
            return job_id
        first = min(tasks)
        priority = tasks[first]
        if not priority.isdigit():
            raise SlurmError(f"squeue printed no priority for task {job_id}_{first}: "
                             f"{priority!r}", command=list(listed.argv))
        ref = f"{job_id}_{first}"
        check(self._run(["scontrol", "update", f"JobId={ref}", f"Priority={priority}"]),
              f"scontrol update JobId={ref} (split the task off its array)")
        res = check(self._run(["squeue", "--noheader", f"--jobs={ref}", "--Format=JobID:|"]),
                    f"squeue --jobs={ref}")
        new_id = res.stdout.strip().split("|", 1)[0]
        if not new_id.isdigit():
            raise SlurmError(f"squeue --jobs={ref} named no job after the split: "
                             f"{res.stdout.strip()!r}", command=list(res.argv))
        if job_id in self._arrays:   # later writes this cycle name the tasks left in it
            self._arrays[job_id] = ranges(sorted(set(tasks) - {first}))
        return int(new_id)

    def set_req_nodes(self, job_id: int, nodes: str) -> ActionResult:
        """``scontrol update JobId=ID ReqNodeList=NODES`` ("" clears it), for a pending job.

        A job that is not pending is skipped (``NOT_PENDING``): Slurm 22.05 accepts the update
        on a running job only as a no-op and otherwise says "Invalid node name specified", the
        same words as for a bad name; so that error counts as a race only when the job turns
        out to have started in between.
        """
        if any(c.isspace() for c in nodes) or "\0" in nodes:
            raise ValueError(f"a node list has no spaces, got {nodes!r}")
        before = self.job_facts(job_id).get(job_id)
        if before is None:
            return ActionResult(skipped=(Skipped(job_id, SkipReason.GONE,
                                                 "job not known to slurmctld"),))
        if not before.pending:
            return ActionResult(skipped=(Skipped(job_id, SkipReason.NOT_PENDING,
                                                 f"job is {before.state}"),))
        try:
            return self._scontrol_ids(["update"], job_id, "scontrol update ReqNodeList",
                                      (_GONE, _DONE, _NOT_PENDING),
                                      suffix=[f"ReqNodeList={nodes}"])
        except SlurmError as err:
            after = self.job_facts(job_id).get(job_id)
            if after is not None and after.pending:
                raise
            return ActionResult(skipped=(Skipped(job_id, SkipReason.NOT_PENDING, str(err)),))

    # -- the urgent path (issue 16) ---------------------------------------------------------
    def pending_briefs(self) -> tuple[PendingBrief, ...]:
        """One ``squeue --noheader --states=PENDING -O`` with :data:`~.parse.BRIEF_FORMAT`
        (eight columns of the pending jobs only; no JSON, no node query: slurmctld sees one
        ``REQUEST_JOB_INFO`` and the ``REQUEST_PARTITION_INFO`` squeue itself makes, checked
        with ``sdiag``), with ``SLURM_TIME_FORMAT=%s`` (through ``env`` for a runner that takes
        no environment)."""
        argv = ["squeue", "--noheader", "--states=PENDING", f"--Format={BRIEF_FORMAT}",
                *self.each_record()]
        if isinstance(self._run, SubprocessRunner):
            res = self._run(argv, env={"SLURM_TIME_FORMAT": "%s"})
        else:
            res = self._run(["env", "SLURM_TIME_FORMAT=%s", *argv])
        return parse_pending_briefs(check(res, "squeue --states=PENDING -O").stdout)

    # -- reservations -----------------------------------------------------------------------
    @staticmethod
    def _resv_name(name: str) -> str:
        if not _RESV_NAME_RE.fullmatch(name):
            raise ValueError(f"a reservation name is letters, digits, '_', '.', '-', got "
                             f"{name!r}")
        return name

    @staticmethod
    def _resv_lists(nodes: Iterable[str], users: Iterable[str], minutes: int
                    ) -> tuple[str, str]:
        """The node and user lists of a reservation as scontrol takes them, checked."""
        node_list, user_list = ",".join(nodes), ",".join(users)
        for what, value in (("node list", node_list), ("user list", user_list)):
            if not value or any(c.isspace() or c in "=\0" for c in value):
                raise ValueError(f"a reservation's {what} is a non-empty list without spaces, "
                                 f"got {value!r}")
        if minutes < 1:
            raise ValueError(f"a reservation lasts at least 1 minute, got {minutes!r}")
        return node_list, user_list

    def create_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """``scontrol create reservation ReservationName=NAME Nodes=... Users=...
        StartTime=now Duration=MINUTES Flags=IGNORE_JOBS,FLEX`` (:data:`RESV_FLAGS`)."""
        node_list, user_list = self._resv_lists(nodes, users, minutes)
        argv = ["scontrol", "create", "reservation", f"ReservationName={self._resv_name(name)}",
                f"Nodes={node_list}", f"Users={user_list}", "StartTime=now",
                f"Duration={minutes}", f"Flags={','.join(RESV_FLAGS)}"]
        check(self._run(argv), "scontrol create reservation")

    def update_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """``scontrol update ReservationName=NAME Nodes=... Users=... Duration=MINUTES``
        (22.05 accepts nodes whose jobs run, under the reservation's IGNORE_JOBS, and a
        linked job running on a node taken out goes on: FLEX), then read back: 24.11 and 26.05
        answer "Reservation updated." and exit 0 for an unknown node, keeping the old node
        list (and taking the rest), so a reservation that does not now cover exactly these
        nodes and users raises SlurmError."""
        node_list, user_list = self._resv_lists(nodes, users, minutes)
        argv = ["scontrol", "update", f"ReservationName={self._resv_name(name)}",
                f"Nodes={node_list}", f"Users={user_list}", f"Duration={minutes}"]
        check(self._run(argv), "scontrol update reservation")
        listed = [r for r in self.reservations(name) if r.name == name]
        got = (set(listed[0].nodes), set(listed[0].users)) if listed else None
        if got != (set(node_list.split(",")), set(user_list.split(","))):
            raise SlurmError(
                f"scontrol update reservation {name}: Slurm answered success but the "
                "reservation " + ("is gone" if got is None else
                                  f"covers nodes {','.join(sorted(got[0]))} and users "
                                  f"{','.join(sorted(got[1]))}, not {node_list} and "
                                  f"{user_list}"), command=argv)

    def end_reservation(self, name: str) -> bool:
        """``scontrol delete ReservationName=NAME``. Slurm refuses the delete while a job runs
        in it or waits for it ("Requested reservation is in use", 22.05), and refuses
        ``EndTime=now`` while a job waits for it ("Invalid time specified"): so on a refusal
        the pending jobs linked to it (``squeue --states=PENDING --reservation=NAME``) are
        unlinked and the delete is tried again; if a job still runs in it,
        ``scontrol update ReservationName=NAME EndTime=now`` (its FLEX jobs go on running;
        slurmctld drops it at its next reservation check, within about 20 s on 22.05), or
        ``EndTime=now+2`` when that is refused (within the second it started). False
        when Slurm does not know the name. Refusals are not told apart by their words (other
        releases may word them otherwise); when the end fails too, a name Slurm no longer lists
        counts as gone, and one whose end has passed as ended."""
        ref = f"ReservationName={self._resv_name(name)}"
        res = self._run(["scontrol", "delete", ref])
        if res.returncode == 0:
            return True
        if _RESV_INVALID in (res.stderr + res.stdout).lower():
            return False
        waiting = check(self._run(["squeue", "--noheader", "--states=PENDING",
                                   f"--reservation={name}", "--Format=JobID:|",
                                   *self.each_record()]),
                        "squeue --reservation").stdout
        ids = [int(x) for x in waiting.replace("|", " ").split() if x.isdigit()]
        if ids:
            self._scontrol_ids(["update"], ids, "scontrol update Reservation=",
                               (_GONE, _DONE, _NOT_PENDING), suffix=["Reservation="])
            if self._run(["scontrol", "delete", ref]).returncode == 0:
                return True
        ended = self._run(["scontrol", "update", ref, "EndTime=now"])
        if ended.returncode == 0:
            return True
        # 22.05 also refuses EndTime=now within the second the reservation started (the end
        # must come after the start: "Invalid time specified"); a plan whose victim saves at
        # once gets there. Two seconds later is as good an end for the guard.
        if self._run(["scontrol", "update", ref, "EndTime=now+2"]).returncode == 0:
            return True
        listed = [r for r in self.reservations(name) if r.name == name]
        if not listed:
            return False
        end = listed[0].end_time
        if end is not None and end <= self._clock() + 1:
            return True   # ended already, slurmctld drops it at its next check (22.05 refuses
            #               a second EndTime=now: "Invalid time specified")
        check(ended, "scontrol update reservation EndTime=now")
        return True

    def reservations(self, prefix: str = "") -> tuple[Reservation, ...]:
        """``scontrol show reservation --oneliner`` (times as POSIX seconds)."""
        argv = ["scontrol", "show", "reservation", "--oneliner"]
        if isinstance(self._run, SubprocessRunner):
            res = self._run(argv, env={"SLURM_TIME_FORMAT": "%s"})
        else:
            res = self._run(argv)
        out = check(res, "scontrol show reservation").stdout
        return tuple(r for r in parse_reservations(out) if r.name.startswith(prefix))

    def set_job_reservation(self, job_id: int, name: str) -> ActionResult:
        """``scontrol update JobId=ID Reservation=NAME`` ("" unlinks); a job that ended is
        skipped; an array's own record as ``A_[TASKS]``, its tasks read afresh (a task split
        off since the snapshot is another job, not linked with it)."""
        if name:
            self._resv_name(name)
        ids, refs, result = self._to_records(job_id, fresh=True)
        return result.merged(self._scontrol_ids(
            ["update"], ids, "scontrol update Reservation", (_GONE, _DONE, _NOT_PENDING),
            suffix=[f"Reservation={name}"], refs=refs))


def _record_tasks(listing: str) -> dict[int, dict[int, str]]:
    """From ``squeue --array -O JobID:|,ArrayJobID:|,ArrayTaskID:|[,MORE:|]`` lines: per array,
    its tasks still in its own record (listed under the array's own id), each with the rest of
    its line (the next column, or "")."""
    out: dict[int, dict[int, str]] = {}
    for line in listing.splitlines():
        cols = line.strip().split("|")
        if len(cols) >= 3 and cols[0].isdigit() and cols[0] == cols[1] and cols[2].isdigit():
            out.setdefault(int(cols[0]), {})[int(cols[2])] = cols[3] if len(cols) > 3 else ""
    return out


def ranges(tasks: Sequence[int]) -> str:
    """Sorted task ids as a task expression: ``[0, 1, 2, 5]`` is ``"0-2,5"``."""
    runs: list[list[int]] = []
    for t in tasks:
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _record_named(ref: str, by_ref: Mapping[str, int]) -> int | None:
    """The job a per-job message names by a reference the write did not use: ``"5"`` for a
    job written as the task alias ``5_3``; ``"A_2-4"`` for an array's own record written as
    ``A_[...]`` naming the same tasks (scontrol reports the record's tasks together; tasks
    that left the record since the snapshot are reported apart: ``A_1: Invalid job id``), or
    written as ``A`` (the whole array; a range holds the record's tasks). None for another
    record."""
    head, _, tasks = ref.partition("_")
    if not head.isdigit():
        return None
    jid = int(head)
    if not tasks:
        return jid if jid in by_ref.values() else None
    if by_ref.get(head) == jid:
        return jid if not tasks.isdigit() else None
    written = next((m[2] for r in by_ref if (m := _NAMED_TASKS.fullmatch(r)) and m[1] == head),
                   None)
    if written is not None and task_ids(tasks) == task_ids(written):
        return jid
    return None


def running_only(ids: tuple[int, ...], facts: Mapping[int, JobFacts]
                 ) -> tuple[tuple[int, ...], list[Skipped]]:
    """The running jobs among ``ids``, and why each other one is skipped (a requeue of a job
    that is not running would re-run a COMPLETED job or act on a pending one). Every backend's
    requeue uses it."""
    keep: list[int] = []
    skipped: list[Skipped] = []
    for jid in ids:
        f = facts.get(jid)
        if f is None:
            skipped.append(Skipped(jid, SkipReason.GONE, "job not known to slurmctld"))
        elif f.running:
            keep.append(jid)
        elif f.pending:
            skipped.append(Skipped(jid, SkipReason.PENDING, "job is pending"))
        else:
            skipped.append(Skipped(jid, SkipReason.FINISHED, f"job is {f.state}"))
    return tuple(keep), skipped
