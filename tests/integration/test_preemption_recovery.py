"""An executor killed with SIGKILL mid-plan, on the real testbed: the restarted one completes the
plan, and no job is left held or half-requeued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import Testbed
from preempt_support import Bed, bed_for

from hai_slurm.priority.demo.scenario import steps_lost, toy_runs
from hai_slurm.priority.store import PlanState

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)

CHILD = """
import json, sys, time
from pathlib import Path
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.adapter import CliSlurmClient
from hai_slurm.slurm_plugins.runner import SubprocessRunner

a = json.loads(sys.argv[1])
run = SubprocessRunner(a["conf"])
slurm = CliSlurmClient(run)

def hook(point, plan_id):
    if point == a["point"]:
        Path(a["marker"]).write_text(str(plan_id))
        time.sleep(600)  # the test kills us here

ex = PreemptionExecutor(slurm, Repository(upgrade(a["db"])), hook=hook)
ex.run(ExecutionRequest(a["bene"], tuple(a["victims"]), nodes=tuple(a["nodes"])),
       slurm.snapshot())
"""


def _wait_exited(bed: Bed, job_id: int, timeout: float = 20) -> None:
    """Wait until a victim that acked has left its GPUs: ended, or already pending again
    after Slurm's RequeueExit=75 (phase 1 ends at the ack, the job's exit follows it)."""
    end = time.monotonic() + timeout
    while True:
        facts = bed.facts(job_id)
        if facts.finished or (facts.pending and facts.restart_count == 1):
            return
        assert time.monotonic() < end, f"an acked victim did not exit: {facts}"
        time.sleep(0.2)


@pytest.mark.parametrize("point", ["phase1_done", "asked"])
def test_sigkill_mid_plan_then_restart_completes_it(bed: Bed, point: str) -> None:
    """Kill -9 after phase 1 (victims acked, then exiting; guard up) or right after asking;
    a new executor's recover() requeues the victims, the beneficiary starts on n1+n2,
    everything held is released and the victims resume with 0 steps lost."""
    victims = [bed.toy(f"v{n}", sbatch=["-N1", "--gres=gpu:8", f"--nodelist=n{n}"])
               for n in (1, 2, 3, 4)]
    for v in victims:
        bed.wait(v, "RUNNING")
    for v in victims:
        bed.wait_progress(v, 10)
    competitor = bed.toy("competitor", steps=20, priority="NORMAL", sbatch=["--gres=gpu:8"])
    bene = bed.toy("bene", steps=30, priority="HIGH", account="team-b",
                   sbatch=["-N2", "--gres=gpu:8"])
    marker = bed.workdir / "marker"
    args = {"conf": bed.testbed.slurm_conf, "db": f"sqlite:///{bed.workdir / 'state.db'}",
            "point": point, "marker": str(marker), "bene": bene.job_id,
            "victims": [victims[0].job_id, victims[1].job_id], "nodes": ["n1", "n2"]}
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)])
    try:
        end = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, f"executor child exited early ({child.returncode})"
            assert time.monotonic() < end, f"the child never reached {point}"
            time.sleep(0.05)
        if point == "phase1_done":  # both acked (saved); each exits 75 right after its ack
            for v in victims[:2]:  # ended, or already requeued by RequeueExit=75 (not held)
                _wait_exited(bed, v.job_id)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(10)
    plan_id = int(marker.read_text())
    assert bed.repo.get_plan(plan_id).state is PlanState.SIGNALLED
    # The killed executor's guard is still up: its reservation, which holds nobody.
    standing = [r for r in bed.slurm.reservations(f"hai-plan-{plan_id}-")
                if r.end_time and r.end_time > time.time()]   # not an ended one of a test before
    assert [set(r.nodes) for r in standing] == [{"n1", "n2"}]
    assert competitor.job_id not in bed.held_jobs()

    (result,) = bed.executor().recover()
    assert result.plan_id == plan_id
    assert result.state is PlanState.DONE, result.note
    assert bed.held_jobs() == []
    assert bed.repo.unfinished_plans() == []
    bed.wait(bene, "COMPLETED", timeout=30)
    for v in victims[:2]:
        facts = bed.wait(v, "RUNNING", timeout=bed.testbed.shape.cred_expire + 30)
        assert facts.restart_count == 1
        bed.wait_progress(v, 3, run=1)
        assert steps_lost(toy_runs(v)) == [0], toy_runs(v)
    for v in victims[2:]:
        assert bed.facts(v).restart_count == 0
