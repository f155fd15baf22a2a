"""The daemon preempts nobody for a pending job that could not start on the freed GPUs.

A HIGH job that waits for its begin time (``--begin``), for another job (``--dependency``) or
for its array's task limit (``--array=...%1``) would stay pending on GPUs a plan freed: the
victims would save, be requeued and lose their restart for nothing. Slurm says why each job
waits (squeue's reason); the daemon plans only for jobs that wait for resources or priority.
A plain HIGH job submitted afterwards is planned for, showing the daemon was planning all
along.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import HAI_SLURM, DaemonProcess, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.slow

_HIGH = """#!/bin/bash
#HAI --priority=HIGH --team=team-b
#SBATCH -N1 --gres=gpu:8
sleep 2
"""


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


def test_jobs_that_cannot_start_get_no_plan(bed: Bed, tmp_path: Path) -> None:
    """Begin time, dependency, array task limit: no plan, and ``priority explain`` says what
    the job waits for; then a plain HIGH job gets its plan."""
    script = bed.workdir / "high.sh"
    script.write_text(_HIGH)
    long = bed.workdir / "long.sh"
    long.write_text(_HIGH.replace("sleep 2", "sleep 600"))

    def submit(*args: str, path: Path = script) -> int:
        jid = bed.slurm.submit_script(path, ["--account=team-b", f"--chdir={bed.workdir}",
                                               f"--output={bed.workdir}/%j.out", *args])
        bed.jobs.append(jid)
        return jid

    # one task of a 2-task array runs (on n1..n4, whichever); the other waits for the limit
    limited = submit("--array=0-1%1", path=long)
    wait_until(lambda: (j := bed.slurm.snapshot().job(limited)) is not None
               and j.reason == "JobArrayTaskLimit", 30, "the array's second task never waited "
               "for its task limit")
    bed.fill(3)
    blocker = submit("--hold")
    waiting = {
        "BeginTime": submit("--begin=now+600"),
        "Dependency": submit(f"--dependency=afterok:{blocker}"),
        "JobArrayTaskLimit": limited,
    }
    config = daemon_config(tmp_path, bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    try:
        daemon.wait_log("preemption on", timeout=30)
        for _ in range(6):                       # six 1-s cycles at least
            daemon.wait_log("cycle: ", timeout=30, after=len(daemon.text()))
        # no plan at all (a plan for an array's record would name its split-off task)
        plans = repo.history(limit=100)
        assert plans == [], (waiting, plans, daemon.text()[-4000:])
        for why, jid in waiting.items():
            out = subprocess.run([HAI_SLURM, "priority", "explain", str(jid), "--config",
                                  str(config)], capture_output=True, text=True, timeout=60,
                                 check=False)
            assert out.returncode == 0, out.stderr
            assert why in out.stdout, (why, out.stdout)
        plain = submit()
        wait_until(lambda: plain in {b.job_id for p in repo.history(limit=100)
                                     for b in p.beneficiaries}, 60,
                   f"no plan for the plain HIGH job {plain}:\n{daemon.text()[-4000:]}")
        bed.wait(plain, "COMPLETED", timeout=60)   # its plan ends before the daemon does
    finally:
        daemon.kill()
