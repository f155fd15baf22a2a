"""Parsers on output recorded from real Slurm 24.11.5 (trixie) and 26.05.5 (sid).

Both folders were written by ``tests/data/slurm/record.py`` from the same job mix on a 2-node x
4-GPU Docker testbed with accounting, so the same facts must come out of each release's layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.slurm_formats import INFINITE, SlurmVersion
from hai_slurm.slurm_plugins.parse import (
    parse_jobs,
    parse_nodes,
    parse_partitions_json,
    parse_partitions_text,
    parse_qos,
)
from hai_slurm.slurm_plugins.types import Job, JobState
from hai_slurm.slurm_plugins.version import QOS_FIELDS, PartitionSource, parse_version, query_plan

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RECORDED = {"24.11": SlurmVersion(24, 11, 5), "26.05": SlurmVersion(26, 5, 5)}
SERIES = pytest.mark.parametrize("series", sorted(RECORDED))


def load(series: str, name: str) -> Any:
    """A recorded JSON document."""
    return json.loads((DATA / series / name).read_text())


def by_name(series: str, name: str) -> dict[str, Job]:
    """Active jobs of a recorded queue by job name."""
    return {j.name: j for j in parse_jobs(load(series, name))}


@SERIES
def test_version_and_plan(series: str) -> None:
    """The recorded version strings parse, and the plan reads nodes as JSON, partitions as text."""
    version = parse_version((DATA / series / "scontrol-version.txt").read_text())
    assert version == RECORDED[series]
    assert parse_version((DATA / series / "sinfo-version.txt").read_text()) == version
    plan = query_plan(version)
    assert plan.nodes == ("scontrol", "show", "nodes", "--json")
    assert plan.partition_source is PartitionSource.SCONTROL_TEXT


@SERIES
def test_running_jobs(series: str) -> None:
    """Running jobs: nodes, GPUs per node, comments, limits as the recorder submitted them."""
    jobs = by_name(series, "squeue-mixed.json")
    assert "done" not in jobs                                   # the completed job is left out
    train = jobs["train-a"]
    assert train.state is JobState.RUNNING and train.state_flags == ()
    assert train.nodes == ("n1",) and train.gpus_requested == 2
    assert dict(train.gpus_per_node) == {"n1": 2} and train.gpus_allocated == 2
    assert (train.comment, train.admin_comment) == ("user note", "hai:class=HIGH")
    assert train.user == "root" and train.uid == 0 and train.account == "team-a"
    assert train.time_limit == INFINITE and train.batch and train.requeue
    assert train.start_time is not None and train.submit_time is not None
    assert train.start_time >= train.submit_time
    multi = jobs["multi"]
    assert multi.nodes == ("n1", "n2") and multi.node_list == "n[1-2]"
    assert multi.gpus_requested == 2 and dict(multi.gpus_per_node) == {"n1": 1, "n2": 1}
    assert multi.time_limit == 30 and multi.node_count == 2
    assert not jobs["norequeue"].requeue and jobs["norequeue"].gpus_requested == 0
    # the class record job_submit.lua wrote at submission (no #HAI line: the default class)
    assert jobs["multi"].admin_comment.startswith("hai:v1:priority=NORMAL;class=NORMAL")


@SERIES
def test_pending_held_and_requeued_jobs(series: str) -> None:
    """Pending reasons, a held job, a requeued one, and GPUs asked per job and per task."""
    jobs = by_name(series, "squeue-mixed.json")
    waits = jobs["waits"]
    assert waits.state is JobState.PENDING and waits.reason == "Resources"
    assert waits.gpus_requested == 8 and waits.nodes == () and waits.start_time is None
    held = jobs["held"]
    assert held.held and held.priority == 0 and held.reason == "JobHeldUser"
    assert held.gpus_requested == 4 and held.eligible_time is None          # --gpus=4
    assert jobs["per-task"].gpus_requested == 4                             # 2 tasks x 2
    assert not jobs["per-task"].held and jobs["per-task"].priority > 0
    requeued = jobs["requeued"]
    assert requeued.state is JobState.PENDING and requeued.reason == "BeginTime"
    assert requeued.restart_count == 1 and requeued.eligible_time is not None
    assert requeued.submit_time is not None and requeued.eligible_time > requeued.submit_time


@SERIES
def test_array_tasks(series: str) -> None:
    """Four running tasks with their own ids, and one pending record holding tasks 4-5."""
    jobs = parse_jobs(load(series, "squeue-array.json"))
    pending = [j for j in jobs if j.state is JobState.PENDING]
    running = [j for j in jobs if j.state is JobState.RUNNING]
    assert len(pending) == 1 and len(running) == 4
    (array,) = pending
    assert array.array_job_id == array.job_id and array.array_tasks == "4-5"
    assert array.array_task_id is None
    assert sorted(j.array_task_id for j in running) == [0, 1, 2, 3]  # type: ignore[type-var]
    assert all(j.array_job_id == array.job_id != j.job_id for j in running)
    assert all(j.gpus_requested == 2 and sum(j.gpus_per_node.values()) == 2 for j in running)


@SERIES
def test_nodes(series: str) -> None:
    """scontrol show nodes --json: state lists, GRES used, CPUs allocated."""
    nodes = {n.name: n for n in parse_nodes(load(series, "scontrol-show-nodes.json"))}
    assert sorted(nodes) == ["n1", "n2"]
    assert all(n.gpus == 4 and n.cpus == 16 and n.memory_mb == 64000 for n in nodes.values())
    assert all(n.state == "MIXED" and n.available and n.partitions == ("main",)
               for n in nodes.values())
    # train-a (2) and multi (1 on each node) are the jobs holding GPUs
    assert (nodes["n1"].gpus_used, nodes["n2"].gpus_used) == (3, 1)
    assert nodes["n1"].cpus_allocated == 3     # train-a, multi, norequeue: one CPU each


@SERIES
def test_partitions_text(series: str) -> None:
    """scontrol --oneliner show partition: the source the adapter uses on every release."""
    (main,) = parse_partitions_text((DATA / series / "scontrol-show-partition.txt").read_text())
    assert main.name == "main" and main.default and main.nodes == ("n1", "n2")
    assert main.max_time == INFINITE and main.preempt_mode == "OFF" and main.grace_time == 0
    assert main.priority_tier == 1 and main.state == "UP"


def test_partitions_json_differs_between_releases() -> None:
    """Why partitions are read as text: the JSON lacks the default (24.11) or the mode (26.05)."""
    (p2411,) = parse_partitions_json(load("24.11", "scontrol-show-partitions.json"))
    (p2605,) = parse_partitions_json(load("26.05", "scontrol-show-partitions.json"))
    assert p2411.nodes == p2605.nodes == ("n1", "n2")
    assert not p2411.default            # 24.11.5 emits no partition flags at all
    assert p2605.default and p2605.preempt_mode == "CLUSTER_GLOBAL"   # text says OFF


@SERIES
def test_qos(series: str) -> None:
    """sacctmgr --parsable2 rows of the eight class QOS the testbed creates."""
    qos = {q.name: q for q in parse_qos((DATA / series / "sacctmgr-show-qos.txt").read_text(),
                                        QOS_FIELDS)}
    assert {n: q.priority for n, q in qos.items()} == {
        "extreme_high": 50, "very_high": 40, "high": 30, "above_normal": 20, "normal": 10,
        "under_normal": 8, "below_normal": 5, "low": 0}
    assert all(q.preempt == () and q.preempt_mode == "CLUSTER" and q.grace_time == 0
               for q in qos.values())
