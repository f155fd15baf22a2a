"""Signal handling that only sets a flag: the training loop acts on it at its next step boundary.

The handler records which signal arrived and when (``time.monotonic()``), sets a
:class:`threading.Event` and, if a Python handler was installed before ours, calls it too
(``chain=True``). It does no I/O, takes no lock and allocates next to nothing, so it is safe
whatever the main thread was doing. Handlers can only be installed from the main thread; elsewhere
:meth:`RequestListener.install` returns False and the caller says so.

A forked child (a DataLoader worker) inherits the handler; it then does nothing there (the pid is
not the one that installed it), so a worker neither dies of the request nor takes it for its own.
:func:`ignore_requests_in_worker` is the ``worker_init_fn`` for workers that are spawned instead.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType

from hai_slurm.checkpoint.env import DEFAULT_SIGNAL, parse_signal

Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


@dataclass(frozen=True)
class Request:
    """A pending checkpoint request: which signal, and when it arrived (monotonic seconds)."""

    signal: signal.Signals
    at_monotonic: float


class RequestListener:
    """Installs flag-only handlers for ``signals`` and restores the previous ones on uninstall."""

    def __init__(self, signals: Iterable[signal.Signals], *, chain: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.signals = tuple(dict.fromkeys(signals))
        self._clock = clock
        self._chain = chain
        self._event = threading.Event()
        self._first: Request | None = None
        self._latest: Request | None = None
        self._last_signum = 0
        self._previous: dict[signal.Signals, Handler] = {}
        self._pid = os.getpid()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Flag only: no I/O, no locks. Keep the first request, but remember a SIGTERM that comes
        # later (it must not expire), and when the latest one came (the grace counts from it).
        if os.getpid() != self._pid:  # a forked worker: the request is for the training process
            return
        arrived = Request(signal.Signals(signum), self._clock())
        if self._first is None or signum == signal.SIGTERM:
            self._first = arrived
        self._latest = arrived
        self._last_signum = signum
        self._event.set()
        previous = self._previous.get(signal.Signals(signum))
        if self._chain and callable(previous):
            previous(signum, frame)

    def install(self) -> bool:
        """Install the handlers; False (nothing installed) when not called from the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._pid = os.getpid()
        for sig in self.signals:
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def uninstall(self) -> None:
        """Put back the handlers that were there before (only where ours is still installed)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in list(self._previous.items()):
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            del self._previous[sig]

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def pending(self) -> Request | None:
        """The pending request, if any."""
        if not self._event.is_set():
            return None
        first = self._first  # None only if a signal raced with clear(): still a request
        return first or Request(signal.Signals(self._last_signum or signal.SIGTERM), self._clock())

    def latest(self) -> Request | None:
        """The latest request that arrived while one is pending (None: none pending): the
        scheduler sends a request again while it still waits, so a request expires the grace
        time after its latest arrival."""
        if not self._event.is_set():
            return None
        return self._latest or self.pending()

    def trigger(self, sig: signal.Signals) -> None:
        """Record a request that arrived by other means (another rank, a file flag, a test)."""
        if self._first is None:
            self._first = self._latest = Request(sig, self._clock())
        self._event.set()

    def clear(self) -> None:
        """Forget the pending request (it was handled or expired)."""
        self._event.clear()
        self._first = self._latest = None

    def expire(self, judged: Request) -> bool:
        """Forget the pending request unless a signal arrived after ``judged`` (the
        :meth:`latest` the caller found too old): True if it was forgotten. A request that
        arrives meanwhile, at any point of this, stays pending: the handler sets the event
        last, so one that ran after the event was cleared leaves it set."""
        self._event.clear()
        if self._latest is not judged and self._latest is not None:
            self._event.set()    # a newer one came before the event was cleared
            return False
        self._first = self._latest = None
        # set again: the handler ran meanwhile (pending() then names its signal)
        return not self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a request arrives (for watchdogs and tests)."""
        return self._event.wait(timeout)


def ignore_requests_in_worker(worker_id: int = 0) -> None:
    """``worker_init_fn`` for DataLoader workers: ignore the request signal and SIGTERM.

    ``scancel --signal=USR2 --full`` and Slurm's SIGTERM reach every process of a step, workers
    included; a worker must neither die of them (the training process would see "DataLoader worker
    exited unexpectedly" in the middle of its save) nor act on them. The training process stops
    its workers when it exits. Reads ``HAI_CHECKPOINT_SIGNAL`` (default USR2); call it from your
    own ``worker_init_fn`` if you have one.
    """
    raw = os.environ.get("HAI_CHECKPOINT_SIGNAL", "").strip()
    request = parse_signal(raw) if raw else DEFAULT_SIGNAL
    for sig in (request, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
