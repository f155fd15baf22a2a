"""CliSlurmClient's command building, batching and error mapping, on recorded Slurm outputs.

Commands go to a replaying CommandRunner (same interface as SubprocessRunner) that answers with
files recorded from Slurm 22.05.8, 24.11.5 and 26.05.5, and with stderr texts Slurm 22.05
printed for real.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.slurm_plugins.cli_backend import QOS_REFRESH, CliSlurmClient, fresh, ranges, task_ids
from hai_slurm.slurm_plugins.runner import Completed, SubprocessRunner
from hai_slurm.slurm_plugins.types import SignalTarget, SkipReason
from hai_slurm.slurm_plugins.version import QOS_COMMAND, parse_version, query_plan

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
Answer: TypeAlias = Completed | Callable[[tuple[str, ...]], Completed]


def ok(argv: Sequence[str], stdout: str = "", stderr: str = "", rc: int = 0) -> Completed:
    """A finished command."""
    return Completed(tuple(argv), rc, stdout, stderr)


class ReplayRunner:
    """Answers commands from a table (exact argv, else the first two words); logs every call."""

    def __init__(self, answers: dict[tuple[str, ...], Answer]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        """Replay the answer for ``argv``."""
        key = tuple(argv)
        self.calls.append(key)
        answer = self.answers.get(key) or self.answers.get(key[:2])
        if answer is None and key == ("scontrol", "version"):
            return ok(key, "slurm 22.05.8\n")   # the release, when a test does not say
        if answer is None:
            return ok(key)          # a write that Slurm accepted silently
        return answer(key) if callable(answer) else Completed(key, answer.returncode,
                                                              answer.stdout, answer.stderr)


def cluster_2205(accounting: str = "accounting_storage/none") -> dict[tuple[str, ...], Answer]:
    """Answers recorded on Slurm 22.05.8."""
    d = DATA / "22.05"
    return {
        ("scontrol", "version"): ok([], (d / "scontrol-version.txt").read_text()),
        ("scontrol", "show", "config"): ok([], f"AccountingStorageType   = {accounting}\n"
                                               "ClusterName             = lab\n"),
        ("squeue", "--json"): ok([], (d / "squeue-mixed.json").read_text()),
        ("sinfo", "--json"): ok([], (d / "sinfo.json").read_text()),
        ("scontrol", "--oneliner", "show", "partition"):
            ok([], (d / "scontrol-show-partition.txt").read_text()),
        QOS_COMMAND: ok([], (d / "sacctmgr-show-qos.txt").read_text()),
    }


def cluster_recorded(series: str) -> dict[tuple[str, ...], Answer]:
    """Answers recorded on a newer release (24.11.5 or 26.05.5, Docker testbed with accounting)."""
    d = DATA / series
    return {
        ("scontrol", "version"): ok([], (d / "scontrol-version.txt").read_text()),
        ("scontrol", "show", "config"): ok([], "AccountingStorageType   = "
                                               "accounting_storage/slurmdbd\n"),
        ("squeue", "--json"): ok([], (d / "squeue-mixed.json").read_text()),
        ("scontrol", "show", "nodes", "--json"): ok([], (d / "scontrol-show-nodes.json")
                                                    .read_text()),
        ("scontrol", "--oneliner", "show", "partition"):
            ok([], (d / "scontrol-show-partition.txt").read_text()),
        QOS_COMMAND: ok([], (d / "sacctmgr-show-qos.txt").read_text()),
    }


def test_snapshot_2205_uses_sinfo_and_scontrol_text() -> None:
    """On 22.05 nodes come from sinfo --json and partitions from scontrol text; no sacctmgr.
    The pending 2-node job makes one compact squeue read --switches (not in 22.05's JSON)."""
    runner = ReplayRunner(cluster_2205())
    snap = CliSlurmClient(runner, clock=lambda: 1795940500.7).snapshot()
    assert runner.calls == [("scontrol", "version"), ("squeue", "--json"),
                            ("squeue", "--noheader", "--states=PENDING",
                             "--Format=JobID:|,ReqSwitch:|,Wait4Switch:|", "--array-unique"),
                            ("sinfo", "--json"),
                            ("scontrol", "--oneliner", "show", "partition"),
                            ("scontrol", "show", "config")]
    assert snap.version == SlurmVersion(22, 5, 8) and snap.time == 1795940500
    assert len(snap.jobs) == 6 and len(snap.nodes) == 4 and len(snap.partitions) == 2
    assert snap.qos == ()


@pytest.mark.parametrize(("series", "version"), [("24.11", SlurmVersion(24, 11, 5)),
                                                  ("26.05", SlurmVersion(26, 5, 5))])
def test_snapshot_newer_uses_scontrol_json_nodes_text_partitions_and_qos(
        series: str, version: SlurmVersion) -> None:
    """From 23.02 nodes come from scontrol --json, partitions from its text, QOS from sacctmgr;
    on 26.05 jobs' --exclusive from squeue -O (its JSON does not tell it)."""
    runner = ReplayRunner(cluster_recorded(series))
    client = CliSlurmClient(runner)
    snap = client.snapshot()
    told = ([("squeue", "--noheader", "--states=PENDING", "--Format=JobID:|,Exclusive:|")]
            if series == "26.05" else [])
    assert runner.calls == [("scontrol", "version"), ("squeue", "--json"), *told,
                            ("scontrol", "show", "nodes", "--json"),
                            ("scontrol", "--oneliner", "show", "partition"),
                            ("scontrol", "show", "config"), QOS_COMMAND]
    assert snap.version == version and len(snap.qos) == 8
    assert len(snap.jobs) == 7 and len(snap.nodes) == 2
    (main,) = snap.partitions
    assert main.default and main.nodes == ("n1", "n2")
    client.snapshot()
    assert runner.calls.count(("scontrol", "version")) == 1       # detected once
    assert runner.calls.count(("scontrol", "show", "config")) == 1


def test_exclusive_is_read_from_its_column_where_the_json_lacks_it() -> None:
    """26.05's JSON lists ``shared`` as ``[]`` for every job: ``squeue -O Exclusive`` tells
    (NODE, USER; NO shares). A release that refuses the column keeps the JSON's value and is
    not asked again."""
    answers = cluster_recorded("26.05")
    pending = [j.job_id for j in CliSlurmClient(ReplayRunner(dict(answers))).snapshot().pending]
    assert len(pending) >= 2
    column = ("squeue", "--noheader", "--states=PENDING", "--Format=JobID:|,Exclusive:|")
    answers[column] = ok([], f"{pending[0]}|NODE|\n{pending[1]}|USER|\n999|NO|\n")
    snap = CliSlurmClient(ReplayRunner(answers)).snapshot()
    assert [snap.job(j).exclusive for j in pending[:2]] == ["node", "user"]  # type: ignore[union-attr]
    assert all(j.exclusive == "" for j in snap.jobs if j.job_id not in pending[:2])
    answers["scontrol", "version"] = ok([], "slurm 25.05.1\n")
    answers[column] = ok([], "", "squeue: error: Invalid job format specification: Exclusive\n",
                         rc=1)
    runner = ReplayRunner(answers)
    client = CliSlurmClient(runner)
    assert all(j.exclusive == "" for j in client.snapshot().jobs)
    client.snapshot()
    assert runner.calls.count(column) == 1


def test_qos_are_read_again_only_after_qos_refresh() -> None:
    """sacctmgr runs in the first snapshot and again once QOS_REFRESH seconds have passed (or
    the clock went back); the snapshots between carry the QOS read last."""
    now = [1_000.0]
    runner = ReplayRunner(cluster_recorded("24.11"))
    client = CliSlurmClient(runner, clock=lambda: now[0])
    first = client.snapshot().qos
    now[0] += QOS_REFRESH - 1
    assert client.snapshot().qos == first and runner.calls.count(QOS_COMMAND) == 1
    now[0] += 1
    assert client.snapshot().qos == first and runner.calls.count(QOS_COMMAND) == 2
    now[0] -= 10
    client.snapshot()
    assert runner.calls.count(QOS_COMMAND) == 3


@pytest.mark.parametrize("broken", [("sinfo", "--json"), ("scontrol", "--oneliner"), QOS_COMMAND])
def test_any_failed_query_fails_the_whole_snapshot(broken: tuple[str, ...]) -> None:
    """A failing part never yields a partial snapshot: SlurmError carries command and message."""
    answers = cluster_2205("accounting_storage/slurmdbd")
    answers[broken] = ok([], "", "slurm_load_partitions: Unable to contact slurm controller "
                                 "(connect failure)", rc=1)
    if broken[:2] == ("scontrol", "--oneliner"):
        answers[("scontrol", "--oneliner", "show", "partition")] = answers.pop(broken)
    with pytest.raises(SlurmError, match="Unable to contact slurm controller") as info:
        CliSlurmClient(ReplayRunner(answers)).snapshot()
    assert info.value.returncode == 1 and info.value.command[:1] == [broken[0]]


def test_invalid_json_is_a_slurm_error() -> None:
    """Truncated JSON output is reported with the command and the first bytes."""
    answers = cluster_2205()
    answers[("squeue", "--json")] = ok([], '{"jobs": [')
    with pytest.raises(SlurmError, match=r"squeue --json printed invalid JSON.*first bytes"):
        CliSlurmClient(ReplayRunner(answers)).snapshot()


def test_set_priorities_one_command_per_value_and_chunks() -> None:
    """Jobs sharing a value share one scontrol update; long id lists are chunked."""
    runner = ReplayRunner({})
    client = CliSlurmClient(runner)
    res = client.set_priorities({1: 5, 2: 5, 3: 7})
    assert runner.calls == [("scontrol", "update", "JobId=1,2", "Priority=5"),
                            ("scontrol", "update", "JobId=3", "Priority=7")]
    assert res.commands == 2 and sorted(res.done) == [1, 2, 3]
    runner.calls.clear()
    res = client.set_priorities(dict.fromkeys(range(1, 451), 9))
    assert len(runner.calls) == 3 and res.commands == 3 and len(res.done) == 450
    with pytest.raises(ValueError, match="priority for job 4 must be an integer"):
        client.set_priorities({4: -1})


def test_harmless_races_are_skipped_real_failures_raise() -> None:
    """'Invalid job id' is skipped; any other per-job message raises with Slurm's words."""
    runner = ReplayRunner({("scontrol", "update"): ok(
        [], "", "Invalid job id specified for job 999\n", rc=1)})
    res = CliSlurmClient(runner).set_priorities({3: 11, 999: 11})
    assert res.done == (3,)
    assert [(s.job_id, s.reason, s.message) for s in res.skipped] == [
        (999, SkipReason.GONE, "Invalid job id specified")]
    runner = ReplayRunner({("scontrol", "update"): ok(
        [], "", "Access/permission denied for job 5\n", rc=1)})
    with pytest.raises(SlurmError, match="job 5: Access/permission denied") as info:
        CliSlurmClient(runner).set_priority(5, 3)
    assert info.value.command == ["scontrol", "update", "JobId=5", "Priority=3"]


def test_held_job_priority_write_is_skipped() -> None:
    """Slurm refuses a priority on a held job; the adapter reports it as HELD, not an error."""
    runner = ReplayRunner({("scontrol", "update"): ok(
        [], "", "Job is in held state, pending scheduler release for job 4\n", rc=1)})
    res = CliSlurmClient(runner).set_priorities({3: 7, 4: 7})
    assert res.done == (3,) and [s.reason for s in res.skipped] == [SkipReason.HELD]


def test_job_that_finished_since_the_snapshot_is_skipped() -> None:
    """A job ending between snapshot and write ("Job has already finished") is no error."""
    runner = ReplayRunner({("scontrol", "update"): ok(
        [], "", "Job has already finished for job 5\n", rc=1)})
    res = CliSlurmClient(runner).set_priorities({5: 7, 6: 7})
    assert res.done == (6,) and [(s.job_id, s.reason) for s in res.skipped] == [
        (5, SkipReason.FINISHED)]


def test_failure_without_per_job_lines_raises() -> None:
    """A failed command that names no job (controller down) is an error."""
    runner = ReplayRunner({("scontrol", "hold"): ok(
        [], "", "slurm_suspend error: Unable to contact slurm controller", rc=1)})
    with pytest.raises(SlurmError, match=r"scontrol hold failed.*Unable to contact"):
        CliSlurmClient(runner).hold([1, 2])


def test_signal_argv() -> None:
    """scancel gets --signal, --full or --batch, and space-separated ids."""
    runner = ReplayRunner({("scancel", "--signal=USR2"): ok(
        [], "", "scancel: error: Kill job error on job id 9: Invalid job id specified\n", rc=1)})
    client = CliSlurmClient(runner)
    res = client.signal([8, 9], "USR2")
    assert runner.calls == [("scancel", "--signal=USR2", "--full", "8", "9")]
    assert res.done == (8,) and res.skipped_ids == {9}
    client.signal(8, "TERM", target=SignalTarget.BATCH)
    client.signal(8, "12", target=SignalTarget.STEPS)
    assert runner.calls[1:] == [("scancel", "--signal=TERM", "--batch", "8"),
                                ("scancel", "--signal=12", "8")]
    with pytest.raises(ValueError, match="signal must be a name"):
        client.signal(8, "USR2; rm -rf /")


def test_requeue_only_touches_running_jobs() -> None:
    """Jobs found COMPLETED, PENDING or unknown are skipped; scontrol requeue gets the rest.

    (``scontrol requeue`` on a COMPLETED job would run it again: measured on 22.05.)
    """
    runner = ReplayRunner({("squeue", "--noheader"): ok(
        [], "5|RUNNING|0|9|None||\n6|COMPLETED|0|0|None||\n7|PENDING|0|9|Priority||\n")})
    res = CliSlurmClient(runner).requeue([5, 6, 7, 8])
    assert runner.calls[-1] == ("scontrol", "requeue", "5")
    assert res.done == (5,) and res.commands == 1
    assert {s.job_id: s.reason for s in res.skipped} == {
        6: SkipReason.FINISHED, 7: SkipReason.PENDING, 8: SkipReason.GONE}


def test_requeue_when_all_ids_are_gone() -> None:
    """squeue fails with 'Invalid job id' when no id is known: all skipped, nothing requeued."""
    runner = ReplayRunner({("squeue", "--noheader"): ok(
        [], "", "slurm_load_jobs error: Invalid job id specified", rc=1)})
    res = CliSlurmClient(runner).requeue_hold([41, 42])
    assert res.done == () and res.skipped_ids == {41, 42}
    assert all(c[0] == "squeue" or c == ("scontrol", "version") for c in runner.calls)


def test_admin_comment_is_one_argv_element() -> None:
    """Spaces and '=' stay inside one argument; newlines are refused."""
    runner = ReplayRunner({})
    client = CliSlurmClient(runner)
    client.set_admin_comment(3, "hai:v1 class=HIGH team=a")
    assert runner.calls == [("scontrol", "update", "JobId=3", "AdminComment=hai:v1 class=HIGH "
                                                              "team=a")]
    with pytest.raises(ValueError, match="single line"):
        client.set_admin_comment(3, "a\nb")
    with pytest.raises(ValueError, match="positive integer"):
        client.cancel([0])


def test_version_parsing_and_plans() -> None:
    """Version strings of Debian and upstream builds; too old releases are refused."""
    assert parse_version("slurm-wlm 22.05.8\n") == SlurmVersion(22, 5, 8)
    assert parse_version("slurm 24.11.5") == SlurmVersion(24, 11, 5)
    assert str(parse_version("26.05")) == "26.05.0"
    assert query_plan(SlurmVersion(23, 2, 0)).nodes == ("scontrol", "show", "nodes", "--json")
    assert query_plan(SlurmVersion(22, 5, 8)).nodes == ("sinfo", "--json")
    text = ("scontrol", "--oneliner", "show", "partition")   # JSON is not faithful, see version.py
    assert {query_plan(SlurmVersion(*v)).partitions for v in ((22, 5, 8), (24, 11, 5),
                                                               (26, 5, 5))} == {text}
    with pytest.raises(SlurmError, match="too old"):
        query_plan(SlurmVersion(21, 8, 5))
    with pytest.raises(SlurmError, match="cannot read a Slurm version"):
        parse_version("scontrol: fatal: Could not establish a configuration source")


def test_subprocess_runner_env_missing_program_and_timeout(tmp_path: Path) -> None:
    """The real runner exports SLURM_CONF, names a missing program, and enforces its timeout."""
    runner = SubprocessRunner(tmp_path / "slurm.conf", timeout=5)
    res = runner(["printenv", "SLURM_CONF"])
    assert res.returncode == 0 and res.stdout.strip() == str(tmp_path / "slurm.conf")
    with pytest.raises(SlurmError, match="no-such-slurm-tool not found"):
        runner(["no-such-slurm-tool"])
    with pytest.raises(SlurmError, match=r"did not finish within 0.2 s") as info:
        runner(["sleep", "5"], timeout=0.2)
    assert info.value.command == ["sleep", "5"]


def test_array_task_holding_the_array_id_is_addressed_as_task() -> None:
    """`scontrol requeue 40` would requeue the whole array 40; the adapter writes 40_3.

    Slurm gives the last task of an array the array's own id (seen on 22.05: tasks 0-3 got
    new ids, task 3 of array 1034 ran as job 1034).
    """
    answers = cluster_2205()
    answers[("squeue", "--json")] = ok([], json.dumps({"jobs": [
        {"job_id": 40, "array_job_id": 40, "array_task_id": 3, "job_state": "RUNNING",
         "nodes": "n1", "node_count": 1},
        {"job_id": 41, "array_job_id": 40, "array_task_id": 0, "job_state": "RUNNING",
         "nodes": "n2", "node_count": 1}], "errors": []}))
    answers[("squeue", "--noheader")] = ok([], "40|RUNNING|0|9|None||\n41|RUNNING|0|9|None||\n")
    answers[("scontrol", "requeue")] = ok(
        [], "", "Job/step already completing or completed for job 40_3\n", rc=1)
    runner = ReplayRunner(answers)
    client = CliSlurmClient(runner)
    client.snapshot()
    res = client.requeue([40, 41])
    assert runner.calls[-1] == ("scontrol", "requeue", "40_3,41")
    assert res.done == (41,) and [(s.job_id, s.reason) for s in res.skipped] == [
        (40, SkipReason.FINISHED)]
    client.signal(40)
    assert runner.calls[-1:] == [("scancel", "--signal=USR2", "--full", "40_3")]


def test_switch_requests_come_from_json_or_one_compact_squeue() -> None:
    """24.11+ JSON carries --switches; 22.05's does not, so one ``squeue -O ReqSwitch`` of the
    pending jobs fills it in, and only when a pending multi-node job needs it."""
    answers = cluster_2205()
    answers[("squeue", "--json")] = ok([], json.dumps({"jobs": [
        {"job_id": 50, "job_state": "PENDING", "node_count": 2, "nodes": ""},
        {"job_id": 51, "job_state": "PENDING", "node_count": 2, "nodes": ""}], "errors": []}))
    answers[("squeue", "--noheader")] = ok([], "50|1|2:00|\n51|0|0:00|\n")
    runner = ReplayRunner(answers)
    snap = CliSlurmClient(runner).snapshot()
    assert ("squeue", "--noheader", "--states=PENDING",
            "--Format=JobID:|,ReqSwitch:|,Wait4Switch:|", "--array-unique") in runner.calls
    job50, job51 = snap.job(50), snap.job(51)
    assert job50 is not None and (job50.switches, job50.switch_wait) == (1, 120)
    assert job51 is not None and (job51.switches, job51.switch_wait) == (0, 0)

    single = cluster_2205()
    single[("squeue", "--json")] = ok([], json.dumps({"jobs": [
        {"job_id": 52, "job_state": "PENDING", "node_count": 1, "nodes": ""}], "errors": []}))
    quiet = ReplayRunner(single)
    assert CliSlurmClient(quiet).snapshot().job(52).switches == 0  # type: ignore[union-attr]
    assert not any(c[:2] == ("squeue", "--noheader") for c in quiet.calls)

    later = cluster_2205()
    later[("squeue", "--json")] = ok([], json.dumps({"jobs": [
        {"job_id": 53, "job_state": "PENDING", "node_count": 2, "nodes": "",
         "required_switches": 1, "maximum_switch_wait_time": 300}], "errors": []}))
    snap = CliSlurmClient(ReplayRunner(later)).snapshot()
    assert (snap.job(53).switches, snap.job(53).switch_wait) == (1, 300)  # type: ignore[union-attr]


def test_workload_signal_goes_to_srun_steps_else_to_the_batch_shell() -> None:
    """One ``squeue --steps`` sorts the jobs: those with an srun step (own ids, array tasks
    included) get the signal in their steps only, the others in their batch shell only."""
    steps = ("7_1.0|7|\n7_1.batch|7|\n9.batch|9|\n9.extern|9|\n11.3|11|\n")
    runner = ReplayRunner({("squeue", "--noheader"): ok([], steps)})
    res = CliSlurmClient(runner).signal([7, 9, 11], "USR2", target=SignalTarget.WORKLOAD)
    assert runner.calls == [
        ("squeue", "--noheader", "--steps", "--jobs=7,9,11", "--Format=StepId:|,JobId:|"),
        ("scancel", "--signal=USR2", "7", "11"),
        ("scancel", "--signal=USR2", "--batch", "9")]
    assert set(res.done) == {7, 9, 11} and res.commands == 2


def test_requeue_any_counts_an_array_task_slurm_requeued_meanwhile() -> None:
    """The victim, array task 1085_3, exits 75 after its ack and Slurm's RequeueExit requeues it
    between our state query and our ``scontrol requeuehold``, which then says
    ``1085_3: Job is pending execution`` (seen on 22.05, a CI run): it counts as requeued,
    not as a failure."""
    answers = cluster_2205()
    answers[("squeue", "--json")] = ok([], json.dumps({"jobs": [
        {"job_id": 1085, "array_job_id": 1085, "array_task_id": 3, "job_state": "RUNNING",
         "nodes": "n1", "node_count": 1}], "errors": []}))
    answers[("squeue", "--noheader")] = ok([], "1085|RUNNING|0|9|None||\n")
    answers[("scontrol", "requeuehold")] = ok([], "", "1085_3: Job is pending execution\n",
                                              rc=1)
    runner = ReplayRunner(answers)
    client = CliSlurmClient(runner)
    client.snapshot()
    assert client.requeue_any([1085], hold=True) == (1085,)
    assert runner.calls[-2:] == [("scontrol", "requeuehold", "1085_3"),
                                 ("scontrol", "hold", "1085_3")]


def test_fresh_is_younger_than_its_ttl_and_never_from_the_future() -> None:
    """The cache rule of the QOS, the kept job details and pyslurm's GPU requests: read, and
    younger than the TTL; a clock that went back past the read makes it stale, not fresh."""
    assert fresh(100.0, 100.0, 5.0) and fresh(100.0, 104.9, 5.0)
    assert not fresh(100.0, 105.0, 5.0)
    assert not fresh(None, 100.0, 5.0)
    assert not fresh(100.0, 99.0, 5.0)



class ArraySlurmctld:
    """slurmctld's priority updates on array 52, as 22.05.8 does them (checked on the testbed):
    ``JobId=53`` is that record, ``JobId=52`` every record of the array, ``52_[TASKS]`` the
    array's own record when TASKS hold all of its tasks (else Slurm splits them off: refused
    here), ``52_T`` task T's record. ``squeue`` cuts a task expression past 64 characters
    (``squeue --array`` lists each pending task); other commands are answered from the 22.05
    recordings."""

    ARRAY = 52

    def __init__(self, records: dict[int, dict[str, object]]) -> None:
        self.records = records
        self.replay = ReplayRunner(cluster_2205())
        self.calls: list[tuple[str, ...]] = []
        self.updates: list[str] = []

    def priorities(self) -> dict[int, object]:
        """Each record's priority now."""
        return {j: r["priority"] for j, r in self.records.items()}

    def _json(self) -> str:
        jobs = []
        for jid, r in self.records.items():
            tasks = str(r.get("tasks", ""))
            jobs.append({"job_id": jid, "array_job_id": self.ARRAY,
                         "array_task_id": r.get("task"), "job_state": r["state"],
                         "array_task_string": tasks if len(tasks) <= 64 else tasks[:61] + "...",
                         "priority": r["priority"], "node_count": 1,
                         "nodes": "n1" if r["state"] == "RUNNING" else ""})
        return json.dumps({"jobs": jobs, "errors": []})

    def _update(self, line: str) -> None:
        self.updates.append(line)
        _, ids, value = line.split()
        for ref in re.findall(r"\d+(?:_(?:\[[^\]]*\]|\d+))?", ids.removeprefix("JobId=")):
            head, _, tasks = ref.partition("_")
            if int(head) != self.ARRAY:     # a split task's own id: that record
                hit = [int(head)]
            elif not tasks:
                hit = list(self.records)
            elif tasks.isdigit():
                hit = [j for j, r in self.records.items() if r.get("task") == int(tasks)]
            else:
                named = task_ids(tasks.removeprefix("[").removesuffix("]"))
                own = task_ids(str(self.records[self.ARRAY]["tasks"]))
                assert named is not None and own is not None and own <= named, (
                    f"JobId={ref} splits tasks off the array's record")
                hit = [self.ARRAY]
            for jid in hit:
                self.records[jid]["priority"] = int(value.removeprefix("Priority="))

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None,
                 stdin: str | None = None, env: Mapping[str, str] | None = None,
                 exact: bool = False) -> Completed:
        """Answer as slurmctld would."""
        key = tuple(argv)
        self.calls.append(key)
        env = dict(env or {})
        while key[0] == "env":
            name, _, value = key[1].partition("=")
            env[name] = value
            key = ("env", *key[2:]) if key[2] == "env" else key[2:]
        if key == ("squeue", "--json"):
            return ok(key, self._json())
        if key == ("scontrol",) and stdin is not None:
            for line in stdin.splitlines():
                self._update(line)
            return ok(key)
        if key[:2] == ("scontrol", "update"):
            self._update(" ".join(key[1:]))
            return ok(key)
        if key[0] == "squeue" and "--Format=JobID:|,ArrayJobID:|,ArrayTaskID:|" in key:
            assert "--array" in key and "--states=PENDING" in key, key   # a line per task
            lines = []
            for j, r in self.records.items():
                if r["state"] != "PENDING":
                    continue
                own = task_ids(str(r["tasks"])) if "tasks" in r else {r["task"]}
                lines += [f"{j}|{self.ARRAY}|{t}|\n" for t in sorted(own or ())]
            return ok(key, "".join(lines))
        return self.replay(key)


class PipedArraySlurmctld(ArraySlurmctld, SubprocessRunner):
    """The same, as a SubprocessRunner: several values go to one scontrol reading stdin."""

    def __init__(self, records: dict[int, dict[str, object]]) -> None:
        ArraySlurmctld.__init__(self, records)
        SubprocessRunner.__init__(self, "/nonexistent/slurm.conf")


def array_52(own_tasks: str = "1-2") -> dict[int, dict[str, object]]:
    """Array 52: its own pending record (tasks ``own_tasks``), task 0 split off as 53
    (pending), task 3 running as 54."""
    return {52: {"tasks": own_tasks, "state": "PENDING", "priority": 100},
            53: {"task": 0, "state": "PENDING", "priority": 100},
            54: {"task": 3, "state": "RUNNING", "priority": 100}}


@pytest.mark.parametrize("piped", [False, True])
def test_priority_of_an_array_leaves_its_split_off_tasks_alone(piped: bool) -> None:
    """``JobId=52`` is the whole array 52 to scontrol, so its value went to task 53 split off
    it too (22.05.8 testbed: {52: 900, 53: 650} left 53 at 900). The array's own record is
    written as ``52_[1-2]``: each job ends with its own value and the running task keeps its
    own, with one command per value or one scontrol reading stdin."""
    slurmctld = (PipedArraySlurmctld if piped else ArraySlurmctld)(array_52())
    client = CliSlurmClient(slurmctld)
    client.snapshot()
    res = client.set_priorities({52: 900, 53: 650})
    assert slurmctld.priorities() == {52: 900, 53: 650, 54: 100}
    assert sorted(res.done) == [52, 53] and res.skipped == ()
    assert "update JobId=52_[1-2] Priority=900" in slurmctld.updates
    res = client.set_priorities({53: 700, 52: 600})    # the other order of values
    assert slurmctld.priorities() == {52: 600, 53: 700, 54: 100}


@pytest.mark.parametrize("piped", [False, True])
def test_array_task_expression_cut_by_squeue_is_read_again_whole(piped: bool) -> None:
    """squeue ends a task expression past 64 characters in ``...``; naming only the tasks
    before the cut would split the rest off the array's record (Slurm splits tasks named
    apart from the rest). One ``squeue --array`` reads the record's tasks one by one. A ``%N``
    throttle is left out of the name."""
    long = ",".join(f"{t}-{t + 1}" for t in range(4, 150, 3))
    slurmctld = (PipedArraySlurmctld if piped else ArraySlurmctld)(array_52(long))
    client = CliSlurmClient(slurmctld)
    assert client.snapshot().job(52).array_tasks.endswith("...")  # type: ignore[union-attr]
    client.set_priorities({52: 900, 53: 650})
    assert slurmctld.priorities() == {52: 900, 53: 650, 54: 100}
    assert f"update JobId=52_[{long}] Priority=900" in slurmctld.updates
    reads = [c for c in slurmctld.calls if "--Format=JobID:|,ArrayJobID:|,ArrayTaskID:|" in c]
    assert len(reads) == 1
    throttled = ArraySlurmctld(array_52("1-2%4"))
    client = CliSlurmClient(throttled)
    client.snapshot()
    client.set_priority(52, 5)
    assert throttled.updates == ["update JobId=52_[1-2] Priority=5"]


def test_writes_to_an_array_record_read_its_tasks_afresh() -> None:
    """Hold, release, the Reservation link and scancel read the record's pending tasks again
    (the priorities, written every cycle, keep the snapshot's): task 1 split off after the
    snapshot (as 55) is not named with the record. Once no task is left in the record (task 2
    started and took the array's id) nothing is written: ``52`` would be the whole array, the
    split tasks and the running one too."""
    slurmctld = ArraySlurmctld(array_52())
    client = CliSlurmClient(slurmctld)
    client.snapshot()
    slurmctld.records[52]["tasks"] = "2"
    slurmctld.records[55] = {"task": 1, "state": "PENDING", "priority": 100}
    writes = [("hold", lambda: client.hold(52)), ("release", lambda: client.release(52)),
              ("update", lambda: client.set_job_reservation(52, "hai-plan-1")),
              ("scancel", lambda: client.cancel(52))]
    for verb, write in writes:
        before = len(slurmctld.calls)
        write()
        named = [c for c in slurmctld.calls[before:] if verb in c[:2]]
        assert len(named) == 1 and "52_2" in " ".join(named[0]), (verb, named)
    slurmctld.records[52] = {"task": 2, "state": "RUNNING", "priority": 100}
    for verb, write in writes:
        before = len(slurmctld.calls)
        res = write()
        assert res.done == () and [(s.job_id, s.reason) for s in res.skipped] == [
            (52, SkipReason.NOT_PENDING)], (verb, res)
        assert not [c for c in slurmctld.calls[before:] if verb in c[:2]], verb


def test_no_array_no_extra_work() -> None:
    """Without arrays the writes are as before: ids only, no extra read."""
    runner = ReplayRunner(cluster_2205())
    client = CliSlurmClient(runner)
    client.snapshot()
    before = len(runner.calls)
    client.set_priorities({1: 5, 2: 6})
    assert runner.calls[before:] == [("scontrol", "update", "JobId=1", "Priority=5"),
                                     ("scontrol", "update", "JobId=2", "Priority=6")]


def test_messages_about_an_arrays_own_record() -> None:
    """A held array's record, named ``52_[1-2]``, is reported as ``52_1-2`` (22.05.8): a HELD
    skip of 52. Tasks that left the record since the snapshot are reported apart (``52_1:
    Invalid job id``) beside ``No error`` for the record, which was written."""
    answers = cluster_2205()
    answers[("squeue", "--json")] = ok([], ArraySlurmctld(array_52())._json())
    answers[("scontrol", "update")] = ok(
        [], "", "52_1-2: Job is in held state, pending scheduler release\n", rc=1)
    client = CliSlurmClient(ReplayRunner(answers))
    client.snapshot()
    res = client.set_priorities({52: 9, 53: 9})
    assert res.done == (53,) and [(s.job_id, s.reason) for s in res.skipped] == [
        (52, SkipReason.HELD)]
    answers[("scontrol", "update")] = ok(
        [], "", "52_1: Invalid job id specified\n52_2: No error\n", rc=1)
    res = client.set_priorities({52: 9, 53: 9})
    assert sorted(res.done) == [52, 53] and res.skipped == ()
    answers[("scontrol", "update")] = ok([], "", "52_2: Access/permission denied\n", rc=1)
    with pytest.raises(SlurmError, match="job 52_2: Access/permission denied"):
        client.set_priorities({52: 9})


@pytest.mark.parametrize(("tasks", "expr"), [
    ([0, 1, 2, 5], "0-2,5"), ([3], "3"), ([1, 3, 4, 6, 7, 8], "1,3-4,6-8"), ([0, 2, 4], "0,2,4")])
def test_ranges_is_the_task_expression_of_sorted_ids(tasks: list[int], expr: str) -> None:
    assert ranges(tasks) == expr
    assert task_ids(expr) == frozenset(tasks)
