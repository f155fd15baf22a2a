"""A victim is never lost, on the real testbed (issue 12): a save that fails, a step killed by
the request, and an array task that acknowledges. Each ends with the victim requeued, nobody
held, and the victim running again from its newest valid checkpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from conftest import Testbed
from preempt_support import Bed, bed_for

from hai_slurm.priority.demo.scenario import ToyJob, toy_runs
from hai_slurm.priority.executor.types import ExecutionRequest, ExecutionResult
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.testbed import local

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


def fill_others(bed: Bed) -> None:
    """Long LOW jobs on n2..n4, so a 1-node beneficiary can only use n1."""
    for n in (2, 3, 4):
        bed.wait(bed.toy(f"filler{n}", sbatch=["-N1", "--gres=gpu:8", f"--nodelist=n{n}"]),
                 "RUNNING")


def plan_steps(bed: Bed, plan_id: int) -> list[str]:
    """The plan's recorded states."""
    return [s.to_state.value for s in bed.repo.get_plan(plan_id).steps]


def urgent(bed: Bed) -> ToyJob:
    """A short HIGH job for one node."""
    return bed.toy("urgent", steps=20, priority="HIGH", account="team-b",
                   sbatch=["-N1", "--gres=gpu:8"])


def test_save_that_fails_is_requeued_and_resumes_from_the_newest_checkpoint(bed: Bed) -> None:
    """The requested save fails in the kernel (file size limit, like a full disk) and the job
    exits 1 saying older checkpoints are untouched: it is requeued held, released once the
    beneficiary ran, and its next run starts from its newest periodic checkpoint.
    (Before: recorded gone, plan done, the job left FAILED.)"""
    fill_others(bed)
    victim = bed.toy("victim", sbatch=["-N1", "--gres=gpu:8", "--nodelist=n1"],
                     train=["--save-every", "20", "--fail-save-on-run", "0"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 50)
    bene = urgent(bed)
    result = bed.executor().run(ExecutionRequest(bene.job_id, (victim.job_id,), nodes=("n1",),
                                                 deadlines={victim.job_id: 20.0}),
                                bed.slurm.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert result.beneficiary_started
    assert plan_steps(bed, result.plan_id) == ["planned", "signalled", "forced", "requeued",
                                               "done"]
    (v,) = bed.repo.get_plan(result.plan_id).victims
    assert v.state is VictimState.REQUEUED
    assert "Older checkpoints are untouched" in victim.output.read_text()
    bed.wait(bene, "COMPLETED", timeout=60)
    facts = bed.wait(victim, "RUNNING", timeout=bed.testbed.shape.cred_expire + 40)
    assert facts.restart_count == 1
    bed.wait_progress(victim, 3, run=1)
    first, second = toy_runs(victim)[:2]
    # the newest periodic save before the step whose requested save failed
    assert second.start_step == (first.last_step - 1) // 20 * 20 > 0, toy_runs(victim)
    assert bed.held_jobs() == []


def test_step_killed_by_the_request_is_requeued(bed: Bed) -> None:
    """``trap '' USR2; srun sleep 600``: the request kills the step, the script ends with its
    error. The job is requeued held and runs again after the beneficiary.
    (Before: recorded all_acked/gone and never requeued.)"""
    fill_others(bed)
    ck = bed.workdir / "trap.ck"
    script = bed.workdir / "trap.sh"
    script.write_text("#!/bin/bash\n#HAI --priority=LOW --team=team-a --grace=30\n"
                      f"#HAI --checkpoint-dir={ck}\ntrap '' USR2\nsrun sleep 600\n")
    jid = bed.slurm.submit_script(script, ["--job-name=trap", "--account=team-a", "-N1",
                                           "--gres=gpu:8", "--nodelist=n1",
                                           f"--output={bed.workdir / 'trap.out'}"])
    bed.jobs.append(jid)
    bed.wait(jid, "RUNNING")
    bene = urgent(bed)
    result = bed.executor().run(ExecutionRequest(bene.job_id, (jid,), nodes=("n1",),
                                                 deadlines={jid: 20.0}), bed.slurm.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert "all_acked" not in plan_steps(bed, result.plan_id)
    (v,) = bed.repo.get_plan(result.plan_id).victims
    assert v.state is VictimState.REQUEUED and v.ack_step is None
    assert "without an acknowledgement" in result.note
    bed.wait(bene, "COMPLETED", timeout=60)
    facts = bed.wait(jid, "RUNNING", timeout=bed.testbed.shape.cred_expire + 40)
    assert facts.restart_count == 1
    assert bed.held_jobs() == []


def test_array_task_acknowledges(bed: Bed) -> None:
    """A one-task array (``--array=3``: its own id is the array's id, Slurm names it
    ``<id>_3``) saves, acknowledges under its own id, is requeued and resumes losing nothing.
    (Before: the job wrote ``.hai/<id>_3``, the daemon read ``.hai/<id>``: a miss, abort.)"""
    fill_others(bed)
    victim = bed.toy("arr", sbatch=["--array=3", "-N1", "--gres=gpu:8", "--nodelist=n1"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 20)
    job = bed.slurm.snapshot().job(victim.job_id)
    assert job is not None and job.array_task_id == 3, job
    assert (victim.checkpoints / ".hai" / str(victim.job_id)).is_dir()
    bene = urgent(bed)
    result = bed.executor().run(ExecutionRequest(bene.job_id, (victim.job_id,), nodes=("n1",),
                                                 deadlines={victim.job_id: 20.0}),
                                bed.slurm.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert plan_steps(bed, result.plan_id) == ["planned", "signalled", "all_acked", "requeued",
                                               "done"]
    (v,) = bed.repo.get_plan(result.plan_id).victims
    assert v.state is VictimState.REQUEUED and v.ack_step is not None
    bed.wait(bene, "COMPLETED", timeout=60)
    bed.wait(victim, "RUNNING", timeout=bed.testbed.shape.cred_expire + 40)
    bed.wait_progress(victim, 3, run=1)
    first, second = toy_runs(victim)[:2]
    assert second.start_step == v.ack_step == first.last_step, toy_runs(victim)
    assert bed.held_jobs() == []


def test_victim_that_saves_while_no_daemon_watches_is_requeued_by_slurm(bed: Bed) -> None:
    """The daemon asked (USR2 to the steps) and died: the victim saves, exits 75, and the
    generated ``RequeueExit=75`` requeues it with no daemon at all; it resumes losing nothing.
    (Before: daemon mode had no RequeueExit, the victim was left FAILED.)"""
    victim = bed.toy("orphan", sbatch=["-N1", "--gres=gpu:8"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 20)
    bed.run(["scancel", "--signal=USR2", str(victim.job_id)])
    end = time.monotonic() + bed.testbed.shape.cred_expire + 40
    while not (bed.facts(victim).restart_count == 1 and bed.facts(victim).state == "RUNNING"):
        assert bed.facts(victim).state in ("RUNNING", "COMPLETING", "PENDING"), \
            bed.facts(victim)
        assert time.monotonic() < end, f"not requeued and running again: {bed.facts(victim)}"
        time.sleep(0.2)
    bed.wait_progress(victim, 3, run=1)
    first, second = toy_runs(victim)[:2]
    assert second.start_step == first.last_step, toy_runs(victim)


def test_slurmctld_restarted_during_the_save(bed: Bed) -> None:
    """slurmctld is stopped 2 s into an 8-s save and started again 6 s later: the plan ends done
    (directly, or through the next cycle's recover() if the requeue hit the outage), the victim
    resumes from its save, nobody is left held. A regression guard only: it passes on the old
    executor too (Slurm's clients wait out an outage shorter than MessageTimeout, and so did a
    25-s one here); the failing-today cases are the unit tests with slurmctld unreachable
    (tests/unit/test_executor_losses.py)."""
    if not bed.testbed.started_here:
        pytest.skip("restarts slurmctld: only on a testbed this session started")
    fill_others(bed)
    victim = bed.toy("slowsave", sbatch=["-N1", "--gres=gpu:8", "--nodelist=n1"],
                     train=["--save-seconds", "8"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 20)
    bene = urgent(bed)
    ex = bed.executor(saving_extension=60.0, start_timeout=120.0)
    results: list[ExecutionResult] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(ex.run(ExecutionRequest(bene.job_id, (victim.job_id,),
                                                   nodes=("n1",),
                                                   deadlines={victim.job_id: 30.0}),
                                  bed.slurm.snapshot()))
        except BaseException as err:  # reported below
            errors.append(err)
    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(2.0 + 0.5)
    local.stop_component(bed.testbed.state_dir, "slurmctld")
    try:
        time.sleep(6.0)
    finally:
        local.start_component(bed.testbed.state_dir, "slurmctld")
    thread.join(timeout=300)
    assert not thread.is_alive(), "the executor did not finish within 300 s"
    if errors and not results:  # a failure at phase 2 is left to the next cycle's recover()
        results.extend(ex.recover())
    (result,) = results
    assert result.state is PlanState.DONE, (result.note, errors)
    (v,) = bed.repo.get_plan(result.plan_id).victims
    assert v.state is VictimState.REQUEUED and v.ack_step is not None
    bed.wait(victim, "RUNNING", timeout=bed.testbed.shape.cred_expire + 90)
    bed.wait_progress(victim, 3, run=1)
    _first, second = toy_runs(victim)[:2]
    assert second.start_step == v.ack_step, toy_runs(victim)
    assert bed.held_jobs() == []
    state = local.load_state(bed.testbed.state_dir)
    assert state is not None
