"""Fuzzing discovery's readers: ``nvidia-smi topo -m``, ``nvidia-smi -L`` / the CSV query and
``lscpu`` (conf/discover_parse.py), then the node type built from them.

Inputs: the real samples of tests/data/topo (see its SOURCES.md) after random edits, and
arbitrary text. Property: a node type, or a ConfigError (see fuzz_support).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_support import fuzz, mutated, rejects_cleanly
from hypothesis import given
from hypothesis import strategies as st

from hai_slurm.conf.discover_parse import parse_gpu_list, parse_lscpu
from hai_slurm.conf.discover_run import Sources, discover, file_sources
from hai_slurm.conf.toml_out import render_discovery

pytestmark = pytest.mark.fuzz
TOPO = Path(__file__).parents[1] / "data" / "topo"
SAMPLES = tuple(sorted(p.read_text() for p in TOPO.glob("*.txt") if "lscpu" not in p.name))
LSCPU = (TOPO / "dgx-a100.lscpu.txt").read_text()
GPU_LIST = "\n".join(f"GPU {i}: NVIDIA A100-SXM4-40GB (UUID: GPU-{i:08x}-1111-2222-3333-"
                     f"444455556666)" for i in range(8)) + "\n"
GPU_CSV = "index, name, pci.bus_id, uuid\n" + "".join(
    f"{i}, NVIDIA A100-SXM4-40GB, 00000000:{16 * i + 7:02X}:00.0, GPU-{i:08x}\n"
    for i in range(8))


def node_type(topo: str, gpus: str | None = None, lscpu: str | None = None) -> None:
    """Discovery as ``hai-slurm conf discover`` runs it, down to the TOML it prints."""
    src = Sources(topo=(topo, "topo.txt"), gpus=(gpus, "gpus.txt") if gpus else None,
                  lscpu=(lscpu, "lscpu.txt") if lscpu else None)
    render_discovery(discover("fuzz", src, 1000), "fuzz")


@fuzz(80)
@given(topo=st.sampled_from(SAMPLES).flatmap(mutated))
def test_topo_matrix(topo: str) -> None:
    """Each real matrix after random edits."""
    rejects_cleanly(node_type, topo)


@fuzz(60)
@given(topo=st.sampled_from(SAMPLES).flatmap(lambda s: mutated(s, max_edits=1)),
       lscpu=mutated(LSCPU, max_edits=2),
       gpus=st.sampled_from((GPU_LIST, GPU_CSV)).flatmap(lambda s: mutated(s, max_edits=2)))
def test_topo_with_lscpu_and_gpu_list(topo: str, lscpu: str, gpus: str) -> None:
    """All three outputs edited together (the combination checks cross-references)."""
    rejects_cleanly(node_type, topo, gpus, lscpu)


@fuzz(60)
@given(text=st.one_of(st.text(max_size=300), mutated(LSCPU), mutated(GPU_LIST),
                      mutated(GPU_CSV)))
def test_lscpu_and_gpu_list_alone(text: str) -> None:
    """Any text as lscpu output and as a GPU list."""
    rejects_cleanly(parse_lscpu, text)
    rejects_cleanly(parse_gpu_list, text)


@fuzz(25)
@given(data=st.binary(max_size=300))
def test_saved_outputs_as_bytes(tmp_path: Path, data: bytes) -> None:
    """Saved files of any bytes, read as ``conf discover --topo F --lscpu F`` reads them."""
    path = tmp_path / "saved.txt"
    path.write_bytes(data)
    src = file_sources(str(path), lscpu=str(path))
    rejects_cleanly(lambda: render_discovery(discover("fuzz", src, 1000), "fuzz"))
