"""Where a job's GPUs go: a mutable view of busy GPUs over the topology, and placement choices.

Built once per planning pass from :class:`~hai_slurm.conf.topology.Topology` (which stays the
source of truth for the tree). Each node's GPUs are bits of an int, each cell inside a node
(node, sockets, PCIe switches, GPUs) a mask, so "free GPUs of a cell" is one ``bit_count``.
Placement follows the topology module's rules, made incremental for 10,000 jobs a pass:

* inside a node, the GPUs go into the lowest cell that has room (one PCIe switch, else one
  socket, else the node), the fullest such cell (best fit), whole free children taken first;
* a single-node job goes to the node where that cell is lowest, then the fullest node, then the
  fullest leaf switch: large free cells (whole nodes, whole leaves) stay whole (HiveD's buddy
  idea: carve from what is already carved);
* a multi-node job gets nodes under one leaf switch (the *group* of a node: its parent cell).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter
from types import MappingProxyType
from weakref import WeakKeyDictionary

from hai_slurm.conf.topology import GpuRef, Level, Topology

LEVELS: tuple[Level, ...] = tuple(Level(i) for i in range(max(Level) + 1))
"""``LEVELS[i] is Level(i)``, without calling the enum (a Python-level lookup)."""


@dataclass(frozen=True, slots=True)
class _CellMask:
    level: Level
    mask: int
    children: tuple[int, ...]   # indices into NodeLayout.cells
    above: tuple[int, ...]      # parent, grandparent ... up to the node (index 0)


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """One node: its GPUs (bit i is ``refs[i]``), its cells (index 0 is the node) and group."""

    name: str
    group: str
    order: int
    refs: tuple[GpuRef, ...]
    full: int
    cells: tuple[_CellMask, ...]

    def gpus(self, mask: int) -> tuple[GpuRef, ...]:
        """The GPUs whose bits are set in ``mask``."""
        return tuple(r for i, r in enumerate(self.refs) if mask >> i & 1)

    def pick(self, free: int, count: int) -> tuple[Level, int] | None:
        """(level, mask) of ``count`` GPUs out of ``free`` in the lowest, fullest cell; or None."""
        if count <= 0:
            return (Level.GPU, 0)
        room = [(c.mask & free).bit_count() for c in self.cells]
        best: tuple[int, ...] | None = None
        for ci, cell in enumerate(self.cells):
            if room[ci] >= count:  # lowest level, then fullest cell, parent, grandparent...
                key = (int(cell.level), room[ci], *(room[a] for a in cell.above), ci)
                if best is None or key < best:
                    best = key
        if best is None:
            return None
        return Level(best[0]), self._take(best[-1], count, free)

    def _take(self, ci: int, count: int, free: int) -> int:
        cell = self.cells[ci]
        if not cell.children:
            return cell.mask & free if count else 0
        kids = [k for k in cell.children if self.cells[k].mask & free]
        taken = 0
        while count > 0 and kids:
            room = {k: (self.cells[k].mask & free).bit_count() for k in kids}
            fits = [k for k in kids if room[k] >= count]
            # the rest fits in one child: the fullest such child; else the emptiest child whole
            k = min(fits, key=lambda k: (room[k], k)) if fits else min(
                kids, key=lambda k: (-room[k], k))
            got = self._take(k, min(count, room[k]), free)
            taken |= got
            count -= got.bit_count()
            kids.remove(k)
        return taken


def _layout(topo: Topology, node: str, order: int) -> NodeLayout:
    root = topo.cell(node)
    refs = root.gpus
    bit = {r: i for i, r in enumerate(refs)}
    ids: list[str] = []

    def walk(cid: str) -> None:
        ids.append(cid)
        for k in topo.cell(cid).children:
            walk(k)

    walk(node)
    index = {cid: i for i, cid in enumerate(ids)}

    def above(cid: str) -> tuple[int, ...]:
        out: list[int] = []
        parent = topo.cell(cid).parent
        while cid != node and parent is not None:
            out.append(index[parent])
            cid, parent = parent, topo.cell(parent).parent
        return tuple(out)

    cells = tuple(_CellMask(
        topo.cell(cid).level, sum(1 << bit[g] for g in topo.cell(cid).gpus),
        tuple(index[k] for k in topo.cell(cid).children), above(cid)) for cid in ids)
    return NodeLayout(node, root.parent or topo.root, order, refs, (1 << len(refs)) - 1, cells)


@dataclass(frozen=True, slots=True)
class _Static:
    """What a view derives from its topology alone (shared by the views of one topology)."""

    nodes: dict[str, NodeLayout]
    groups: dict[str, tuple[str, ...]]
    group_gpus: dict[str, int]
    max_node_gpus: int
    bits: dict[GpuRef, tuple[str, int]]
    shape: dict[str, int]   # nodes with equal cells share an id (and their picks)
    picks: dict[tuple[int, int, int], tuple[Level, int] | None]
    masks: dict[tuple[GpuRef, ...], dict[str, int]]   # per GPU list seen (see ClusterView.masks)
    refs: dict[tuple[str, int], tuple[GpuRef, ...]]   # per (node, mask): its GPUs, sorted
    full: dict[str, int]   # each node's mask of all its GPUs (a plain dict: read per search)


_STATIC: WeakKeyDictionary[Topology, _Static] = WeakKeyDictionary()
"""Layouts per topology: a topology is immutable, so its layouts are built once, not once per
planning pass (read only; each view has its own busy GPUs)."""


def _static(topo: Topology) -> _Static:
    got = _STATIC.get(topo)
    if got is None:
        nodes = {c.id: _layout(topo, c.id, i) for i, c in enumerate(topo.cells_at(Level.NODE))}
        groups: dict[str, list[str]] = {}
        for layout in nodes.values():
            groups.setdefault(layout.group, []).append(layout.name)
        got = _Static(
            nodes, {g: tuple(n) for g, n in groups.items()},
            {g: sum(nodes[n].full.bit_count() for n in ns) for g, ns in groups.items()},
            max((n.full.bit_count() for n in nodes.values()), default=0),
            {r: (n.name, i) for n in nodes.values() for i, r in enumerate(n.refs)},
            _shapes(nodes), {}, {}, {}, {n: lay.full for n, lay in nodes.items()})
        _STATIC[topo] = got
    return got


def _shapes(nodes: Mapping[str, NodeLayout]) -> dict[str, int]:
    ids: dict[tuple[_CellMask, ...], int] = {}
    return {name: ids.setdefault(layout.cells, len(ids)) for name, layout in nodes.items()}


class ClusterView:
    """Busy GPUs per node during one planning pass (mutable; never shared between passes)."""

    def __init__(self, topo: Topology) -> None:
        static = _static(topo)
        self.nodes: Mapping[str, NodeLayout] = MappingProxyType(static.nodes)
        self.busy: dict[str, int] = dict.fromkeys(self.nodes, 0)
        self.all_nodes = tuple(self.nodes)
        self.with_free: set[str] = set(self.all_nodes)
        """Nodes with at least one free GPU (a full cluster has few: free placements look at
        those only)."""
        self.groups: Mapping[str, tuple[str, ...]] = MappingProxyType(static.groups)
        self.group_order = {g: i for i, g in enumerate(self.groups)}
        self.group_free = dict(static.group_gpus)
        self.max_node_gpus = static.max_node_gpus
        self.capacity: dict[tuple[int, bool, frozenset[str] | None], int] = {}
        self._allowed: dict[tuple[int, frozenset[str]],
                            tuple[tuple[str, tuple[str, ...]], ...]] = {}
        self._bit = static.bits
        self._shape = static.shape
        self._picks = static.picks
        self._masks = static.masks
        self._refs = static.refs
        self._full = static.full

    def gpus(self, node: str, mask: int) -> tuple[GpuRef, ...]:
        """The GPUs of ``mask`` on ``node``, sorted; remembered per topology (at most 2^GPUs
        masks per node)."""
        key = (node, mask)
        got = self._refs.get(key)
        if got is None:
            got = self._refs[key] = tuple(sorted(self.nodes[node].gpus(mask), key=_ref_order))
        return got

    def pick(self, node: str, free: int, count: int) -> tuple[Level, int] | None:
        """``self.nodes[node].pick(free, count)``, remembered per node shape (a pure function
        of the node's cells, ``free`` and ``count``)."""
        key = (self._shape[node], free, count)
        try:
            return self._picks[key]
        except KeyError:
            got = self._picks[key] = self.nodes[node].pick(free, count)
            return got

    def masks(self, gpus: Iterable[GpuRef]) -> dict[str, int] | GpuRef:
        """Per-node masks of ``gpus``; the first unknown GPU instead when one is not in the tree.

        Remembered per GPU tuple and topology (a running job keeps its GPUs from pass to pass):
        the dict returned may be shared, so callers never change it."""
        known = self._masks.get(gpus) if isinstance(gpus, tuple) else None
        if known is not None:
            return known
        out: dict[str, int] = {}
        for g in gpus:
            where = self._bit.get(g)
            if where is None:
                return g
            out[where[0]] = out.get(where[0], 0) | 1 << where[1]
        if isinstance(gpus, tuple):
            if len(self._masks) >= 100_000:  # bounded: a long-lived daemon sees many lists
                self._masks.clear()
            self._masks[gpus] = out
        return out

    def free(self, node: str) -> int:
        """Mask of the free GPUs of ``node``."""
        return self._full[node] & ~self.busy[node]

    def occupy(self, node: str, mask: int) -> None:
        """Mark ``mask`` busy on ``node`` (GPUs already busy stay busy)."""
        new = mask & ~self.busy[node]
        busy = self.busy[node] = self.busy[node] | mask
        self.group_free[self.nodes[node].group] -= new.bit_count()
        if busy == self._full[node]:
            self.with_free.discard(node)

    def load(self, held: Mapping[str, int]) -> None:
        """Mark each node's mask in ``held`` busy (a pass's running jobs, gathered per node:
        one :meth:`occupy` per node rather than per job and node)."""
        for node, mask in held.items():
            if mask:
                self.occupy(node, mask)

    def release(self, node: str, mask: int) -> None:
        """Mark ``mask`` free on ``node`` (GPUs already free stay free)."""
        gone = mask & self.busy[node]
        self.busy[node] &= ~mask
        self.group_free[self.nodes[node].group] += gone.bit_count()
        if gone:
            self.with_free.add(node)

    def groups_for(self, nodes: int, allowed: frozenset[str] | None = None
                   ) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The groups a job of ``nodes`` nodes may use: one leaf switch each, or (multi-node with
        no leaf left) nothing. A single-node job may use every node: one group of all nodes.
        With ``allowed``, only those nodes (groups left without any are dropped)."""
        if allowed is None:
            if nodes <= 1:
                return (("cluster", self.all_nodes),)
            return tuple(self.groups.items())
        key = (nodes, allowed)
        got = self._allowed.get(key)
        if got is None:
            if nodes <= 1:
                got = (("cluster", self.members(None, allowed)),)
            else:
                got = tuple((g, ms) for g in self.groups
                            if (ms := self.members(g, allowed)))
            self._allowed[key] = got
        return got

    def members(self, group: str | None, allowed: frozenset[str] | None) -> tuple[str, ...]:
        """The nodes of ``group`` (None: the whole cluster) in order, only ``allowed`` ones
        (None: all)."""
        names = self.all_nodes if group is None else self.groups[group]
        return names if allowed is None else tuple(n for n in names if n in allowed)


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs chosen for a job: per-node masks, the nodes in order, and the worst in-node level."""

    masks: tuple[tuple[str, int], ...]
    level: Level

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes of the placement."""
        return tuple([n for n, _ in self.masks])   # a list: cheaper than a generator

    def gpus(self, view: ClusterView) -> tuple[GpuRef, ...]:
        """The GPUs of the placement, sorted."""
        if len(self.masks) == 1:
            return view.gpus(*self.masks[0])
        nodes = [n for n, _ in self.masks]
        parts = [view.gpus(n, m) for n, m in self.masks]
        if all([a < b for a, b in pairwise(nodes)]):
            # nodes in order (as the planner makes them): each node's GPUs are sorted, so
            # their concatenation is, without sorting every GPU by its (node, index) again
            return tuple([g for part in parts for g in part])
        return tuple(sorted([g for part in parts for g in part], key=_ref_order))


_ref_order = attrgetter("node", "index")
"""A GPU's (node, index): the order of GpuRef, without its Python-level comparisons."""


def place_free(view: ClusterView, nodes: int, per_node: int, *, cross_leaf: bool = False,
               allowed: frozenset[str] | None = None) -> Placement | None:
    """The best placement of ``nodes`` x ``per_node`` GPUs on free GPUs only (of the
    ``allowed`` nodes; None: any), or None."""
    got = _place_free(view, view.groups_for(nodes, allowed), nodes, per_node)
    if got is None and nodes > 1 and cross_leaf:  # no leaf switch can: across leaves
        got = _place_free(view, (("cluster", view.members(None, allowed)),), nodes, per_node)
    return got


def _place_free(view: ClusterView, groups: tuple[tuple[str, tuple[str, ...]], ...], nodes: int,
                per_node: int) -> Placement | None:
    best: tuple[tuple[int, ...], Placement] | None = None
    with_free = view.with_free
    for gi, (group, members) in enumerate(groups):
        options: list[tuple[tuple[int, ...], str, int]] = []
        # the whole cluster: only the nodes with a free GPU (any order: the keys decide)
        for name in with_free if members is view.all_nodes else members:
            if name not in with_free:
                continue
            layout = view.nodes[name]
            free = layout.full & ~view.busy[name]
            have = free.bit_count()
            if have < per_node:
                continue
            got = view.pick(name, free, per_node)
            if got is None:
                continue
            level, mask = got
            options.append(((int(level), have, view.group_free[layout.group], layout.order),
                            name, mask))
        if len(options) < nodes:
            continue
        options.sort()
        chosen = options[:nodes]
        worst = max(o[0][0] for o in chosen)
        key = (worst, view.group_free.get(group, 0) if nodes > 1 else 0,
               *chosen[0][0][1:], gi)
        if best is None or key < best[0]:
            best = (key, Placement(tuple(sorted((n, m) for _, n, m in chosen)), LEVELS[worst]))
    return None if best is None else best[1]


def group_capacity(view: ClusterView, per_node: int, *, cross_leaf: bool = False,
                   allowed: frozenset[str] | None = None) -> int:
    """The most nodes with at least ``per_node`` GPUs (busy or not) under one group (under
    the whole cluster with ``cross_leaf``), of the ``allowed`` nodes (None: all). Cached per
    view: capacities never change."""
    key = (per_node, cross_leaf, allowed)
    got = view.capacity.get(key)
    if got is None:
        groups = ([view.members(None, allowed)] if cross_leaf
                  else [view.members(g, allowed) for g in view.groups])
        got = max((sum(view.nodes[n].full.bit_count() >= per_node for n in ns)
                   for ns in groups), default=0)
        view.capacity[key] = got
    return got
