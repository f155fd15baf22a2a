"""A strict reader for TOML tables: every key is consumed once, unknown keys are errors.

Errors name the file, the line (best effort: tomllib does not report lines for values), the dotted
key, the bad value and what is allowed, with a "did you mean" for near misses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.policy.ladder import parse_class, suggest
from hai_slurm.urls import mask_password

T = TypeVar("T")
_HEADER = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+?)\s*=")


@dataclass(frozen=True)
class Source:
    """The file being read: its name for messages and its text for line lookups."""

    name: str
    text: str

    def line_of(self, dotted: str) -> int | None:
        """1-based line where ``dotted`` (``table.sub.key``) is set or its table opens."""
        table, _, key = dotted.rpartition(".")
        current = ""
        header_line = None
        for number, line in enumerate(self.text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header:
                current = header.group(1).replace('"', "").replace("'", "").replace(" ", "")
                if current == dotted:
                    header_line = number
                continue
            found = _KEY.match(line)
            if found:
                name = found.group(1).replace('"', "").replace("'", "")
                full = f"{current}.{name}" if current else name
                if full == dotted or (current == table and name == key):
                    return number
        return header_line


class Table:
    """One TOML table being read; :meth:`finish` rejects keys nobody asked for."""

    def __init__(self, data: dict[str, Any], path: str, source: Source) -> None:
        self.data = data
        self.path = path
        self.source = source
        self._seen: set[str] = set()

    def key(self, name: str) -> str:
        """The dotted name of ``name`` inside this table."""
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, message: str, value: object = None) -> ConfigError:
        """A ConfigError for key ``name`` of this table, with its line when it can be found."""
        dotted = self.key(name)
        line = self.source.line_of(dotted)
        where = f"{self.source.name}, line {line}" if line else self.source.name
        if isinstance(value, str):
            value = mask_password(value)  # a bad database or Redis URL: never print its password
        shown = f" = {value!r}" if value is not None else ""
        err = ConfigError(message, source=where, key=f"{dotted}{shown}", value=value)
        err.key = dotted  # the message shows "key = value"; the attribute is the key alone
        return err

    def get(self, name: str, default: T, convert: Callable[[object], T], allowed: str) -> T:
        """Read key ``name`` with ``convert``; a ValueError/TypeError becomes a ConfigError."""
        self._seen.add(name)
        if name not in self.data:
            return default
        raw = self.data[name]
        try:
            return convert(raw)
        except ConfigError as err:
            raise self.error(name, str(err).split(": ", 1)[-1], raw) from None
        except (ValueError, TypeError) as err:
            detail = str(err) or "invalid value"
            raise self.error(name, f"{detail}; allowed: {allowed}", raw) from None

    def sub(self, name: str) -> Table:
        """The sub-table ``name`` (empty when absent)."""
        self._seen.add(name)
        raw = self.data.get(name, {})
        if not isinstance(raw, dict):
            raise self.error(name, f"expected a table ([{self.key(name)}])", raw)
        return Table(raw, self.key(name), self.source)

    def names(self) -> list[str]:
        """Every key of this table (for tables keyed by team or class); marks them all seen."""
        self._seen.update(self.data)
        return list(self.data)

    def finish(self, allowed: Iterable[str] | None = None) -> None:
        """Raise on the first key that was never read, suggesting the nearest known one."""
        known = set(allowed) if allowed is not None else self._seen
        for name in self.data:
            if name not in known:
                options = sorted(known)
                hint = suggest(name, options)
                listing = ", ".join(options) if options else "(none)"
                raise self.error(name, f"unknown key{hint}; known keys here: {listing}")


def integer(minimum: int, maximum: int | None = None) -> Callable[[object], int]:
    """A converter accepting ints in [minimum, maximum]."""

    def convert(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an integer, got {type(value).__name__}")
        if value < minimum or (maximum is not None and value > maximum):
            raise ValueError("out of range")
        return value

    return convert


def number(minimum: float, maximum: float | None = None) -> Callable[[object], float]:
    """A converter accepting ints or floats in [minimum, maximum]."""

    def convert(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected a number, got {type(value).__name__}")
        try:
            finite = math.isfinite(value)
        except OverflowError:   # an int of hundreds of digits
            finite = False
        if not finite:   # TOML's nan passes both range tests below
            raise ValueError("must be a finite number (TOML nan and inf are not)")
        if value < minimum or (maximum is not None and value > maximum):
            raise ValueError("out of range")
        return float(value)

    return convert


def boolean(value: object) -> bool:
    """A converter accepting only true/false."""
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def string(value: object) -> str:
    """A converter accepting only strings."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def class_keys(table: Table) -> dict[PriorityClass, str]:
    """The keys of ``table`` that must be class names, by class: a near miss gets a
    suggestion, and two keys naming one class (``high`` and ``HIGH``: class names are read
    in any case) are refused rather than one silently dropping the other."""
    out: dict[PriorityClass, str] = {}
    for name in table.names():
        try:
            cls = parse_class(name)
        except ConfigError as err:
            raise table.error(name, str(err).split(": ", 1)[-1]) from None
        if cls in out:
            raise table.error(name, f"names class {cls.name} as {out[cls]!r} does; keep one "
                                    "of the two")
        out[cls] = name
    return out
