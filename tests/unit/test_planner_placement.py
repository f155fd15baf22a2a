"""Where beneficiaries go: lowest cell inside a node, fullest nodes and leaves, whole cells kept."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Level
from hai_slurm.priority.planner.placement import ClusterView, place_free
from hai_slurm.priority.planner.search import plan_preemptions
from hai_slurm.priority.planner.testing import NOW, gpu_cluster, gpus, holder, snapshot, waiting
from hai_slurm.priority.planner.types import Outcome, PlannerConfig

HIGH, NORMAL = PriorityClass.HIGH, PriorityClass.NORMAL


def _view(leaves: int, per_leaf: int, busy: tuple[GpuRef, ...]) -> ClusterView:
    view = ClusterView(gpu_cluster(leaves, per_leaf))
    masks = view.masks(busy)
    assert isinstance(masks, dict)
    for node, mask in masks.items():
        view.occupy(node, mask)
    return view


def test_two_gpus_go_under_one_pcie_switch_of_the_used_node() -> None:
    """n1 has GPUs 0, 2, 4 busy: the 2-GPU job takes n1's free switch (6, 7); n2 stays whole."""
    view = _view(1, 2, gpus("n1", 0, 2, 4))
    got = place_free(view, 1, 2)
    assert got is not None and got.gpus(view) == gpus("n1", 6, 7)
    assert got.level is Level.PCIE_SWITCH


def test_four_gpus_take_a_free_socket_before_a_whole_node() -> None:
    """A half-used node's free socket beats carving a whole free node."""
    view = _view(1, 2, gpus("n2", 0, 1, 2, 3))
    got = place_free(view, 1, 4)
    assert got is not None and got.gpus(view) == gpus("n2", 4, 5, 6, 7)
    assert got.level is Level.SOCKET


def test_lower_cell_beats_fuller_node() -> None:
    """A PCIe switch on an emptier node beats GPUs split over sockets on a fuller one."""
    view = _view(1, 2, gpus("n1", 0, 2, 4, 6, 7) + gpus("n2", 0))  # n1: 1, 3, 5 free
    got = place_free(view, 1, 2)
    assert got is not None and got.nodes == ("n2",) and got.level is Level.PCIE_SWITCH
    assert got.gpus(view) == gpus("n2", 2, 3)  # the switch in the fuller socket


def test_multi_node_job_keeps_a_whole_free_leaf() -> None:
    """2 x 8 GPUs go under the leaf that is already in use, leaving the free leaf whole."""
    view = _view(2, 3, gpus("n6", 0))
    got = place_free(view, 2, 8)
    assert got is not None and got.nodes == ("n4", "n5")


def test_multi_node_job_needs_one_leaf() -> None:
    """Two free nodes under different leaves do not hold a 2-node job unless allowed."""
    view = _view(2, 2, gpus("n1", 0) + gpus("n3", 0))
    assert place_free(view, 2, 8) is None
    got = place_free(view, 2, 8, cross_leaf=True)
    assert got is not None and got.nodes == ("n2", "n4")


def test_preemption_frees_one_pcie_switch_when_losses_tie() -> None:
    """Eight equal 1-GPU victims: the two chosen share a PCIe switch."""
    topo = gpu_cluster(1, 1)
    jobs = [holder(10 + g, NORMAL, gpus("n1", g)) for g in range(8)]
    plan = plan_preemptions(snapshot(topo, jobs, [waiting(9, HIGH, 2, wait=86400)]),
                            config=PlannerConfig(), now=NOW).plan_for(9)
    assert plan is not None and plan.victim_ids == (10, 11)
    assert topo.span(plan.placement) is Level.PCIE_SWITCH
    assert "in-node level PCIE_SWITCH" in plan.reason


def test_preemption_uses_free_gpus_and_keeps_whole_cells() -> None:
    """With GPUs 6, 7 free, one 2-GPU victim completes a 4-GPU socket (no second victim)."""
    topo = gpu_cluster(1, 1)
    jobs = [holder(1, NORMAL, gpus("n1", 0, 1, 2, 3)), holder(2, NORMAL, gpus("n1", 4, 5))]
    result = plan_preemptions(snapshot(topo, jobs, [waiting(9, HIGH, 4, wait=86400)]),
                              config=PlannerConfig(), now=NOW)
    plan = result.plan_for(9)
    assert plan is not None and plan.victim_ids == (2,)
    assert plan.placement == gpus("n1", 4, 5, 6, 7)
    assert any("job 1 on n1 kept: not needed" in line for line in plan.not_chosen)


def test_fits_decision_names_the_node() -> None:
    """A job that fits on free GPUs is reported as such, with the node it is expected on."""
    topo = gpu_cluster(1, 2)
    result = plan_preemptions(snapshot(topo, [holder(1, NORMAL, gpus("n1", 0))],
                                       [waiting(9, HIGH, 1)]), config=PlannerConfig(), now=NOW)
    decision = result.decisions[9]
    assert decision.outcome is Outcome.FITS and "of n1 " in decision.reason


@settings(max_examples=150, deadline=None)
@given(st.sets(st.integers(0, 7), max_size=8), st.integers(1, 8))
def test_in_node_pick_agrees_with_topology_best_placement(busy: set[int], count: int) -> None:
    """Inside one node, the planner picks exactly what Topology.best_placement picks."""
    topo = gpu_cluster(1, 1)
    refs = gpus("n1", *sorted(busy))
    view = _view(1, 1, refs)
    ours = place_free(view, 1, count)
    theirs = topo.best_placement(count, refs)
    assert (ours is None) == (theirs is None)
    if ours is not None and theirs is not None:
        assert ours.gpus(view) == theirs
