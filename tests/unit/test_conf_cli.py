"""`hai-slurm conf generate|validate|discover` through the real click entry point."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.conf.description import load
from hai_slurm.conf.generate import render_all

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "conf" / "examples" / "cluster.toml"
TOPO = ROOT / "tests" / "data" / "topo"


def test_generate_writes_every_file(tmp_path: Path) -> None:
    """generate writes exactly what render_all returns, and the script is executable."""
    res = CliRunner().invoke(cli, ["conf", "generate", str(EXAMPLE), "-o", str(tmp_path / "out"),
                                   "--slurm-version", "24.11"])
    assert res.exit_code == 0, res.output
    desc, dep = load(EXAMPLE, "24.11")
    files = render_all(desc, dep)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(files)
    for name, text in files.items():
        assert (tmp_path / "out" / name).read_text() == text
    assert (tmp_path / "out" / "sacctmgr-setup.sh").stat().st_mode & 0o111
    assert "PreemptParameters" not in files["slurm.conf"]  # daemon mode: Slurm never preempts
    assert "for Slurm 24.11" in files["slurm.conf"]


def test_validate_ok_and_error(tmp_path: Path) -> None:
    """validate prints a summary, or one error line naming file and key with exit code 1."""
    ok = CliRunner().invoke(cli, ["conf", "validate", str(EXAMPLE)])
    assert ok.exit_code == 0 and "OK - cluster hai, 8 nodes, 64 GPUs" in ok.output
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text().replace('nodes = "dgx[01-04]"', 'nodes = "dgx[01-05]"'))
    res = CliRunner().invoke(cli, ["conf", "validate", str(bad)])
    assert res.exit_code == 1
    assert f"error: {bad}: switch[1].nodes: unknown node 'dgx05'" in res.output


def test_discover_from_files() -> None:
    """discover --topo/--lscpu prints a TOML node type with the NICs as comments."""
    res = CliRunner().invoke(cli, ["conf", "discover", "--topo", str(TOPO / "dgx-a100.txt"),
                                   "--lscpu", str(TOPO / "dgx-a100.lscpu.txt"), "--name", "dgx",
                                   "--memory-mb", "1000000"])
    assert res.exit_code == 0, res.output
    assert "# NIC mlx5_0: socket 0, same PCIe switch as GPUs [0, 1]" in res.output
    data = tomllib.loads(res.output)
    assert data["node_types"]["dgx"]["memory_mb"] == 1000000
    assert data["node_types"]["dgx"]["socket"][1]["pcie_switch"][0]["cores"] == "112-127"


def test_discover_errors() -> None:
    """Malformed files and a missing nvidia-smi give one clear error line."""
    res = CliRunner().invoke(cli, ["conf", "discover", "--topo",
                                   str(TOPO / "dgx-a100.lscpu.txt")])
    assert res.exit_code == 1 and "no header with GPU0" in res.output
    res = CliRunner().invoke(cli, ["conf", "discover", "--lscpu", str(TOPO / "x")])
    assert res.exit_code == 2 and "need --topo" in res.output
    if shutil.which("nvidia-smi") is None:
        res = CliRunner().invoke(cli, ["conf", "discover"])
        assert res.exit_code == 1 and "nvidia-smi not found on PATH" in res.output


@pytest.mark.parametrize("version", ["22.05", "23.02", "26.05"])
def test_version_option_is_used(tmp_path: Path, version: str) -> None:
    """--slurm-version reaches every file header."""
    res = CliRunner().invoke(cli, ["conf", "generate", str(EXAMPLE), "-o", str(tmp_path),
                                   "--slurm-version", version])
    assert res.exit_code == 0
    assert f"for Slurm {version}" in (tmp_path / "gres.conf").read_text()
