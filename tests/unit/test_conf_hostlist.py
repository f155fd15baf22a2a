"""Hostlist expressions: examples, errors, and round trips checked against python-hostlist."""

from __future__ import annotations

import hostlist as oracle  # python-hostlist, an independent implementation (test-only dependency)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.conf.hostlist import compress, expand, sorted_hosts
from hai_slurm.errors import ConfigError


@pytest.mark.parametrize(("expr", "names"), [
    ("n[001-003]", ["n001", "n002", "n003"]),
    ("gpu[1-4,7]", ["gpu1", "gpu2", "gpu3", "gpu4", "gpu7"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[1,1-2]", ["n1", "n2"]),
    ("node-7", ["node-7"]),
])
def test_expand_examples(expr: str, names: list[str]) -> None:
    """Ranges, lists, padding, several bracket groups and plain names expand like Slurm."""
    assert expand(expr) == names
    assert oracle.expand_hostlist(expr) == names


@pytest.mark.parametrize(("names", "expr"), [
    (["n003", "n001", "n002"], "n[001-003]"),
    (["gpu7", "gpu1", "gpu2", "gpu3", "gpu4"], "gpu[1-4,7]"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["n09", "n10"], "n[09-10]"),
    (["n1", "n01"], "n[1,01]"),
    (["a", "b1"], "a,b1"),
    (["r1n01", "r1n02", "r2n01"], "r1n[01-02],r2n01"),
])
def test_compress_examples(names: list[str], expr: str) -> None:
    """Compression sorts numerically, keeps padding and writes one bracket group per term."""
    assert compress(names) == expr


@pytest.mark.parametrize(("expr", "fragment"), [
    ("n[1-3", "never closed"),
    ("n1-3]", "without '['"),
    ("n[[1]]", "nested"),
    ("n[3-1]", "backwards"),
    ("n[a-b]", "bad range"),
    ("n[1-2],,m", "empty item"),
    ("", "empty hostlist"),
    ("n$1", "invalid characters"),
    ("n[1-2000000]", "larger than"),
])
def test_expand_errors_name_key_and_value(expr: str, fragment: str) -> None:
    """Malformed expressions fail with the file, key and expression in the message."""
    with pytest.raises(ConfigError) as err:
        expand(expr, source="c.toml", key="nodes[0].names")
    assert fragment in str(err.value)
    assert str(err.value).startswith("c.toml: nodes[0].names: ")
    assert err.value.value == expr


_prefix = st.sampled_from(["n", "gpu", "node-", "r1n", "x.y"])
_number = st.integers(min_value=0, max_value=300)
_width = st.integers(min_value=1, max_value=4)


@st.composite
def _names(draw: st.DrawFn) -> list[str]:
    items = draw(st.lists(st.tuples(_prefix, _number, _width, st.booleans()), min_size=1,
                          max_size=40))
    return [p if plain else p + str(n).zfill(w) for p, n, w, plain in items]


@settings(max_examples=300, deadline=None)
@given(_names())
def test_compress_expand_round_trip(names: list[str]) -> None:
    """expand(compress(x)) gives x's unique names in canonical order, and python-hostlist agrees."""
    expr = compress(names)
    assert expand(expr) == sorted_hosts(names)
    assert sorted(oracle.expand_hostlist(expr)) == sorted(set(names))
    assert compress(expand(expr)) == expr


@settings(max_examples=200, deadline=None)
@given(_names())
def test_expand_of_oracle_compression(names: list[str]) -> None:
    """Expressions python-hostlist writes (also multi-group ones) expand to the same set."""
    expr = oracle.collect_hostlist(names)
    assert sorted(expand(expr)) == sorted(set(names))
