"""A one-line progress bar on stderr, drawn only on a terminal and at most 5 times a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Call with (done, total); :meth:`close` ends the line. Silent when ``enabled`` is False."""

    def __init__(self, label: str, *, enabled: bool | None = None,
                 stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.2 and done < total:
            return
        self._last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label:<18} [{bar:<30}] {frac:6.1%} {done}/{total} jobs")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the bar's line (if one was drawn)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
