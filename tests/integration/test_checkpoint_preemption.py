"""A real Slurm job using the checkpoint library: asked to save twice by USR2, requeued, resumed.

Run against a running testbed with ``HAI_TESTBED_STATE_DIR=... pytest tests/integration -k
checkpoint``, or let the session fixture start one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_toy import TOTAL, TRAIN
from conftest import Submitter, Testbed

from hai_slurm.checkpoint import read_job_report
from hai_slurm.testbed.waiting import check


def wait_for_ack(control: Path, job: str, restart: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        report = read_job_report(control, job, os.geteuid(), restart_count=restart)
        if report.ack is not None:
            assert report.ack.step is not None
            return report.ack.step
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job} run {restart} did not acknowledge within {timeout} s "
                               f"(phase {report.phase}, problems {report.problems})")
        time.sleep(0.1)


def wait_requeued(submit: Submitter, job: str, restarts: int, timeout: float = 30) -> None:
    """Wait until Slurm has requeued the job ``restarts`` times: daemon mode generates
    ``RequeueExit=75``, so a job that saved and exited 75 comes back by itself."""
    deadline = time.monotonic() + timeout
    while True:
        info = submit.info(job)
        if int(info.get("Restarts", "0")) >= restarts:
            return
        assert time.monotonic() < deadline, (f"job {job} was not requeued {restarts} time(s) "
                                             f"within {timeout} s: {info.get('JobState')}")
        time.sleep(0.2)


@pytest.mark.slow
def test_toy_training_preempted_twice_is_bit_identical(testbed: Testbed, submit: Submitter,
                                                       tmp_path: Path) -> None:
    """USR2 through Slurm twice: each run saves, acks, exits 75, is requeued by Slurm's
    RequeueExit=75; 0 steps lost."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    reference = tmp_path / "reference.json"
    subprocess.run([sys.executable, str(script), str(reference), str(TOTAL)], check=True,
                   timeout=60, env={**os.environ, "REFERENCE": "1"})
    result = tmp_path / "result.json"
    checkpoints = tmp_path / "ck"
    job = submit(f"#!/bin/bash\nexport HAI_CHECKPOINT_DIR={checkpoints}\n"
                 f"exec {sys.executable} {script} {result} {TOTAL}\n",
                 args=["--open-mode=append"])  # keep every run's output
    control = checkpoints / ".hai" / job
    acked: list[int] = []
    for restart in (0, 1):
        submit.wait(job, "RUNNING", timeout=testbed.shape.cred_expire + 30)
        time.sleep(1.5)  # let it train a little (about 35 steps)
        check(testbed.run, ["scancel", "--signal=USR2", "--full", job])
        acked.append(wait_for_ack(control, job, restart, timeout=20))
        wait_requeued(submit, job, restart + 1)  # exit 75: RequeueExit=75 requeues it
    submit.wait(job, "COMPLETED", timeout=testbed.shape.cred_expire + 60)
    out = submit.output(job)
    starts = [int(line.split()[1]) for line in out.splitlines() if line.startswith("start ")]
    assert starts == [0, *acked], out  # each run resumed exactly where the last one saved
    assert 0 < acked[0] < acked[1] < TOTAL
    assert json.loads(result.read_text()) == json.loads(reference.read_text())


@pytest.mark.slow
def test_corrupted_newest_checkpoint_resumes_from_the_previous(testbed: Testbed,
                                                               submit: Submitter,
                                                               tmp_path: Path) -> None:
    """After a save, the newest file is damaged; the requeued job says so and resumes earlier."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    reference = tmp_path / "reference.json"
    subprocess.run([sys.executable, str(script), str(reference), str(TOTAL)], check=True,
                   timeout=60, env={**os.environ, "REFERENCE": "1"})
    result = tmp_path / "result.json"
    checkpoints = tmp_path / "ck"
    job = submit(f"#!/bin/bash\nexport HAI_CHECKPOINT_DIR={checkpoints}\n"
                 f"exec {sys.executable} {script} {result} {TOTAL}\n",
                 args=["--open-mode=append"])
    submit.wait(job, "RUNNING", timeout=30)
    deadline = time.monotonic() + 30
    while not list(checkpoints.glob("ckpt-*-step40.meta.json")):  # the periodic save at step 40
        assert time.monotonic() < deadline, "no periodic checkpoint at step 40 within 30 s"
        time.sleep(0.1)
    check(testbed.run, ["scancel", "--signal=USR2", "--full", job])
    acked = wait_for_ack(checkpoints / ".hai" / job, job, 0, timeout=20)
    wait_requeued(submit, job, 1)  # it may not start again before cred_expire has passed
    newest = sorted(checkpoints.glob("ckpt-*.pkl"))[-1]
    assert newest.name.endswith(f"-step{acked}.pkl")
    newest.write_bytes(newest.read_bytes()[:-10] + b"0123456789")
    submit.wait(job, "COMPLETED", timeout=testbed.shape.cred_expire + 60)
    out = submit.output(job)
    assert f"skipping checkpoint {newest.name} (step {acked}): sha256 mismatch" in out
    assert "start 40" in out.splitlines()  # the periodic checkpoint before it
    assert json.loads(result.read_text()) == json.loads(reference.read_text())


CHILD = """
import json, os, signal, sys, time
got = []
signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
for step in range(2000):
    time.sleep(0.01)
    if got:
        with open(os.environ["HAI_SAVE_MARKER"], "w") as f:
            json.dump({"step": step}, f)
        sys.exit(75)
"""


def hai_run_job(submit: Submitter, tmp_path: Path, child_text: str, launch: str
                ) -> tuple[str, Path]:
    """Submit a batch script running ``LAUNCH hai-run -- python child.py`` (``launch``: what
    comes before hai-run on its line, after any #SBATCH lines it starts with); the job id and
    hai-run's control directory."""
    child = tmp_path / "child.py"
    child.write_text(child_text)
    hai_run = Path(sys.executable).parent / "hai-run"
    control = tmp_path / "ctl"
    return submit(f"#!/bin/bash\n{launch} {hai_run} --control-dir {control} -- "
                  f"{sys.executable} {child}\n"), control


@pytest.mark.slow
def test_hai_run_under_slurm_acknowledges_for_its_child(testbed: Testbed, submit: Submitter,
                                                        tmp_path: Path) -> None:
    """A batch script `hai-run -- python child.py`: USR2 via scancel, the child saves, ack."""
    job, control = hai_run_job(submit, tmp_path, CHILD, "exec")
    submit.wait(job, "RUNNING", timeout=30)
    time.sleep(1.0)
    check(testbed.run, ["scancel", "--signal=USR2", "--full", job])
    step = wait_for_ack(control, job, 0, timeout=20)
    wait_requeued(submit, job, 1)  # it exited 75 (RequeueExit=75 requeued it)
    assert step > 0
    report = read_job_report(control, job, os.geteuid())
    assert report.ack is not None and report.ack.source == "hai-run"
    assert "child saved" in submit.output(job)


# task 1 of the step saves 2 s after the request, task 0 at once; each says when its handler
# is in place (ready.<task> beside the script)
SLOW_TASK_CHILD = CHILD.replace(
    "    if got:\n",
    "    if got and (os.environ['SLURM_PROCID'] == '0' or time.sleep(2) is None):\n").replace(
    "for step in range(2000):\n",
    "open(os.path.join(os.path.dirname(os.path.abspath(__file__)),\n"
    "                  'ready.' + os.environ['SLURM_PROCID']), 'w').close()\n"
    "for step in range(2000):\n")


@pytest.mark.slow
def test_hai_run_in_a_two_task_step_acknowledges_once_both_saved(
        testbed: Testbed, submit: Submitter, tmp_path: Path) -> None:
    """`srun -n 2 hai-run -- python child.py` on two nodes: USR2 to the step reaches both
    tasks; task 1's child saves 2 s after task 0's, and the job's ack comes after it. (Before:
    the first task whose child saved acknowledged for the job.)"""
    job, control = hai_run_job(submit, tmp_path, SLOW_TASK_CHILD, "#SBATCH -N 2 -n 2\nsrun")
    submit.wait(job, "RUNNING", timeout=30)
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"ready.{t}").exists() for t in (0, 1)):
        assert time.monotonic() < deadline, submit.output(job)
        time.sleep(0.1)
    # the steps only, as the executor signals a job that runs srun (the batch shell would die
    # of USR2 and take the step with it)
    check(testbed.run, ["scancel", "--signal=USR2", job])
    asked = time.monotonic()
    wait_for_ack(control, job, 0, timeout=20)
    assert time.monotonic() - asked >= 1.5, "acknowledged before task 1's child saved"
    saved = (control / "hai-run-saved.0.0.1.json")
    assert saved.exists() and json.loads(saved.read_text())["request"] == 1
