"""The planner's topology when the daemon has no cluster description: derived from Slurm (pure).

With ``cluster = ...`` in the daemon file the topology is the description's
(:meth:`~hai_slurm.conf.topology.Topology.from_description`), GPU layout inside nodes included.
Without it, :func:`topology_from_slurm` builds one from what Slurm reports:

* nodes and their GPU counts from the snapshot (``sinfo``); nodes without GPUs are left out,
  the planner only places GPUs. Inside a node all GPUs count as equally close (one socket, one
  PCIe switch): Slurm's snapshot does not say more;
* leaf switches from ``scontrol show topology``
  (:meth:`~hai_slurm.slurm_plugins.types.SlurmClient.switches`, TopologyPlugin
  ``topology/tree``), read once at start. Without that output (no topology plugin, or nodes the
  topology does not name) the nodes sit under one flat switch, so multi-node plans may pick any
  nodes.

:class:`DerivedTopology` rebuilds the topology only when the set of nodes or their GPU counts
changes (a node added, a GPU count reconfigured).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hai_slurm.conf.hostlist import compress
from hai_slurm.conf.model import ClusterDescription, NodeGroup, NodeType, PcieSwitch, Socket, Switch
from hai_slurm.conf.topology import Topology
from hai_slurm.slurm_plugins.types import ClusterSnapshot, SwitchInfo

FLAT_SWITCH = "flat"
"""Name of the one switch every node hangs under when Slurm reports no topology."""

def _node_type(gpus: int) -> NodeType:
    return NodeType(name=f"gpu{gpus}", sockets=(Socket((PcieSwitch(tuple(range(gpus))),)),),
                    cores_per_socket=1)


def topology_from_slurm(nodes: Iterable[tuple[str, int]],
                        switches: Sequence[SwitchInfo] = ()) -> Topology:
    """A topology of ``nodes`` (name, GPU count) under ``switches`` (see the module docstring).

    Switch nodes Slurm reports that are not in ``nodes`` (no GPUs) are dropped; nodes no leaf
    switch names go under one extra switch, :data:`FLAT_SWITCH`; switches left empty are
    dropped. With no switches at all every node is under :data:`FLAT_SWITCH`.
    """
    counts = {name: gpus for name, gpus in nodes if gpus > 0}
    types = {g: _node_type(g) for g in sorted(set(counts.values()))}
    groups = tuple(NodeGroup(compress([n for n in counts if counts[n] == g]), types[g].name)
                   for g in types)
    leaves: list[Switch] = []
    placed: set[str] = set()
    for sw in switches:
        if sw.level == 0:
            mine = [n for n in sw.nodes if n in counts and n not in placed]
            if mine:
                placed.update(mine)
                leaves.append(Switch(sw.name, nodes=compress(mine)))
    rest = [n for n in counts if n not in placed]
    if rest:
        leaves.append(Switch(FLAT_SWITCH if not any(s.name == FLAT_SWITCH for s in leaves)
                             else f"{FLAT_SWITCH}-rest", nodes=compress(rest)))
    kept = {s.name for s in leaves}
    parented: set[str] = set()  # a switch under two parents would break the tree: first wins
    tree: list[Switch] = []
    for sw in sorted((s for s in switches if s.level > 0), key=lambda s: s.level):
        below = tuple(c for c in sw.switches if c in kept and c not in parented)
        if below:
            parented.update(below)
            tree.append(Switch(sw.name, switches=below))
            kept.add(sw.name)
    desc = ClusterDescription("derived-from-slurm", tuple(types.values()), groups,
                              (*leaves, *tree), source="the Slurm snapshot")
    return Topology.from_description(desc)


def node_gpus(snap: ClusterSnapshot) -> tuple[tuple[str, int], ...]:
    """(node, GPUs) of every node in the snapshot, sorted by name."""
    return tuple(sorted((n.name, n.gpus) for n in snap.nodes))


class DerivedTopology:
    """A topology provider for :class:`~hai_slurm.priority.daemon.planning.SnapshotPlanner`: the
    topology of each snapshot's nodes under ``switches``, rebuilt only when they change."""

    def __init__(self, switches: Sequence[SwitchInfo] = ()) -> None:
        self.switches = tuple(switches)
        self._key: tuple[tuple[str, int], ...] | None = None
        self._topology: Topology | None = None

    def __call__(self, snap: ClusterSnapshot) -> Topology:
        """The topology for ``snap``."""
        key = node_gpus(snap)
        if self._topology is None or key != self._key:
            self._topology = topology_from_slurm(key, self.switches)
            self._key = key
        return self._topology
