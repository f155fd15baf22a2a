"""The cluster as a tree of cells (HiveD's model, plus the network above nodes). Pure.

Levels, from the bottom: GPU < PCIe switch < socket < node < leaf switch < spine < cluster.
A *cell* is one element at one level with every GPU below it; *buddy cells* are cells of the same
level under the same parent (HiveD's buddy allocation splits and merges them). Multi-GPU jobs run
faster the lower the cell that holds all their GPUs, so :meth:`Topology.best_placement` looks for
the lowest such cell and, among equals, the fullest one (best fit keeps big cells free).

The planner (placement and victim choice) and the simulator build their cluster with
:meth:`Topology.from_description`, so they see what the generated Slurm configuration says.
Every switch above a leaf has level SPINE, also in trees with more than two tiers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from hai_slurm.conf.hostlist import expand
from hai_slurm.conf.model import ClusterDescription


class Level(IntEnum):
    """How far apart two GPUs are: the level of the lowest cell that holds both."""

    GPU = 0
    PCIE_SWITCH = 1
    SOCKET = 2
    NODE = 3
    LEAF_SWITCH = 4
    SPINE = 5
    CLUSTER = 6


@dataclass(frozen=True, order=True)
class GpuRef:
    """One GPU: node name and Slurm's GPU index on that node."""

    node: str
    index: int

    def __str__(self) -> str:
        return f"{self.node}:{self.index}"


@dataclass(frozen=True)
class Cell:
    """A node of the topology tree. ``id`` is unique (``n1/socket0/pcie1``, ``leaf2``)."""

    id: str
    level: Level
    parent: str | None
    children: tuple[str, ...]
    gpus: tuple[GpuRef, ...]


class Topology:
    """An immutable cell tree with placement queries. Build with :meth:`from_description`."""

    def __init__(self, cells: dict[str, Cell], root: str) -> None:
        self._cells = dict(cells)
        self.root = root
        self._gpu_cell: dict[GpuRef, str] = {
            c.gpus[0]: c.id for c in cells.values() if c.level is Level.GPU}

    @classmethod
    def from_description(cls, desc: ClusterDescription) -> Topology:
        """The tree of ``desc`` (validated descriptions only)."""
        cells: dict[str, Cell] = {}
        node_parent: dict[str, str] = {}
        for sw in desc.switches:
            if sw.nodes is not None:
                for n in expand(sw.nodes):
                    node_parent[n] = sw.name
        switch_parent = {child: sw.name for sw in desc.switches for child in sw.switches}
        node_ids: list[str] = []
        for node, nt in desc.nodes():
            sock_ids = []
            for si, sock in enumerate(nt.sockets):
                sid = f"{node}/socket{si}"
                sw_ids = []
                for wi, pcie in enumerate(sock.pcie_switches):
                    wid = f"{sid}/pcie{wi}"
                    gids = []
                    for g in pcie.gpus:
                        ref = GpuRef(node, g)
                        gid = f"{node}/gpu{g}"
                        cells[gid] = Cell(gid, Level.GPU, wid, (), (ref,))
                        gids.append(gid)
                    cells[wid] = Cell(wid, Level.PCIE_SWITCH, sid, tuple(gids),
                                      tuple(GpuRef(node, g) for g in pcie.gpus))
                    sw_ids.append(wid)
                cells[sid] = Cell(sid, Level.SOCKET, node, tuple(sw_ids),
                                  tuple(r for w in sw_ids for r in cells[w].gpus))
                sock_ids.append(sid)
            parent = node_parent.get(node, "cluster")
            cells[node] = Cell(node, Level.NODE, parent, tuple(sock_ids),
                               tuple(r for s in sock_ids for r in cells[s].gpus))
            node_ids.append(node)

        def build_switch(name: str) -> None:
            sw = next(s for s in desc.switches if s.name == name)
            if sw.nodes is not None:
                kids = tuple(n for n in node_ids if node_parent.get(n) == name)
                level = Level.LEAF_SWITCH
            else:
                for child in sw.switches:
                    if child not in cells:
                        build_switch(child)
                kids = sw.switches
                level = Level.SPINE
            cells[name] = Cell(name, level, switch_parent.get(name, "cluster"), kids,
                               tuple(r for k in kids for r in cells[k].gpus))

        for sw in desc.switches:
            if sw.name not in cells:
                build_switch(sw.name)
        tops = tuple(c.id for c in cells.values()
                     if c.parent == "cluster" and c.level is not Level.GPU)
        cells["cluster"] = Cell("cluster", Level.CLUSTER, None, tops,
                                tuple(r for t in tops for r in cells[t].gpus))
        return cls(cells, "cluster")

    def without(self, nodes: Iterable[str]) -> Topology:
        """The tree without ``nodes`` (and without switches left with no GPU): what jobs can
        be placed on while those nodes are down or drained. ``self`` when none is in it."""
        gone = set(nodes)
        if not any(c.level is Level.NODE and c.id in gone for c in self._cells.values()):
            return self
        cells: dict[str, Cell] = {}
        for cid, c in self._cells.items():
            gpus = tuple(g for g in c.gpus if g.node not in gone)
            if gpus or cid == self.root:
                cells[cid] = Cell(cid, c.level, c.parent, c.children, gpus)
        for cid, c in cells.items():
            cells[cid] = Cell(cid, c.level, c.parent,
                              tuple(k for k in c.children if k in cells), c.gpus)
        return Topology(cells, self.root)

    # ---- lookups -------------------------------------------------------------------------
    def cell(self, cell_id: str) -> Cell:
        """The cell called ``cell_id`` (KeyError if none)."""
        return self._cells[cell_id]

    def cells_at(self, level: Level) -> tuple[Cell, ...]:
        """Every cell of ``level``, in tree order."""
        return tuple(c for c in self._cells.values() if c.level is level)

    @property
    def gpus(self) -> tuple[GpuRef, ...]:
        """Every GPU of the cluster."""
        return self._cells[self.root].gpus

    def ancestors(self, gpu: GpuRef) -> tuple[Cell, ...]:
        """Cells holding ``gpu``, from its GPU cell up to the cluster."""
        out = []
        cid: str | None = self._gpu_cell[gpu]
        while cid is not None:
            out.append(self._cells[cid])
            cid = self._cells[cid].parent
        return tuple(out)

    def ancestor(self, gpu: GpuRef, level: Level) -> Cell | None:
        """The cell of ``level`` that holds ``gpu`` (None when the tree has no such level)."""
        return next((c for c in self.ancestors(gpu) if c.level is level), None)

    def buddies(self, cell_id: str) -> tuple[Cell, ...]:
        """Other cells of the same level under the same parent."""
        cell = self._cells[cell_id]
        if cell.parent is None:
            return ()
        return tuple(self._cells[k] for k in self._cells[cell.parent].children
                     if k != cell_id and self._cells[k].level is cell.level)

    def distance(self, a: GpuRef, b: GpuRef) -> Level:
        """Level of the lowest cell holding both GPUs (GPU when ``a == b``)."""
        above_a = {c.id for c in self.ancestors(a)}
        for c in self.ancestors(b):
            if c.id in above_a:
                return c.level
        return Level.CLUSTER

    def span(self, gpus: Iterable[GpuRef]) -> Level:
        """Level of the lowest cell holding all ``gpus``."""
        refs = list(gpus)
        if not refs:
            return Level.GPU
        return max((self.distance(refs[0], g) for g in refs), default=Level.GPU)

    # ---- free space and placement --------------------------------------------------------
    def _free_counts(self, allocated: set[GpuRef]) -> dict[str, int]:
        return {cid: sum(g not in allocated for g in c.gpus) for cid, c in self._cells.items()}

    def free_cells(self, allocated: Iterable[GpuRef]) -> tuple[Cell, ...]:
        """The largest cells whose GPUs are all free (a free node is listed, not its GPUs)."""
        busy = set(allocated)
        free = self._free_counts(busy)
        out: list[Cell] = []

        def walk(cid: str) -> None:
            cell = self._cells[cid]
            if cell.gpus and free[cid] == len(cell.gpus):
                out.append(cell)
                return
            for k in cell.children:
                walk(k)

        walk(self.root)
        return tuple(out)

    def best_placement(self, count: int, allocated: Iterable[GpuRef]
                       ) -> tuple[GpuRef, ...] | None:
        """``count`` free GPUs in the lowest possible cell, best fit; None if they do not exist.

        Among cells of the lowest level with room, the one with the fewest free GPUs wins, then
        the one whose parent (grandparent...) has the fewest (ties: tree order). Inside it,
        whole free children are taken before splitting one.
        """
        if count < 1:
            return ()
        busy = set(allocated)
        free = self._free_counts(busy)
        fitting = [c for c in self._cells.values() if free[c.id] >= count]
        if not fitting:
            return None
        order = {cid: i for i, cid in enumerate(self._cells)}

        def fullness(c: Cell) -> tuple[int, ...]:  # free GPUs of the cell and its ancestors
            out = []
            cid: str | None = c.id
            while cid is not None:
                out.append(free[cid])
                cid = self._cells[cid].parent
            return tuple(out)

        best = min(fitting, key=lambda c: (c.level, fullness(c), order[c.id]))
        return tuple(sorted(self._pick(best.id, count, free, busy, order)))

    def _pick(self, cid: str, count: int, free: dict[str, int], busy: set[GpuRef],
              order: dict[str, int]) -> list[GpuRef]:
        cell = self._cells[cid]
        if cell.level is Level.GPU:
            return [g for g in cell.gpus if g not in busy][:count]
        kids = [k for k in cell.children if free[k] > 0]
        picked: list[GpuRef] = []
        while len(picked) < count and kids:
            need = count - len(picked)
            fits = [k for k in kids if free[k] >= need]
            if fits:  # the rest fits in one child: the fullest such child (best fit)
                k = min(fits, key=lambda k: (free[k], order[k]))
            else:     # take the child with most free GPUs whole, then look again
                k = min(kids, key=lambda k: (-free[k], order[k]))
            picked += self._pick(k, min(need, free[k]), free, busy, order)
            kids.remove(k)
        return picked
