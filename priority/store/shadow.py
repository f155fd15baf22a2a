"""Shadow plans in the database: record, find the newest for a job, list (newest first).

Kept apart from :mod:`.plans` and :class:`~.repository.Repository` on purpose: nothing that reads
real plans (recovery, compensation, the busy-job check) can see a shadow plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from hai_slurm.errors import StateError
from hai_slurm.priority.store.engine import READ_ONLY, db_error
from hai_slurm.priority.store.models import ShadowPlanRow
from hai_slurm.priority.store.records import JsonValue, PlanJob, ShadowPlan, ShadowVictim


class ShadowPlans:
    """The ``shadow_plans`` table behind three methods, each one transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._readers = sessionmaker(
            engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False)

    @contextmanager
    def _tx(self, doing: str, *, read_only: bool = False) -> Iterator[Session]:
        sessions = self._readers if read_only else self._sessions
        try:
            with sessions.begin() as session:
                yield session
        except DBAPIError as err:
            raise db_error(self._engine.url, doing, err) from err

    def record(self, plan: ShadowPlan) -> ShadowPlan:
        """Store ``plan``; returns it with its id."""
        victims: list[JsonValue] = [
            {"job_id": v.job_id, "team": v.team, "user": v.user, "gpus": v.gpus,
             "priority_class": v.priority_class, "deadline": v.deadline} for v in plan.victims]
        row = ShadowPlanRow(
            created_at=plan.created_at, beneficiary=plan.beneficiary.job_id,
            beneficiary_class=plan.beneficiary_class, team=plan.beneficiary.team,
            user=plan.beneficiary.user, gpus=plan.beneficiary.gpus,
            teams="," + ",".join(sorted(plan.teams)) + ",", nodes=",".join(plan.nodes),
            victims=json.dumps(victims), actions=json.dumps(list(plan.actions)),
            reason=plan.reason, on_miss=plan.on_miss)
        with self._tx("recording a shadow plan") as s:
            s.add(row)
            s.flush()
            return _from_row(row)

    def latest_for(self, beneficiary: int) -> ShadowPlan | None:
        """The newest shadow plan for ``beneficiary``, or None."""
        query = (select(ShadowPlanRow).where(ShadowPlanRow.beneficiary == beneficiary)
                 .order_by(ShadowPlanRow.created_at.desc(), ShadowPlanRow.id.desc()).limit(1))
        with self._tx("reading shadow plans", read_only=True) as s:
            row = s.scalars(query).one_or_none()
            return None if row is None else _from_row(row)

    def history(self, team: str | None = None, limit: int = 20) -> list[ShadowPlan]:
        """The newest ``limit`` shadow plans, optionally only those involving ``team``."""
        if limit < 1:
            raise StateError(f"history limit must be at least 1, got {limit}")
        query = (select(ShadowPlanRow)
                 .order_by(ShadowPlanRow.created_at.desc(), ShadowPlanRow.id.desc()).limit(limit))
        if team is not None:
            query = query.where(ShadowPlanRow.teams.contains(f",{team},", autoescape=True))
        with self._tx("reading shadow plans", read_only=True) as s:
            return [_from_row(r) for r in s.scalars(query)]


def _from_row(row: ShadowPlanRow) -> ShadowPlan:
    raw = json.loads(row.victims)
    victims = tuple(ShadowVictim(job_id=int(v["job_id"]), team=str(v["team"]),
                                 user=str(v["user"]), gpus=int(v["gpus"]),
                                 priority_class=str(v["priority_class"]),
                                 deadline=float(v["deadline"])) for v in raw)
    return ShadowPlan(
        created_at=row.created_at,
        beneficiary=PlanJob(row.beneficiary, row.team, row.user, row.gpus),
        beneficiary_class=row.beneficiary_class, victims=victims,
        nodes=tuple(n for n in row.nodes.split(",") if n),
        actions=tuple(str(a) for a in json.loads(row.actions)), reason=row.reason,
        on_miss=row.on_miss, plan_id=row.id)
