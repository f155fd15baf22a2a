"""The daemon's state, read and written through one small class: pure SQL, no Slurm, no clock.

Every public method is one transaction. A daemon cycle writes everything it changed with one
:meth:`Repository.record_cycle`; each plan step is its own transaction, committed together with
the counters and credits it changes, so a daemon killed at any point leaves a consistent database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields

from sqlalchemy import Engine, String, delete, func, insert, select, type_coerce, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import StateError
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.priority.store import convert, plans
from hai_slurm.priority.store.engine import READ_ONLY, db_error
from hai_slurm.priority.store.models import (
    AuditRow,
    CreditRow,
    FairnessEventRow,
    PlanRow,
    PlanVictimRow,
    ProtectionRow,
    TrackedJobRow,
    ValueRow,
)
from hai_slurm.priority.store.records import (
    AuditEntry,
    CreditEntry,
    CycleWrite,
    JsonValue,
    Plan,
    PlanJob,
    Protection,
    TrackedJob,
)
from hai_slurm.priority.store.states import PlanState, VictimState

_CHUNK = 500  # ids per IN (...) list; far below SQLite's and MariaDB's limits


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start:start + _CHUNK]


class Repository:
    """All persistent daemon state, behind plain methods taking and returning records."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._readers = sessionmaker(
            engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False
        )
        self._jobs: dict[int, TrackedJob] | None = None
        """The tracked jobs as of :attr:`_jobs_mark` (see :meth:`tracked_jobs`)."""
        self._jobs_mark: tuple[object, ...] | None = None
        self._pending_jobs = []

    @property
    def engine(self) -> Engine:
        """The engine this repository writes through (for the store's other tables)."""
        return self._engine

    @contextmanager
    def _tx(self, doing: str, *, read_only: bool = False) -> Iterator[Session]:
        """One transaction; driver failures (server gone, disk full) become :class:`StateError`."""
        sessions = self._readers if read_only else self._sessions
        try:
            with sessions.begin() as session:
                yield session
        except DBAPIError as err:
            raise db_error(self._engine.url, doing, err) from err

    # ----------------------------------------------------------------------------- cycle write
    def record_cycle(self, write: CycleWrite) -> None:
        """Write everything one daemon cycle changed, in a single transaction."""
        with self._jobs_kept(), self._tx("recording the cycle") as s:
            self._apply(s, write)

    def _apply(self, s: Session, write: CycleWrite) -> None:
        self._save_jobs(s, write.jobs)
        ids = list(dict.fromkeys(write.forget_jobs))
        for chunk in _chunks(ids):
            s.execute(delete(TrackedJobRow).where(TrackedJobRow.job_id.in_(chunk)))
        if (write.jobs or ids) and self._jobs is not None:
            self._pending_jobs.append((write.jobs, ids, self._mark(s)))
        s.add_all(convert.event_row(e) for e in write.events)
        s.add_all(convert.credit_row(c) for c in write.credits)
        for protection in write.protections:
            self._protect(s, protection)
        s.add_all(convert.audit_row(a) for a in write.audit)
        for key, value in write.values:
            self._put_value(s, key, value, write.at)

    @staticmethod
    def _save_jobs(s: Session, jobs: Sequence[TrackedJob]) -> None:
        by_id = {j.job_id: j for j in jobs}  # the last record of a job wins
        if not by_id:
            return
        ids = list(by_id)
        existing: set[int] = set()
        for chunk in _chunks(ids):
            existing.update(
                s.scalars(select(TrackedJobRow.job_id).where(TrackedJobRow.job_id.in_(chunk)))
            )
        rows = [convert.job_values(j) for j in by_id.values()]
        new = [r for r in rows if r["job_id"] not in existing]
        old = [r for r in rows if r["job_id"] in existing]
        if new:
            s.execute(insert(TrackedJobRow), new)
        if old:
            s.execute(update(TrackedJobRow), old)  # bulk UPDATE by primary key

    @staticmethod
    def _protect(s: Session, protection: Protection) -> None:
        row = s.get(ProtectionRow, protection.team)
        if row is None:
            s.add(ProtectionRow(team=protection.team, until=protection.until,
                                granted_at=protection.granted_at, reason=protection.reason))
        elif protection.until > row.until:  # never shorten a running protection
            row.until = protection.until
            row.granted_at = protection.granted_at
            row.reason = protection.reason

    @staticmethod
    def _put_value(s: Session, key: str, value: JsonValue, write_at: float) -> None:
        text = json.dumps(value, sort_keys=True, allow_nan=False)
        row = s.get(ValueRow, key)
        if row is None:
            s.add(ValueRow(key=key, value=text, updated_at=write_at))
        else:
            row.value = text
            row.updated_at = write_at

    # ------------------------------------------------------------------------------------ jobs
    def save_jobs(self, jobs: Iterable[TrackedJob]) -> None:
        """Insert or update tracked jobs in one transaction."""
        with self._jobs_kept(), self._tx("saving tracked jobs") as s:
            todo = list(jobs)
            self._save_jobs(s, todo)
            if todo and self._jobs is not None:
                self._pending_jobs.append((tuple(todo), [], self._mark(s)))

    # The tracked jobs kept in memory between cycles. The daemon reads every tracked job each
    # cycle (12,000 rows: a tenth of a second on SQLite) while a cycle changes a few. This
    # repository's own writes update the copy once committed; any other writer (another daemon
    # that led meanwhile, an operator's tool) is caught by the table's mark, one aggregate
    # query: the row count and sums of the columns every rewrite of a record changes
    # (``updated_at`` is the writing cycle's time). A mark that differs reloads the table.
    _pending_jobs: list[tuple[Sequence[TrackedJob], Sequence[int], tuple[object, ...]]]

    @staticmethod
    def _mark(s: Session) -> tuple[object, ...]:
        t = TrackedJobRow
        row = s.execute(select(
            func.count(), func.max(t.updated_at), func.sum(t.updated_at),
            func.sum(t.run_seconds), func.sum(t.wait_seconds), func.sum(t.priority),
            func.sum(t.preemptions), func.sum(t.checkpoint_at), func.sum(t.checkpoint_step),
            func.sum(t.first_seen_at), func.sum(t.original_submit_at))).one()
        return tuple(row)

    @contextmanager
    def _jobs_kept(self) -> Iterator[None]:
        """Around a write of tracked jobs: apply what it wrote to the kept copy once committed;
        drop the copy if the write failed (what was committed is then unknown)."""
        self._pending_jobs = []
        try:
            yield
        except BaseException:
            self._jobs = self._jobs_mark = None
            raise
        finally:
            pending, self._pending_jobs = self._pending_jobs, []
        for jobs, forget, mark in pending:
            if self._jobs is None:
                break
            self._jobs.update((j.job_id, j) for j in jobs)
            for job_id in forget:
                self._jobs.pop(job_id, None)
            self._jobs_mark = mark

    def forget_kept_jobs(self) -> None:
        """Drop the in-memory copy of the tracked jobs: the next :meth:`tracked_jobs` reads
        them all (the daemon calls this when it takes the lead)."""
        self._jobs = self._jobs_mark = None

    def tracked_jobs(self) -> dict[int, TrackedJob]:
        """What :meth:`load_jobs` returns, from the copy kept since the last call when the
        table's mark shows no change by another writer (one aggregate query), else loaded."""
        with self._tx("loading tracked jobs", read_only=True) as s:
            mark = self._mark(s)
            if self._jobs is not None and mark == self._jobs_mark:
                return dict(self._jobs)
            jobs = self._load_jobs(s)
        self._jobs, self._jobs_mark = jobs, mark
        return dict(jobs)

    def load_jobs(self) -> dict[int, TrackedJob]:
        """Every tracked job by id (what a restarted daemon starts from), read from the
        database (:meth:`tracked_jobs` reads them once and then only the changes)."""
        with self._tx("loading tracked jobs", read_only=True) as s:
            return self._load_jobs(s)

    @staticmethod
    def _load_jobs(s: Session) -> dict[int, TrackedJob]:
        """Plain rows, not ORM objects: the daemon loads every tracked job each cycle, and at
        12,000 jobs building mapped objects took most of a second."""
        names = [f.name for f in fields(TrackedJob)]
        # The enum column read as text and mapped here: SQLAlchemy's per-row enum processing
        # was a third of the load.
        columns = [type_coerce(TrackedJobRow.class_origin, String) if n == "class_origin"
                   else getattr(TrackedJobRow, n) for n in names]
        at = names.index("class_origin")
        origins = {o.value: o for o in ClassOrigin}
        out: dict[int, TrackedJob] = {}
        for row in s.execute(select(*columns)):
            values = list(row)
            values[at] = origins[values[at]]
            out[values[0]] = TrackedJob(*values)
        return out

    def get_job(self, job_id: int) -> TrackedJob | None:
        """One tracked job, or None if the daemon does not track it."""
        with self._tx("loading a tracked job", read_only=True) as s:
            row = s.get(TrackedJobRow, job_id)
            return None if row is None else convert.job_from_row(row)

    # -------------------------------------------------------------------------------- fairness
    def add_events(self, events: Iterable[FairnessEvent]) -> None:
        """Append fairness events."""
        with self._tx("adding fairness events") as s:
            s.add_all(convert.event_row(e) for e in events)

    def count_events(
        self, team: str, kind: EventKind, since: float, *, user: str | None = None
    ) -> int:
        """How many ``kind`` events ``team`` (and ``user``, if given) had at or after ``since``."""
        query = select(func.count()).select_from(FairnessEventRow).where(
            FairnessEventRow.team == team, FairnessEventRow.kind == kind,
            FairnessEventRow.at >= since,
        )
        if user is not None:
            query = query.where(FairnessEventRow.user == user)
        with self._tx("counting fairness events", read_only=True) as s:
            return int(s.scalar(query) or 0)

    def event_counts(self, since: float) -> dict[tuple[str, EventKind], int]:
        """(team, kind) -> number of events at or after ``since``, for all teams in one query."""
        query = (
            select(FairnessEventRow.team, FairnessEventRow.kind, func.count())
            .where(FairnessEventRow.at >= since)
            .group_by(FairnessEventRow.team, FairnessEventRow.kind)
        )
        with self._tx("counting fairness events", read_only=True) as s:
            return {(team, kind): int(n) for team, kind, n in s.execute(query)}

    def user_event_counts(self, since: float) -> dict[tuple[str, EventKind], int]:
        """(user, kind) -> number of events at or after ``since``."""
        query = (
            select(FairnessEventRow.user, FairnessEventRow.kind, func.count())
            .where(FairnessEventRow.at >= since)
            .group_by(FairnessEventRow.user, FairnessEventRow.kind)
        )
        with self._tx("counting fairness events", read_only=True) as s:
            return {(user, kind): int(n) for user, kind, n in s.execute(query)}

    def events_since(self, since: float) -> list[FairnessEvent]:
        """Every fairness event at or after ``since``, oldest first (the policy's window)."""
        query = (
            select(FairnessEventRow).where(FairnessEventRow.at >= since)
            .order_by(FairnessEventRow.at, FairnessEventRow.id)
        )
        with self._tx("loading fairness events", read_only=True) as s:
            return [convert.event_from_row(r) for r in s.scalars(query)]

    def prune_events(self, before: float) -> int:
        """Delete fairness events older than ``before`` (outside every window); returns how many."""
        with self._tx("pruning fairness events") as s:
            result = s.execute(delete(FairnessEventRow).where(FairnessEventRow.at < before))
            return int(getattr(result, "rowcount", 0))

    # ----------------------------------------------------------------- protections and credits
    def protect(self, protection: Protection) -> None:
        """Protect a team until ``protection.until`` (an existing longer protection is kept)."""
        with self._tx("protecting a team") as s:
            self._protect(s, protection)

    def active_protections(self, now: float) -> dict[str, Protection]:
        """Teams protected at ``now``."""
        with self._tx("loading protections", read_only=True) as s:
            rows = s.scalars(select(ProtectionRow).where(ProtectionRow.until > now))
            return {r.team: convert.protection_from_row(r) for r in rows}

    def add_credit(self, entry: CreditEntry) -> None:
        """Append a line to the team credit ledger."""
        with self._tx("adding a credit") as s:
            s.add(convert.credit_row(entry))

    def credit_balance(self, team: str) -> float:
        """GPU-hours ``team`` is owed (sum of its ledger; 0 for a team never preempted)."""
        query = select(func.sum(CreditRow.gpu_hours)).where(CreditRow.team == team)
        with self._tx("reading credits", read_only=True) as s:
            return float(s.scalar(query) or 0.0)

    def credit_balances(self) -> dict[str, float]:
        """Team -> GPU-hours owed, for every team with ledger lines."""
        query = select(CreditRow.team, func.sum(CreditRow.gpu_hours)).group_by(CreditRow.team)
        with self._tx("reading credits", read_only=True) as s:
            return {team: float(total) for team, total in s.execute(query)}

    # ------------------------------------------------------------------------ audit and values
    def audit(self, entry: AuditEntry) -> None:
        """Append one audit entry."""
        with self._tx("writing the audit log") as s:
            s.add(convert.audit_row(entry))

    def put_value(self, key: str, value: JsonValue, *, at: float) -> None:
        """Store a small named JSON value (e.g. the policy's round-robin cursor)."""
        with self._tx("storing a value") as s:
            self._put_value(s, key, value, at)

    def audit_entries(
        self, *, limit: int = 100, since: float | None = None, plan_id: int | None = None
    ) -> list[AuditEntry]:
        """Audit entries, newest first."""
        query = select(AuditRow).order_by(AuditRow.at.desc(), AuditRow.id.desc()).limit(limit)
        if since is not None:
            query = query.where(AuditRow.at >= since)
        if plan_id is not None:
            query = query.where(AuditRow.plan_id == plan_id)
        with self._tx("reading the audit log", read_only=True) as s:
            return [convert.audit_from_row(r) for r in s.scalars(query)]

    def get_value(self, key: str) -> JsonValue:
        """A named value stored by :meth:`record_cycle` (None if never stored)."""
        with self._tx("reading a stored value", read_only=True) as s:
            row = s.get(ValueRow, key)
            return None if row is None else json.loads(row.value)

    # ----------------------------------------------------------------------------------- plans
    def create_plan(
        self,
        *,
        at: float,
        beneficiaries: Sequence[PlanJob],
        victims: Sequence[PlanJob],
        reason: str,
        on_miss: DeadlineAction = DeadlineAction.ABORT,
        deadline_at: float | None = None,
    ) -> Plan:
        """Record a new plan (state ``planned``); a job may be in one unfinished plan only."""
        with self._tx("creating a preemption plan") as s:
            row = plans.create_plan(
                s, at=at, beneficiaries=beneficiaries, victims=victims, reason=reason,
                on_miss=on_miss, deadline_at=deadline_at,
            )
            return convert.plan_from_row(row)

    def transition_plan(
        self,
        plan_id: int,
        target: PlanState,
        *,
        at: float,
        note: str = "",
        also: CycleWrite | None = None,
    ) -> Plan:
        """Move a plan to ``target``; :class:`StateError` naming both states if that is illegal.

        ``also`` (fairness events, credits, job updates) is committed in the same transaction, so
        a plan that is ``done`` has always counted its events exactly once.
        """
        with self._jobs_kept(), self._tx(f"moving plan {plan_id} to {target}") as s:
            row = plans.transition(s, plan_id, target, at=at, note=note)
            if also is not None:
                self._apply(s, also)
            return convert.plan_from_row(row)

    def update_victims(
        self,
        plan_id: int,
        job_ids: Iterable[int],
        target: VictimState,
        *,
        at: float,
        ack_step: int | None = None,
    ) -> Plan:
        """Move victims to ``target`` (all or none); :class:`StateError` on an illegal move."""
        with self._tx(f"updating victims of plan {plan_id}") as s:
            return convert.plan_from_row(
                plans.update_victims(s, plan_id, job_ids, target, at=at, ack_step=ack_step)
            )

    def daemon_requeues(self, since: Mapping[int, float]) -> dict[int, int]:
        """How often the daemon's plans requeued each job (victims in state ``requeued``), counting
        only requeues at or after ``since[job]`` (when the daemon first saw this job, so a
        reused job id does not inherit the requeues of an older job). Jobs never requeued by a
        plan are left out. Requeues by the job's owner, an admin or Slurm are never counted."""
        ids = list(since)
        counts: dict[int, int] = {}
        if not ids:
            return counts
        with self._tx("counting the daemon's requeues", read_only=True) as s:
            for chunk in _chunks(ids):
                rows = s.execute(select(PlanVictimRow.job_id, PlanVictimRow.requeued_at).where(
                    PlanVictimRow.job_id.in_(chunk),
                    PlanVictimRow.state == VictimState.REQUEUED))
                for job_id, at in rows:
                    if at is not None and at >= since[job_id]:
                        counts[job_id] = counts.get(job_id, 0) + 1
        return counts

    def get_plan(self, plan_id: int) -> Plan:
        """One plan with its jobs and steps; :class:`StateError` if it does not exist."""
        with self._tx(f"loading plan {plan_id}", read_only=True) as s:
            return convert.plan_from_row(plans.load_plan(s, plan_id))

    def unfinished_plans(self) -> list[Plan]:
        """Plans not yet done, aborted or rolled back, oldest first: what recovery must settle."""
        query = plans.plans_query().where(PlanRow.state.in_(plans.UNFINISHED)).order_by(PlanRow.id)
        with self._tx("loading unfinished plans", read_only=True) as s:
            return [convert.plan_from_row(r) for r in s.scalars(query)]

    def history(self, team: str | None = None, limit: int = 20) -> list[Plan]:
        """The newest ``limit`` plans, optionally only those involving ``team``."""
        if limit < 1:
            raise StateError(f"history limit must be at least 1, got {limit}")
        with self._tx("loading plan history", read_only=True) as s:
            return [convert.plan_from_row(r) for r in s.scalars(plans.history_query(team, limit))]

