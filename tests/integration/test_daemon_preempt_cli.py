"""``hai-slurm daemon`` (the real command, a child process) preempts on the testbed by default.

Four LOW team-a toy jobs fill the 4 x 8 GPUs; a HIGH team-b job asks for one node. The daemon,
started with a config that only shortens the planner's minimum run time, plans from a topology
derived from Slurm (nodes, GPUs, leaf switches from ``scontrol show topology``), asks one victim
to checkpoint, requeues it, and the HIGH job runs; the victim resumes from its checkpoint having
lost nothing. With ``--no-preempt`` the same command writes priorities only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import HAI_SLURM, DaemonProcess, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.demo.scenario import steps_lost, toy_runs
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)



def test_daemon_command_preempts_a_low_job_for_a_high_one(bed: Bed, tmp_path: Path) -> None:
    """The HIGH job starts within seconds; exactly one LOW job acknowledged its checkpoint, was
    requeued (restart 1) and resumed at the step it saved; the plan is done in the database."""
    lows = bed.fill()
    config = daemon_config(tmp_path, bed.testbed)
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    try:
        daemon.wait_log("preemption on (planner + two-phase executor), topology from Slurm's "
                        "nodes under 2 leaf switch(es)", timeout=30)
        high = bed.toy("high", steps=40, priority="HIGH", account="team-b",
                       sbatch=["-N1", "--gres=gpu:8"])
        bed.wait(high, "RUNNING", "COMPLETED", timeout=60)
        repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
        plans = wait_until(lambda: [p for p in repo.history() if p.state is PlanState.DONE],
                           30, f"no plan done; log:\n{daemon.text()[-3000:]}")
        (plan,) = plans
        assert plan.beneficiaries[0].job_id == high.job_id
        (victim,) = plan.victims
        assert victim.state is VictimState.REQUEUED, plan
        assert victim.job_id in {j.job_id for j in lows}
        bed.wait(high, "COMPLETED", timeout=60)
        low = next(j for j in lows if j.job_id == victim.job_id)
        facts = bed.wait(low, "RUNNING", timeout=bed.testbed.shape.cred_expire + 60)
        assert facts.restart_count == 1
        bed.wait_progress(low, 5, run=1, timeout=60)
        assert steps_lost(toy_runs(low)) == [0], toy_runs(low)
        others = [j for j in lows if j.job_id != victim.job_id]
        assert all(bed.facts(j).restart_count == 0 for j in others)
        assert bed.held_jobs() == []
    finally:
        daemon.kill()


def test_no_preempt_flag_runs_priorities_only(testbed: Testbed, tmp_path: Path) -> None:
    """``--no-preempt --once``: one policy cycle, and the log says preemption is off."""
    config = daemon_config(tmp_path, testbed)
    res = subprocess.run([HAI_SLURM, "daemon", "--config", str(config), "--once",
                          "--no-preempt"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert "preemption off (priorities only)" in res.stderr, res.stderr
