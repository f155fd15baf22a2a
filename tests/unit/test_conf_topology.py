"""The cell tree: levels, buddies, distances, free cells and best placement."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.conf.description import load
from hai_slurm.conf.topology import GpuRef, Level, Topology

GOLDEN = Path(__file__).parent / "golden" / "conf"


def _mixed() -> Topology:
    """n1,n2: 4 PCIe GPUs (2 per socket, one switch each) under leaf1; n3,n4: DGX-1 under leaf2."""
    desc, _ = load(GOLDEN / "mixed-2leaf" / "description.toml")
    return Topology.from_description(desc)


def test_tree_shape_and_levels() -> None:
    """Each level has the expected number of cells and the cluster holds every GPU."""
    topo = _mixed()
    counts = {lvl: len(topo.cells_at(lvl)) for lvl in Level}
    assert counts == {Level.GPU: 24, Level.PCIE_SWITCH: 12, Level.SOCKET: 8, Level.NODE: 4,
                      Level.LEAF_SWITCH: 2, Level.SPINE: 1, Level.CLUSTER: 1}
    assert len(topo.gpus) == 24
    assert topo.cell("spine").children == ("leaf1", "leaf2")
    assert topo.cell("n3/socket1/pcie0").gpus == (GpuRef("n3", 4), GpuRef("n3", 5))


def test_distance_per_level() -> None:
    """Distance is the level of the lowest common cell."""
    topo = _mixed()
    g = GpuRef
    assert topo.distance(g("n3", 0), g("n3", 0)) is Level.GPU
    assert topo.distance(g("n3", 0), g("n3", 1)) is Level.PCIE_SWITCH
    assert topo.distance(g("n3", 0), g("n3", 2)) is Level.SOCKET
    assert topo.distance(g("n3", 0), g("n3", 7)) is Level.NODE
    assert topo.distance(g("n3", 0), g("n4", 0)) is Level.LEAF_SWITCH
    assert topo.distance(g("n1", 0), g("n4", 0)) is Level.SPINE
    assert topo.span([g("n1", 0), g("n1", 1), g("n1", 2)]) is Level.NODE


def test_buddies_are_same_level_siblings() -> None:
    """Buddies share the parent and the level."""
    topo = _mixed()
    assert [c.id for c in topo.buddies("n3/socket0/pcie0")] == ["n3/socket0/pcie1"]
    assert [c.id for c in topo.buddies("leaf1")] == ["leaf2"]
    assert [c.id for c in topo.buddies("n1")] == ["n2"]
    assert topo.buddies("cluster") == ()
    assert topo.ancestor(GpuRef("n4", 6), Level.LEAF_SWITCH).id == "leaf2"  # type: ignore[union-attr]


def test_free_cells_are_maximal() -> None:
    """One busy GPU splits its node into the largest free cells around it."""
    topo = _mixed()
    free = topo.free_cells([GpuRef("n3", 0)])
    ids = [c.id for c in free]
    assert "leaf1" in ids and "n4" in ids
    assert {"n3/gpu1", "n3/socket0/pcie1", "n3/socket1"} <= set(ids)
    assert not any(c.id.startswith("n1") for c in free)


def test_best_placement_prefers_low_cells_and_best_fit() -> None:
    """2 GPUs go into one PCIe switch, into the fullest one that fits; 8 into one node."""
    topo = _mixed()
    g = GpuRef
    busy = [g("n2", 0)]  # n2/socket0/pcie0 has 1 free GPU; everything else is whole
    assert topo.best_placement(1, busy) == (g("n2", 1),)  # best fit: the half-used switch
    two = topo.best_placement(2, busy)
    assert two is not None and topo.span(two) is Level.PCIE_SWITCH
    eight = topo.best_placement(8, busy)
    assert eight is not None and topo.span(eight) is Level.NODE and eight[0].node == "n3"
    three = topo.best_placement(3, busy)  # a DGX-1 socket (4 GPUs) beats any 4-GPU node
    assert three is not None and topo.span(three) is Level.SOCKET
    busy4 = [g("n3", 0), g("n3", 1), g("n3", 2), g("n3", 4), g("n4", 0), g("n4", 4), g("n2", 0)]
    # 4 GPUs: no socket has 4 free; nodes with 4+ free: n1 (4), n3 (4), n4 (6). n1 and n3 tie,
    # and n1's leaf is fuller (7 free against 10): n1.
    four = topo.best_placement(4, busy4)
    assert four is not None and {x.node for x in four} == {"n1"}
    ten = topo.best_placement(10, busy)
    assert ten is not None and topo.span(ten) is Level.LEAF_SWITCH
    assert topo.best_placement(25, []) is None
    assert topo.best_placement(0, []) == ()


@settings(max_examples=80, deadline=None)
@given(st.sets(st.integers(0, 23)), st.integers(1, 24))
def test_best_placement_properties(busy_idx: set[int], count: int) -> None:
    """Placement uses only free GPUs, exactly ``count`` of them, and no lower cell could hold
    them (HiveD's rule); None only when too few GPUs are free."""
    topo = _mixed()
    busy = {topo.gpus[i] for i in busy_idx}
    picked = topo.best_placement(count, busy)
    free = [x for x in topo.gpus if x not in busy]
    if picked is None:
        assert len(free) < count
        return
    assert len(picked) == count == len(set(picked)) and not set(picked) & busy
    level = topo.span(picked)
    for lvl in Level:
        if lvl < level:
            assert all(sum(x not in busy for x in c.gpus) < count for c in topo.cells_at(lvl))


def test_without_nodes_drops_their_cells_and_empty_switches() -> None:
    """``without`` leaves the nodes out (a drained node's GPUs fit nobody), with every cell
    above them, and a leaf whose nodes are all gone."""
    topo = _mixed()
    assert topo.without(["nx"]) is topo
    rest = topo.without(["n3", "n4"])
    assert {c.id for c in rest.cells_at(Level.NODE)} == {"n1", "n2"}
    assert [c.id for c in rest.cells_at(Level.LEAF_SWITCH)] == ["leaf1"]
    assert rest.cell("spine").children == ("leaf1",)
    assert len(rest.gpus) == 8 and all(g.node in ("n1", "n2") for g in rest.gpus)
    assert len(topo.gpus) == 24  # unchanged
