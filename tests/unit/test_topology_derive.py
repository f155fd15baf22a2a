"""The planner's topology derived from Slurm when the daemon has no cluster description."""

from __future__ import annotations

from hai_slurm.conf.topology import GpuRef, Level
from hai_slurm.priority.planner.slurm_topology import (
    FLAT_SWITCH,
    DerivedTopology,
    topology_from_slurm,
)
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.parse import parse_switches
from hai_slurm.slurm_plugins.types import SwitchInfo

# What `scontrol show topology` printed on the testbed (Slurm 22.05, topology/tree).
SCONTROL_TOPOLOGY = """\
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[3-4]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]
"""


def test_parse_switches_keeps_leaf_nodes_and_upper_switches() -> None:
    """Leaves keep their nodes; the spine keeps its switches, not the nodes below them."""
    assert parse_switches(SCONTROL_TOPOLOGY) == (
        SwitchInfo("leaf1", 0, ("n1", "n2")),
        SwitchInfo("leaf2", 0, ("n3", "n4")),
        SwitchInfo("spine", 1, (), ("leaf1", "leaf2")),
    )


def test_parse_switches_ignores_noise_and_no_topology() -> None:
    """Without a topology plugin scontrol prints a message, not switches: no switches."""
    assert parse_switches("") == ()
    assert parse_switches("scontrol: topology/none plugin\nSwitchName=x Level=zero\n") == ()


def test_leaf_switches_from_scontrol_shape_the_tree() -> None:
    """Four 8-GPU nodes under two leaves and a spine: same-leaf nodes are closer."""
    topo = topology_from_slurm([(f"n{i}", 8) for i in range(1, 5)],
                               parse_switches(SCONTROL_TOPOLOGY))
    assert len(topo.gpus) == 32
    assert [c.id for c in topo.cells_at(Level.LEAF_SWITCH)] == ["leaf1", "leaf2"]
    assert topo.distance(GpuRef("n1", 0), GpuRef("n2", 7)) is Level.LEAF_SWITCH
    assert topo.distance(GpuRef("n1", 0), GpuRef("n3", 0)) is Level.SPINE
    # Slurm's snapshot says nothing inside a node: its GPUs are all equally close (one switch).
    assert topo.distance(GpuRef("n1", 0), GpuRef("n1", 7)) is Level.PCIE_SWITCH


def test_without_switches_every_node_is_under_one_flat_switch() -> None:
    """No topology from Slurm: one leaf holding all GPU nodes; nodes without GPUs are left out."""
    topo = topology_from_slurm([("a1", 4), ("a2", 8), ("login", 0)])
    (leaf,) = topo.cells_at(Level.LEAF_SWITCH)
    assert leaf.id == FLAT_SWITCH and leaf.children == ("a1", "a2")
    assert len(topo.gpus) == 12
    assert topo.distance(GpuRef("a1", 3), GpuRef("a2", 0)) is Level.LEAF_SWITCH


def test_nodes_no_leaf_names_go_under_the_flat_switch_and_unknown_ones_are_dropped() -> None:
    """A switch naming a node Slurm does not list is ignored for that node; a GPU node no
    switch names still gets a leaf, so the planner can use its GPUs."""
    switches = (SwitchInfo("leaf1", 0, ("n1", "gone")), SwitchInfo("leaf9", 0, ("gone2",)),
                SwitchInfo("spine", 1, (), ("leaf1", "leaf9")))
    topo = topology_from_slurm([("n1", 8), ("n2", 8)], switches)
    leaves = {c.id: c.children for c in topo.cells_at(Level.LEAF_SWITCH)}
    assert leaves == {"leaf1": ("n1",), FLAT_SWITCH: ("n2",)}
    assert [c.children for c in topo.cells_at(Level.SPINE)] == [("leaf1",)]


def test_derived_topology_is_rebuilt_only_when_nodes_change() -> None:
    """The provider keeps its topology across snapshots until a node or GPU count changes."""
    fake = FakeSlurm([FakeNode("n1", gpus=8), FakeNode("n2", gpus=8)])
    derive = DerivedTopology()
    first = derive(fake.snapshot())
    assert derive(fake.snapshot()) is first
    fake.nodes["n3"] = FakeNode("n3", gpus=4)
    second = derive(fake.snapshot())
    assert second is not first and len(second.gpus) == 20
