"""Fuzzing the daemon configuration (priority/config) and the cluster description (conf/).

Inputs: the shipped examples, parsed, with values replaced, keys removed or added (then written
back as TOML), their text after random edits, and arbitrary bytes. A description that parses is
also run through the generators (``hai-slurm conf generate``) and the topology model. Property:
a value, or a ConfigError (see fuzz_support).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from fuzz_support import fuzz, mutated, mutated_tree, rejects_cleanly, to_toml, toml_values
from hypothesis import given
from hypothesis import strategies as st

from hai_slurm.conf.description import load
from hai_slurm.conf.generate import render_all
from hai_slurm.conf.topology import Topology
from hai_slurm.priority.config.loader import load_config, parse_config

pytestmark = pytest.mark.fuzz
ROOT = Path(__file__).parents[2]
CLUSTER = (ROOT / "conf" / "examples" / "cluster.toml").read_text()
DAEMON = (ROOT / "priority" / "examples" / "daemon.toml").read_text()
FIRST_TRY = (ROOT / "priority" / "examples" / "first-try.toml").read_text()


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    path.chmod(0o600)
    return path


def generate(path: Path) -> None:
    """What ``hai-slurm conf generate`` does with a description file, and the topology."""
    desc, dep = load(path)
    render_all(desc, dep)
    Topology.from_description(desc)


@fuzz(60)
@given(tree=st.one_of(mutated_tree(tomllib.loads(DAEMON), toml_values()),
                      mutated_tree(tomllib.loads(FIRST_TRY), toml_values())))
def test_daemon_config_values(tmp_path: Path, tree: dict[str, object]) -> None:
    """The example daemon files with values, keys and tables changed."""
    rejects_cleanly(parse_config, to_toml(tree), source="fuzz.toml", base_dir=tmp_path)


@fuzz(60)
@given(text=mutated(DAEMON))
def test_daemon_config_text(tmp_path: Path, text: str) -> None:
    """The example daemon file's text after random edits, read as the daemon reads it."""
    rejects_cleanly(load_config, write(tmp_path, "daemon.toml", text))


@fuzz(60)
@given(tree=mutated_tree(tomllib.loads(CLUSTER), toml_values()))
def test_cluster_description_values(tmp_path: Path, tree: dict[str, object]) -> None:
    """The example cluster description with values, keys and tables changed; generated."""
    rejects_cleanly(generate, write(tmp_path, "cluster.toml", to_toml(tree)))


@fuzz(60)
@given(text=mutated(CLUSTER))
def test_cluster_description_text(tmp_path: Path, text: str) -> None:
    """The example description's text after random edits; generated when it still parses."""
    rejects_cleanly(generate, write(tmp_path, "cluster.toml", text))


@fuzz(40)
@given(data=st.binary(max_size=200))
def test_any_bytes(tmp_path: Path, data: bytes) -> None:
    """Arbitrary bytes as a daemon file and as a description."""
    rejects_cleanly(load_config, write(tmp_path, "daemon.toml", data))
    rejects_cleanly(generate, write(tmp_path, "cluster.toml", data))
