"""The class ladder: ranks, one-class steps and parsing of class names with "did you mean".

:class:`~hai_slurm.classes.PriorityClass` carries hai-platform's weights (50 … 0). The
policy works on *ranks* (LOW = 0 … EXTREME_HIGH = 7) so that "one class higher" is ``rank + 1``
whatever the weights are. Everything here is pure and cheap.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError

#: Classes from lowest to highest (LOW first), ordered by hai-platform weight.
LADDER: tuple[PriorityClass, ...] = tuple(sorted(PriorityClass, key=lambda c: c.weight))
#: Rank of each class on the ladder (LOW = 0).
RANK: dict[PriorityClass, int] = {c: i for i, c in enumerate(LADDER)}
TOP: int = len(LADDER) - 1
URGENT_FROM = PriorityClass.HIGH
"""The lowest urgent class: the top classes (HIGH, VERY_HIGH, EXTREME_HIGH), the urgent work
the issue's targets and the simulator's metrics name. Their new jobs get the daemon's looks
between cycles (lower classes wait for the cycle: their benefit weight cannot outweigh a
victim's save + restart within the looks anyway, and looking at every NORMAL job would read
the whole queue every poll), and a protected team's jobs give way to them too (the planner:
protection shields a team from ordinary work, not from the work preemption exists for)."""


def rank(cls: PriorityClass) -> int:
    """Position of ``cls`` on the ladder, LOW = 0."""
    return RANK[cls]


def at_rank(index: int) -> PriorityClass:
    """The class at ``index``, clamped to the ladder (so LOW - 1 is LOW)."""
    return LADDER[min(max(index, 0), TOP)]


def step(cls: PriorityClass, classes: int) -> PriorityClass:
    """The class ``classes`` steps above ``cls`` (negative: below), clamped to the ladder."""
    return at_rank(RANK[cls] + classes)


def class_names() -> list[str]:
    """Every class name, highest first (the order users read them in)."""
    return [c.name for c in reversed(LADDER)]


def suggest(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the nearest choice, or '' when nothing is close."""
    options = list(choices)
    upper = {o.upper(): o for o in options}
    close = difflib.get_close_matches(word.upper(), list(upper), n=1, cutoff=0.6)
    return f" (did you mean {upper[close[0]]!r}?)" if close else ""


def parse_class(text: object, *, key: str = "class", source: str | None = None) -> PriorityClass:
    """Read a class name (case-insensitive, '-' or '_'); a near miss gets a suggestion."""
    if isinstance(text, PriorityClass):
        return text
    if not isinstance(text, str):
        raise ConfigError(
            f"expected a class name, got {text!r}; allowed: {', '.join(class_names())}",
            source=source, key=key, value=text,
        )
    name = text.strip().upper().replace("-", "_")
    try:
        return PriorityClass[name]
    except KeyError:
        hint = suggest(name, class_names())
        raise ConfigError(
            f"unknown priority class {text!r}{hint}; allowed: {', '.join(class_names())}",
            source=source, key=key, value=text,
        ) from None
