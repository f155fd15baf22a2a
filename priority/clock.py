"""The daemon's clock: wall time for the policy, and interruptible waits between cycles.

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

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait up to ``seconds`` or until ``stop`` is set; True if it was set."""
        ...


class SystemClock:
    """``time.time()`` and ``Event.wait``."""

    def time(self) -> float:
        """POSIX seconds now."""
        return time.time()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """``stop.wait(seconds)``."""
        return stop.wait(max(0.0, seconds))


class FakeClock:
    """A clock that stands still until :meth:`advance` or :meth:`wait` moves it."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now
        self.waits: list[float] = []
        """Every wait the daemon asked for, in order (to check intervals and back-off)."""

    def time(self) -> float:
        """The fake now."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        if seconds < 0:
            raise ValueError(f"time cannot go back ({seconds} s)")
        self.now += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Record the wait and jump over it (unless a stop was requested)."""
        self.waits.append(seconds)
        if stop.is_set():
            return True
        self.now += max(0.0, seconds)
        return stop.is_set()
