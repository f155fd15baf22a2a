"""Durations ("90s", "30m", "1h30m", "2d", or a number of seconds) and sizes ("512G", or MiB)
in hai-slurm's own configuration files.

These durations are hai-slurm's notation, not Slurm's (Slurm's ``1-02:00:00`` and what a bare
number means there are read by :mod:`hai_slurm.slurm_formats`). Sizes are Slurm's notation and
are read there (:func:`~hai_slurm.slurm_formats.size_mib`: whole MiB, rounded up).
"""

from __future__ import annotations

import math
import re

from hai_slurm.slurm_formats import size_mib

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like '90s', '30m', '1h30m', '2d'.

    Raises ValueError when the value is none of these.
    """
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int | float):
        try:
            finite = math.isfinite(value)
        except OverflowError:   # an int of hundreds of digits
            finite = False
        if not finite:   # TOML's nan and inf: a wait of nan s spins a loop
            raise ValueError("a duration must be a finite number of seconds")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            if not math.isfinite(float(text)):
                raise ValueError("a duration must be a finite number of seconds")
            return float(text)
        parts = _DURATION.findall(text)
        if parts and "".join(a + u for a, u in parts) == re.sub(r"\s+", "", text):
            seconds = sum(float(a) * _SECONDS[u.lower()] for a, u in parts)
            if not math.isfinite(seconds):   # hundreds of digits overflow to inf
                raise ValueError("a duration must be a finite number of seconds")
            return seconds
    raise ValueError("not a duration")


def parse_size_mb(value: object) -> int:
    """MiB from a whole number (MiB) or a size string like '512G', '4T', '800MiB', '1.5T'."""
    if isinstance(value, bool):
        raise ValueError("not a size")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        try:
            return size_mib(value)
        except ValueError:
            pass
    raise ValueError("not a size")


def format_duration(seconds: float) -> str:
    """'1h30m', '45s', '2d3h': the largest two units, for messages and explain."""
    total = round(seconds)
    if total < 60:
        return f"{total}s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            out.append(f"{total // size}{unit}")
            total %= size
        if len(out) == 2:
            break
    return "".join(out)
