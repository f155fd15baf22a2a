"""The leader lease: one active daemon at a time, replaced without a human when it dies.

A single row per lock name holds the owner and the time its lease expires. Acquiring and renewing
is one conditional UPDATE (``WHERE owner = me OR expires_at <= now``) whose row count says who won;
the row is inserted on first use, and a concurrent insert loses on the primary key. This is atomic
on SQLite (``BEGIN IMMEDIATE``) and on MariaDB/MySQL (row lock; SQLAlchemy's PyMySQL dialect asks
for *matched* rather than *changed* rows, so renewing with unchanged values still counts).
Time is passed in: the lock reads no clock.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from sqlalchemy import Engine, case, delete, insert, or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from hai_slurm.errors import StateError
from hai_slurm.priority.store.engine import READ_ONLY, db_error
from hai_slurm.priority.store.models import LeaderLockRow

DEFAULT_LOCK_NAME = "priority-daemon"


def default_owner() -> str:
    """An owner id unique to this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds the lease, since when, and until when."""

    owner: str
    acquired_at: float
    renewed_at: float
    expires_at: float


class LeaderLock:
    """A named lease in the daemon's database (see the module docstring)."""

    def __init__(self, engine: Engine, name: str = DEFAULT_LOCK_NAME) -> None:
        self._engine = engine
        self._name = name

    def acquire_or_renew(self, owner: str, now: float, ttl: float) -> bool:
        """Take the lease, or extend it if ``owner`` holds it; False while someone else holds it.

        The lease lasts ``ttl`` seconds from ``now``; renew well within it (e.g. every cycle with a
        TTL of three cycles). A lease that expired at or before ``now`` may be taken over.
        """
        if ttl <= 0:
            raise StateError(f"leader lease TTL must be positive, got {ttl} s")
        if not owner:
            raise StateError("leader lease owner id must not be empty")
        t = LeaderLockRow
        take = (
            update(t)
            .where(t.name == self._name, or_(t.owner == owner, t.expires_at <= now))
            # MySQL evaluates SET left to right with updated values: acquired_at must read the
            # old owner, so it is assigned before owner.
            .ordered_values(
                (t.acquired_at, case((t.owner == owner, t.acquired_at), else_=now)),
                (t.owner, owner),
                (t.renewed_at, now),
                (t.expires_at, now + ttl),
            )
        )
        try:
            with self._engine.begin() as conn:
                if conn.execute(take).rowcount == 1:
                    return True
            with self._engine.begin() as conn:
                conn.execute(insert(t).values(
                    name=self._name, owner=owner, acquired_at=now, renewed_at=now,
                    expires_at=now + ttl,
                ))
            return True
        except IntegrityError:
            return False  # the row exists and is held by someone else (or a racer inserted it)
        except DBAPIError as err:
            raise db_error(
                self._engine.url, f"taking the leader lease {self._name!r}", err
            ) from err

    def release(self, owner: str) -> bool:
        """Give the lease up at once (on clean shutdown); False if ``owner`` did not hold it."""
        t = LeaderLockRow
        try:
            with self._engine.begin() as conn:
                result = conn.execute(delete(t).where(t.name == self._name, t.owner == owner))
                return result.rowcount == 1
        except DBAPIError as err:
            raise db_error(
                self._engine.url, f"releasing the leader lease {self._name!r}", err
            ) from err

    def holder(self, now: float) -> LeaseHolder | None:
        """The current holder at ``now``, or None if the lease is free or expired."""
        t = LeaderLockRow
        try:
            with self._engine.execution_options(**{READ_ONLY: True}).connect() as conn:
                row = conn.execute(
                    select(t.owner, t.acquired_at, t.renewed_at, t.expires_at)
                    .where(t.name == self._name)
                ).one_or_none()
        except DBAPIError as err:
            raise db_error(
                self._engine.url, f"reading the leader lease {self._name!r}", err
            ) from err
        if row is None or row.expires_at <= now:
            return None
        return LeaseHolder(
            owner=row.owner, acquired_at=row.acquired_at, renewed_at=row.renewed_at,
            expires_at=row.expires_at,
        )
