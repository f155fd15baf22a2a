"""DRF fair share on jobs as the Slurm adapter reports them: GPUs, CPUs and memory reach the policy.

Slurm jobs (recorded output, FakeSlurm) go through ``convert`` and ``cycle.build_inputs`` into
:func:`compute_priorities`, as in the daemon.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.daemon import job_values
from hai_slurm.priority.daemon.cycle import build_inputs
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.settings import PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import Resources, Rule
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.parse import parse_jobs
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def recorded(rel: str) -> dict[str, Job]:
    """Active jobs of a recorded ``squeue --json`` document, by name."""
    return {j.name: j for j in parse_jobs(json.loads((DATA / rel).read_text()))}


def test_convert_passes_cpus_and_memory_of_recorded_jobs() -> None:
    """22.05 and 24.11 jobs keep their GPUs, CPUs and memory in the policy's values."""
    old = recorded("22.05/squeue-mixed.json")
    now = 1_700_000_000.0
    run = job_values.running_job(old["train-b"], None, PriorityClass.NORMAL, now)
    assert run.resources == Resources(16, 2, 0)
    pend = job_values.pending_job(old["big-wait"], None, PriorityClass.NORMAL, now)
    assert pend.resources == Resources(16, 2, 32000)
    new = recorded("24.11/hand-written/squeue.json")
    big = job_values.running_job(new["train-big"], None, PriorityClass.NORMAL, now)
    assert big.resources == Resources(16, 2, 2048)


CONFIG = PolicyConfig(teams={"heavy": TeamQuota(gpus=16), "light": TeamQuota(gpus=16)})


def cluster(heavy_cpus: int, heavy_mem: int) -> tuple[FakeSlurm, int, int]:
    """Two teams with equal quotas on 4 x (8 GPUs, 32 CPUs, 256000 MiB).

    ``heavy`` runs one 1-GPU job with ``heavy_cpus`` CPUs and ``heavy_mem`` MiB, ``light`` one
    2-GPU job with 2 CPUs and 8000 MiB; then each submits a NORMAL job, ``heavy`` first.
    Returns the fake and the two pending ids (heavy, light).
    """
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8, cpus=32, memory_mb=256_000) for i in range(4)])
    fake.submit(account="heavy", gpus_per_node=1, cpus_per_node=heavy_cpus,
                memory_per_node_mb=heavy_mem)
    fake.submit(account="light", gpus_per_node=2, cpus_per_node=2, memory_per_node_mb=8000)
    assert len(fake.schedule()) == 2
    fake.advance(fake.now + 60)
    heavy = fake.submit(account="heavy", gpus_per_node=8, nodes=4)
    fake.advance(fake.now + 60)
    light = fake.submit(account="light", gpus_per_node=8, nodes=4)
    return fake, heavy, light


def ranks(snap: ClusterSnapshot, heavy: int, light: int) -> tuple[int, int, dict[str, float]]:
    """Written priorities of the two pending jobs and the teams' dominant shares."""
    inputs = build_inputs(snap, {}, (), CONFIG, float(snap.time))
    result = compute_priorities(inputs.pending, inputs.running, config=CONFIG,
                                cluster=inputs.cluster, now=float(snap.time))
    assert result.pending[heavy].reason.rule is Rule.FAIR_SHARE
    return (result.priorities[heavy], result.priorities[light],
            {t: s.share for t, s in result.teams.items()})


@pytest.mark.parametrize(("cpus", "mem", "heavy_share"), [
    (28, 8000, 28 / 64),             # 28 of the team's 64 CPUs (half the cluster's 128)
    (2, 200_000, 200_000 / 512_000),  # 200000 of its 512000 MiB
])
def test_cpu_or_memory_heavy_team_ranks_after_gpu_light_team(cpus: int, mem: int,
                                                             heavy_share: float) -> None:
    """NORMAL is fair share: the team whose dominant share (CPU or memory) is larger goes second.

    By GPUs alone ``heavy`` (1 of 16) is below ``light`` (2 of 16) and, submitting first, would
    lead; with the adapter's CPUs and memory its dominant share is larger, so ``light`` leads.
    """
    fake, heavy, light = cluster(cpus, mem)
    snap = fake.snapshot()
    assert build_inputs(snap, {}, (), CONFIG, 0.0).cluster == Resources(32, 128, 1_024_000)
    p_heavy, p_light, shares = ranks(snap, heavy, light)
    assert shares["heavy"] == pytest.approx(heavy_share)
    assert shares["light"] == pytest.approx(2 / 16)
    assert p_light > p_heavy

    gpu_only = dataclasses.replace(snap, jobs=tuple(
        dataclasses.replace(j, cpus=0, memory_mb=0) for j in snap.jobs))
    p_heavy, p_light, shares = ranks(gpu_only, heavy, light)
    assert shares["heavy"] == pytest.approx(1 / 16)
    assert p_heavy > p_light
