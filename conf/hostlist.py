"""Slurm hostlist expressions: ``n[001-128]``, ``gpu[1-4,7]``, ``r[1-2]n[01-04]``, ``a,b[1-3]``.

:func:`expand` turns an expression into host names (several bracket groups per term are
supported: the leftmost group varies slowest, as in Slurm). :func:`compress` turns names into the
shortest expression this module writes: one bracket group per term, on the trailing number of
each name (``r1n01,r1n02`` becomes ``r1n[01-02]``; it never merges into ``r[1-2]n[..]``).
Zero padding follows Slurm: a range takes the width of its first number (``[08-10]``).

Why not ``python-hostlist`` (PyPI, well kept, used as an independent oracle in the tests): it is
GPL-2.0-or-later while hai-slurm is MIT, it has no type information (``mypy --strict``), and we
want errors that name the file and key of the description. This module is small and pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hai_slurm.errors import ConfigError

MAX_HOSTS = 1_000_000  # refuse expressions that would expand to more names than this
_NAME_OK = re.compile(r"^[A-Za-z0-9._\-]+$")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _fail(message: str, expr: str, source: str | None, key: str | None) -> ConfigError:
    return ConfigError(f"{message} in hostlist {expr!r}", source=source, key=key, value=expr)


def _split_top(expr: str, source: str | None, key: str | None) -> list[str]:
    """Split at commas outside brackets; check bracket balance."""
    terms: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise _fail(f"nested '[' at position {i}", expr, source, key)
            depth = 1
        elif ch == "]":
            if not depth:
                raise _fail(f"']' without '[' at position {i}", expr, source, key)
            depth = 0
        elif ch == "," and not depth:
            terms.append(expr[start:i])
            start = i + 1
    if depth:
        raise _fail("'[' is never closed", expr, source, key)
    terms.append(expr[start:])
    return terms


def _expand_group(body: str, expr: str, source: str | None, key: str | None) -> list[str]:
    """``1-4,7`` -> ``['1','2','3','4','7']`` with the width of each range's first number."""
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise _fail(f"bad range {item!r} (use N or N-M with digits)", expr, source, key)
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if lo > hi:
            raise _fail(f"range {item!r} runs backwards", expr, source, key)
        if hi - lo + 1 > MAX_HOSTS:
            raise _fail(f"range {item!r} is larger than {MAX_HOSTS}", expr, source, key)
        width = len(lo_s)
        out.extend(str(v).zfill(width) for v in range(lo, hi + 1))
    return out


def _expand_term(term: str, expr: str, source: str | None, key: str | None) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", term)
    names = [""]
    for part in parts:
        if part.startswith("["):
            values = _expand_group(part[1:-1], expr, source, key)
            names = [n + v for n in names for v in values]
            if len(names) > MAX_HOSTS:
                raise _fail(f"more than {MAX_HOSTS} names", expr, source, key)
        elif part:
            if not _NAME_OK.match(part):
                raise _fail(f"invalid characters in {part!r}", expr, source, key)
            names = [n + part for n in names]
    return names


def expand(expr: str, *, source: str | None = None, key: str | None = None) -> list[str]:
    """Host names of a hostlist expression, in the expression's order (duplicates kept once).

    Raises :class:`ConfigError` naming ``source``/``key`` for malformed expressions.
    """
    text = expr.strip()
    if not text:
        raise _fail("empty hostlist", expr, source, key)
    seen: dict[str, None] = {}
    for term in _split_top(text, source, key):
        term = term.strip()
        if not term:
            raise _fail("empty item (two commas in a row?)", expr, source, key)
        for name in _expand_term(term, expr, source, key):
            seen.setdefault(name, None)
    return list(seen)


def sort_key(name: str) -> tuple[str, int, int]:
    """Canonical order of host names: prefix, then trailing number, then its width."""
    m = _TRAILING_NUMBER.match(name)
    if not m:
        return (name, -1, 0)
    return (m.group(1), int(m.group(2)), len(m.group(2)))


def sorted_hosts(names: Iterable[str]) -> list[str]:
    """Unique names in canonical order (the order :func:`expand` gives for :func:`compress`)."""
    return sorted(set(names), key=sort_key)


def _runs(numbers: list[str]) -> list[str]:
    """Consecutive numbers that print with one width become ``lo-hi`` ranges."""
    out: list[str] = []
    i = 0
    while i < len(numbers):
        first = numbers[i]
        width = len(first)
        j = i
        while (j + 1 < len(numbers)
               and int(numbers[j + 1]) == int(numbers[j]) + 1
               and str(int(numbers[j + 1])).zfill(width) == numbers[j + 1]):
            j += 1
        out.append(first if j == i else f"{first}-{numbers[j]}")
        i = j + 1
    return out


def compress(names: Iterable[str]) -> str:
    """The hostlist expression of ``names`` (order and duplicates do not matter).

    ``expand(compress(names)) == sorted_hosts(names)`` for every list of valid names.
    """
    ordered = sorted_hosts(names)
    for name in ordered:
        if not _NAME_OK.match(name):
            raise ConfigError(f"invalid host name {name!r}", value=name)
    terms: list[str] = []
    i = 0
    while i < len(ordered):
        prefix, value, _ = sort_key(ordered[i])
        if value < 0:
            terms.append(ordered[i])
            i += 1
            continue
        numbers: list[str] = []
        while i < len(ordered):
            p, v, _ = sort_key(ordered[i])
            if p != prefix or v < 0:
                break
            numbers.append(ordered[i][len(p):])
            i += 1
        if len(numbers) == 1:
            terms.append(prefix + numbers[0])
        else:
            terms.append(f"{prefix}[{','.join(_runs(numbers))}]")
    if not terms:
        raise ConfigError("cannot compress an empty list of hosts")
    return ",".join(terms)
