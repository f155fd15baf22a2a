"""Jobs' CPUs and memory, read from recorded 22.05, 24.11 and 26.05 output and carried by FakeSlurm.

The recorded clusters do not treat memory as a consumable resource (their nodes report
``alloc_memory`` 0): running jobs hold no memory there although their requests name a whole
node's; pending jobs carry what they request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.parse import parse_job, parse_jobs, parse_nodes
from hai_slurm.slurm_plugins.tres import tres_items
from hai_slurm.slurm_plugins.types import Job, JobState

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RECORDED = pytest.mark.parametrize("series", ["24.11", "26.05"])


def load(rel: str) -> Any:
    """A JSON test document."""
    return json.loads((DATA / rel).read_text())


def sizes(rel: str) -> dict[str, tuple[JobState, int, int]]:
    """(state, cpus, memory MiB) of each active job in a recorded queue, by job name."""
    return {j.name: (j.state, j.cpus, j.memory_mb) for j in parse_jobs(load(rel))}


def record(rel: str, name: str) -> dict[str, Any]:
    """A copy of one raw job record of a test document."""
    return dict(next(r for r in load(rel)["jobs"] if r["name"] == name))


def test_22_05_running_jobs_hold_allocated_cpus_and_no_memory() -> None:
    """22.05: running jobs take cpu from tres_alloc_str, which names no mem on a CR_Core cluster."""
    got = sizes("22.05/squeue-mixed.json")
    assert got["train-a"] == (JobState.RUNNING, 1, 0)
    assert got["train-b"] == (JobState.RUNNING, 2, 0)        # cpu=2 over 2 nodes
    assert got["norequeue"] == (JobState.RUNNING, 1, 0)


def test_22_05_pending_jobs_carry_their_request() -> None:
    """22.05: pending jobs take cpu and mem from tres_req_str (mem=32000M for two nodes)."""
    got = sizes("22.05/squeue-mixed.json")
    assert got["big-wait"] == (JobState.PENDING, 2, 32000)
    assert got["held"] == (JobState.PENDING, 1, 16000)
    assert got["cpuonly"] == (JobState.PENDING, 2, 16000)
    array = {j.array_task_id: (j.state, j.cpus, j.memory_mb)
             for j in parse_jobs(load("22.05/squeue-array.json"))}
    assert array[0] == (JobState.RUNNING, 1, 0)
    assert array[None] == (JobState.PENDING, 1, 16000)       # the record for the waiting tasks


@RECORDED
def test_recorded_jobs_cpus_and_memory(series: str) -> None:
    """24.11/26.05 (number wrappers): G units, multi-node totals, per-task CPUs."""
    got = sizes(f"{series}/squeue-mixed.json")
    assert got["train-a"] == (JobState.RUNNING, 1, 0)
    assert got["multi"] == (JobState.RUNNING, 2, 0)
    assert got["waits"] == (JobState.PENDING, 2, 128000)     # mem=125G, 2 nodes
    assert got["per-task"] == (JobState.PENDING, 2, 64000)   # mem=62.50G, --ntasks=2
    assert got["held"] == (JobState.PENDING, 1, 64000)


@pytest.mark.parametrize(("jobs", "nodes"), [
    ("22.05/squeue-mixed.json", "22.05/sinfo.json"),
    ("24.11/squeue-mixed.json", "24.11/scontrol-show-nodes.json"),
    ("26.05/squeue-mixed.json", "26.05/scontrol-show-nodes.json"),
])
def test_running_jobs_add_up_to_what_the_nodes_report(jobs: str, nodes: str) -> None:
    """Recorded together: running jobs' CPUs and memory sum to the nodes' alloc_cpus/_memory."""
    running = [j for j in parse_jobs(load(jobs)) if j.state is JobState.RUNNING]
    ns = parse_nodes(load(nodes))
    assert sum(j.cpus for j in running) == sum(n.cpus_allocated for n in ns) == 4
    assert sum(j.memory_mb for j in running) == sum(n.memory_allocated_mb for n in ns) == 0


def test_allocated_memory_wins_for_running_jobs() -> None:
    """24.11 hand-written: mem in tres_alloc_str counts; an empty one falls back to the request."""
    got = sizes("24.11/hand-written/squeue.json")
    assert got["train-big"] == (JobState.RUNNING, 2, 2048)   # alloc cpu=2,mem=2G over req cpu=1
    assert got["per-task"] == (JobState.RUNNING, 4, 4096)    # no alloc string: cpu=4,mem=4G
    assert got["eval"] == (JobState.PENDING, 1, 1024)


def without_tres(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with both TRES strings removed, so only the memory fields are left."""
    rec.pop("tres_req_str", None)
    rec.pop("tres_alloc_str", None)
    return rec


def parsed(rec: dict[str, Any]) -> Job:
    """An active job from one record."""
    job = parse_job(rec)
    assert job is not None
    return job


def test_memory_fields_when_no_tres_string_22_05() -> None:
    """v0.0.38 plain ints: memory_per_node x nodes, memory_per_cpu x cpus (flag bit cleared)."""
    rec = without_tres(record("22.05/squeue-mixed.json", "big-wait"))
    per_node = parsed({**rec, "memory_per_node": 8000})
    assert (per_node.cpus, per_node.memory_mb) == (2, 16000)
    per_cpu = parsed({**rec, "memory_per_cpu": (1 << 63) | 3000})
    assert (per_cpu.cpus, per_cpu.memory_mb) == (2, 6000)
    assert parsed(rec).memory_mb == 0                         # nothing known


@RECORDED
def test_memory_fields_when_no_tres_string_wrapped(series: str) -> None:
    """Wrapped numbers: set per-CPU memory counts; per-node 0 ("whole node") and unset give 0."""
    rec = without_tres(record(f"{series}/squeue-mixed.json", "per-task"))
    assert parsed(rec).memory_mb == 0                         # per node 0, per cpu unset
    wrapped = {"set": True, "infinite": False, "number": 4000}
    job = parsed({**rec, "memory_per_cpu": wrapped})
    assert (job.cpus, job.memory_mb) == (2, 8000)


def test_tres_items_ignores_noise() -> None:
    """Empty, ``(null)`` and items without ``=`` give nothing; values are kept as written."""
    assert tres_items("") == tres_items("(null)") == {}
    assert tres_items("cpu=4,mem=16G,gres/gpu=2") == {"cpu": "4", "mem": "16G", "gres/gpu": "2"}


def test_unreadable_tres_values_name_job_and_value() -> None:
    """A mem or cpu item that is not a size/number fails the snapshot with job, field and value."""
    rec = record("22.05/squeue-mixed.json", "big-wait")
    with pytest.raises(SlurmError, match=r"job 3: tres_req_str mem: .*'lots'.*16000M"):
        parse_job({**rec, "tres_req_str": "cpu=2,mem=lots,node=2"})
    with pytest.raises(SlurmError, match=r"job 3: tres cpu: .*'two'"):
        parse_job({**rec, "tres_req_str": "cpu=two,mem=1G"})


def test_fake_jobs_carry_cpus_and_memory_and_memory_must_fit() -> None:
    """FakeSlurm: cpus and memory are per node x nodes; memory is allocated like GPUs and CPUs."""
    fake = FakeSlurm([FakeNode("n1", cpus=16, memory_mb=64000),
                      FakeNode("n2", cpus=16, memory_mb=64000)], backfill=True)
    big = fake.submit(nodes=2, cpus_per_node=4, memory_per_node_mb=48000)
    too_much = fake.submit(cpus_per_node=1, memory_per_node_mb=20000)
    fits = fake.submit(cpus_per_node=1, memory_per_node_mb=16000)
    fake.schedule()
    snap = fake.snapshot()
    jobs = {j.job_id: j for j in snap.jobs}
    assert (jobs[big].cpus, jobs[big].memory_mb, jobs[big].state) == (8, 96000, JobState.RUNNING)
    assert jobs[too_much].state is JobState.PENDING and jobs[too_much].reason == "Resources"
    assert (jobs[too_much].cpus, jobs[too_much].memory_mb) == (1, 20000)
    assert jobs[fits].state is JobState.RUNNING and jobs[fits].nodes == ("n1",)
    assert [n.memory_allocated_mb for n in snap.nodes] == [64000, 48000]
    plain_id = fake.submit()                                    # defaults: 1 CPU, no --mem
    plain = fake.snapshot().job(plain_id)
    assert plain is not None and (plain.cpus, plain.memory_mb) == (1, 0)
