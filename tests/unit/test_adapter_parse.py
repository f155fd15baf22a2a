"""Parsers of Slurm output, on recorded 22.05 output and hand-written 24.11/26.05 layouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import INFINITE
from hai_slurm.slurm_plugins.hostlist import (
    compress_hostlist,
    expand_hostlist,
    gres_gpu_count,
    tres_gpu_count,
)
from hai_slurm.slurm_plugins.parse import (
    compact_job_records,
    detail_signature,
    exclusivity,
    job_messages,
    job_state,
    number,
    parse_job,
    parse_jobs,
    parse_node,
    parse_nodes,
    parse_partitions_json,
    parse_partitions_text,
    parse_qos,
)
from hai_slurm.slurm_plugins.types import JobState
from hai_slurm.slurm_plugins.version import QOS_FIELDS

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def load(rel: str) -> Any:
    """A JSON test document."""
    return json.loads((DATA / rel).read_text())


# -- 22.05 recordings ---------------------------------------------------------------------------
def test_2205_squeue_active_jobs_and_fields() -> None:
    """The recorded 22.05 queue gives every active job with Slurm's values."""
    jobs = {j.job_id: j for j in parse_jobs(load("22.05/squeue-mixed.json"))}
    assert sorted(jobs) == [1, 2, 3, 4, 5, 6]
    run = jobs[1]
    assert (run.name, run.state, run.reason, run.priority) == ("train-a", JobState.RUNNING,
                                                               "None", 1)
    assert run.nodes == ("n1",) and run.gpus_requested == 2 and dict(run.gpus_per_node) == {"n1": 2}
    assert run.comment == "user note" and run.admin_comment == "hai:class=HIGH"
    assert run.user == "root" and run.uid == 0 and run.batch and run.requeue
    assert run.submit_time == 1795940470 and run.start_time == 1795940470
    assert run.time_limit == INFINITE          # null in v0.0.38 = no limit
    multi = jobs[2]
    assert multi.nodes == ("n2", "n3") and multi.node_list == "n[2-3]"
    assert multi.gpus_requested == 16 and multi.gpus_allocated == 16 and multi.time_limit == 30
    pending = jobs[3]
    assert pending.state is JobState.PENDING and pending.reason == "Resources"
    assert pending.nodes == () and pending.start_time is None and pending.gpus_requested == 16
    held = jobs[4]
    assert held.held and held.priority == 0 and held.gpus_requested == 4   # --gpus=4: tres_per_job
    assert held.eligible_time is None
    assert not jobs[5].requeue and jobs[5].partition == "debug"
    requeued = jobs[6]
    assert requeued.restart_count == 1 and requeued.reason == "BeginTime"
    assert requeued.gpus_requested == 0 and requeued.eligible_time == 1795940484


def test_2205_completed_jobs_are_left_out() -> None:
    """squeue --json lists COMPLETED jobs too (22.05 ignores --states); the parser drops them."""
    doc = load("22.05/squeue-held-completed.json")
    states = {j["job_id"]: j["job_state"] for j in doc["jobs"]}
    assert states[7] == "COMPLETED"
    jobs = {j.job_id: j for j in parse_jobs(doc)}
    assert 7 not in jobs and len(jobs) == 6
    assert jobs[5].state is JobState.RUNNING and jobs[5].reason == "JobHeldAdmin"
    assert not jobs[5].held      # a held *running* job keeps running; only pending ones are held
    assert jobs[1].held and jobs[1].restart_count == 1


def test_2205_array_jobs() -> None:
    """Running array tasks are jobs of their own; pending tasks share one record."""
    jobs = {j.job_id: j for j in parse_jobs(load("22.05/squeue-array.json"))}
    running = [j for j in jobs.values() if j.state is JobState.RUNNING]
    assert sorted(j.array_task_id for j in running) == [0, 1, 2, 3]  # type: ignore[type-var]
    assert all(j.array_job_id == 1 and j.array_tasks == "" for j in running)
    pending = jobs[1]
    assert pending.state is JobState.PENDING and pending.array_task_id is None
    assert pending.array_tasks == "4-5" and pending.gpus_requested == 8
    plain = parse_jobs(load("22.05/squeue-mixed.json"))[0]
    assert plain.array_job_id is None and plain.array_tasks == ""


def test_2205_sinfo_nodes() -> None:
    """sinfo --json nodes: lower-case state, GRES with socket and index suffixes."""
    nodes = {n.name: n for n in parse_nodes(load("22.05/sinfo.json"))}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    n1 = nodes["n1"]
    assert (n1.state, n1.cpus, n1.memory_mb, n1.gpus) == ("MIXED", 16, 16000, 8)
    assert n1.gpus_used == 3 and n1.cpus_allocated == 2     # gres_used "gpu:(null):3(IDX:0-1,4)"
    assert n1.partitions == ("main", "debug") and n1.available
    assert sum(n.gpus_used for n in nodes.values()) == 2 + 16 + 1


def test_2205_partitions_text() -> None:
    """scontrol --oneliner show partition, as 22.05 prints it."""
    parts = parse_partitions_text((DATA / "22.05/scontrol-show-partition.txt").read_text())
    main, debug = parts
    assert main.name == "main" and main.default and main.nodes == ("n1", "n2", "n3", "n4")
    assert main.max_time == INFINITE and main.preempt_mode == "OFF" and main.priority_tier == 1
    assert debug.name == "debug" and not debug.default and debug.max_time == 60
    assert debug.node_list == "n[1-2]"


def test_2205_qos_recorded() -> None:
    """sacctmgr --parsable2 output recorded on a 22.05 testbed with accounting."""
    qos = parse_qos((DATA / "22.05/sacctmgr-show-qos.txt").read_text(), QOS_FIELDS)
    by = {q.name: q for q in qos}
    assert by["extreme_high"].priority == 50 and by["low"].priority == 0
    assert by["normal"].preempt == () and by["normal"].preempt_mode == "CLUSTER"
    assert by["normal"].max_wall is None and by["normal"].usage_factor == 1.0


# -- newer layouts (hand-written, see tests/data/slurm/README.md) --------------------------------
def test_2411_wrapped_numbers_and_state_lists() -> None:
    """24.11 layout: number wrappers, job_state lists, gres/gpu specs, per-task GPUs."""
    jobs = {j.job_id: j for j in parse_jobs(load("24.11/hand-written/squeue.json"))}
    assert sorted(jobs) == [101, 102, 103, 104, 105, 107]       # 106 COMPLETED is dropped
    big = jobs[101]
    assert big.state is JobState.RUNNING and big.priority == 4000 and big.time_limit == 1440
    assert big.nodes == ("gpu01", "gpu02") and big.gpus_requested == 16
    assert dict(big.gpus_per_node) == {"gpu01": 8, "gpu02": 8}
    assert jobs[102].time_limit == INFINITE and jobs[102].gpus_requested == 4
    assert jobs[102].start_time is None
    assert jobs[103].held and jobs[103].priority == 0
    requeued = jobs[104]
    assert requeued.state is JobState.PENDING and requeued.state_flags == ("REQUEUED",)
    assert requeued.restart_count == 2 and requeued.eligible_time == 1764400321
    assert jobs[105].state is JobState.COMPLETING and jobs[105].state_flags == ("COMPLETED",)
    assert jobs[107].gpus_requested == 4 and jobs[107].gpus_allocated == 4


def test_2411_nodes_and_partitions() -> None:
    """24.11 scontrol show nodes/partitions --json."""
    nodes = {n.name: n for n in parse_nodes(load("24.11/hand-written/scontrol-show-nodes.json"))}
    assert nodes["gpu03"].state == "MIXED" and nodes["gpu03"].state_flags == ("COMPLETING",)
    assert nodes["gpu04"].gpus == 8 and nodes["gpu04"].gpus_used == 4
    assert not nodes["gpu04"].available and nodes["gpu04"].reason == "fan"
    assert nodes["gpu01"].gpus_used == 8
    gpu, debug = parse_partitions_json(load("24.11/hand-written/scontrol-show-partitions.json"))
    assert gpu.default and gpu.max_time == INFINITE and len(gpu.nodes) == 4
    assert not debug.default and debug.max_time == 60 and debug.priority_tier == 10
    assert debug.grace_time == 30


def test_2411_qos_with_preempt_lists() -> None:
    """Preempt lists, grace times and wall limits in sacctmgr's --parsable2 form."""
    text = (DATA / "24.11/hand-written/sacctmgr-show-qos.txt").read_text()
    by = {q.name: q for q in parse_qos(text, QOS_FIELDS)}
    assert by["high"].preempt == ("low", "normal") and by["high"].grace_time == 120
    assert by["high"].max_wall == 2 * 24 * 60 and by["high"].flags == ("DenyOnLimit",
                                                                         "OverPartQOS")
    assert by["low"].max_wall == 30 and by["low"].usage_factor == 0.5
    assert by["low"].preempt_mode == "REQUEUE" and by["low"].grace_time == 10


def test_2605_unknown_fields_ignored_and_missing_tolerated() -> None:
    """Extra fields of a newer data_parser are ignored; absent optional fields do not break."""
    jobs = {j.job_id: j for j in parse_jobs(load("26.05/hand-written/squeue.json"))}
    assert jobs[2001].gpus_per_node == {"node-a1": 4, "node-a2": 4}
    assert jobs[2002].gpus_requested == 2 and not jobs[2002].held
    nodes = {n.name: n for n in parse_nodes(load("26.05/hand-written/scontrol-show-nodes.json"))}
    assert nodes["node-b1"].state == "DOWN" and "NOT_RESPONDING" in nodes["node-b1"].state_flags
    assert not nodes["node-b1"].available and nodes["node-a2"].gpus_used == 4
    (batch,) = parse_partitions_json(load("26.05/hand-written/scontrol-show-partitions.json"))
    assert batch.nodes == ("node-a1", "node-a2", "node-b1") and batch.max_time == 2880


# -- small pieces --------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "expected"), [
    (5, 5), (None, None), ({"set": True, "infinite": False, "number": 7}, 7),
    ({"set": False, "infinite": False, "number": 0}, None),
    ({"set": False, "infinite": True, "number": 0}, INFINITE),
    (4294967294, None), (4294967295, INFINITE), (2.9, 2), ("12", 12), (True, 1),
])
def test_number_forms(value: object, expected: int | None) -> None:
    """Plain ints, wrappers, NO_VAL/INFINITE sentinels and numeric strings."""
    assert number(value) == expected


def test_number_rejects_text_naming_the_field() -> None:
    """A non-number says which field held what."""
    with pytest.raises(SlurmError, match=r"job 9: priority: expected a number, got 'high'"):
        number("high", "job 9: priority")


def test_unknown_job_state_is_an_error_not_a_silent_drop() -> None:
    """An unknown state would make the snapshot partial, so parsing fails loudly."""
    with pytest.raises(SlurmError, match="job 3: job_state: unknown job_state 'WARPING'"):
        parse_job({"job_id": 3, "job_state": "WARPING"})
    assert job_state(["CONFIGURING"], "x") == (JobState.RUNNING, ())


@pytest.mark.parametrize(("value", "state", "flags"), [
    ("REQUEUED", JobState.PENDING, ()),               # one-word form (squeue -O, v0.0.38)
    (["PENDING", "REQUEUED"], JobState.PENDING, ("REQUEUED",)),   # data_parser list
    ("REQUEUE_HOLD", JobState.PENDING, ()), ("SPECIAL_EXIT", JobState.PENDING, ()),
    ("RESIZING", JobState.RUNNING, ()), (["RUNNING", "CONFIGURING"], JobState.RUNNING,
                                         ("CONFIGURING",)),
    ("STAGE_OUT", JobState.COMPLETING, ()), ("REVOKED", JobState.CANCELLED, ()),
    ("PD", JobState.PENDING, ()), ("RUNNING+COMPLETING", JobState.COMPLETING, ("RUNNING",)),
])
def test_flags_slurm_shows_instead_of_a_state_read_as_the_state_they_imply(
        value: object, state: JobState, flags: tuple[str, ...]) -> None:
    """Slurm's one-word state shows some flags in place of the base state; each reads as the
    state it implies (a requeued job is pending), and a listed flag stays a flag."""
    assert job_state(value, "x") == (state, flags)


def test_document_errors_and_missing_lists_raise() -> None:
    """Slurm-reported errors and a document without the expected list both raise."""
    with pytest.raises(SlurmError, match="reported errors"):
        parse_jobs({"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]})
    with pytest.raises(SlurmError, match="JSON has no 'nodes' list"):
        parse_nodes({"sinfo": []})


@pytest.mark.parametrize(("spec", "gpus"), [
    ("gres:gpu:8", 8), ("gres/gpu:4", 4), ("gpu:a100:2", 2), ("gpu:8(S:0-15)", 8),
    ("gpu:(null):3(IDX:0-1,4)", 3), ("gres/gpu:h100=2", 2), ("gpu", 1), ("gpu:a100", 1),
    ("gpu:h100:1(IDX:0),gpu:h200:0(IDX:N/A)", 1), ("gres:mps:100,gres:gpu:2", 2), ("", 0),
    ("(null)", 0), ("N/A", 0),
])
def test_gres_gpu_count(spec: str, gpus: int) -> None:
    """GPU counts from every GRES spelling seen across releases."""
    assert gres_gpu_count(spec) == gpus


def test_tres_gpu_count_prefers_the_untyped_total() -> None:
    """Typed counts are summed only without an untyped total."""
    assert tres_gpu_count("cpu=2,gres/gpu=16,gres/gpu:h100=16") == 16
    assert tres_gpu_count("cpu=2,gres/gpu:h100=2,gres/gpu:a100=4") == 6
    assert tres_gpu_count("cpu=1,mem=1G") == 0


def test_hostlists_round_trip() -> None:
    """Host lists expand with padding and nested lists, and compress back."""
    assert expand_hostlist("n[1-3,07],gpu-a") == ("n1", "n2", "n3", "n07", "gpu-a")
    assert expand_hostlist("r[1-2]-n[01-02]") == ("r1-n01", "r1-n02", "r2-n01", "r2-n02")
    assert expand_hostlist("") == () and expand_hostlist("(null)") == ()
    assert compress_hostlist(("n1", "n2", "n3", "n5", "login")) == "login,n[1-3,5]"
    assert expand_hostlist("n1,weird+name") == ("n1", "weird+name")  # Slurm output: kept as is
    with pytest.raises(ValueError, match="bad range 'a-b'"):
        expand_hostlist("n[a-b]")


def test_qos_durations_by_field_and_unreadable_ones_named() -> None:
    """GraceTime is read as seconds and MaxWall as minutes (a bare number means seconds in one
    and minutes in the other); an unreadable duration names the QOS and the column."""
    fields = ("Name", "GraceTime", "MaxWall")
    by = {q.name: q for q in parse_qos("a|30|30\nb|00:00:30|1-02\nc||\n", fields)}
    assert (by["a"].grace_time, by["a"].max_wall) == (30, 30)
    assert (by["b"].grace_time, by["b"].max_wall) == (30, 26 * 60)
    assert (by["c"].grace_time, by["c"].max_wall) == (0, None)
    with pytest.raises(SlurmError, match=r"qos high: GraceTime: cannot read duration 'soon'"):
        parse_qos("high|soon|\n", fields)


def test_qos_column_mismatch_names_the_line() -> None:
    """A sacctmgr row with the wrong number of columns names line and expected columns."""
    with pytest.raises(SlurmError, match=r"line 2: expected 8 columns"):
        parse_qos("normal|10||cluster|00:00:00||1.000000|\nbroken|1\n", QOS_FIELDS)


def test_job_messages_from_real_stderr() -> None:
    """Per-job lines of scontrol and scancel (texts recorded on 22.05) are attributed to jobs."""
    stderr = ("Invalid job id specified for job 999\n"
              "slurm_suspend error: Invalid job id specified\n"
              "Job is pending execution for job 3\n"
              "scancel: error: Kill job error on job id 7: Invalid job id specified\n"
              "Job/step already completing or completed for job 40_3\n"
              "1085_3: Job is pending execution\n")
    per_job, other = job_messages(stderr)
    assert per_job == {"999": "Invalid job id specified", "3": "Job is pending execution",
                       "7": "Invalid job id specified",
                       "40_3": "Job/step already completing or completed",
                       "1085_3": "Job is pending execution"}
    assert other == ["slurm_suspend error: Invalid job id specified"]


def test_job_messages_name_an_arrays_tasks_by_range() -> None:
    """scontrol names an array's pending tasks by range (recorded on 22.05.8, a priority
    written to ``17`` and ``13_[1-4]``); ``No error`` lists the tasks that did change."""
    per_job, other = job_messages("17_0-2: Job is in held state, pending scheduler release\n"
                                  "13_1: Invalid job id specified\n13_2-4: No error\n"
                                  "12_0-118:2: Invalid job id specified\n")
    assert per_job == {"17_0-2": "Job is in held state, pending scheduler release",
                       "13_1": "Invalid job id specified", "13_2-4": "No error",
                       "12_0-118:2": "Invalid job id specified"}
    assert other == []


# squeue -O COMPACT_JOBS_FORMAT with SLURM_TIME_FORMAT=%s, recorded on the 22.05 testbed (the
# OverSubscribe and Reservation columns, added since, as 22.05 prints them for jobs without
# --exclusive or --reservation: OK, (null)).
_COMPACT = (
    "3663|3663|N/A|root|0|team-a|main|high|PENDING|6000|Priority|1796172925|1796172925|N/A|"
    "UNLIMITED|4||N/A|gres:gpu:8|N/A|N/A|cpu=4,mem=500M,node=4,billing=4,gres/gpu=32|4|*|0|1|1|"
    "4|0|0:00|n[1-4]|OK|(null)|\n"
    "2|2|N/A|root|0|team-a|main|normal|RUNNING|2000|None|1796172485|1796172485|1796172485|"
    "365-00:00:00|4|n[1-4]|N/A|gres:gpu:8|N/A|N/A|cpu=4,mem=500M,node=4,billing=4,gres/gpu=32|"
    "4|*|2|1|1|4|1|1:00:00||OK|(null)|\n"
    "4665|4665|1-3|root|0|team-a|main|normal|PENDING|0|JobHeldUser|1796172995|N/A|N/A|30:00|1||"
    "N/A|N/A|N/A|N/A|cpu=1,mem=125M,node=1,billing=1|1|*|0|1|1|1|0|0:00|(null)|OK|(null)|\n"
)


def test_compact_job_lines_become_json_shaped_records() -> None:
    """Compact lines read like squeue --json records once the kept details are added: times,
    limits, GPUs, held arrays, switches; the details come from elsewhere."""
    recs = compact_job_records(_COMPACT)
    detail = {"name": "x", "admin_comment": "hai:v1:team=t", "comment": "",
              "gres_detail": ["gpu:8(IDX:0-7)"] * 4, "excluded_nodes": "n9",
              "features": "a100|h100"}
    jobs = [parse_job({**r, **detail}) for r in recs]
    pend, run, arr = jobs
    assert pend is not None and pend.state is JobState.PENDING and pend.time_limit == INFINITE
    assert pend.gpus_requested == 32 and pend.cpus == 4 and pend.memory_mb == 500
    assert pend.submit_time == 1796172925 and pend.start_time is None and pend.nodes == ()
    assert run is not None and run.nodes == ("n1", "n2", "n3", "n4")
    assert run.time_limit == 365 * 24 * 60 and run.restart_count == 2
    assert run.switches == 1 and run.switch_wait == 3600
    assert run.gpus_per_node == {f"n{i}": 8 for i in range(1, 5)}
    assert run.admin_comment == "hai:v1:team=t" and run.array_job_id is None
    assert arr is not None and arr.held and arr.array_job_id == 4665
    assert arr.array_task_id is None and arr.array_tasks == "1-3" and arr.time_limit == 30
    assert detail_signature(recs[1]) == ("n[1-4]", 2)
    assert pend.required_nodes == "n[1-4]" and run.required_nodes == arr.required_nodes == ""
    assert pend.excluded_nodes == "n9" and pend.features == "a100|h100"


# Recorded on the 22.05 testbed (2026-12-06): sbatch --exclusive --gpus=2 (4, pending beside
# 6 free GPUs), --exclusive=user --gpus=1 (5), --oversubscribe --gpus=1 (6), plain (2), and
# --exclusive --gpus=2 running (3: Slurm gave it all 8 GPUs, gpu:8(IDX:0-7)); the Reservation
# column, added since, as 22.05 prints it for a job without one: (null).
_EXCLUSIVE = (
    "4|4|N/A|root|0|(null)|main|(null)|PENDING|1|Resources|1796548720|1796548720|1828084728|"
    "UNLIMITED|1||gres:gpu:2|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||"
    "NO|(null)|\n"
    "5|5|N/A|root|0|(null)|main|(null)|RUNNING|1|None|1796548727|1796548727|1796548728|"
    "365-00:00:00|1|n1|gres:gpu:1|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|"
    "0:00||USER|(null)|\n"
    "6|6|N/A|root|0|(null)|main|(null)|RUNNING|1|None|1796548727|1796548727|1796548728|"
    "365-00:00:00|1|n1|gres:gpu:1|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|"
    "0:00||YES|(null)|\n"
    "2|2|N/A|root|0|(null)|main|(null)|RUNNING|1|None|1796548720|1796548720|1796548721|"
    "365-00:00:00|1|n1|gres:gpu:2|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|"
    "0:00|n1|OK|(null)|\n"
    "3|3|N/A|root|0|(null)|main|(null)|RUNNING|1|None|1796548720|1796548720|1796548721|"
    "365-00:00:00|1|n2|gres:gpu:2|N/A|N/A|N/A|cpu=16,mem=62.50G,node=1,billing=16|1|*|0|1|1|16|"
    "0|0:00||NO|(null)|\n")


def test_exclusive_jobs_in_every_form_slurm_prints() -> None:
    """``--exclusive[=user]`` as squeue -O's OverSubscribe (NO, USER; YES and OK share), as
    22.05's JSON ``shared`` (none, user, shared, null) and as later releases' flag lists."""
    details = {"name": "wrap", "admin_comment": "", "comment": "", "gres_detail": [],
               "excluded_nodes": "", "features": ""}
    jobs = {j.job_id: j for r in compact_job_records(_EXCLUSIVE)
            if (j := parse_job({**r, **details})) is not None}
    assert {i: j.exclusive for i, j in jobs.items()} == {4: "node", 5: "user", 6: "", 2: "",
                                                           3: "node"}
    assert [i for i, j in jobs.items() if j.takes_whole_nodes] == [4, 5, 3]
    assert all(j.reservation == "" for j in jobs.values())
    linked = compact_job_records(_EXCLUSIVE.splitlines()[0].replace("|NO|(null)|", "|NO|maint|"))
    assert parse_job({**linked[0], **details}).reservation == "maint"  # type: ignore[union-attr]
    for shared, want in (("none", "node"), ("user", "user"), ("mcs", "mcs"), ("shared", ""),
                         (None, ""), ([], ""), (["oversubscribe"], ""), (["none"], "node"),
                         (["topo"], "topo"), ("whatever", "")):
        assert exclusivity(shared) == want, shared
    plain = parse_job(load("22.05/squeue-mixed.json")["jobs"][0])
    later = parse_job(load("24.11/squeue-mixed.json")["jobs"][0])
    assert plain is not None and later is not None and plain.exclusive == later.exclusive == ""


def test_compact_lines_that_do_not_fit_are_errors() -> None:
    """A line with a column too many or too few, or times not in POSIX seconds, is refused:
    the cycle is skipped rather than acting on a misread queue."""
    line = _COMPACT.splitlines()[0]
    with pytest.raises(SlurmError, match="expected 33"):
        compact_job_records(line + "extra|")
    with pytest.raises(SlurmError, match="expected 33"):
        compact_job_records(line.replace("|high|", "|"))
    with pytest.raises(SlurmError, match="POSIX seconds"):
        compact_job_records(line.replace("1796172925", "2026-12-02T00:55:25", 1))


def test_a_node_not_registered_since_slurmctld_started() -> None:
    """After a slurmctld restart a node's boot time is unknown until its slurmd registers
    (``BootTime=None``; 0 in 22.05's JSON, an unset number later): not ``registered``, and
    awaiting registration unless Slurm already marked it DOWN or NOT_RESPONDING."""
    doc = load("22.05/sinfo.json")
    doc["nodes"][0]["boot_time"] = 0
    n1 = parse_nodes(doc)[0]
    assert not n1.registered and n1.awaiting_registration
    doc["nodes"][0]["state_flags"] = ["NOT_RESPONDING"]
    assert not parse_nodes(doc)[0].awaiting_registration
    later = load("24.11/scontrol-show-nodes.json")
    assert all(n.registered for n in parse_nodes(later))
    later["nodes"][0]["boot_time"] = {"set": False, "infinite": False, "number": 0}
    assert not parse_nodes(later)[0].registered


def test_a_nodes_reservation_where_slurm_names_it() -> None:
    """24.11 and 26.05 name a node's active reservation (``reservation``, empty when none, as
    recorded); 22.05's ``sinfo --json`` does not (only the RESERVED flag)."""
    for series in ("24.11", "26.05"):
        doc = load(f"{series}/scontrol-show-nodes.json")
        assert [n.reservation for n in parse_nodes(doc)] == ["", ""]
        doc["nodes"][0]["reservation"] = "maint"
        doc["nodes"][0]["state"] = ["IDLE", "RESERVED"]
        first = parse_nodes(doc)[0]
        assert first.reservation == "maint" and "RESERVED" in first.state_flags
    assert all(n.reservation == "" for n in parse_nodes(load("22.05/sinfo.json")))


def test_a_job_held_for_its_deleted_reservation() -> None:
    """``RESV_DEL_HOLD`` as 22.05's ``squeue --json`` showed it (measured by hand: a job
    requeued held in a reservation that was then purged): pending, priority 0, reason
    ReservationDeleted; not a user's or admin's hold."""
    doc = load("22.05/squeue-mixed.json")
    rec = doc["jobs"][0]
    rec.update(job_state="RESV_DEL_HOLD", state_reason="ReservationDeleted", priority=0,
               state_description="Reservation rtest2 was deleted", nodes="")
    job = parse_jobs(doc)[0]
    assert job.state is JobState.PENDING and job.reservation_deleted and not job.held
    rec.update(state_reason="JobHeldUser")
    assert not parse_jobs(doc)[0].reservation_deleted


def test_node_requests_of_jobs_and_features_of_nodes_in_each_release() -> None:
    """``--nodelist``/``--exclude``/``--constraint`` come from the job record's
    required_nodes/excluded_nodes/features (every release); a node's active features from a
    string (22.05's sinfo), a list (``scontrol show nodes --json`` later) or sinfo's later
    ``{"total", "active"}``."""
    for release, name in (("22.05", "squeue-mixed.json"), ("24.11", "squeue-mixed.json"),
                          ("26.05", "squeue-mixed.json")):
        doc = load(f"{release}/{name}")
        doc["jobs"][0].update(required_nodes="n[1-2]", excluded_nodes="n4",
                              features="a100&(nvlink|ib)")
        job = parse_jobs(doc)[0]
        assert (job.required_nodes, job.excluded_nodes, job.features) == (
            "n[1-2]", "n4", "a100&(nvlink|ib)"), release
        assert all(j.features == "" for j in parse_jobs(load(f"{release}/{name}")))
    doc = load("22.05/sinfo.json")
    doc["nodes"][0].update(features="a100,nvlink,spare", active_features="a100,nvlink")
    assert parse_nodes(doc)[0].features == ("a100", "nvlink")
    for release in ("24.11", "26.05"):
        doc = load(f"{release}/scontrol-show-nodes.json")
        doc["nodes"][0].update(features=["a100", "spare"], active_features=["a100"])
        assert parse_nodes(doc, "scontrol show nodes --json")[0].features == ("a100",)
        assert parse_nodes(load(f"{release}/scontrol-show-nodes.json"),
                           "scontrol")[0].features == ()
    assert parse_node({"name": "n1", "state": "IDLE",
                      "features": {"total": "a,b", "active": "a"}}).features \
        == ("a",)
