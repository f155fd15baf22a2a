"""Shared pieces of the fuzz tier (``tests/unit/test_fuzz_*.py``, marker ``fuzz``).

The hypothesis profile ``hai-fuzz`` keeps CI short: each fuzz test runs its own moderate number
of examples, derandomized (the same examples every run, so CI never flakes on a new one).
``HAI_FUZZ_EXAMPLES=N`` runs every fuzz test N examples with fresh random data, for a longer
local session::

    HAI_FUZZ_EXAMPLES=5000 pytest -m fuzz -q

The property every parser of user input must hold: it returns, or it raises an error of the
project's hierarchy (:class:`~hai_slurm.errors.HaiSlurmError`) with a message; any other
exception (a traceback for the user) fails the test with the input that caused it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from hai_slurm.errors import HaiSlurmError

T = TypeVar("T")
EXAMPLES = int(os.environ.get("HAI_FUZZ_EXAMPLES", "0") or 0)
settings.register_profile(
    "hai-fuzz", deadline=None, derandomize=EXAMPLES == 0, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
PROFILE = settings.get_profile("hai-fuzz")


def fuzz(examples: int) -> settings:
    """The fuzz profile with ``examples`` examples (``HAI_FUZZ_EXAMPLES`` overrides it)."""
    return settings(PROFILE, max_examples=EXAMPLES or examples)


def rejects_cleanly(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``fn(*args)``; None when it raised one of our errors, which must carry a message."""
    try:
        return fn(*args, **kwargs)
    except HaiSlurmError as err:
        assert str(err).strip(), f"{type(err).__name__} without a message"
        return None


#: Values that break parsers: empty, signs, huge and special numbers, separators, quotes,
#: non-ASCII look-alikes (NBSP, BOM), control characters.
TOKENS = ("", " ", "0", "-1", "1", "8", "1.5", "nan", "inf", "-inf", "1e309", "1e18",
          "18446744073709551615", "4294967294", "99999999999999999999999", "é", "\u00a0",
          "\ufeff", "\x00", "\x7f", "|", ",", "=", ";", ":", "'", '"', "[", "]", "{", "}", "#",
          "\t", "\r", "\n", "\v", "NaN", "true", "null", "-", "--", "0-", "0-3,", "a-b", "%",
          "%zz", "n[1-", "n[3-1]", "n[0-99999999]", "X", "SYS", "NV12", "PIX", "GPU0", "AUTO",
          "HIGH", "hai:v1:", "Unknown", "None", "2026-02-30T25:61:00", "\U0001f600")
_SPLIT = re.compile(r"(\s+|[|,=;:\[\]{}\"'#])")


@st.composite
def mutated(draw: st.DrawFn, base: str, max_edits: int = 4) -> str:
    """``base`` after a few random edits: lines dropped or repeated, tokens replaced, text
    inserted, the end cut off."""
    text = base
    for _ in range(draw(st.integers(1, max_edits))):
        op = draw(st.sampled_from(("token", "token", "token", "drop", "repeat", "insert",
                                   "cut")))
        lines = text.split("\n")
        if op in ("drop", "repeat") and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines[i:i + 1] = [] if op == "drop" else [lines[i], lines[i]]
            text = "\n".join(lines)
        elif op == "token":
            parts = _SPLIT.split(text)
            if parts:
                i = draw(st.integers(0, len(parts) - 1))
                parts[i] = draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=6)))
                text = "".join(parts)
        elif op == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=8))) \
                + text[at:]
        else:
            text = text[:draw(st.integers(0, len(text)))]
    return text


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """Any JSON value (NaN and infinities included: Python's json reads them)."""
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                     st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(TOKENS),
                     st.text(max_size=8))
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=max_leaves)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


@st.composite
def mutated_tree(draw: st.DrawFn, base: Any, values: st.SearchStrategy[Any],
                 max_edits: int = 3) -> Any:
    """A deep copy of the JSON-like ``base`` with a few values replaced, keys removed or
    added."""
    tree = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, max_edits))):
        paths = _paths(tree)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = tree
        for step in path[:-1]:
            parent = parent[step]
        op = draw(st.sampled_from(("replace", "replace", "delete", "add")))
        if op == "replace":
            parent[path[-1]] = draw(values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from([*TOKENS[:20], "extra", *map(str, parent)]))] = \
                draw(values)
        else:
            parent.insert(path[-1], draw(values))
    return tree


def toml_values(max_leaves: int = 4) -> st.SearchStrategy[Any]:
    """Values TOML can hold (no null)."""
    leaf = st.one_of(st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1),
                     st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(TOKENS),
                     st.text(max_size=8))
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=max_leaves)


def _toml_string(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    out = out.replace("\x7f", "\\u007f")
    return re.sub(r"[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", out)


def to_toml(value: Any, *, root: bool = True) -> str:
    """TOML text for a tree of dicts, lists and scalars (tables inline; None left out)."""
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if v is not None]
        if root:
            return "".join(f"{_toml_string(str(k))} = {to_toml(v, root=False)}\n"
                           for k, v in items)
        return "{" + ", ".join(f"{_toml_string(str(k))} = {to_toml(v, root=False)}"
                               for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_toml(v, root=False) for v in value if v is not None) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return _toml_string(str(value))
