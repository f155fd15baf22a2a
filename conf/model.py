"""The cluster description as immutable values (what ``description.toml`` parses into).

Hardware: :class:`NodeType` (sockets, PCIe switches with their GPUs, NVLink groups) and
:class:`NodeGroup` (a hostlist of nodes of one type). Network: :class:`Switch` (leaf switches list
nodes, spines list switches). Policy: :class:`ClassPolicy` per priority class, :class:`Team` quotas
and entitlements, :class:`Partition`. Deployment details (paths, ports, preemption mode, Slurm
version) are a separate value, :class:`hai_slurm.conf.deployment.Deployment`, so one description
serves a real cluster and the local testbed alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.hostlist import expand


@dataclass(frozen=True)
class PcieSwitch:
    """GPUs behind one PCIe switch. ``cores`` (Slurm core ids, e.g. ``"48-63"``) and ``numa``
    narrow the CPU affinity below the socket when known (discovery fills them in)."""

    gpus: tuple[int, ...]
    cores: str | None = None
    numa: int | None = None


@dataclass(frozen=True)
class Socket:
    """One CPU socket and the PCIe switches (with GPUs) attached to it."""

    pcie_switches: tuple[PcieSwitch, ...] = ()


@dataclass(frozen=True)
class NvlinkGroup:
    """Every pair of ``gpus`` is joined by ``links`` bonded NVLinks (NVSwitch: all 8 GPUs)."""

    gpus: tuple[int, ...]
    links: int


@dataclass(frozen=True)
class NodeType:
    """The hardware of one kind of node. GPU indices are Slurm's (sorted by PCI bus id)."""

    name: str
    sockets: tuple[Socket, ...]
    cores_per_socket: int
    threads_per_core: int = 1
    memory_mb: int = 1
    gpu_model: str = ""
    device_pattern: str = "/dev/nvidia{index}"
    nvlink: tuple[NvlinkGroup, ...] = ()

    @property
    def gpu_count(self) -> int:
        """Number of GPUs in the layout."""
        return sum(len(sw.gpus) for s in self.sockets for sw in s.pcie_switches)

    @property
    def cpus(self) -> int:
        """Logical CPUs (Slurm's ``CPUs=``)."""
        return len(self.sockets) * self.cores_per_socket * self.threads_per_core

    def socket_of(self, gpu: int) -> int:
        """Socket index of ``gpu`` (KeyError if absent)."""
        for si, s in enumerate(self.sockets):
            for sw in s.pcie_switches:
                if gpu in sw.gpus:
                    return si
        raise KeyError(gpu)

    def switch_of(self, gpu: int) -> tuple[int, int]:
        """(socket index, switch index within the socket) of ``gpu``."""
        for si, s in enumerate(self.sockets):
            for wi, sw in enumerate(s.pcie_switches):
                if gpu in sw.gpus:
                    return si, wi
        raise KeyError(gpu)

    def nvlinks(self, a: int, b: int) -> int:
        """Bonded NVLinks between GPUs ``a`` and ``b`` (0 if none; groups do not add up)."""
        best = 0
        for grp in self.nvlink:
            if a in grp.gpus and b in grp.gpus and a != b:
                best = max(best, grp.links)
        return best


# gres.conf Links= scores (Slurm: -1 self, 0 no connection, higher = better connected).
LINK_SELF = -1
LINK_OTHER_SOCKET = 0
LINK_SAME_SOCKET = 1
LINK_SAME_SWITCH = 2
LINK_NVLINK_BASE = 2  # n bonded NVLinks score 2 + n: any NVLink beats any PCIe path


def link_score(nt: NodeType, a: int, b: int) -> int:
    """Slurm ``Links=`` value between GPUs ``a`` and ``b`` of ``nt``."""
    if a == b:
        return LINK_SELF
    n = nt.nvlinks(a, b)
    if n:
        return LINK_NVLINK_BASE + n
    (sa, wa), (sb, wb) = nt.switch_of(a), nt.switch_of(b)
    if sa != sb:
        return LINK_OTHER_SOCKET
    return LINK_SAME_SWITCH if wa == wb else LINK_SAME_SOCKET


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one type, given as a hostlist expression (``n[001-016]``)."""

    nodes: str
    type: str


@dataclass(frozen=True)
class Switch:
    """A network switch: a leaf lists ``nodes`` (hostlist), a spine lists ``switches``."""

    name: str
    nodes: str | None = None
    switches: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassPolicy:
    """How a priority class maps to Slurm: its QOS, grace time and the classes it may preempt.

    ``max_grace_s`` caps a job's own ``#HAI --grace`` (default: ``grace_time_s``);
    ``allow_non_preemptible`` lets jobs ask ``--preemptible=no`` (default: only classes no class
    may preempt). Both go to job_submit.lua's entitlements table."""

    cls: PriorityClass
    qos: str
    grace_time_s: int = 0
    preempts: tuple[PriorityClass, ...] = ()
    max_grace_s: int | None = None
    allow_non_preemptible: bool | None = None


@dataclass(frozen=True)
class Team:
    """A team = a Slurm account. ``gpu_quota`` GPUs are guaranteed (None: no quota); borrowing
    beyond it is the daemon's business. ``gpu_limit`` is an optional hard cap Slurm enforces
    (``GrpTRES=gres/gpu=N``). ``classes`` are the priority classes it may submit in."""

    name: str
    gpu_quota: int | None = None
    classes: tuple[PriorityClass, ...] = ()
    gpu_limit: int | None = None
    users: tuple[str, ...] = ()


@dataclass(frozen=True)
class Partition:
    """A Slurm partition over a hostlist (``"ALL"`` = every node)."""

    name: str
    nodes: str = "ALL"
    default: bool = False
    max_time: str = "INFINITE"


@dataclass(frozen=True)
class ClusterDescription:
    """Everything the generators, the topology model and the simulator need to know."""

    name: str
    node_types: tuple[NodeType, ...]
    node_groups: tuple[NodeGroup, ...]
    switches: tuple[Switch, ...] = ()
    partitions: tuple[Partition, ...] = ()
    classes: tuple[ClassPolicy, ...] = ()
    teams: tuple[Team, ...] = ()
    source: str = field(default="<description>", compare=False)

    def nodes(self) -> tuple[tuple[str, NodeType], ...]:
        """Every node with its type, in description order (hostlists expanded)."""
        types = {nt.name: nt for nt in self.node_types}
        return tuple((n, types[g.type]) for g in self.node_groups
                     for n in expand(g.nodes, source=self.source, key="nodes"))

    @property
    def total_gpus(self) -> int:
        """GPUs in the whole cluster."""
        return sum(nt.gpu_count for _, nt in self.nodes())

    def node_type(self, name: str) -> NodeType:
        """The node type called ``name`` (KeyError if absent)."""
        for nt in self.node_types:
            if nt.name == name:
                return nt
        raise KeyError(name)

    def class_policy(self, cls: PriorityClass) -> ClassPolicy:
        """Policy of ``cls`` (every class has one after parsing)."""
        for cp in self.classes:
            if cp.cls is cls:
                return cp
        raise KeyError(cls)
