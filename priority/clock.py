"""The daemon's clock: wall time for the policy, a monotonic time for its waits, and
interruptible waits between cycles.

The wall clock can jump (an NTP step, a VM restored with an old clock); the monotonic one never
goes back, so the daemon measures its waits with it and tells a stepped wall clock from stale
data by comparing the two.

:class:`SystemClock` is the real one; :class:`FakeClock` moves only when the daemon waits (or the
test says so), so unit tests run many cycles in no time and deterministically.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time and a wait that a stop request cuts short."""

    def time(self) -> float:
        """POSIX seconds now."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back, whatever the wall clock does."""
        ...

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait up to ``seconds`` or until ``stop`` is set; True if it was set."""
        ...


class SystemClock:
    """``time.time()``, ``time.monotonic()`` and ``Event.wait``."""

    def time(self) -> float:
        """POSIX seconds now."""
        return time.time()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """``stop.wait(seconds)``."""
        return stop.wait(max(0.0, seconds))


class FakeClock:
    """A clock that stands still until :meth:`advance` or :meth:`wait` moves it (both its
    times), or :meth:`step` moves its wall time alone."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now
        self.mono = 0.0
        self.waits: list[float] = []
        """Every wait the daemon asked for, in order (to check intervals and back-off)."""

    def time(self) -> float:
        """The fake now."""
        return self.now

    def monotonic(self) -> float:
        """The fake monotonic time: moved by :meth:`advance` and :meth:`wait` only."""
        return self.mono

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        if seconds < 0:
            raise ValueError(f"time cannot go back ({seconds} s)")
        self.now += seconds
        self.mono += seconds

    def step(self, seconds: float) -> None:
        """Step the wall time alone, either way (an NTP step): no time passes."""
        self.now += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Record the wait and jump over it (unless a stop was requested)."""
        self.waits.append(seconds)
        if stop.is_set():
            return True
        self.now += max(0.0, seconds)
        self.mono += max(0.0, seconds)
        return stop.is_set()
