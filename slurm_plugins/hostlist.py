"""Slurm host lists and GRES strings: pure text helpers shared by the parsers and the fake."""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[([^\]]*)\]")


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


def _expand_one(name: str) -> list[str]:
    m = _BRACKET.search(name)
    if m is None:
        return [name]
    head, tail = name[: m.start()], name[m.end():]
    out: list[str] = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if not rng:
            continue
        lo, _, hi = rng.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad range {rng!r} in host list {name!r}")
        width = len(lo)
        for i in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{i:0{width}d}{tail}"))
    return out


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """Expand ``"n[1-3,07],gpu-a"`` to ``("n1", "n2", "n3", "n07", "gpu-a")``.

    Empty text, ``"(null)"`` and ``"None assigned"`` give an empty tuple.
    """
    if not text or text in ("(null)", "None assigned", "N/A"):
        return ()
    out: list[str] = []
    for part in split_top_level(text):
        out.extend(_expand_one(part))
    return tuple(out)


def compress_hostlist(names: tuple[str, ...] | list[str]) -> str:
    """The inverse of :func:`expand_hostlist` for simple ``prefixNUMBER`` names (order kept)."""
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        prefix, num = (m.group(1), m.group(2)) if m else (name, "")
        if groups and groups[-1][0] == prefix and num and groups[-1][1]:
            groups[-1][1].append(num)
        else:
            groups.append((prefix, [num] if num else []))
    parts: list[str] = []
    for prefix, nums in groups:
        if not nums:
            parts.append(prefix)
        elif len(nums) == 1:
            parts.append(prefix + nums[0])
        else:
            runs: list[str] = []
            start = prev = nums[0]
            for n in [*nums[1:], None]:
                if n is not None and int(n) == int(prev) + 1 and len(n) == len(prev):
                    prev = n
                    continue
                runs.append(start if start == prev else f"{start}-{prev}")
                if n is not None:
                    start = prev = n
            parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(parts)


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
