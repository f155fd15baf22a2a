"""The recipes of checkpoint/RECIPES.md, run as written: 2 local ranks (gloo) for torch.save and
DCP, 1 process for Lightning. USR2 reaches one rank; every rank exits 75 at the same step; the
next run resumes at that step and finishes. Skipped when torch (or lightning) is missing."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 "
                                    "(scripts/setup-host.sh installs it)")

RECIPES = Path(__file__).resolve().parents[2] / "checkpoint" / "RECIPES.md"


def recipe(name: str) -> str:
    """The python block right after ``<!-- recipe: NAME -->``."""
    match = re.search(rf"<!-- recipe: {name} -->\n```python\n(.*?)```", RECIPES.read_text(),
                      re.DOTALL)
    assert match, f"no recipe {name!r} in {RECIPES}"
    return match.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(script: Path, tmp: Path, world: int, run: int) -> list[subprocess.Popen[str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HAI_"))}
    env = {**base, "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "HAI_CHECKPOINT_DIR": str(tmp / "ck"),
           "SLURM_JOB_ID": "31", "SLURM_RESTART_COUNT": str(run), "OMP_NUM_THREADS": "1"}
    return [subprocess.Popen([sys.executable, str(script)], cwd=tmp, text=True,
                             env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                             stdout=(tmp / f"r{r}-{run}.log").open("w"),
                             stderr=subprocess.STDOUT) for r in range(world)]


def logs(tmp: Path) -> str:
    return "".join(p.read_text() for p in sorted(tmp.glob("r*.log")))


def preempt_and_resume(name: str, tmp: Path, world: int) -> None:
    script = tmp / f"recipe_{name.replace('-', '_')}.py"
    script.write_text(recipe(name))
    procs = start(script, tmp, world, 0)
    deadline = time.monotonic() + 120
    while logs(tmp).count("start 0") < world:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), logs(tmp)
        time.sleep(0.05)
    time.sleep(0.5)
    procs[-1].send_signal(signal.SIGUSR2)
    assert [p.wait(timeout=180) for p in procs] == [75] * world, logs(tmp)
    acked = re.findall(r"acknowledged checkpoint at step (\d+)", logs(tmp))
    assert len(acked) == 1, logs(tmp)
    procs = start(script, tmp, world, 1)
    assert [p.wait(timeout=300) for p in procs] == [0] * world, logs(tmp)
    assert logs(tmp).count(f"start {acked[0]}") == world, logs(tmp)


def test_torch_save_recipe(tmp_path: Path) -> None:
    """One torch.save file per rank in its part directory."""
    preempt_and_resume("torch-save", tmp_path, 2)


def test_dcp_recipe(tmp_path: Path) -> None:
    """dcp.save before exiting, dcp.async_save every 1000 steps."""
    preempt_and_resume("dcp", tmp_path, 2)


def test_lightning_recipe(tmp_path: Path) -> None:
    """The Lightning callback (skipped without lightning: pip install lightning==2.6.6)."""
    pytest.importorskip("lightning", reason="lightning is not installed: pip install "
                                            "lightning==2.6.6 (scripts/setup-host.sh does)")
    preempt_and_resume("lightning", tmp_path, 1)
