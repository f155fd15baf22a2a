"""Generated files for three cluster shapes match the golden copies byte for byte.

To accept an intended change:
``HAI_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_conf_golden.py``, then review
``git diff tests/unit/golden/conf`` (see tests/unit/golden/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hai_slurm.conf.description import load
from hai_slurm.conf.generate import render_all

GOLDEN = Path(__file__).parent / "golden" / "conf"
UPDATE = os.environ.get("HAI_UPDATE_GOLDEN") == "1"
# (shape folder, target Slurm version): each writes to <shape>/expected-<version>/
CASES = [
    ("pcie8-2socket", "22.05"),
    ("dgx-a100-nvlink", "22.05"),
    ("dgx-a100-nvlink", "24.11"),
    ("mixed-2leaf", "22.05"),
]


@pytest.mark.parametrize(("shape", "version"), CASES)
def test_generated_files_match_golden(shape: str, version: str) -> None:
    """Every generated file equals its golden copy, and no golden file is left over."""
    desc, dep = load(GOLDEN / shape / "description.toml", version)
    files = render_all(desc, dep)
    expected_dir = GOLDEN / shape / f"expected-{version}"
    if UPDATE:
        expected_dir.mkdir(exist_ok=True)
        for old in expected_dir.iterdir():
            old.unlink()
        for name, text in files.items():
            (expected_dir / name).write_text(text, encoding="utf-8")
    on_disk = sorted(p.name for p in expected_dir.iterdir())
    assert on_disk == sorted(files), "set HAI_UPDATE_GOLDEN=1 to accept a new set of files"
    for name, text in files.items():
        golden = (expected_dir / name).read_text(encoding="utf-8")
        assert text == golden, (f"{shape}/{name} for Slurm {version} differs from the golden "
                                "copy; if intended, rerun with HAI_UPDATE_GOLDEN=1")


def test_generation_is_deterministic() -> None:
    """Renders in fresh interpreters with other hash seeds are identical to this one (no clock,
    no set or dict order leaking into the output) and hold no absolute paths."""
    path = GOLDEN / "mixed-2leaf" / "description.toml"
    here = render_all(*load(path))
    code = ("import json, sys; from hai_slurm.conf.description import load; "
            "from hai_slurm.conf.generate import render_all; "
            "print(json.dumps(render_all(*load(sys.argv[1]))))")
    for seed in ("1", "2"):
        res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, timeout=60, check=False,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == here, f"output differs with PYTHONHASHSEED={seed}"
    assert str(GOLDEN) not in "".join(here.values())


def test_version_specific_preemption_keys() -> None:
    """22.05 gets preempt_send_user_signal in SchedulerParameters; 24.11 gets PreemptParameters."""
    old = (GOLDEN / "dgx-a100-nvlink" / "expected-22.05" / "slurm.conf").read_text()
    new = (GOLDEN / "dgx-a100-nvlink" / "expected-24.11" / "slurm.conf").read_text()
    assert "PreemptParameters" not in old
    assert "preempt_send_user_signal" in old
    assert "PreemptParameters=send_user_signal" in new
    assert "preempt_send_user_signal" not in new


@pytest.mark.parametrize(("shape", "version"), CASES)
def test_generated_scripts_parse(shape: str, version: str, tmp_path: Path) -> None:
    """The sacctmgr script is valid bash and the entitlements table is a Lua 5.1 chunk that
    returns the eight classes."""
    desc, dep = load(GOLDEN / shape / "description.toml", version)
    files = render_all(desc, dep)
    if "sacctmgr-setup.sh" in files:
        script = tmp_path / "setup.sh"
        script.write_text(files["sacctmgr-setup.sh"])
        res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                             timeout=30, check=False)
        assert res.returncode == 0, res.stderr
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.skip("lua5.1 is not installed")
    table = tmp_path / "hai_entitlements.lua"
    table.write_text(files["hai_entitlements.lua"])
    res = subprocess.run([lua, "-e", f"local t = dofile('{table}'); print(#t.classes)"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 0 and res.stdout.strip() == "8", res.stderr
