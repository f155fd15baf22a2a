"""Fuzzing the trace readers: generic and Alibaba CSV, the Alibaba node list, sacct exports.

Inputs are real files (tests/data/traces, the recorded sacct exports of tests/data/sacct) after
random edits, and arbitrary bytes. Property: a trace, or a ConfigError (see fuzz_support).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_support import fuzz, json_values, mutated, mutated_tree, rejects_cleanly
from hypothesis import given
from hypothesis import strategies as st

from hai_slurm.priority.sim.cluster import alibaba_description
from hai_slurm.priority.sim.sacct import read_sacct
from hai_slurm.priority.sim.trace import load_trace, read_alibaba, read_generic

pytestmark = pytest.mark.fuzz
DATA = Path(__file__).parents[1] / "data"
TRACES = DATA / "traces"
GENERIC = (TRACES / "one_node_contention.csv").read_text()
ALIBABA = "\n".join((TRACES / "openb_pod_list_default.csv").read_text().split("\n")[:12])
NODES = "\n".join((TRACES / "openb_node_list_gpu_node.csv").read_text().split("\n")[:10])
SACCT_JSON = json.loads((DATA / "sacct" / "24.11" / "sacct.json").read_text())
SACCT_JSON["jobs"] = SACCT_JSON["jobs"][:4]
SACCT_22 = json.loads((DATA / "sacct" / "22.05" / "sacct.json").read_text())
SACCT_22["jobs"] = SACCT_22["jobs"][:3]
SACCT_P = (DATA / "sacct" / "26.05" / "sacct-steps.txt").read_text()


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "input"
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    return path


@fuzz(60)
@given(text=mutated(GENERIC))
def test_generic_csv(tmp_path: Path, text: str) -> None:
    """Edited generic traces: read, or a ConfigError; with --skip-bad too."""
    path = write(tmp_path, text)
    rejects_cleanly(read_generic, path)
    rejects_cleanly(read_generic, path, skip_bad=True)


@fuzz(60)
@given(text=mutated(ALIBABA))
def test_alibaba_csv(tmp_path: Path, text: str) -> None:
    """Edited Alibaba pod lists, read by format detection as the CLI does."""
    path = write(tmp_path, text)
    rejects_cleanly(load_trace, path)
    rejects_cleanly(read_alibaba, path, skip_bad=True)


@fuzz(60)
@given(text=mutated(NODES))
def test_alibaba_node_list(tmp_path: Path, text: str) -> None:
    """Edited Alibaba node lists (the simulator's --cluster CSV)."""
    rejects_cleanly(alibaba_description, write(tmp_path, text))


@fuzz(40)
@given(data=st.binary(max_size=200))
def test_any_bytes_to_every_reader(tmp_path: Path, data: bytes) -> None:
    """Arbitrary bytes (non-UTF-8 included) to each trace reader."""
    path = write(tmp_path, data)
    for reader in (read_generic, read_alibaba, load_trace, alibaba_description, read_sacct):
        rejects_cleanly(reader, path)


@fuzz(80)
@given(doc=st.one_of(mutated_tree(SACCT_JSON, json_values()),
                     mutated_tree(SACCT_22, json_values())))
def test_sacct_json_documents(tmp_path: Path, doc: object) -> None:
    """Real sacct --json documents (24.11, 22.05) with values replaced, removed or added."""
    path = write(tmp_path, json.dumps(doc))
    rejects_cleanly(read_sacct, path)
    rejects_cleanly(read_sacct, path, skip_bad=True)


@fuzz(60)
@given(text=mutated(SACCT_P))
def test_sacct_parsable(tmp_path: Path, text: str) -> None:
    """A real sacct -P export (26.05, step rows included) after random edits."""
    path = write(tmp_path, text)
    rejects_cleanly(read_sacct, path)
    rejects_cleanly(read_sacct, path, skip_bad=True)


@fuzz(40)
@given(text=mutated(json.dumps(SACCT_JSON, indent=1), max_edits=2))
def test_sacct_json_text(tmp_path: Path, text: str) -> None:
    """The JSON text itself edited (broken syntax, cut files)."""
    rejects_cleanly(read_sacct, write(tmp_path, text))
