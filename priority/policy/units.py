"""Durations ("90s", "30m", "1h30m", "2d", or a number of seconds) and sizes ("512G", or MiB)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_MIB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like '90s', '30m', '1h30m', '2d'.

    Raises ValueError when the value is none of these.
    """
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            return float(text)
        parts = _DURATION.findall(text)
        if parts and "".join(a + u for a, u in parts) == re.sub(r"\s+", "", text):
            return sum(float(a) * _SECONDS[u.lower()] for a, u in parts)
    raise ValueError("not a duration")


def parse_size_mb(value: object) -> int:
    """MiB from a number (MiB) or a string like '512G', '4T', '800MiB'."""
    if isinstance(value, bool):
        raise ValueError("not a size")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            return int(float(match.group(1)) * _MIB[match.group(2).lower()])
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
