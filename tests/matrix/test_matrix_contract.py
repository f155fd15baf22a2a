"""The SlurmClient contract, run by the host-side CLI backend against each release in Docker.

The adapter runs on the host exactly as in production; only its command runner differs
(:class:`~hai_slurm.slurm_plugins.runner.DockerExecRunner`, ``docker exec`` into the controller).
Same suite as tests/integration/test_adapter_contract.py (local 22.05 testbed).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import SuiteCluster, series_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contract"))
from slurm_client_contract import EXCLUSIVE_OPTION, Harness, SlurmClientContract

from hai_slurm.slurm_plugins.adapter import CliSlurmClient, Job, SlurmClient, make_client
from hai_slurm.slurm_plugins.runner import DockerExecRunner

# Runs until cancelled (or until an exit-JOBID file names its exit code); logs each USR2 it
# gets. `sleep & wait` lets the trap run at once.
JOB_SCRIPT = """#!/bin/bash
trap 'echo "HAI-SIGNAL USR2"' USR2
echo started
while :; do
  [ -f "exit-$SLURM_JOB_ID" ] && exit "$(cat "exit-$SLURM_JOB_ID")"
  sleep 0.2 & wait $!
done
"""


class DockerHarness:
    """Submits through sbatch in the controller, polls snapshots, cancels what it made."""

    def __init__(self, bed: SuiteCluster) -> None:
        self.run: DockerExecRunner = bed.runner()
        self.client: SlurmClient = make_client("cli", runner=self.run)
        self.workdir = bed.scratch()
        self.submitted: list[int] = []

    def sbatch(self, *args: str) -> int:
        """sbatch ``args`` with the job script on stdin; remember and return the job id."""
        argv = ["sbatch", "--parsable", f"--chdir={self.workdir}", *args]
        res = self.run(argv, stdin=JOB_SCRIPT)
        assert res.returncode == 0, f"sbatch failed: {res.stderr.strip()}"
        jid = int(res.stdout.strip().split(";")[0])
        self.submitted.append(jid)
        return jid

    def submit(self, *, name: str, gpus: int = 1, hold: bool = False, begin_in: int = 0,
               comment: str = "", nodelist: str = "", exclude: str = "",
               exclusive: str = "", time_limit: int = 0) -> int:
        """sbatch a job that runs until cancelled."""
        args = [f"--job-name={name}", "--nodes=1", f"--output={self.workdir}/%j.out"]
        args += [f"--gres=gpu:{gpus}"] if gpus else []
        args += ["--hold"] if hold else []
        args += [f"--begin=now+{begin_in}"] if begin_in else []
        args += [f"--comment={comment}"] if comment else []
        args += [f"--nodelist={nodelist}"] if nodelist else []
        args += [f"--exclude={exclude}"] if exclude else []
        args += [EXCLUSIVE_OPTION[exclusive]] if exclusive else []
        args += [f"--time={time_limit}"] if time_limit else []
        return self.sbatch(*args)

    def forbid_requeue(self, job_id: int) -> None:
        """``scontrol update JobId=J Requeue=0`` in the controller (as root, the admin)."""
        res = self.run(["scontrol", "update", f"JobId={job_id}", "Requeue=0"])
        assert res.returncode == 0, res.stderr

    def admin_reservation(self, name: str, node: str, start_in: int, minutes: int) -> None:
        """``scontrol create reservation`` in the controller (as root, the cluster's admin)."""
        res = self.run(["scontrol", "create", "reservation", f"ReservationName={name}",
                        f"StartTime=now+{start_in}", f"Duration={minutes}", f"Nodes={node}",
                        "Users=root", "Flags=MAINT"])
        assert res.returncode == 0, res.stderr

    def wait_for(self, job_id: int, what: str, ok: Callable[[Job | None], bool],
                 timeout: float = 30.0) -> Job | None:
        """Poll snapshots every 0.25 s until ``ok`` holds or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.client.snapshot().job(job_id)
            if ok(job):
                return job
            if time.monotonic() > deadline:
                now = "gone" if job is None else f"{job.state.value}, reason {job.reason}"
                pytest.fail(f"job {job_id} did not become {what} within {timeout:g} s "
                            f"(now {now})")
            time.sleep(0.25)

    def signals_seen(self, job_id: int) -> list[str]:
        """Signals the job logged to its output file (read in the container)."""
        res = self.run(["cat", f"{self.workdir}/{job_id}.out"])
        lines = res.stdout.splitlines() if res.returncode == 0 else []
        return [ln.split()[-1] for ln in lines if ln.startswith("HAI-SIGNAL")]

    def make_exit(self, job_id: int, code: int) -> None:
        """Tell the job (it polls its working directory, shared by the containers) to exit."""
        res = self.run(["sh", "-c", f"echo {int(code)} > {self.workdir}/exit-{int(job_id)}"])
        assert res.returncode == 0, res.stderr

    def cleanup(self) -> None:
        """Cancel every job this harness submitted."""
        if self.submitted:
            self.run(["scancel", *map(str, self.submitted)])


@pytest.fixture
def docker_harness(suite_cluster: SuiteCluster) -> Iterator[DockerHarness]:
    """A harness on the suite's testbed whose jobs are cancelled after the test."""
    h = DockerHarness(suite_cluster)
    try:
        yield h
    finally:
        h.cleanup()


class TestDockerSlurmContract(SlurmClientContract):
    """The CLI backend honours the SlurmClient contract on every release of the matrix."""

    @pytest.fixture
    def harness(self, docker_harness: DockerHarness) -> Harness:
        """The contract's harness: the Docker one."""
        return docker_harness


def test_version_is_the_suites_release(suite_cluster: SuiteCluster) -> None:
    """The release is detected once, and is the one this suite is known to ship."""
    client = CliSlurmClient(suite_cluster.runner())
    v = client.version()
    assert client.version() is v and client.snapshot().version == v
    assert v.series == suite_cluster.series, (
        f"{suite_cluster.suite} now ships Slurm {v}, not {suite_cluster.series}: update "
        "docker_images.SLURM_SERIES, record its outputs (tests/data/slurm/record.py) and check "
        "slurm_plugins/version.py")


def test_qos_come_from_accounting(suite_cluster: SuiteCluster) -> None:
    """With accounting, the snapshot carries the eight class QOS with their priorities."""
    client = CliSlurmClient(suite_cluster.runner())
    assert client.accounting()
    prio = {q.name: q.priority for q in client.snapshot().qos}
    assert prio["extreme_high"] == 50 and prio["normal"] == 10 and prio["low"] == 0


def test_requeue_of_array_task_holding_the_array_id(docker_harness: DockerHarness) -> None:
    """Requeueing the task that runs under the array's own id leaves its sibling running."""
    h = docker_harness
    array_id = h.sbatch("--array=0-1", "--nodes=1", "--gres=gpu:1",
                        f"--output={h.workdir}/%A_%a.out")

    def both_running(_: Job | None) -> bool:
        tasks = [j for j in h.client.snapshot().jobs if j.array_job_id == array_id]
        return len(tasks) == 2 and all(t.state.value == "RUNNING" for t in tasks)

    h.wait_for(array_id, "two running tasks", both_running)
    tasks = {j.job_id: j for j in h.client.snapshot().jobs if j.array_job_id == array_id}
    assert array_id in tasks and tasks[array_id].array_task_id is not None
    (sibling,) = set(tasks) - {array_id}
    assert h.client.requeue(array_id).done == (array_id,)
    again = h.wait_for(array_id, "requeued", lambda j: j is not None and j.restart_count == 1)
    assert again is not None
    other = h.client.snapshot().job(sibling)
    assert other is not None and other.state.value == "RUNNING" and other.restart_count == 0


def test_docker_exec_runner_reports_slurm_errors(suite_cluster: SuiteCluster) -> None:
    """A failing Slurm command keeps its exit code and message through docker exec."""
    res = suite_cluster.runner()(["scontrol", "show", "job", "987654"])
    assert res.returncode != 0 and "Invalid job id" in res.stderr
    assert series_of(suite_cluster.runner()(["scontrol", "version"]).stdout) == \
        suite_cluster.series


def test_writes_to_an_array_record_spare_the_task_split_off_it(
        docker_harness: DockerHarness) -> None:
    """On each release, an array's own pending record (tasks 1-3; task 0 split off by its
    user's hold) is written as ``A_[TASKS]``: a hold, a release and a priority reach the
    record only, and the split task stays held at priority 0 (``JobId=A`` would be the whole
    array). ``split_array_task`` then makes task 1 a job of its own, leaving 2-3."""
    h = docker_harness
    array = h.sbatch("--array=0-3", "--begin=now+3600", "--nodes=1", "--gres=gpu:1",
                     f"--output={h.workdir}/%A_%a.out")
    res = h.run(["scontrol", "hold", f"{array}_0"])
    assert res.returncode == 0, res.stderr

    def records() -> dict[int, Job]:
        return {j.job_id: j for j in h.client.snapshot().jobs if j.array_job_id == array}

    (split,) = set(records()) - {array}
    assert records()[array].array_tasks == "1-3" and records()[split].held
    assert h.client.hold(array).done == (array,)
    assert h.client.release(array).done == (array,)
    assert h.client.set_priorities({array: 777}).done == (array,)
    now = records()
    assert now[array].priority == 777 and not now[array].held, now[array]
    assert now[split].held and now[split].priority == 0, now[split]
    first = h.client.split_array_task(array)
    assert first not in (array, split)
    now = records()
    assert now[first].array_task_id == 1 and now[array].array_tasks == "2-3", now

