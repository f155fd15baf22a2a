"""PyslurmClient's translation of pyslurm's values and errors (a stand-in module, no Slurm).

The real pyslurm against a real slurmctld is tested by the contract suite in
tests/integration/test_adapter_contract.py; this covers the mapping rules alone.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import INFINITE, SlurmVersion
from hai_slurm.slurm_plugins.cli_backend import CliSlurmClient
from hai_slurm.slurm_plugins.parse import parse_job
from hai_slurm.slurm_plugins.pyslurm_backend import PyslurmClient, job_facts_of, job_record
from hai_slurm.slurm_plugins.runner import Completed
from hai_slurm.slurm_plugins.types import JobState, SignalTarget, SkipReason


def pyslurm_job(**over: Any) -> SimpleNamespace:
    """A pending job with the attributes pyslurm 22.5's Job has (None where Slurm has none)."""
    base: dict[str, Any] = dict(
        id=7, name="train", user_id=0, account="vision", partition="gpu",
        qos="normal", state="PENDING", state_reason="Priority", priority=4000,
        submit_time=1_700_000_000, eligible_time=1_700_000_000, start_time=None,
        time_limit=None, num_nodes=2, allocated_nodes=None, gres_per_node={"gpu": 4},
        ntasks=2, sockets_per_node=None, cpus=8, memory_per_node=16384, memory_per_cpu=None,
        requeue_count=0, is_requeueable=True, comment="c", admin_comment=None,
        is_batch_job=True, array_id=None, array_task_id=None, array_tasks_waiting=None,
        required_switches=None, max_wait_time_switches=None, required_nodes=None,
        excluded_nodes=None, constraints=None, resource_sharing="OK", reservation=None,
        steps={})
    base.update(over)
    job = SimpleNamespace(**base)
    job.get_resource_layout_per_node = lambda: over.get("layout", {})
    return job


def test_pending_job_reads_like_squeue_json() -> None:
    """A pending job: GPUs from tres_per_node x nodes, memory from the request, no time limit
    (pyslurm's None) as UNLIMITED, as squeue --json v0.0.38 writes it."""
    job = parse_job(job_record(pyslurm_job()))
    assert job is not None
    assert (job.state, job.gpus_requested, job.node_count, job.nodes) == (
        JobState.PENDING, 8, 2, ())
    assert (job.cpus, job.memory_mb, job.time_limit) == (8, 32768, INFINITE)
    assert (job.admin_comment, job.comment, job.switches, job.array_job_id) == ("", "c", 0, None)
    assert job.user == "root"
    assert (job.required_nodes, job.excluded_nodes, job.features) == ("", "", "")
    asked = parse_job(job_record(pyslurm_job(required_nodes="n[1-2]", excluded_nodes="n3",
                                             constraints="a100|h100")))
    assert asked is not None
    assert (asked.required_nodes, asked.excluded_nodes, asked.features) == (
        "n[1-2]", "n3", "a100|h100")
    assert job.exclusive == "" and not job.takes_whole_nodes and job.reservation == ""
    linked = parse_job(job_record(pyslurm_job(reservation="maint")))
    assert linked is not None and linked.reservation == "maint"
    for sharing, want in (("NO", "node"), ("USER", "user"), ("MCS", "mcs"), ("YES", "")):
        got = parse_job(job_record(pyslurm_job(resource_sharing=sharing)))
        assert got is not None and got.exclusive == want, sharing


def test_unknown_uid_is_shown_as_its_number() -> None:
    """A uid the daemon's host cannot resolve is the number (pyslurm itself would raise)."""
    job = parse_job(job_record(pyslurm_job(user_id=3_999_999)))
    assert job is not None and (job.user, job.uid) == ("3999999", 3_999_999)


def test_running_job_counts_what_slurm_allocated() -> None:
    """A running job: GPUs per node and memory from its resource layout; no memory in the
    layout (memory not consumable) means 0, as a tres_alloc_str without mem does."""
    layout = {"n1": {"gres": {"gpu": {"count": "2", "indexes": "0-1"}}, "memory": 8192},
              "n2": {"gres": {"gpu": {"count": "2", "indexes": "4-5"}}, "memory": 8192}}
    running = pyslurm_job(state="RUNNING", allocated_nodes="n[1-2]", start_time=1_700_000_100,
                          time_limit=60, gres_per_node={"gpu": 2}, layout=layout)
    job = parse_job(job_record(running))
    assert job is not None and job.nodes == ("n1", "n2")
    assert dict(job.gpus_per_node) == {"n1": 2, "n2": 2} and job.gpus_requested == 4
    assert (job.memory_mb, job.time_limit, job.start_time) == (16384, 60, 1_700_000_100)
    bare = {"n1": {"gres": {"gpu": 2}, "memory": None}}
    job = parse_job(job_record(pyslurm_job(state="RUNNING", allocated_nodes="n1", num_nodes=1,
                                           layout=bare)))
    assert job is not None and job.memory_mb == 0


def test_held_array_task_zero_and_flag_states() -> None:
    """Priority 0 with JobHeldAdmin is held; task 0 (pyslurm's None) is task 0; a flag word
    (REQUEUED) is read by the one job_state reader."""
    held = parse_job(job_record(pyslurm_job(priority=0, state_reason="JobHeldAdmin")))
    assert held is not None and held.held
    task = parse_job(job_record(pyslurm_job(id=9, array_id=9, array_task_id=None)))
    assert task is not None and (task.array_job_id, task.array_task_id) == (9, 0)
    many = parse_job(job_record(pyslurm_job(id=9, array_id=9, array_tasks_waiting="1-3")))
    assert many is not None and (many.array_task_id, many.array_tasks) == (None, "1-3")
    facts = job_facts_of(pyslurm_job(state="REQUEUED", priority=0,
                                     state_reason="JobHeldAdmin", requeue_count=1,
                                     required_nodes="n3"))
    assert (facts.state, facts.held, facts.restart_count, facts.req_nodes) == (
        JobState.PENDING, True, 1, "n3")


class RPCError(Exception):
    """pyslurm.RPCError's shape: errno and Slurm's message."""

    def __init__(self, errno: int, msg: str) -> None:
        super().__init__(msg)
        self.errno, self.msg = errno, msg


class FakePyslurm:
    """A stand-in for the pyslurm module: jobs by id; unknown ids fail as slurmctld does."""

    __version__ = "22.5.3"
    RPCError = RPCError

    def __init__(self, jobs: dict[int, SimpleNamespace]) -> None:
        self.jobs = jobs
        self.calls: list[tuple[int, str, Any]] = []
        fake = self

        class Job:
            def __init__(self, job_id: int) -> None:
                self.id = job_id

            @staticmethod
            def load(job_id: int) -> SimpleNamespace:
                fake._known(job_id)
                return fake.jobs[job_id]

            def _act(self, what: str, arg: Any = None) -> None:
                fake._known(self.id)
                job = fake.jobs[self.id]
                if what == "modify" and job.priority == 0 and "priority" in arg:
                    raise RPCError(2053, "Job is in held state, pending scheduler release")
                if what == "send_signal" and job.state == "PENDING":
                    raise RPCError(2023, "Job is pending execution")
                fake.calls.append((self.id, what, arg))

            def modify(self, desc: dict[str, Any]) -> None:
                self._act("modify", desc)

            def send_signal(self, sig: str, steps: str) -> None:
                self._act("send_signal", (sig, steps))

            def requeue(self, hold: bool = False) -> None:
                self._act("requeue", hold)

            def hold(self) -> None:
                self._act("hold")

            def release(self) -> None:
                self._act("release")

            def cancel(self) -> None:
                self._act("cancel")

        class Jobs:
            @staticmethod
            def load() -> SimpleNamespace:
                return SimpleNamespace(data={"local": dict(fake.jobs)})

        self.Job = Job
        self.Jobs = Jobs
        self.JobSubmitDescription = dict

    def _known(self, job_id: int) -> None:
        if job_id not in self.jobs:
            raise RPCError(2017, "Invalid job id specified")


class VersionOnlyCli(CliSlurmClient):
    """A CLI backend that knows its release and must run nothing else."""

    def __init__(self) -> None:
        super().__init__(runner=self._refuse)
        self._version = SlurmVersion(22, 5, 8)

    @staticmethod
    def _refuse(argv: Any, *, timeout: float | None = None) -> Completed:
        raise AssertionError(f"unexpected command {argv}")


def client(jobs: dict[int, SimpleNamespace]) -> tuple[PyslurmClient, FakePyslurm]:
    """A PyslurmClient over the stand-in module."""
    fake = FakePyslurm(jobs)
    return PyslurmClient(module=fake, cli=VersionOnlyCli()), fake


def test_writes_sort_races_from_failures_like_the_cli() -> None:
    """Gone ids and held jobs are skipped with the CLI's reasons; other errors raise."""
    c, fake = client({1: pyslurm_job(id=1), 2: pyslurm_job(id=2, priority=0)})
    res = c.set_priorities({1: 500, 2: 500, 99: 600})
    assert res.done == (1,)
    assert {s.job_id: s.reason for s in res.skipped} == {2: SkipReason.HELD,
                                                         99: SkipReason.GONE}
    assert fake.calls == [(1, "modify", {"priority": 500})]
    assert c.hold([1, 99]).skipped_ids == {99}
    fake.Job.modify = lambda self, desc: (_ for _ in ()).throw(RPCError(2002, "Access denied"))
    with pytest.raises(SlurmError, match=r"job 1: Access denied \(errno 2002\)"):
        c.set_priority(1, 5)


def test_requeue_only_running_jobs_and_workload_signal_by_steps() -> None:
    """requeue skips pending and gone jobs; WORKLOAD signals the steps of a job with an srun
    step and the batch shell of one without."""
    jobs = {1: pyslurm_job(id=1, state="RUNNING", steps={"batch": 0, 0: 0}),
            2: pyslurm_job(id=2, state="RUNNING", steps={"batch": 0}),
            3: pyslurm_job(id=3)}
    c, fake = client(jobs)
    res = c.requeue_hold([1, 3, 99])
    assert res.done == (1,)
    assert {s.job_id: s.reason for s in res.skipped} == {3: SkipReason.PENDING,
                                                         99: SkipReason.GONE}
    fake.calls.clear()
    res = c.signal([1, 2, 3], "USR2", target=SignalTarget.WORKLOAD)
    assert set(res.done) == {1, 2} and res.skipped_ids == {3}
    assert sorted(fake.calls) == [(1, "send_signal", ("SIGUSR2", "children")),
                                  (2, "send_signal", ("SIGUSR2", "batch"))]
    with pytest.raises(ValueError, match="signal must be a name"):
        c.signal(1, "usr2; rm")


def test_job_facts_of_a_task_under_the_array_id() -> None:
    """Job.load(array id) gives the array's first record; the task with that id is found in
    the full listing instead of being taken for gone."""
    task5 = pyslurm_job(id=5, array_id=5, array_task_id=1, state="RUNNING")
    task6 = pyslurm_job(id=6, array_id=5, array_task_id=0, state="PENDING")
    c, fake = client({5: task5, 6: task6})
    fake.Job.load = staticmethod(lambda job_id: task6)
    facts = c.job_facts([5])
    assert list(facts) == [5] and facts[5].state is JobState.RUNNING


def test_after_slurmctld_was_unreachable_calls_fail_fast_until_it_accepts_again() -> None:
    """An RPC that found no slurmctld marks it unreachable: later calls check that it accepts
    connections first and fail at once while it does not (a pyslurm call holds the interpreter
    lock through libslurm's connect retries, so a SIGTERMed daemon could not stop); once it
    accepts again, pyslurm is called again. No probe while all is well."""
    c, fake = client({1: pyslurm_job(id=1)})
    probes: list[str | None] = []
    answer: dict[str, str | None] = {"now": "127.0.0.1:6817: Connection refused"}

    def probe() -> str | None:
        probes.append(answer["now"])
        return answer["now"]

    c.probe = probe
    assert 1 in c.job_facts([1]) and probes == []
    real = fake.Job.load
    fake.Job.load = staticmethod(lambda _id: (_ for _ in ()).throw(RPCError(
        1007, "Unable to contact slurm controller (connect failure)")))
    with pytest.raises(SlurmError, match="Unable to contact"):
        c.job_facts([1])
    fake.Job.load = real
    with pytest.raises(SlurmError, match=r"does not accept connections.*Connection refused"):
        c.job_facts([1])
    with pytest.raises(SlurmError, match="does not accept connections"):
        c.hold([1])
    assert fake.calls == []  # pyslurm was not called while it was refused
    answer["now"] = None
    assert 1 in c.job_facts([1])
    assert c.hold([1]).done == (1,)
    assert len(probes) == 3  # one per call while unreachable, then none


def test_controller_addresses_from_slurm_conf() -> None:
    """SlurmctldHost's address (or name) with SlurmctldPort's first port; none: ()."""
    from hai_slurm.slurm_plugins.pyslurm_backend import controller_addresses

    text = ("SlurmctldHost=vm(127.0.0.1)  # primary\nSlurmctldHost=backup\n"
            "SlurmctldPort=7817-7818\n")
    assert controller_addresses(text) == (("127.0.0.1", 7817), ("backup", 7817))
    assert controller_addresses("ClusterName=x\n") == ()


class GpuRequestCli(CliSlurmClient):
    """A CLI backend that answers only ``squeue -O`` of the GPU requests (``gres:gpu:N`` per
    job in ``per_job``), logging each argv; ``--jobs`` of only unknown ids fails like squeue."""

    def __init__(self, per_job: dict[int, int]) -> None:
        super().__init__(runner=self._answer)
        self._version = SlurmVersion(22, 5, 8)
        self.per_job = per_job
        self.calls: list[tuple[str, ...]] = []

    def _answer(self, argv: Any, *, timeout: float | None = None) -> Completed:
        argv = tuple(argv)
        assert argv[:2] == ("squeue", "--noheader"), argv
        self.calls.append(argv)
        ids = sorted(self.per_job)
        chosen = [a for a in argv if a.startswith("--jobs=")]
        if chosen:
            ids = [int(i) for i in chosen[0].removeprefix("--jobs=").split(",")
                   if int(i) in self.per_job]
            if not ids:
                return Completed(argv, 1, "", "slurm_load_jobs error: Invalid job id specified")
        out = "".join(f"{i}|gres:gpu:{self.per_job[i]}|N/A|N/A|\n" for i in ids)
        return Completed(argv, 0, out, "")


def test_gpu_requests_are_read_for_new_jobs_only_and_all_again_after_detail_refresh() -> None:
    """Jobs without a per-node request get theirs from squeue: all of them in the first
    snapshot, then only a job not seen before (``--jobs``), all again after DETAIL_REFRESH;
    a job with gres_per_node needs no read. A record equal to the last one gives the same Job
    object (not parsed again); a changed one is parsed again."""
    from hai_slurm.slurm_plugins.compact_listing import DETAIL_REFRESH

    now = [1_000.0]
    cli = GpuRequestCli({2: 2})
    jobs = {1: pyslurm_job(id=1), 2: pyslurm_job(id=2, gres_per_node=None, num_nodes=1)}
    fake = FakePyslurm(jobs)
    c = PyslurmClient(module=fake, cli=cli, clock=lambda: now[0])
    first = {j.job_id: j for j in c.jobs()}
    assert first[2].gpus_requested == 2 and first[1].gpus_requested == 8
    assert len(cli.calls) == 1 and not any(a.startswith("--jobs=") for a in cli.calls[0])
    again = {j.job_id: j for j in c.jobs()}
    assert len(cli.calls) == 1 and again[2] is first[2] and again[1] is first[1]
    jobs[3], cli.per_job[3] = pyslurm_job(id=3, gres_per_node=None, num_nodes=1), 3
    jobs[1] = pyslurm_job(id=1, priority=5000)
    third = {j.job_id: j for j in c.jobs()}
    assert cli.calls[-1][2] == "--jobs=3" and len(cli.calls) == 2
    assert third[3].gpus_requested == 3
    assert third[1] is not first[1] and third[1].priority == 5000 and third[2] is first[2]
    now[0] += DETAIL_REFRESH
    c.jobs()
    assert len(cli.calls) == 3 and not any(a.startswith("--jobs=") for a in cli.calls[-1])
    jobs[4] = pyslurm_job(id=4, gres_per_node=None, num_nodes=1)  # ends before squeue sees it
    assert 4 in {j.job_id for j in c.jobs()}
    assert [len(cli.calls), cli.calls[-2][2]] == [5, "--jobs=4"]  # refused: then all again
    assert not any(a.startswith("--jobs=") for a in cli.calls[-1])
