"""``sbatch --constraint`` expressions, read per node: which nodes have the features a job asks for.

Slurm's syntax (``man sbatch``, ``--constraint``): a feature name; ``a&b`` (AND; a comma is read
as AND too); ``a|b`` (OR); ``[a|b]`` (matching OR: every node of the job has the same one of
them); parentheses for grouping; ``a*2`` (a node count per feature, with ``&`` between counted
terms, e.g. ``[a*2&b*4]``).

:func:`node_filter` answers "may a node with these active features be one of the job's nodes?".
A matching OR is read as a plain OR (every node the job may get has one of the features; which
one is Slurm's choice). Counts make the answer depend on the other nodes of the job (``a*2&b*4``
means two nodes with ``a`` and four with ``b``, not six with both): such an expression gets no
filter (None), and a text that does not parse neither: a node set too wide lets a plan free GPUs
the job may not use, one too narrow hides a plan that would have worked; Slurm has checked the
expression when it accepted the job, so an unreadable one is a syntax this module does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

from hai_slurm.errors import SlurmError

Features = frozenset[str]
NodeFilter = Callable[[Features], bool]

_SPECIAL = "&|,()[]*"


@lru_cache(maxsize=1024)
def node_filter(expression: str) -> NodeFilter | None:
    """A test of one node's features for ``expression``; None when it cannot be decided per node
    (node counts) or does not parse (see the module docstring). An empty expression: no test."""
    text = expression.strip()
    if not text or "*" in text:
        return None
    try:
        parser = _Parser(_tokens(text))
        test = parser.alternatives()
        if parser.rest():
            raise SlurmError(f"unexpected {parser.rest()[0]!r}")
    except SlurmError:
        return None
    return test


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    name: list[str] = []
    for ch in text:
        if ch in _SPECIAL or ch.isspace():
            if name:
                out.append("".join(name))
                name = []
            if not ch.isspace():
                out.append(ch)
        else:
            name.append(ch)
    if name:
        out.append("".join(name))
    return out


class _Parser:
    """Recursive descent: alternatives := all ('|' all)*; all := one (('&' | ',') one)*;
    one := NAME | '(' alternatives ')' | '[' alternatives ']'."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.at = tokens, 0

    def rest(self) -> list[str]:
        return self.tokens[self.at:]

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise SlurmError("expression ends too early")
        self.at += 1
        return token

    def alternatives(self) -> NodeFilter:
        return self._joined(("|",), self._all, any)

    def _all(self) -> NodeFilter:
        return self._joined(("&", ","), self._one, all)

    def _joined(self, ops: tuple[str, ...], part: Callable[[], NodeFilter],
                combine: Callable[[Iterable[bool]], bool]) -> NodeFilter:
        """``part`` (op ``part``)*, its tests combined by ``combine`` (any, all)."""
        parts = [part()]
        while self._peek() in ops:
            self.at += 1
            parts.append(part())
        if len(parts) == 1:
            return parts[0]
        return lambda features: combine(p(features) for p in parts)

    def _one(self) -> NodeFilter:
        word = self._take()
        if word in ("(", "["):
            inner = self.alternatives()
            close = ")" if word == "(" else "]"
            if self._take() != close:
                raise SlurmError(f"{word!r} without {close!r}")
            return inner
        if word in _SPECIAL:
            raise SlurmError(f"unexpected {word!r}")
        return lambda features: word in features
