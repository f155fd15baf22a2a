"""The urgent path on the real testbed: ``hai-slurm daemon`` with the README's default 30-s
cycle plans a new HIGH job that needs preemption within seconds of its ``sbatch``, at the
urgent poll, not at the next cycle.

Four LOW toy jobs fill the 4 x 8 GPUs; the daemon runs its first cycle; a HIGH 8-GPU job is
submitted right after it. With the 30-s cycle, a plan within 10 s can only come from the urgent
path (the poll every ``urgent_poll`` = 1 s, the default). The figure is printed; the bound is
generous on purpose (this is not a timed test: bench/urgent_path measures it, on and off).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import DaemonProcess, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)



def test_a_high_job_is_planned_seconds_after_sbatch_with_the_default_30s_cycle(
        bed: Bed, tmp_path: Path) -> None:
    """sbatch -> plan created, measured and printed; < 10 s (the cycle is 30 s), with no
    cycle in between; the HIGH job then runs."""
    bed.fill()
    config = daemon_config(tmp_path, bed.testbed, shipped_intervals=True)
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log",
                                 bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    try:
        daemon.wait_log("preemption on", timeout=30)
        daemon.wait_log("cycle: ", timeout=30)       # the first cycle is done: 30 s to the next
        cycles = daemon.text().count("cycle: ")
        sbatch = time.time()
        high = bed.toy("urgent", steps=40, priority="HIGH", account="team-b",
                       sbatch=["-N1", "--gres=gpu:8"])
        plan = wait_until(
            lambda: next((p for p in repo.history()
                          if high.job_id in {b.job_id for b in p.beneficiaries}), None), 25,
            f"no plan for job {high.job_id} within 25 s; log:\n{daemon.text()[-3000:]}")
        seconds = plan.created_at - sbatch
        between = daemon.text().count("cycle: ") - cycles
        print(f"sbatch -> plan created: {seconds:.2f} s (cycle 30 s, urgent_poll 1 s); "
              f"{between} cycle(s) in between")
        assert seconds < 10, f"planned {seconds:.1f} s after sbatch: the urgent path is absent"
        assert between == 0, "a cycle ran before the plan: it did not come from the urgent path"
        # logged once the look is done, which may be just after the plan is in the store
        daemon.wait_log(f"urgent look at job(s) {high.job_id}", timeout=10)
        bed.wait(high, "RUNNING", "COMPLETED", timeout=60)
    finally:
        daemon.kill()


def test_a_high_job_behind_young_jobs_is_planned_when_they_come_of_age(
        bed: Bed, tmp_path: Path) -> None:
    """The four LOW jobs are younger than the urgent minimum run time (45 s here) when the
    HIGH job arrives: every fixed look (up to 20 s after it was seen) refuses it, "too young".
    The refusal says when they come of age, and the job gets one more look then, so it is
    planned within seconds of that, long before the next cycle (120 s here; before, that
    cycle planned it). The daemon runs its first cycle before the LOW jobs start, so they are
    seconds old when the HIGH job arrives however long the daemon took to start."""
    config = daemon_config(tmp_path, bed.testbed, shipped_intervals=True, extra="""
urgent_min_run_time = "45s"
[planner.class_min_run_time]
LOW = "10m"
[intervals]
cycle = "120s"
lock_ttl = "150s"
""")
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    try:
        daemon.wait_log("cycle: ", timeout=30)
        cycles = daemon.text().count("cycle: ")
        lows = bed.fill()
        snap = bed.slurm.snapshot()
        starts = [snap.job(low.job_id).start_time for low in lows]
        assert all(s is not None for s in starts), starts
        of_age = max(s for s in starts if s is not None) + 45
        assert of_age - time.time() > 21, "the LOW jobs came of age before the fixed looks ended"
        high = bed.toy("urgent", steps=40, priority="HIGH", account="team-b",
                       sbatch=["-N1", "--gres=gpu:8"])
        plan = wait_until(
            lambda: next((p for p in repo.history()
                          if high.job_id in {b.job_id for b in p.beneficiaries}), None),
            of_age - time.time() + 20,
            f"no plan for job {high.job_id} within 20 s of its victims' coming of age; "
            f"log:\n{daemon.text()[-3000:]}")
        print(f"victims of age -> plan created: {plan.created_at - of_age:.2f} s "
              f"(cycle 120 s, RIPE_GAP 5 s)")
        assert plan.created_at >= of_age - 1, "planned before its victims came of age"
        assert daemon.text().count("cycle: ") == cycles, "a cycle planned it, not a look"
        bed.wait(high, "RUNNING", "COMPLETED", timeout=60)
    finally:
        daemon.kill()
