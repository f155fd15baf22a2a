"""The daemon helps jobs that free GPUs beside running jobs cannot start.

* A job that takes its nodes whole (``sbatch --exclusive``) starts only on a node that runs no
  other job, and Slurm gives it every GPU there (22.05: ``--exclusive --gres=gpu:2`` holds
  ``gpu:8``). On a testbed where one node runs a 2-GPU LOW job (6 GPUs free) and the other
  three an 8-GPU LOW job each, a HIGH ``--exclusive`` 2-GPU job stayed pending for good: the
  planner counted 6 free GPUs, so it "fit" and got no plan. Now its plan takes the 2-GPU job
  (the cheapest way to empty a node) and the job runs there.
* A node whose CPUs are all taken (a 1-GPU LOW job with ``-c 16``) has 7 free GPUs nobody can
  use: a HIGH 2-GPU job "fit" there too and waited. Now that node is left out of the job's
  plans and the plan frees another; so is a node with free CPUs, but fewer than the job asks.
* An idle node in an admin's reservation: a HIGH job "fit" on its 8 free GPUs and waited, though
  Slurm starts there only jobs linked to the reservation. Now such nodes are left out; so are
  nodes of a reservation that starts before the job's time limit would end (Slurm keeps the job
  off them too).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import DaemonProcess, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.records import Plan
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.slow

_HIGH = """#!/bin/bash
#HAI --priority=HIGH --team=team-b
#SBATCH -N1 {sbatch}
sleep 10
"""


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


@contextmanager
def planned_high(bed: Bed, tmp_path: Path, sbatch: str) -> Iterator[tuple[int, Plan]]:
    """Submit a HIGH job (``#SBATCH -N1`` and ``sbatch``), start the daemon (1-s cycles) and
    wait for the job's plan: (the job's id, its plan). The daemon runs until the block ends."""
    script = bed.workdir / "high.sh"
    script.write_text(_HIGH.format(sbatch=sbatch))
    high = bed.slurm.submit_script(script, ["--account=team-b", f"--chdir={bed.workdir}",
                                            f"--output={bed.workdir}/%j.out"])
    bed.jobs.append(high)
    config = daemon_config(tmp_path, bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)

    def plans() -> list[Plan]:
        return [p for p in repo.history(limit=100)
                if high in {b.job_id for b in p.beneficiaries}]

    try:
        daemon.wait_log("preemption on", timeout=30)   # its database is made by then
        wait_until(lambda: plans() != [], 60,
                   f"no plan for the HIGH job {high} ({sbatch}):\n{daemon.text()[-4000:]}")
        (plan,) = plans()
        yield high, plan
    finally:
        daemon.kill()


def test_an_exclusive_high_job_gets_a_whole_node(bed: Bed, tmp_path: Path) -> None:
    """The plan's one victim is the 2-GPU LOW job; the HIGH job then runs alone on its node,
    holding all 8 GPUs, and completes."""
    small = bed.toy("small", sbatch=["-N1", "--gres=gpu:2"])
    bed.wait(small, "RUNNING", timeout=60)
    bed.wait_progress(small, 20, timeout=60)
    bed.fill(3)
    with planned_high(bed, tmp_path, "--gres=gpu:2 --exclusive") as (high, plan):
        assert [v.job_id for v in plan.victims] == [small.job_id], plan
        bed.wait(high, "RUNNING", timeout=120)
        snap = bed.slurm.snapshot()
        job = snap.job(high)
        assert job is not None and job.exclusive == "node" and job.gpus_allocated == 8, job
        assert [j.job_id for j in snap.running
                if j.job_id != high and set(j.nodes) & set(job.nodes)] == []
        bed.wait(high, "COMPLETED", timeout=60)


@pytest.mark.parametrize(("hog_cpus", "high_cpus"), [(16, 1), (12, 8)])
def test_free_gpus_on_a_node_without_free_cpus_start_nobody(bed: Bed, tmp_path: Path,
                                                            hog_cpus: int, high_cpus: int) -> None:
    """The plan frees one of the three full nodes; the HIGH job runs there and completes.
    With 4 CPUs left beside the hog, a LOW 1-GPU job asking 2 CPUs waits for a full node
    (``--nodelist``): the hog's node had room for it, so it was not closed, and the HIGH job
    asking 8 CPUs "fit" there (no plan) until each job's own request was checked."""
    hog = bed.toy("hog", sbatch=["-N1", "--gres=gpu:1", f"--cpus-per-task={hog_cpus}"])
    bed.wait(hog, "RUNNING", timeout=60)
    fill = bed.fill(3)
    if hog_cpus < 16:
        full = sorted(bed.nodes_of(fill[0]))[0]
        bed.toy("small", sbatch=["-N1", "--gres=gpu:1", "--cpus-per-task=2",
                                 f"--nodelist={full}"])
    with planned_high(bed, tmp_path, f"--gres=gpu:2 --cpus-per-task={high_cpus}") as (
            high, plan):
        assert {v.job_id for v in plan.victims} <= {f.job_id for f in fill}, plan
        bed.wait(high, "RUNNING", timeout=120)
        bed.wait(high, "COMPLETED", timeout=60)


def test_victims_that_free_gpus_but_not_the_cpus_asked_are_not_taken(bed: Bed,
                                                                     tmp_path: Path) -> None:
    """One node runs LOW jobs "light" (4 GPUs, 1 CPU) and "heavy" (4 GPUs, 14 CPUs), the other
    three an 8-GPU LOW job each. For a HIGH job of 4 GPUs and 8 CPUs the planner, counting
    GPUs, could take "light" (as cheap as "heavy"), which leaves 2 CPUs: Slurm kept the job
    pending and "light" gave way for nothing. Now the plan takes "heavy" (its CPUs come free
    with its GPUs) or frees a full node, the job runs, and "light" runs on."""
    light = bed.toy("light", sbatch=["-N1", "--gres=gpu:4", "--cpus-per-task=1"])
    bed.wait(light, "RUNNING", timeout=60)
    (node,) = bed.nodes_of(light)
    heavy = bed.toy("heavy", sbatch=["-N1", "--gres=gpu:4", "--cpus-per-task=14",
                                     f"--nodelist={node}"])
    bed.wait(heavy, "RUNNING", timeout=60)
    fill = bed.fill(3)
    with planned_high(bed, tmp_path, "--gres=gpu:4 --cpus-per-task=8") as (high, plan):
        victims = {v.job_id for v in plan.victims}
        assert light.job_id not in victims, plan
        assert victims == {heavy.job_id} or victims <= {f.job_id for f in fill}, plan
        bed.wait(high, "RUNNING", timeout=120)
        running = bed.slurm.snapshot().job(high)
        assert running is not None and (node not in running.nodes) == (heavy.job_id
                                                                       not in victims), running
        bed.wait(high, "COMPLETED", timeout=60)
    job = bed.slurm.snapshot().job(light.job_id)
    assert job is not None and job.restart_count == 0, job


@pytest.mark.parametrize("start", ["now", "now+30minutes"])
def test_an_idle_node_in_an_admins_reservation_starts_nobody(bed: Bed, tmp_path: Path,
                                                             start: str) -> None:
    """Three nodes run LOW jobs, the fourth is idle in reservation ``maint-*`` (root's),
    started or starting in 30 min (the HIGH job has no time limit, so Slurm keeps it off that
    node either way; before, the planner counted the node's GPUs free until the reservation
    started, and the job waited): the HIGH 8-GPU job's plan frees one of the three, and it
    runs there."""
    fill = bed.fill(3)
    busy = {n for f in fill for n in (bed.slurm.snapshot().job(f.job_id) or f).nodes}
    (idle,) = [n.name for n in bed.slurm.snapshot().nodes if n.name not in busy]
    name = f"maint-{time.time_ns()}"
    made = bed.run(["scontrol", "create", "reservation", f"ReservationName={name}",
                    f"StartTime={start}", "Duration=30", f"Nodes={idle}", "Users=root",
                    "Flags=MAINT"])
    assert made.returncode == 0, made.stderr
    try:
        if start == "now":
            wait_until(lambda: any(n.name == idle and "RESERVED" in n.state_flags
                                   for n in bed.slurm.snapshot().nodes), 60,
                       f"{idle} never flagged RESERVED")
        else:
            (listed,) = [r for r in bed.slurm.reservations(name) if r.name == name]
            assert listed.state == "INACTIVE" and listed.nodes == (idle,), listed
            assert listed.start_time is not None and listed.start_time > time.time() + 600
        with planned_high(bed, tmp_path, "--gres=gpu:8") as (high, _plan):
            bed.wait(high, "RUNNING", timeout=120)
            job = bed.slurm.snapshot().job(high)
            assert job is not None and idle not in job.nodes, job
            bed.wait(high, "COMPLETED", timeout=60)
    finally:
        bed.run(["scontrol", "delete", f"ReservationName={name}"])
