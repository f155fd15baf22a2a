"""Real PyTorch on the testbed: a 2-node x 2-task job (srun, CPU, gloo) whose model is sharded
across its 4 ranks and saved with DCP through ``Checkpointer.save_with``, preempted by the real
daemon for an urgent job, requeued, and resumed bit-identically.

The LOW torch job holds n1+n2 (8 GPUs each); two VERY_HIGH team-a jobs hold n3+n4, so the only
job that may give way to the urgent HIGH team-b job (2 nodes) is the torch job. The daemon (the
``hai-slurm daemon`` command) asks it to checkpoint with ``scancel --signal=USR2 --full``: every
rank stops at the same step, writes its DCP shard, rank 0 commits and acknowledges, all ranks
exit 75; the daemon requeues it and the urgent job runs. The resumed run's losses and final
parameters (and Adam state) equal an uninterrupted run's, bit for bit.

Skipped when torch is not importable (``pip install torch==2.13.0``; scripts/setup-host.sh).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import DaemonProcess, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.checkpoint import read_job_report
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.runner import check

pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 "
                                    "(scripts/setup-host.sh installs it)")
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "data" / "torch_dcp_train.py"
TOTAL = 60
WORLD = 4


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


def reference_run(out: Path) -> None:
    """The uninterrupted run: 4 local processes, no checkpoint library."""
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HAI_"))}
    env.update(WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1", TRAIN_STORE=str(out / "store"))
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(out), str(TOTAL), "--reference"],
                              env={**env, "RANK": str(r)}, stdout=subprocess.DEVNULL)
             for r in range(WORLD)]
    assert [p.wait(timeout=300) for p in procs] == [0] * WORLD


def losses(out: Path) -> dict[int, str]:
    seen: dict[int, str] = {}
    for line in (out / "losses.txt").read_text().splitlines():
        step, value = line.split()
        assert seen.setdefault(int(step), value) == value, f"step {step} differs when redone"
    return seen


def finals(out: Path) -> list[str]:
    return [(out / f"final-{r}.txt").read_text() for r in range(WORLD)]



def torch_job(bed: Bed, work: Path) -> int:
    """sbatch the torch job as a user would: #HAI lines, srun, exit code passed on by exec."""
    checkpoints = work / "ck"
    script = work / "torch.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2 --gres=gpu:8\n"
        "#HAI --priority=LOW --team=team-a --grace=60\n"
        f"#HAI --checkpoint-dir={checkpoints}\n"
        f"export HAI_CHECKPOINT_DIR={checkpoints}\n"
        "export OMP_NUM_THREADS=1\n"
        f"exec srun {sys.executable} {SCRIPT} {work} {TOTAL} --step-seconds 0.1\n")
    out = check(bed.run(["sbatch", "--parsable", "--job-name=torch", "--account=team-a",
                         f"--chdir={work}", f"--output={work}/torch.out", "--open-mode=append",
                         str(script)]), "sbatch").stdout
    job = int(out.strip().split(";")[0])
    bed.jobs.append(job)
    return job


def test_torch_dcp_job_preempted_by_the_daemon_resumes_bit_identically(bed: Bed,
                                                                        tmp_path: Path) -> None:
    """2 nodes x 2 tasks, DCP shards, preempted through the daemon, 0 steps lost, same bits."""
    reference = tmp_path / "reference"
    reference_run(reference)
    work = tmp_path / "job"
    work.mkdir()
    job = torch_job(bed, work)
    bed.wait(job, "RUNNING", timeout=60)
    fillers = [bed.toy(f"keep{n}", priority="VERY_HIGH", account="team-a",
                       sbatch=["-N1", "--gres=gpu:8", f"--nodelist=n{n}"]) for n in (3, 4)]
    for filler in fillers:
        bed.wait(filler, "RUNNING", timeout=60)
    wait_until(lambda: (work / "losses.txt").exists() and
               len((work / "losses.txt").read_text().splitlines()) >= 10, 120,
               f"torch job did not train 10 steps; output:\n{_text(work / 'torch.out')}")
    daemon = DaemonProcess.start(daemon_config(tmp_path, bed.testbed), tmp_path / "daemon.log",
                                 bed.testbed)
    try:
        daemon.wait_log("preemption on (planner + two-phase executor)", timeout=30)
        urgent = bed.toy("urgent", steps=20, priority="HIGH", account="team-b",
                         sbatch=["-N2", "--gres=gpu:8"])
        started = time.monotonic()
        bed.wait(urgent, "RUNNING", "COMPLETED", timeout=120)
        urgent_wait = time.monotonic() - started
        repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
        (plan,) = wait_until(lambda: [p for p in repo.history() if p.state is PlanState.DONE],
                             30, f"no plan done; log:\n{daemon.text()[-3000:]}")
        (victim,) = plan.victims
        assert victim.job_id == job and victim.state is VictimState.REQUEUED, plan
    finally:
        daemon.kill()
    report = read_job_report(work / "ck" / ".hai" / str(job), str(job), os.geteuid(),
                             restart_count=0)
    assert report.ack is not None and report.ack.step is not None, report
    assert report.ack.checkpoint is not None and report.ack.checkpoint.startswith("sharded-")
    saved = report.ack.step
    bed.wait(job, "COMPLETED", timeout=bed.testbed.shape.cred_expire + 240)
    out = _text(work / "torch.out")
    assert sorted(line for line in out.splitlines() if " start " in line) == sorted(
        [f"rank {r} run 0 start 0" for r in range(WORLD)]
        + [f"rank {r} run 1 start {saved}" for r in range(WORLD)]), out
    assert out.count(f"saving at step {saved}") == WORLD, out
    shards = sorted(p.name for p in (work / "ck" / report.ack.checkpoint).glob("__*.distcp"))
    assert shards == [f"__{r}_0.distcp" for r in range(WORLD)]
    assert losses(work) == losses(reference)
    assert finals(work) == finals(reference)
    print(f"urgent job waited {urgent_wait:.1f} s; torch job saved at step {saved}")


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
