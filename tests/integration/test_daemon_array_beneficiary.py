"""A HIGH job array on a full cluster gets preemption help from the daemon for every task.

Slurm keeps an array's pending tasks in one record (the array's own job id, ``A``), and the
daemon plans for that record as one waiting job. Once one of the array's tasks has started,
Slurm refuses to pin that record to nodes (``scontrol update JobId=A ReqNodeList=...``: "Job
resizing not supported for job arrays"; ``JobId=A_[1-2]``: "Invalid job ID", 22.05.8): the plan
stuck, its guard failing at every step, and the tasks after the first waited for the first to
end. The executor now splits the record's first pending task off into a job of its own
(``A_T``, which Slurm gives a new job id) and makes that job the plan's beneficiary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import DaemonProcess, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.slow

_ARRAY_SCRIPT = """#!/bin/bash
#HAI --priority=HIGH --team=team-b
#SBATCH --array=0-2
#SBATCH -N1 --gres=gpu:8
echo "task $SLURM_ARRAY_TASK_ID job $SLURM_JOB_ID start $(date +%s)"
sleep 60
echo "end $(date +%s)"
"""


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


def _tasks(bed: Bed) -> dict[str, tuple[int, int, int]]:
    """Each task that started (by task id): the job it ran as, its start and end (epoch
    seconds; end 0 while it runs), from the lines it wrote."""
    tasks = {}
    for out in bed.workdir.glob("array-*.out"):
        words = out.read_text().split()
        if len(words) >= 6 and words[0] == "task":
            end = int(words[7]) if len(words) >= 8 and words[6] == "end" else 0
            tasks[words[1]] = (int(words[3]), int(words[5]), end)
    return tasks


def test_a_high_array_gets_preemption_help_for_the_tasks_after_its_first(
        bed: Bed, tmp_path: Path) -> None:
    """Three LOW toy jobs fill 3 of the 4 x 8 GPUs; a 3-task HIGH array (8 GPUs a task, 60 s
    each) arrives: task 0 starts on the free node at once, and the array's record then holds
    tasks 1-2, which Slurm refuses to pin. Each of them is planned for as a job of its own and
    starts while task 0 still runs (task 1 split off as a job of its own, task 2 as the
    record's last task); no plan fails; the LOW victims are requeued, not lost."""
    lows = bed.fill(3)
    config = daemon_config(tmp_path, bed.testbed)
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    script = bed.workdir / "array.sh"
    script.write_text(_ARRAY_SCRIPT)
    try:
        daemon.wait_log("preemption on", timeout=30)
        array = bed.slurm.submit_script(script, ["--account=team-b", f"--chdir={bed.workdir}",
                                                 f"--output={bed.workdir}/array-%A_%a.out"])
        bed.jobs.append(array)
        try:
            wait_until(lambda: len(_tasks(bed)) == 3, 50, "")
        except AssertionError:
            pytest.fail(f"the array's 3 tasks did not all start within 50 s: {_tasks(bed)}; "
                        f"daemon log:\n{daemon.text()[-4000:]}")
        tasks = _tasks(bed)
        first_end = tasks["0"][2] or 2**31
        assert all(tasks[t][1] < first_end for t in ("1", "2")), tasks
        log = daemon.text()
        assert "Slurm failed during the plan" not in log, log[-4000:]
        plans = [p for p in repo.history(limit=100) if p.victims]
        helped = {b.job_id for p in plans for b in p.beneficiaries}
        # task 1 was split off (a new job id); task 2, the record's last, ran as the record
        assert {tasks["1"][0], tasks["2"][0]} <= helped, (tasks, helped)
        assert tasks["1"][0] != array, tasks
        victims = {v.job_id for p in plans for v in p.victims}
        for job in lows:   # requeued (and back, or waiting to be), never cancelled
            facts = bed.facts(job)
            assert facts.state in ("RUNNING", "PENDING"), (job.job_id, facts)
            assert job.job_id not in victims or facts.restart_count >= 1, (job.job_id, facts)
    finally:
        daemon.kill()
