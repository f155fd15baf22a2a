"""Slurm host lists and GRES strings: pure text helpers shared by the parsers and the fake.

Host lists are expanded and compressed by :mod:`hai_slurm.conf.hostlist` (the one implementation);
the wrappers here only make it tolerant of what Slurm prints.
"""

from __future__ import annotations

import re

from hai_slurm.conf.hostlist import compress, expand
from hai_slurm.errors import ConfigError


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and parentheses: ``"n[1-2],m" -> ["n[1-2]", "m"]``."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_term(term: str) -> list[str]:
    try:
        return expand(term)
    except ConfigError as err:
        if "[" not in term and "]" not in term:
            return [term]  # a plain name with characters conf refuses in descriptions: keep it
        raise ValueError(f"{err} (Slurm output)") from None


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """Expand ``"n[1-3,07],gpu-a"`` to ``("n1", "n2", "n3", "n07", "gpu-a")``.

    Empty text, ``"(null)"`` and ``"None assigned"`` give an empty tuple. Expansion is
    :func:`hai_slurm.conf.hostlist.expand`, made tolerant for Slurm's output: a plain name it
    would refuse is kept as it is; only a broken bracket expression raises :class:`ValueError`.
    """
    if not text or text in ("(null)", "None assigned", "N/A"):
        return ()
    out: dict[str, None] = {}
    for part in split_top_level(text):
        out.update(dict.fromkeys(_expand_term(part)))
    return tuple(out)


def compress_hostlist(names: tuple[str, ...] | list[str]) -> str:
    """The hostlist expression of ``names`` (:func:`hai_slurm.conf.hostlist.compress`; canonical
    order, ``""`` for no names; names it refuses are simply joined with commas)."""
    if not names:
        return ""
    try:
        return compress(names)
    except ConfigError:
        return ",".join(names)


def gres_gpu_count(spec: str | None) -> int:
    """Count GPUs in a GRES/TRES-per-x string, whatever the Slurm release wrote.

    Accepts ``gres:gpu:8`` (22.05), ``gres/gpu:4`` (newer), ``gpu:a100:2``, ``gpu:8(S:0-15)``,
    ``gpu:(null):3(IDX:0-1,4)``, ``gres/gpu:h100=2`` and lists of them; other GRES are ignored.
    A bare ``gpu`` counts as one. Returns 0 for empty, ``(null)`` or ``N/A``.
    """
    if not spec or spec in ("(null)", "N/A"):
        return 0
    total = 0
    for entry in split_top_level(spec):
        entry = re.sub(r"\([^()]*\)$", "", entry).strip()
        for prefix in ("gres:", "gres/"):
            if entry.startswith(prefix):
                entry = entry[len(prefix):]
        entry = entry.replace("=", ":")
        parts = entry.split(":")
        if parts[0] != "gpu":
            continue
        last = parts[-1] if len(parts) > 1 else ""
        if last.isdigit():
            total += int(last)
        elif len(parts) <= 2:
            total += 1          # "gpu" or "gpu:TYPE" means one GPU
    return total


def tres_gpu_count(tres: str | None) -> int:
    """GPUs in a TRES string such as ``cpu=1,mem=512M,node=1,gres/gpu=4,gres/gpu:h100=4``.

    Slurm lists the untyped total next to typed counts; the total wins, typed ones are summed
    only when no total is present.
    """
    if not tres:
        return 0
    total: int | None = None
    typed = 0
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return total if total is not None else typed
