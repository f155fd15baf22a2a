"""Real PyTorch (CPU, gloo, DCP) with ``save_with``: 4 local ranks, a model sharded across them.

Skipped when torch is not importable (it is a test-only dependency: ``pip install
torch==2.13.0``, as ``scripts/setup-host.sh`` does). The same training script runs under Slurm in
tests/integration/test_torch_preemption.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 "
                                    "(scripts/setup-host.sh installs it)")

SCRIPT = Path(__file__).resolve().parent.parent / "data" / "torch_dcp_train.py"
WORLD = 4
TOTAL = 40


def launch(out: Path, *args: str, run: int = 0, reference: bool = False
           ) -> list[subprocess.Popen[str]]:
    """Start WORLD ranks of the training script as local processes (like torchrun)."""
    out.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HAI_"))}
    env = {**base, "WORLD_SIZE": str(WORLD), "HAI_CHECKPOINT_DIR": str(out / "ck"),
           "SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": str(run),
           "TRAIN_STORE": str(out / f"store-{run}-{time.monotonic_ns()}"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, str(SCRIPT), str(out), str(TOTAL), *args,
            *(["--reference"] if reference else [])]
    return [subprocess.Popen(argv, env={**env, "RANK": str(r)}, text=True,
                             stdout=(out / f"rank{r}-run{run}.log").open("w"),
                             stderr=subprocess.STDOUT) for r in range(WORLD)]


def codes(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[int]:
    return [p.wait(timeout=timeout) for p in procs]


def losses(out: Path) -> dict[int, str]:
    """step -> loss; a step logged twice (redone after a resume) must have the same loss."""
    seen: dict[int, str] = {}
    for line in (out / "losses.txt").read_text().splitlines():
        step, value = line.split()
        assert seen.setdefault(int(step), value) == value, f"step {step} differs when redone"
    return seen


def finals(out: Path) -> list[str]:
    return [(out / f"final-{r}.txt").read_text() for r in range(WORLD)]


def logs(out: Path) -> str:
    return "".join(p.read_text() for p in sorted(out.glob("rank*.log")))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run, without the checkpoint library."""
    out = tmp_path_factory.mktemp("reference")
    assert codes(launch(out, reference=True)) == [0] * WORLD, logs(out)
    assert sorted(losses(out)) == list(range(1, TOTAL + 1))
    return out


def wait_for(path: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} not in {path} within {timeout} s"
        time.sleep(0.05)


def test_usr2_to_one_rank_saves_sharded_and_resumes_bit_identically(reference: Path,
                                                                     tmp_path: Path) -> None:
    """USR2 reaches rank 2 only; all 4 ranks stop at the same step (all-reduce), save their DCP
    shards, rank 0 commits and acks, all exit 75; the next run loads and matches the reference
    run's losses and final parameters and Adam state bit for bit."""
    procs = launch(tmp_path, "--step-seconds", "0.05")
    wait_for(tmp_path / "losses.txt", "\n10 ")
    procs[2].send_signal(signal.SIGUSR2)
    assert codes(procs) == [75] * WORLD, logs(tmp_path)
    saved = {line.split()[-1] for line in logs(tmp_path).splitlines() if "saving at step" in line}
    assert len(saved) == 1, logs(tmp_path)
    (ckpt,) = (tmp_path / "ck").glob("sharded-*")
    assert sorted(p.name for p in ckpt.glob("__*.distcp")) == [f"__{r}_0.distcp"
                                                              for r in range(WORLD)]
    assert codes(launch(tmp_path, run=1)) == [0] * WORLD, logs(tmp_path)
    assert f"start {saved.pop()}" in logs(tmp_path)
    assert losses(tmp_path) == losses(reference)
    assert finals(tmp_path) == finals(reference)


def test_killed_after_an_async_save_resumes_from_it_bit_identically(reference: Path,
                                                                    tmp_path: Path) -> None:
    """Periodic dcp.async_save every 8 steps; the job is SIGKILLed (no chance to save) after
    the step-16 save committed; the next run resumes from step 16 and matches the reference."""
    procs = launch(tmp_path, "--async-every", "8", "--step-seconds", "0.05")
    deadline = time.monotonic() + 120
    while not list((tmp_path / "ck").glob("sharded-step0000000016-*/.hai-commit.json")):
        assert time.monotonic() < deadline, logs(tmp_path)
        time.sleep(0.05)
    for proc in procs:
        proc.kill()
    codes(procs)
    assert codes(launch(tmp_path, "--async-every", "8", run=1)) == [0] * WORLD, logs(tmp_path)
    starts = [line for line in logs(tmp_path).splitlines() if "run 1 start" in line]
    assert len(starts) == WORLD and all(s.endswith("start 16") for s in starts), starts
    assert losses(tmp_path) == losses(reference)
    assert finals(tmp_path) == finals(reference)
