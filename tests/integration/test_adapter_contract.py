"""The SlurmClient contract run against each real backend (CLI, pyslurm) on a real Slurm cluster.

The cluster is the session testbed (fixture ``testbed`` from tests/integration/conftest.py; set
``HAI_TESTBED_STATE_DIR`` to reuse a running one). ``HAI_ADAPTER_SLURM_CONF`` points the suite at
another running cluster instead (e.g. a throwaway lab without accounting, or another release).
Every job a test submits is cancelled when the test ends. The pyslurm variant is skipped, saying
why, where pyslurm is not installed (scripts/setup-host.sh builds it from the source archives in
../shared/third_party, relative to the repository) or does not match the cluster's Slurm.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contract"))
from slurm_client_contract import EXCLUSIVE_OPTION, Harness, SlurmClientContract

from hai_slurm.slurm_plugins.adapter import (
    CliSlurmClient,
    Job,
    PyslurmClient,
    SignalTarget,
    SlurmClient,
)
from hai_slurm.slurm_plugins.pyslurm_backend import choose_backend
from hai_slurm.slurm_plugins.runner import Completed, SubprocessRunner

pytestmark = pytest.mark.integration

PYSLURM_ARCHIVES = Path(__file__).resolve().parents[2].parent / "shared" / "third_party"
"""Where CI finds pyslurm's source archives: ../shared/third_party from the repository root."""
BACKENDS = ("cli", "pyslurm")


def backend_client(backend: str, slurm_conf: str) -> SlurmClient:
    """The backend's client for ``slurm_conf``; the pyslurm one skips the test, saying what is
    missing, when it cannot be used here."""
    if backend == "cli":
        return CliSlurmClient(slurm_conf=slurm_conf, timeout=30)
    choice = choose_backend(CliSlurmClient(slurm_conf=slurm_conf).version, slurm_conf)
    if choice.backend != "pyslurm":
        archives = (f"the source archives are in {PYSLURM_ARCHIVES}: run scripts/setup-host.sh"
                    if any(PYSLURM_ARCHIVES.glob("pyslurm-*.tar.gz")) else
                    f"no pyslurm source archives at {PYSLURM_ARCHIVES} either")
        pytest.skip(f"pyslurm backend not usable: {choice.reason} ({archives})")
    return PyslurmClient(slurm_conf=slurm_conf, module=choice.module)

# Runs until cancelled (or until an exit-JOBID file names its exit code); logs each USR2 it
# gets. `sleep & wait` lets the trap run at once.
_JOB_SCRIPT = """#!/bin/bash
trap 'echo "HAI-SIGNAL USR2"' USR2
echo started
while :; do
  [ -f "exit-$SLURM_JOB_ID" ] && exit "$(cat "exit-$SLURM_JOB_ID")"
  sleep 0.2 & wait $!
done
"""


class CliHarness:
    """Submits with sbatch, polls snapshots with a monotonic deadline, cancels what it made."""

    def __init__(self, slurm_conf: str, workdir: Path, client: SlurmClient | None = None) -> None:
        self.env = {**os.environ, "SLURM_CONF": slurm_conf}
        self.client: SlurmClient = client or CliSlurmClient(slurm_conf=slurm_conf, timeout=30)
        self.workdir = workdir
        self.submitted: list[int] = []

    def submit(self, *, name: str, gpus: int = 1, hold: bool = False, begin_in: int = 0,
               comment: str = "", nodelist: str = "", exclude: str = "",
               constraint: str = "", exclusive: str = "", time_limit: int = 0) -> int:
        """sbatch a job that runs until cancelled."""
        script = self.workdir / "job.sh"
        script.write_text(_JOB_SCRIPT)
        argv = ["sbatch", "--parsable", f"--job-name={name}", "--nodes=1",
                f"--output={self.workdir}/%j.out", f"--chdir={self.workdir}"]
        argv += [f"--gres=gpu:{gpus}"] if gpus else []
        argv += ["--hold"] if hold else []
        argv += [f"--begin=now+{begin_in}"] if begin_in else []
        argv += [f"--comment={comment}"] if comment else []
        argv += [f"--nodelist={nodelist}"] if nodelist else []
        argv += [f"--exclude={exclude}"] if exclude else []
        argv += [f"--constraint={constraint}"] if constraint else []
        argv += [EXCLUSIVE_OPTION[exclusive]] if exclusive else []
        argv += [f"--time={time_limit}"] if time_limit else []
        res = subprocess.run([*argv, str(script)], capture_output=True, text=True,
                             env=self.env, timeout=30, check=False)
        assert res.returncode == 0, f"sbatch failed: {res.stderr.strip()}"
        jid = int(res.stdout.strip().split(";")[0])
        self.submitted.append(jid)
        return jid

    def forbid_requeue(self, job_id: int) -> None:
        """``scontrol update JobId=J Requeue=0`` as root (the testbed's admin)."""
        res = subprocess.run(["scontrol", "update", f"JobId={job_id}", "Requeue=0"],
                             capture_output=True, text=True, env=self.env, timeout=30,
                             check=False)
        assert res.returncode == 0, res.stderr

    def admin_reservation(self, name: str, node: str, start_in: int, minutes: int) -> None:
        """``scontrol create reservation`` as root (the testbed's admin)."""
        res = subprocess.run(["scontrol", "create", "reservation", f"ReservationName={name}",
                              f"StartTime=now+{start_in}", f"Duration={minutes}",
                              f"Nodes={node}", "Users=root", "Flags=MAINT"],
                             capture_output=True, text=True, env=self.env, timeout=30,
                             check=False)
        assert res.returncode == 0, res.stderr

    def submit_array(self, *options: str) -> int:
        """sbatch a job array (``--array=...`` among ``options``) of 1-GPU tasks that run until
        cancelled; its id."""
        script = self.workdir / "job.sh"
        script.write_text(_JOB_SCRIPT)
        res = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--gres=gpu:1",
                              f"--output={self.workdir}/%A_%a.out", *options, str(script)],
                             capture_output=True, text=True, env=self.env, timeout=30,
                             check=False)
        assert res.returncode == 0, res.stderr
        jid = int(res.stdout.strip().split(";")[0])
        self.submitted.append(jid)
        return jid

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
        """Signals the job logged to its output file."""
        out = self.workdir / f"{job_id}.out"
        lines = out.read_text().splitlines() if out.exists() else []
        return [ln.split()[-1] for ln in lines if ln.startswith("HAI-SIGNAL")]

    def make_exit(self, job_id: int, code: int) -> None:
        """Tell the job (it polls its working directory) to exit with ``code``."""
        (self.workdir / f"exit-{job_id}").write_text(str(code))

    def cleanup(self) -> None:
        """Cancel every job this harness submitted."""
        if self.submitted:
            subprocess.run(["scancel", *map(str, self.submitted)], env=self.env,
                           capture_output=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def adapter_slurm_conf(request: pytest.FixtureRequest) -> str:
    """slurm.conf of the cluster under test."""
    conf = os.environ.get("HAI_ADAPTER_SLURM_CONF")
    if conf:
        return conf
    return str(request.getfixturevalue("testbed").slurm_conf)


class TestRealSlurmContract(SlurmClientContract):
    """Each real backend (CLI, pyslurm) honours the SlurmClient contract on a real cluster."""

    @pytest.fixture(params=BACKENDS)
    def harness(self, request: pytest.FixtureRequest, adapter_slurm_conf: str,
                tmp_path: Path) -> Iterator[Harness]:
        """A harness (jobs made with sbatch, cancelled after the test) around the backend."""
        client = backend_client(request.param, adapter_slurm_conf)
        tmp_path.chmod(0o777)
        h = CliHarness(adapter_slurm_conf, tmp_path, client)
        try:
            yield h
        finally:
            h.cleanup()


def test_version_detected_once(adapter_slurm_conf: str) -> None:
    """The release is read once and gives the read commands for that release."""
    client = CliSlurmClient(slurm_conf=adapter_slurm_conf)
    v = client.version()
    assert client.version() is v
    assert client.plan.version == v
    assert client.snapshot().version == v


def test_qos_follow_accounting(adapter_slurm_conf: str) -> None:
    """With accounting, the snapshot carries sacctmgr's QOS; without, none."""
    client = CliSlurmClient(slurm_conf=adapter_slurm_conf)
    snap = client.snapshot()
    if client.accounting():
        assert "normal" in {q.name for q in snap.qos}
    else:
        assert snap.qos == ()


@pytest.mark.parametrize("backend", BACKENDS)
def test_requeue_of_array_task_holding_the_array_id(backend: str, adapter_slurm_conf: str,
                                                    tmp_path: Path) -> None:
    """Requeueing the task that runs under the array's own id leaves its sibling running."""
    tmp_path.chmod(0o777)
    h = CliHarness(adapter_slurm_conf, tmp_path, backend_client(backend, adapter_slurm_conf))
    script = tmp_path / "job.sh"
    script.write_text(_JOB_SCRIPT)
    res = subprocess.run(["sbatch", "--parsable", "--array=0-1", "--nodes=1", "--gres=gpu:1",
                          f"--output={tmp_path}/%A_%a.out", str(script)], capture_output=True,
                         text=True, env=h.env, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    array_id = int(res.stdout.strip().split(";")[0])
    h.submitted.append(array_id)
    try:
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
    finally:
        h.cleanup()


# The README's script shape: training in an srun step, no `exec`; the batch shell has no trap.
# The step says when its trap is set: squeue lists a step as soon as slurmctld creates it, before
# slurmd has started its task, and a signal sent in that window reaches no process (CI lost one).
_SRUN_SCRIPT = """#!/bin/bash
srun bash -c 'trap "echo HAI-SIGNAL USR2; exit 0" USR2; touch "$0.trapped"
  while :; do sleep 0.2 & wait $!; done' "$1"
echo "batch shell survived"
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_signal_reaches_the_step_and_spares_the_batch_shell(
        backend: str, adapter_slurm_conf: str, tmp_path: Path) -> None:
    """signal(WORKLOAD) on a job that trains in srun: the step hears USR2, and the shell (which
    would die of an untrapped USR2 with --full) goes on and the job completes."""
    tmp_path.chmod(0o777)
    h = CliHarness(adapter_slurm_conf, tmp_path, backend_client(backend, adapter_slurm_conf))
    script = tmp_path / "srun.sh"
    script.write_text(_SRUN_SCRIPT)
    res = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--gres=gpu:1",
                          f"--output={tmp_path}/%j.out", str(script), str(tmp_path / "step")],
                         capture_output=True, text=True, env=h.env, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    jid = int(res.stdout.strip().split(";")[0])
    h.submitted.append(jid)
    try:
        trapped = tmp_path / "step.trapped"
        h.wait_for(jid, "running its srun step with the trap set", lambda _: trapped.exists())
        assert h.client.signal(jid, "USR2", target=SignalTarget.WORKLOAD).done == (jid,)
        h.wait_for(jid, "ended", lambda j: j is None)
        facts = h.client.job_facts(jid)[jid]
        out = (tmp_path / f"{jid}.out").read_text()
        assert "HAI-SIGNAL USR2" in out and "batch shell survived" in out, out
        assert facts.state == "COMPLETED"
    finally:
        h.cleanup()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compact_snapshot_reads_the_same_jobs_as_full_records(
        backend: str, adapter_slurm_conf: str, tmp_path: Path) -> None:
    """Once every job's details are known, a snapshot lists jobs with the compact ``squeue -O``
    and gets the same Job values as from full records (``squeue --json``, or pyslurm's
    ``Jobs.load()``): running and held jobs, an array's pending record and a multi-node GPU
    job, with their admin_comment and per-node GPUs, and a held job's --nodelist and --exclude.
    Pending jobs whose details are not known (new, or the admin_comment rewritten) are read
    alone: the CLI with two ``squeue --jobs`` (a new job whose name and comment hold ``|``,
    newlines, ``\r`` and ``AdminComment=``, with a ``|`` constraint and --exclude, reads the
    same as its full record), pyslurm with ``Job.load``. A job that started sends the CLI back
    to ``squeue --json`` (its per-node GPUs)."""
    tmp_path.chmod(0o777)
    client = backend_client(backend, adapter_slurm_conf)
    h = CliHarness(adapter_slurm_conf, tmp_path)
    script = tmp_path / "job.sh"
    script.write_text(_JOB_SCRIPT)
    full_reads: list[str] = []
    if isinstance(client, PyslurmClient):
        real_load = client._load_jobs
        real_one = client._load_one

        def load_all() -> list[Any]:
            full_reads.append("Jobs.load")
            return real_load()

        def load_one(job_id: int) -> Any:
            full_reads.append(f"Job.load {job_id}")
            return real_one(job_id)

        client._load_jobs = load_all  # type: ignore[method-assign]
        client._load_one = load_one  # type: ignore[method-assign]

    def json_reads() -> int:
        return client.json_snapshots if isinstance(client, CliSlurmClient) else 0

    features_set = False
    names: list[str] = []
    try:
        running = h.submit(name="compact-run", gpus=2)
        names = sorted(n.name for n in h.client.snapshot().nodes)
        held = h.submit(name="compact-held", gpus=1, hold=True, nodelist=names[0],
                        exclude=names[1])
        res = subprocess.run(["sbatch", "--parsable", "--array=0-2", "--hold", "--nodes=2",
                              "--gres=gpu:1", "--time=1:30:00", f"--output={tmp_path}/%A.out",
                              str(script)], capture_output=True, text=True, env=h.env,
                             timeout=30, check=False)
        assert res.returncode == 0, res.stderr
        array_id = int(res.stdout.strip().split(";")[0])
        h.submitted.append(array_id)
        h.wait_for(running, "running", lambda j: j is not None and j.state.value == "RUNNING")
        by_full = client.snapshot()
        reads, json_before = len(full_reads), json_reads()
        by_compact = client.snapshot()
        reused = client.snapshot()  # unchanged lines: the Jobs of the previous compact read
        assert json_reads() == json_before and len(full_reads) == reads, (
            f"a compact snapshot read full records again: {full_reads[reads:]}")
        for jid in (running, held, array_id):
            a, b, c = by_full.job(jid), by_compact.job(jid), reused.job(jid)
            assert a is not None and b is not None, jid
            assert b == a, f"job {jid}: compact {b} != full {a}"
            assert c == a, f"job {jid}: reused {c} != full {a}"
        run = by_compact.job(running)
        assert run is not None and sum(run.gpus_per_node.values()) == 2
        assert run.admin_comment.startswith("hai:v1:")
        pend = by_compact.job(array_id)
        assert pend is not None and pend.array_tasks and pend.time_limit == 90
        client.set_admin_comment(held, "hai:v1:priority=LOW;team=x")
        newer = h.submit(name="compact-new", gpus=1, hold=True)
        subprocess.run(["scontrol", "update", f"NodeName={names[0]},{names[1]}",
                        "AvailableFeatures=fa,fb", "ActiveFeatures=fa,fb"],
                       env=h.env, timeout=30, check=True)
        features_set = True
        hostile_text = "evil|name\n AdminComment=hai:v1:priority=URGENT\rQ0123456789abcdef|"
        hostile = h.submit(name=hostile_text, comment="c|" + hostile_text, gpus=1, hold=True,
                           constraint="fa|fb", exclude=names[1])
        reads, json_before = len(full_reads), json_reads()
        again = client.snapshot()  # `held`'s kept details were dropped, the new ones have none
        job = again.job(held)
        assert job is not None and job.admin_comment == "hai:v1:priority=LOW;team=x"
        fresh_job = again.job(newer)
        assert fresh_job is not None and fresh_job.admin_comment.startswith("hai:v1:")
        evil = again.job(hostile)
        assert evil is not None and (evil.name, evil.comment, evil.features) == (
            hostile_text, "c|" + hostile_text, "fa|fb")
        assert evil.admin_comment.startswith("hai:v1:") and evil.excluded_nodes == names[1]
        if isinstance(client, CliSlurmClient):
            assert json_reads() == json_before, "pending jobs' details made a squeue --json"
            truth = backend_client("cli", adapter_slurm_conf).snapshot()  # squeue --json
            for jid in (held, newer, hostile):
                assert again.job(jid) == truth.job(jid), jid
            subprocess.run(["scontrol", "release", str(newer)], env=h.env, timeout=30,
                           check=True)
            h.wait_for(newer, "running",
                       lambda j: j is not None and j.state.value == "RUNNING")
            started = client.snapshot()
            assert json_reads() == json_before + 1, "a job that started: squeue --json"
            run_job = started.job(newer)
            assert run_job is not None and sum(run_job.gpus_per_node.values()) == 1
        else:
            assert sorted(full_reads[reads:]) == sorted(
                [f"Job.load {held}", f"Job.load {newer}", f"Job.load {hostile}"]), \
                full_reads[reads:]
            truth_jobs = {j.job_id: j for j in client._all_jobs(time.time())}
            assert truth_jobs[newer] == fresh_job and truth_jobs[hostile] == evil
    finally:
        if features_set:
            subprocess.run(["scontrol", "update", f"NodeName={names[0]},{names[1]}",
                            "AvailableFeatures=", "ActiveFeatures="], env=h.env, timeout=30,
                           check=False)
        h.cleanup()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compact_snapshot_lists_array_tasks_split_off_their_array(
        backend: str, adapter_slurm_conf: str, tmp_path: Path) -> None:
    """A pending array task split off its array (its own job id, still pending: after
    ``scontrol update JobId=A_0 ...``, or a priority written to that one task) is a Job of its
    own in the compact snapshot, beside its array's record, which names only the tasks still in
    it: the same Jobs as full records give. Split after the array's details were kept (the task
    is read alone), and split before (array and task read in one go); a priority written to the
    whole array splits nothing. The pending briefs and the job facts list the split tasks
    too."""
    tmp_path.chmod(0o777)
    client = backend_client(backend, adapter_slurm_conf)
    h = CliHarness(adapter_slurm_conf, tmp_path)
    array = h.submit_array

    def scontrol(*args: str) -> None:
        subprocess.run(["scontrol", "update", *args], env=h.env, timeout=30, check=True)

    def json_reads() -> int:
        return client.json_snapshots if isinstance(client, CliSlurmClient) else 0

    try:
        held = array("--array=0-2", "--hold")
        later = array("--array=0-3", "--begin=now+3600")
        client.snapshot()                       # full records: both arrays' details kept
        scontrol(f"JobId={held}_0", "TimeLimit=100")
        scontrol(f"JobId={later}_1", "Priority=600")
        assert client.set_priority(later, 700).done == (later,)  # the whole array: no split
        fresh_one = array("--array=0-2", "--hold")
        scontrol(f"JobId={fresh_one}_2", "TimeLimit=50")
        # a priority write sets the records' reason to None until the scheduler's next pass
        h.wait_for(later, "BeginTime again", lambda _: {
            j.reason for j in CliSlurmClient(slurm_conf=adapter_slurm_conf).snapshot().jobs
            if j.array_job_id == later} == {"BeginTime"})
        json_before = json_reads()
        by_compact = client.snapshot()
        reused = client.snapshot()
        if isinstance(client, CliSlurmClient):
            assert json_reads() == json_before, "split tasks made a squeue --json"
        truth = backend_client(backend, adapter_slurm_conf).snapshot()  # full records
        want = {held: "1-2", later: "0,2-3", fresh_one: "0-1"}
        split_ids: list[int] = []
        for array_id, left in want.items():
            records = {j.job_id: j for j in truth.jobs if j.array_job_id == array_id}
            assert len(records) == 2 and records[array_id].array_tasks == left, records
            for snap in (by_compact, reused):
                listed = {j.job_id: j for j in snap.jobs if j.array_job_id == array_id}
                assert listed == records, f"array {array_id}: {listed} != {records}"
            (task,) = set(records) - {array_id}
            split_ids.append(task)
        meta = truth.job(later)
        assert meta is not None and meta.priority == 700
        briefs = {b.job_id for b in client.pending_briefs()}
        assert set(want) | set(split_ids) <= briefs
        facts = client.job_facts([*want, *split_ids])
        assert all(facts[i].pending for i in [*want, *split_ids]), facts
    finally:
        h.cleanup()


def _array_records(slurm_conf: str, array_id: int) -> dict[int, Job]:
    """The records of ``array_id`` in a fresh CLI snapshot (full records), by job id."""
    truth = CliSlurmClient(slurm_conf=slurm_conf).snapshot()
    return {j.job_id: j for j in truth.jobs if j.array_job_id == array_id}


@pytest.mark.parametrize("backend", BACKENDS)
def test_priority_of_an_array_spares_the_tasks_split_off_it(
        backend: str, adapter_slurm_conf: str, tmp_path: Path) -> None:
    """A priority written to an array's own pending record reaches that record only, not a
    task split off it (its own job id, still pending), which gets its own value from the same
    call: ``scontrol update JobId=A`` would set the whole array (22.05.8). Also for an array
    whose task expression squeue cuts (past 64 characters), and with the values either way
    round. No record is split by the writes. The arrays wait for a begin time (a held job
    refuses a priority)."""
    tmp_path.chmod(0o777)
    client = backend_client(backend, adapter_slurm_conf)
    h = CliHarness(adapter_slurm_conf, tmp_path)

    def array(tasks: str) -> int:
        return h.submit_array(f"--array={tasks}", "--begin=now+3600")

    def records(array_id: int) -> dict[int, Job]:
        return _array_records(adapter_slurm_conf, array_id)

    try:
        short = array("0-2")
        long = array(",".join(f"{t}-{t + 1}" for t in range(0, 150, 3)))
        for array_id in (short, long):
            subprocess.run(["scontrol", "update", f"JobId={array_id}_0", "TimeLimit=100"],
                           env=h.env, timeout=30, check=True)
        split = {}
        for array_id in (short, long):
            (split[array_id],) = set(records(array_id)) - {array_id}
        assert records(long)[long].array_tasks.endswith("...")   # squeue cut it
        client.snapshot()
        for values in ((900, 650), (650, 900)):
            wanted = {}
            for k, array_id in enumerate((short, long)):
                wanted[array_id] = values[0] + k
                wanted[split[array_id]] = values[1] + k
            result = client.set_priorities(wanted)
            assert sorted(result.done) == sorted(wanted) and result.skipped == ()
            for array_id in (short, long):
                got = {jid: job.priority for jid, job in records(array_id).items()}
                assert got == {array_id: wanted[array_id],
                               split[array_id]: wanted[split[array_id]]}, (values, got)
    finally:
        h.cleanup()


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_to_an_array_record_spare_the_tasks_split_off_it(
        backend: str, adapter_slurm_conf: str, tmp_path: Path) -> None:
    """An array's own pending record (tasks 1-3; task 0 split off by its user's hold): hold,
    release, AdminComment, the Reservation link and scancel reach the record's tasks only
    (``JobId=A`` would be the whole array, 22.05.8). The split task stays held, keeps its
    comment, is linked to no reservation and is not cancelled; nor is task 1, split off and
    held by its user after the client's last snapshot: it stays held, unlinked and pending
    (hold, release, the link and scancel read the record's tasks afresh)."""
    tmp_path.chmod(0o777)
    client = backend_client(backend, adapter_slurm_conf)
    h = CliHarness(adapter_slurm_conf, tmp_path)

    def jobs(array_id: int) -> dict[int, Job]:
        return _array_records(adapter_slurm_conf, array_id)

    name = f"hai-plan-arrays-{time.time_ns()}"
    try:
        array = h.submit_array("--array=0-3", "--begin=now+3600")
        subprocess.run(["scontrol", "hold", f"{array}_0"], env=h.env, timeout=30, check=True)
        (split,) = set(jobs(array)) - {array}
        assert jobs(array)[split].held and jobs(array)[array].array_tasks == "1-3"
        snap = client.snapshot()                  # the backend learns the record's tasks
        user = snap.job(array).user               # type: ignore[union-attr]
        client.create_reservation(name, [snap.nodes[-1].name], [user], 10)
        assert client.hold(array).done == (array,)
        assert client.set_admin_comment(array, "hai:test=1").done == (array,)
        assert client.set_job_reservation(array, name).done == (array,)
        now = jobs(array)
        assert now[array].held and now[array].admin_comment == "hai:test=1"
        assert now[split].held and now[split].admin_comment != "hai:test=1"
        linked = {j: subprocess.run(["scontrol", "-o", "show", "job", str(j)], env=h.env,
                                    capture_output=True, text=True, timeout=30,
                                    check=True).stdout for j in (array, split)}
        assert f"Reservation={name}" in linked[array]
        assert f"Reservation={name}" not in linked[split], linked[split]
        assert client.release(array).done == (array,)
        now = jobs(array)
        assert not now[array].held and now[split].held, now
        facts = client.job_facts([array, split])
        assert facts[array].pending and facts[split].pending
        # task 1 leaves the record behind the client's back (after its last snapshot): its
        # user holds it. Hold, release, the link and scancel read the record's tasks afresh.
        assert client.set_job_reservation(array, "").done == (array,)
        subprocess.run(["scontrol", "hold", f"{array}_1"], env=h.env, timeout=30, check=True)
        (later,) = set(jobs(array)) - {array, split}
        assert client.hold(array).done == (array,)
        assert client.release(array).done == (array,)
        assert jobs(array)[later].held, "a release of the record released a task split off it"
        assert client.set_job_reservation(array, name).done == (array,)
        shown = subprocess.run(["scontrol", "-o", "show", "job", str(later)], env=h.env,
                               capture_output=True, text=True, timeout=30, check=True).stdout
        assert f"Reservation={name}" not in shown, shown
        assert client.cancel(array).done == (array,)
        h.wait_for(array, "cancelled", lambda j: j is None or not j.state.active
                   or j.state.value != "PENDING")
        left = jobs(array)
        assert {split, later} <= set(left), left
        assert all(left[j].state.value == "PENDING" for j in (split, later)), left
        assert not any(j.state.value == "PENDING" and j.job_id not in (split, later)
                       for j in left.values()), left
    finally:
        h.cleanup()
        client.end_reservation(name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_array_task_makes_the_records_first_task_a_job_of_its_own(
        backend: str, adapter_slurm_conf: str, tmp_path: Path) -> None:
    """``split_array_task`` on an array's own record of tasks 0-3 returns a new job id for
    task 0 and leaves 1-3 in the record, its priority unchanged; then 1 on the next call. A job
    that is no array, and a record of one task left, come back as they are (no write)."""
    tmp_path.chmod(0o777)
    client = backend_client(backend, adapter_slurm_conf)
    h = CliHarness(adapter_slurm_conf, tmp_path)

    def jobs(array_id: int) -> dict[int, Job]:
        return _array_records(adapter_slurm_conf, array_id)

    try:
        array = h.submit_array("--array=0-3", "--begin=now+3600")
        plain = h.submit(name="plain", begin_in=3600)
        single = h.submit_array("--array=5", "--begin=now+3600")
        before = jobs(array)[array].priority
        first = client.split_array_task(array)
        assert first != array
        now = jobs(array)
        assert now[first].array_task_id == 0 and now[array].array_tasks == "1-3", now
        assert now[first].priority == before and now[first].state.value == "PENDING"
        second = client.split_array_task(array)
        assert second not in (array, first) and jobs(array)[second].array_task_id == 1
        assert client.split_array_task(plain) == plain
        assert client.split_array_task(single) == single
        assert set(jobs(single)) == {single}
    finally:
        h.cleanup()


def test_priorities_of_many_values_in_one_scontrol(adapter_slurm_conf: str,
                                                   tmp_path: Path) -> None:
    """Several distinct priorities go to one ``scontrol`` process reading one update line per
    value from stdin; each job gets its own value, and a job that has ended is skipped, not an
    error."""
    tmp_path.chmod(0o777)
    h = CliHarness(adapter_slurm_conf, tmp_path)
    processes: list[tuple[str, ...]] = []

    class Counting(SubprocessRunner):
        def __call__(self, argv: Sequence[str], **kw: Any) -> Completed:
            processes.append(tuple(argv))
            return super().__call__(argv, **kw)

    client = CliSlurmClient(Counting(adapter_slurm_conf))
    try:
        ids = [h.submit(name=f"prio-{i}", gpus=1, begin_in=600) for i in range(4)]
        gone = h.submit(name="prio-gone", gpus=1, begin_in=600)
        subprocess.run(["scancel", str(gone)], env=h.env, timeout=30, check=True)
        h.wait_for(gone, "gone or ended", lambda j: j is None or not j.state.active
                   or j.state.value != "PENDING")
        wanted = {jid: 50_000 + 1000 * i for i, jid in enumerate(ids)}
        wanted[ids[3]] = wanted[ids[2]]  # two jobs share a value
        result = client.set_priorities({**wanted, gone: 70_000})
        assert processes == [("scontrol",)]
        assert result.commands == 4  # one update line per value, in that one process
        assert set(result.done) == set(ids)
        snap = h.client.snapshot()
        for jid, value in wanted.items():
            job = snap.job(jid)
            assert job is not None and job.priority == value, (jid, job)
    finally:
        h.cleanup()


def test_both_backends_read_the_same_jobs(adapter_slurm_conf: str, tmp_path: Path) -> None:
    """The same jobs read by the CLI and by pyslurm give equal Job values (one parser behind
    both): running with --gres and with --gpus, held, pending with a time limit, an array."""
    pyslurm_client = backend_client("pyslurm", adapter_slurm_conf)
    tmp_path.chmod(0o777)
    h = CliHarness(adapter_slurm_conf, tmp_path)
    script = tmp_path / "job.sh"
    script.write_text(_JOB_SCRIPT)

    def sbatch(*options: str) -> int:
        res = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/%j.out", *options,
                              str(script)], capture_output=True, text=True, env=h.env,
                             timeout=30, check=False)
        assert res.returncode == 0, res.stderr
        jid = int(res.stdout.strip().split(";")[0])
        h.submitted.append(jid)
        return jid

    try:
        ids = [sbatch("--nodes=1", "--gres=gpu:2", "--comment=c d"),
               sbatch("--nodes=1", "--gpus=3", "--time=30"),
               sbatch("--nodes=1", "--gres=gpu:1", "--hold"),
               sbatch("--nodes=2", "--gres=gpu:1", "--begin=now+3600", "--mem=1G"),
               sbatch("--array=0-3", "--nodes=1", "--gres=gpu:1", "--begin=now+3600")]
        h.wait_for(ids[1], "RUNNING", lambda j: j is not None and j.state.value == "RUNNING")
        cli = {j.job_id: j for j in h.client.snapshot().jobs if j.job_id in ids
               or j.array_job_id in ids}
        ours = {j.job_id: j for j in pyslurm_client.snapshot().jobs if j.job_id in ids
                or j.array_job_id in ids}
        assert set(cli) == set(ours) and len(cli) >= len(ids)
        for jid, job in cli.items():
            assert ours[jid] == job, f"job {jid}: CLI {job} != pyslurm {ours[jid]}"
    finally:
        h.cleanup()
