"""One preemption with checkpoint and resume on each release: USR2, save, exit, requeue, resume.

The toy training job (tests/integration/checkpoint_toy.py) runs INSIDE the compute containers with
the image's python3 and the job-side library that ``up`` copied to /shared/hai-py. The host-side
adapter (CliSlurmClient through ``docker exec``) finds the job running and sends the checkpoint
request; the acknowledgement is read with ``read_job_report`` in the container (files on the
shared volume). 0 steps lost: the second run starts at the acknowledged step, and the final
result is bit-identical to an uninterrupted reference run with the same python3.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from conftest import SHAPE, SuiteCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from checkpoint_toy import TOTAL, TRAIN

from hai_slurm.slurm_plugins.adapter import CliSlurmClient, JobState, SignalTarget
from hai_slurm.slurm_plugins.runner import DockerExecRunner
from hai_slurm.testbed import docker_mode
from hai_slurm.testbed.docker_jobpkg import JOB_PYTHONPATH
from hai_slurm.testbed.waiting import show_job, wait_job_state

ACK_PROBE = """
import json, sys
from hai_slurm.checkpoint import read_job_report
r = read_job_report(sys.argv[1], sys.argv[2], 0, restart_count=int(sys.argv[3]))
print(json.dumps({"step": r.ack.step if r.ack else None, "phase": str(r.phase),
                  "problems": list(r.problems)}))
"""


def ok(run: DockerExecRunner, argv: list[str], stdin: str | None = None) -> str:
    """Run in the container; assert success; stdout."""
    res = run(argv, stdin=stdin, timeout=60)
    assert res.returncode == 0, f"{' '.join(argv)}: {res.stderr.strip()}"
    return res.stdout


def wait_for_ack(run: DockerExecRunner, control: str, job: int, restart: int,
                 timeout: float = 20) -> int:
    """The step the job acknowledged in run ``restart`` (polled in the container)."""
    deadline = time.monotonic() + timeout
    while True:
        report = json.loads(ok(run, ["env", f"PYTHONPATH={JOB_PYTHONPATH}", "python3", "-c",
                                     ACK_PROBE, control, str(job), str(restart)]))
        if report["step"] is not None:
            return int(report["step"])
        assert time.monotonic() < deadline, (
            f"job {job} run {restart} did not acknowledge within {timeout:g} s "
            f"(phase {report['phase']}, problems {report['problems']})")
        time.sleep(0.2)


def test_preempted_job_resumes_with_no_step_lost(suite_cluster: SuiteCluster) -> None:
    """USR2 via the adapter, save, ack, exit 75, Slurm requeues (RequeueExit=75), resume at the
    acked step, same result."""
    run = suite_cluster.runner()
    waiting = docker_mode.runner(suite_cluster.state_dir)
    client = CliSlurmClient(run)
    wd = suite_cluster.scratch()
    ok(run, ["sh", "-c", 'cat > "$1"', "sh", f"{wd}/train.py"], stdin=TRAIN)
    ok(run, ["env", "REFERENCE=1", "python3", f"{wd}/train.py", f"{wd}/reference.json",
             str(TOTAL)])
    script = (f"#!/bin/bash\nexport PYTHONPATH={JOB_PYTHONPATH} HAI_CHECKPOINT_DIR={wd}/ck\n"
              f"exec python3 {wd}/train.py {wd}/result.json {TOTAL}\n")
    res = run(["sbatch", "--parsable", "--job-name=toy-train", "--nodes=1", "--gres=gpu:1",
               f"--chdir={wd}", f"--output={wd}/%j.out", "--open-mode=append"], stdin=script)
    assert res.returncode == 0, res.stderr
    job = int(res.stdout.strip().split(";")[0])
    try:
        deadline = time.monotonic() + 30
        while (j := client.snapshot().job(job)) is None or j.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, f"job {job} not RUNNING within 30 s ({j})"
            time.sleep(0.25)
        node = j.nodes[0]
        time.sleep(1.5)  # let it train a little (about 35 steps)
        assert client.signal(job, "USR2", target=SignalTarget.FULL).done == (job,)
        acked = wait_for_ack(run, f"{wd}/ck/.hai/{job}", job, 0)
        # exit 75: the generated daemon-mode slurm.conf (RequeueExit=75) requeues it
        deadline = time.monotonic() + 30
        while int((show_job(waiting, str(job)) or {}).get("Restarts", "0")) < 1:
            assert time.monotonic() < deadline, f"job {job} not requeued by Slurm within 30 s"
            time.sleep(0.25)
        wait_job_state(waiting, str(job), "COMPLETED", timeout=SHAPE.cred_expire + 60)
    finally:
        run(["scancel", str(job)])
    out = ok(run, ["cat", f"{wd}/{job}.out"])
    starts = [int(line.split()[1]) for line in out.splitlines() if line.startswith("start ")]
    assert starts == [0, acked], out  # the second run resumed exactly where the first saved
    assert 0 < acked < TOTAL
    result = json.loads(ok(run, ["cat", f"{wd}/result.json"]))
    assert result == json.loads(ok(run, ["cat", f"{wd}/reference.json"]))
    assert node in SHAPE.node_names  # it ran in a compute container
