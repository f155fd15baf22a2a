"""Leader lease: one active daemon at a time; a dead leader is replaced once its lease expires.

Each "daemon" here has its own engine (its own connections), as separate processes would.
Runs on MariaDB too through tests/integration/test_store_mariadb.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine
from test_store_repository import StoreCase

from hai_slurm.errors import StateError
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.lock import LeaderLock

T0 = 1_790_000_000.0
TTL = 30.0


class TestLeaderLock(StoreCase):
    """acquire_or_renew / release / holder semantics."""

    @pytest.fixture
    def daemons(self, engine: Engine, store_url: str) -> Iterator[Callable[[], LeaderLock]]:
        """Factory of locks, each on its own engine (the schema is migrated by ``engine``)."""
        engines: list[Engine] = []

        def new() -> LeaderLock:
            engines.append(make_engine(store_url))
            return LeaderLock(engines[-1])

        yield new
        for e in engines:
            e.dispose()

    def test_second_daemon_idles_until_the_lease_expires(
        self, daemons: Callable[[], LeaderLock]
    ) -> None:
        """B is refused at every try while A's lease runs, and takes over exactly at expiry."""
        a, b = daemons(), daemons()
        assert a.acquire_or_renew("A", T0, TTL)
        for dt in (0.0, 1.0, 15.0, 29.999):
            assert not b.acquire_or_renew("B", T0 + dt, TTL), dt
        holder = b.holder(T0 + 29.999)
        assert holder is not None and holder.owner == "A"
        assert b.acquire_or_renew("B", T0 + TTL, TTL)  # A died: its lease ran out
        assert not a.acquire_or_renew("A", T0 + TTL + 1, TTL)  # A came back: it is not leader
        holder = a.holder(T0 + TTL + 1)
        assert holder is not None and holder.owner == "B" and holder.acquired_at == T0 + TTL

    def test_renewal_keeps_the_lease(self, daemons: Callable[[], LeaderLock]) -> None:
        """A leader renewing every 10 s with a 30 s TTL is never displaced over 10 minutes."""
        a, b = daemons(), daemons()
        for step in range(60):
            now = T0 + 10.0 * step
            assert a.acquire_or_renew("A", now, TTL), step
            assert not b.acquire_or_renew("B", now + 5.0, TTL), step
        holder = a.holder(T0 + 595)
        assert holder is not None
        assert (holder.owner, holder.acquired_at, holder.renewed_at) == ("A", T0, T0 + 590)
        assert holder.expires_at == T0 + 590 + TTL

    def test_renewing_with_identical_values_still_counts(
        self, daemons: Callable[[], LeaderLock]
    ) -> None:
        """Renewing twice at the same instant is still a success (matched, not changed, rows)."""
        a = daemons()
        assert a.acquire_or_renew("A", T0, TTL)
        assert a.acquire_or_renew("A", T0, TTL)
        assert a.acquire_or_renew("A", T0, TTL)

    def test_release_hands_over_at_once(self, daemons: Callable[[], LeaderLock]) -> None:
        """After A releases, B gets the lease without waiting; releasing twice is harmless."""
        a, b = daemons(), daemons()
        assert a.acquire_or_renew("A", T0, TTL)
        assert not b.release("B")  # B holds nothing
        assert a.release("A")
        assert a.holder(T0 + 1) is None
        assert not a.release("A")
        assert b.acquire_or_renew("B", T0 + 1, TTL)

    def test_exactly_one_of_many_racers_wins(self, daemons: Callable[[], LeaderLock]) -> None:
        """Four daemons racing for a fresh lock, then for an expired one: one winner each time."""
        locks = [daemons() for _ in range(4)]
        for now in (T0, T0 + 2 * TTL):
            barrier = threading.Barrier(len(locks))
            results: dict[str, bool] = {}
            errors: list[BaseException] = []

            def run(
                i: int, now: float = now, barrier: threading.Barrier = barrier,
                results: dict[str, bool] = results, errors: list[BaseException] = errors,
            ) -> None:
                try:
                    barrier.wait(timeout=10)
                    results[f"D{i}"] = locks[i].acquire_or_renew(f"D{i}", now, TTL)
                except BaseException as err:  # reported below, in the test's thread
                    errors.append(err)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(locks))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert errors == []
            winners = [owner for owner, won in results.items() if won]
            assert len(results) == 4 and len(winners) == 1, results
            holder = locks[0].holder(now)
            assert holder is not None and holder.owner == winners[0]

    def test_bad_arguments(self, daemons: Callable[[], LeaderLock]) -> None:
        """A non-positive TTL or an empty owner is refused with a clear message."""
        a = daemons()
        with pytest.raises(StateError, match="TTL must be positive, got 0"):
            a.acquire_or_renew("A", T0, 0)
        with pytest.raises(StateError, match="owner id must not be empty"):
            a.acquire_or_renew("", T0, TTL)
