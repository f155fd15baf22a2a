"""SimSlurm: FakeSlurm with placement on exact GPUs of the topology tree."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hai_slurm.conf.topology import Topology
from hai_slurm.priority.planner.placement import place_free
from hai_slurm.priority.planner.testing import gpu_cluster
from hai_slurm.priority.sim.cluster import load_topology
from hai_slurm.priority.sim.slurm import SimSlurm
from hai_slurm.slurm_plugins.types import JobState

NODES = Path(__file__).parent.parent / "data" / "traces" / "openb_node_list_gpu_node.csv"


@pytest.mark.parametrize("topology", [gpu_cluster(3, 4), load_topology(NODES, every=25)],
                         ids=["8-gpu-nodes", "alibaba-mix"])
def test_single_node_placement_is_the_planners_choice(topology: Topology) -> None:
    """On random occupancy, the fast single-node search picks exactly what place_free picks."""
    rng = random.Random(5)
    for _ in range(40):
        slurm = SimSlurm(topology, now=0)
        view = slurm.view
        for _ in range(rng.randrange(0, 60)):
            size = rng.choice((1, 1, 2, 4))
            jid = slurm.submit_gpus(gpus=size, nodes=1, name="x", user="u", account="a")
            slurm.schedule()
            if rng.random() < 0.3 and slurm.placed:
                slurm.finish(rng.choice(sorted(slurm.placed)), JobState.COMPLETED)
            del jid
        for count in range(1, view.max_node_gpus + 1):
            want = place_free(view, 1, count)
            got = slurm._place_one(count)
            assert (want is None) == (got is None)
            if want is not None and got is not None:
                assert want.masks == got.masks and want.level == got.level


def test_requeue_frees_gpus_and_waits_for_the_delay() -> None:
    """A requeued job gives its GPUs back at once and is eligible again after the delay."""
    slurm = SimSlurm(gpu_cluster(1, 1), now=100, requeue_delay=11)
    a = slurm.submit_gpus(gpus=8, nodes=1, name="a", user="u", account="t")
    assert slurm.schedule() == (a,)
    assert slurm.used_gpus == 8 and len(slurm.gpus_of(a)) == 8
    slurm.requeue(a)
    assert slurm.used_gpus == 0 and slurm.jobs[a].restart_count == 1
    assert slurm.schedule(110) == ()
    assert slurm.schedule(111) == (a,)


def test_pinned_job_starts_only_on_its_nodes() -> None:
    """A job pinned to n2 waits while n2 is busy, though n1 is free."""
    slurm = SimSlurm(gpu_cluster(1, 2), now=0)
    big = slurm.submit_gpus(gpus=8, nodes=1, name="big", user="u", account="t", priority=5)
    slurm.pin(big, ("n2",))
    other = slurm.submit_gpus(gpus=8, nodes=1, name="o", user="u", account="t", priority=9)
    slurm.pin(other, ("n2",))
    assert slurm.schedule() == (other,)
    assert slurm.jobs[big].state is JobState.PENDING
    slurm.finish(other)
    assert slurm.schedule() == (big,)
    assert slurm.jobs[big].nodes == ("n2",)


def test_multi_node_job_stays_under_one_leaf_when_it_can() -> None:
    """2 x 8 GPUs on a cluster of two leaves: both nodes under the same leaf switch."""
    slurm = SimSlurm(gpu_cluster(2, 2), now=0)
    one = slurm.submit_gpus(gpus=4, nodes=1, name="small", user="u", account="t", priority=9)
    job = slurm.submit_gpus(gpus=16, nodes=2, name="wide", user="u", account="t")
    assert slurm.schedule() == (one, job)
    assert slurm.jobs[job].nodes in (("n1", "n2"), ("n3", "n4"))
    assert set(slurm.jobs[job].nodes).isdisjoint(slurm.jobs[one].nodes)


def test_without_backfill_the_first_job_that_does_not_fit_blocks() -> None:
    """No backfill: an 8-GPU job waiting on a half-full node holds back a 1-GPU job."""
    slurm = SimSlurm(gpu_cluster(1, 1), now=0, backfill=False)
    slurm.submit_gpus(gpus=4, nodes=1, name="a", user="u", account="t", priority=9)
    slurm.schedule()
    slurm.submit_gpus(gpus=8, nodes=1, name="b", user="u", account="t", priority=5)
    small = slurm.submit_gpus(gpus=1, nodes=1, name="c", user="u", account="t", priority=1)
    assert slurm.schedule() == ()
    slurm.backfill = True
    assert slurm.schedule() == (small,)
