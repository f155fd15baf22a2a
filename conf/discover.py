"""Discovery: a node type from ``nvidia-smi topo -m`` (+ GPU list, + ``lscpu``). Pure.

Rules, read off the matrix:

- PCIe switch groups: GPUs with ``PIX``/``PXB`` between them, or both ``PIX``/``PXB`` to the same
  NIC, share a switch (union of both). NVLink (``NV#``) hides the PCIe path, so two NVLinked GPUs
  without such a NIC hint get separate switch groups; edit the result if you know better.
- Sockets: with a CPU map (``lscpu -p=CPU,CORE,SOCKET,NODE``, /sys, or the ``lscpu`` summary's
  NUMA lists), a GPU's socket is the one socket of all CPUs of its ``CPU Affinity``; a placement
  the matrix contradicts (``NODE``/``PHB``/``PIX``/``PXB`` across sockets, ``SYS`` within one NUMA
  node of a socket) is refused. Without a CPU map, GPUs with the same affinity or a
  ``NODE``/``PHB``/``PIX``/``PXB`` link share a socket, and cores/threads are written as 0
  placeholders that validation refuses (a warning says so).
- ``cores``/``numa`` of a switch: its GPUs' affinity as Slurm core ids (socket rank x
  cores_per_socket + the core's rank in its socket, see :class:`CpuInfo`) when narrower than the
  socket (e.g. NPS4 machines), and the ``NUMA Affinity`` column (or the CPU map's NUMA nodes).
- NVLink: if every GPU pair has the same ``NV#``, one group of all GPUs; else one group per pair.
- Device files ``/dev/nvidia{index}``: Slurm numbers GPUs by PCI bus id, as ``nvidia-smi`` does;
  the device minor number usually matches (the live path checks /proc and warns if not).
"""

from __future__ import annotations

from dataclasses import dataclass

from hai_slurm.conf.discover_parse import (
    MAX_CPU_ID,
    PARSEABLE_HINT,
    CpuInfo,
    GpuInfo,
    TopoMatrix,
    parse_cpu_list,
)
from hai_slurm.conf.model import NodeType, NvlinkGroup, PcieSwitch, Socket
from hai_slurm.conf.validate import MIN_MEMORY_MB, feature_name, format_cores
from hai_slurm.errors import ConfigError

UNKNOWN_MEMORY_MB = 0
"""``memory_mb`` of a discovery that was not told the node's memory: validation refuses it with
"fill in the node's memory", so the description cannot be used before someone does."""

UNKNOWN_CORES = 0
"""``cores_per_socket``/``threads_per_core`` of a discovery without a CPU source (lscpu or
/sys): validation refuses 0 with "fill in", so nothing is guessed that could pass for real."""

NO_CPU_WARNING = (
    "no CPU source: cores_per_socket and threads_per_core are written as 0 (fill them in; the "
    "description is refused until then), sockets are guessed from the matrix (GPUs linked by "
    "NODE/PHB/PIX/PXB or with the same CPU Affinity share one; on NPS/SNC machines that is a "
    "NUMA node, not a socket) and no PCIe switch gets cores: pass --lscpu with a saved "
    f"`LC_ALL=C lscpu` or, better, `{PARSEABLE_HINT}`")

SIBLINGS_NOTE = (
    "the lscpu summary does not say which CPUs are SMT siblings: the PCIe switches' cores assume "
    "Linux's usual numbering (x86/ARM: a socket's first threads, then its second threads; POWER: "
    f"consecutive); pass `{PARSEABLE_HINT}` for the exact cores")

_SAME_SWITCH = {"PIX", "PXB"}
_SAME_SOCKET = {"PIX", "PXB", "PHB", "NODE"}


@dataclass(frozen=True)
class NicInfo:
    """A non-GPU device of the matrix: its socket (if any GPU is on its side) and the GPUs
    behind the same PCIe switch."""

    name: str
    socket: int | None
    near_gpus: tuple[int, ...]


@dataclass(frozen=True)
class Discovery:
    """Result: the node type, the NICs seen, warnings for the admin (printed on stderr and as
    comments) and notes (assumptions worth a look, printed as comments only)."""

    node_type: NodeType
    nics: tuple[NicInfo, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()


class _Union:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            out.setdefault(self.find(i), []).append(i)
        return sorted(out.values())


def _gpu(i: int) -> str:
    return f"GPU{i}"


def _switch_groups(m: TopoMatrix) -> list[list[int]]:
    u = _Union(m.gpus)
    for a in range(m.gpus):
        for b in range(a + 1, m.gpus):
            if m.link(_gpu(a), _gpu(b)) in _SAME_SWITCH:
                u.join(a, b)
    for nic in m.nics:
        near = [g for g in range(m.gpus) if m.link(_gpu(g), nic) in _SAME_SWITCH]
        for g in near[1:]:
            u.join(near[0], g)
    return u.groups()


def _sockets_from_matrix(m: TopoMatrix) -> list[list[int]]:
    u = _Union(m.gpus)
    for a in range(m.gpus):
        for b in range(a + 1, m.gpus):
            same_aff = m.cpu_affinity[a] is not None and m.cpu_affinity[a] == m.cpu_affinity[b]
            if same_aff or m.link(_gpu(a), _gpu(b)) in _SAME_SOCKET:
                u.join(a, b)
    return u.groups()


def _nvlink(m: TopoMatrix) -> tuple[NvlinkGroup, ...]:
    pairs = {}
    for a in range(m.gpus):
        for b in range(a + 1, m.gpus):
            code = m.link(_gpu(a), _gpu(b))
            if code.startswith("NV"):
                pairs[(a, b)] = int(code[2:])
    if not pairs:
        return ()
    counts = set(pairs.values())
    if len(pairs) == m.gpus * (m.gpus - 1) // 2 and len(counts) == 1:
        return (NvlinkGroup(tuple(range(m.gpus)), counts.pop()),)
    return tuple(NvlinkGroup((a, b), n) for (a, b), n in sorted(pairs.items()))


def gpu_model_name(gpus: tuple[GpuInfo, ...]) -> str:
    """One model name usable as a Slurm feature: ``NVIDIA A100-SXM4-40GB`` -> ``A100-SXM4-40GB``."""
    names = {g.name for g in gpus}
    if len(names) > 1:
        raise ConfigError(f"this node mixes GPU models {sorted(names)}; describe one node type "
                          "per model (Slurm gres types are not generated)", key="name")
    return feature_name(names.pop())


def build_node_type(name: str, m: TopoMatrix, gpus: tuple[GpuInfo, ...] | None = None,
                    cpu: CpuInfo | None = None, memory_mb: int = UNKNOWN_MEMORY_MB
                    ) -> Discovery:
    """The node type the matrix (and optional GPU list and CPU map) describe. ``memory_mb``
    (RealMemory) is not in the matrix, nor are cores and threads without ``cpu``: those are
    written as placeholders validation refuses, with a warning asking to fill them in."""
    warnings: list[str] = [memory_warning(memory_mb)] if memory_mb < MIN_MEMORY_MB else []
    if gpus is not None and len(gpus) != m.gpus:
        raise ConfigError(f"the GPU list has {len(gpus)} GPUs but topo -m shows {m.gpus}",
                          key="GPU list", value=len(gpus))
    if not 1 <= m.gpus <= 16:
        raise ConfigError(f"{m.gpus} GPUs: discovery handles 1 to 16 per node", value=m.gpus)
    affinity = [parse_cpu_list(a) if a else None for a in m.cpu_affinity]
    socket_of: dict[int, int] = {}
    if cpu is not None:
        for g, cpus in enumerate(affinity):
            socket_of[g] = _socket_of_gpu(g, cpus, m.cpu_affinity[g], cpu)
        _check_sockets(m, socket_of, affinity, cpu)
        n_sockets, cps, threads = cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core
    else:
        warnings.append(NO_CPU_WARNING)
        clusters = _sockets_from_matrix(m)
        clusters.sort(key=lambda c: (min((min(a) for g in c if (a := affinity[g])),
                                         default=MAX_CPU_ID + 1), c[0]))
        for si, members in enumerate(clusters):
            for g in members:
                socket_of[g] = si
        n_sockets, cps, threads = len(clusters), UNKNOWN_CORES, UNKNOWN_CORES
    sockets: list[list[PcieSwitch]] = [[] for _ in range(n_sockets)]
    for group in _switch_groups(m):
        si = socket_of[group[0]]
        if any(socket_of[g] != si for g in group):
            raise ConfigError(f"GPUs {group} share a PCIe switch but not a socket",
                              key="topo -m", value=group)
        sockets[si].append(_switch(group, affinity, m, cpu, si, cps))
    notes = [SIBLINGS_NOTE] if cpu is not None and not cpu.exact and any(
        sw.cores is not None for s in sockets for sw in s) else []
    nt = NodeType(name=name, sockets=tuple(Socket(tuple(s)) for s in sockets),
                  cores_per_socket=cps, threads_per_core=threads, memory_mb=memory_mb,
                  gpu_model=gpu_model_name(gpus) if gpus else "", nvlink=_nvlink(m))
    return Discovery(nt, _nics(m, socket_of), tuple(warnings), tuple(notes))


def _socket_of_gpu(g: int, cpus: list[int] | None, text: str | None, cpu: CpuInfo) -> int:
    """The one socket holding every CPU of GPU ``g``'s ``CPU Affinity``, by the CPU map."""
    if cpus is None:
        raise ConfigError(f"GPU{g} has no CPU Affinity; cannot place it on a socket",
                          key="CPU Affinity", value=None)
    unknown = [c for c in cpus if c not in cpu.place]
    if unknown:
        raise ConfigError(
            f"GPU{g}'s CPU Affinity {text} names CPU {unknown[0]}, which the CPU map "
            f"({cpu.cpus} CPUs) does not have: is the lscpu output from this node?",
            key="CPU Affinity", value=text)
    where = sorted({cpu.socket_of(c) for c in cpus})
    if len(where) > 1:
        raise ConfigError(
            f"GPU{g}'s CPU Affinity {text} spans sockets {where}: cannot place it on one "
            "socket (NUMA off in the BIOS?); describe this node type by hand",
            key="CPU Affinity", value=text)
    return where[0]


def _check_sockets(m: TopoMatrix, socket_of: dict[int, int],
                   affinity: list[list[int] | None], cpu: CpuInfo) -> None:
    """Refuse a placement the matrix contradicts, rather than write a wrong gres.conf.

    NODE/PHB/PIX/PXB between two GPUs means one NUMA node, so one socket. SYS means the path
    crosses the SMP interconnect between NUMA nodes: another socket, or another NUMA node of the
    same socket (AMD NPS2/NPS4, Intel SNC; the DGX A100 sample shows SYS within a socket), so
    SYS on one socket is refused unless the two GPUs' NUMA nodes are known and differ.
    NV# says nothing about sockets (NVSwitch links every GPU pair, across sockets too)."""
    def numa(g: int) -> int | None:
        if m.numa_affinity[g] is not None:
            return m.numa_affinity[g]
        cpus = affinity[g]
        return cpu.numa_of(cpus[0]) if cpus else None

    for a in range(m.gpus):
        for b in range(a + 1, m.gpus):
            code, sa, sb = m.link(_gpu(a), _gpu(b)), socket_of[a], socket_of[b]
            pair = (f"GPU{a} and GPU{b} are linked by {code} in topo -m ({{}}) but their CPU "
                    f"Affinity ({m.cpu_affinity[a]}; {m.cpu_affinity[b]}) is on ")
            if code in _SAME_SOCKET and sa != sb:
                why = (pair.format("one NUMA node, so one socket")
                       + f"sockets {sa} and {sb} of the CPU map")
            elif code == "SYS" and sa == sb and cpu.sockets > 1:
                na, nb = numa(a), numa(b)
                if na is not None and nb is not None and na != nb:
                    continue  # two NUMA nodes of one socket
                why = (pair.format("across sockets or NUMA nodes") + f"socket {sa} of the CPU "
                       "map, " + (f"NUMA node {na}" if na is not None and na == nb
                                  else "and their NUMA nodes are unknown"))
            else:
                continue
            raise ConfigError(why + ": refusing to write a wrong gres.conf; check that the "
                              "lscpu output and topo -m come from the same node (or pass "
                              f"`{PARSEABLE_HINT}`)", key="topo -m", value=f"GPU{a},GPU{b}")


def memory_warning(memory_mb: int) -> str:
    """What to do about a ``memory_mb`` that validation will refuse."""
    known = ("the node's memory is unknown" if memory_mb == UNKNOWN_MEMORY_MB
             else f"memory_mb = {memory_mb} is below {MIN_MEMORY_MB} MiB")
    return (f"{known}: fill in the node's memory in MiB (memory_mb, Slurm RealMemory: `free -m` "
            "total minus about 5 %) or pass --memory-mb; the description is refused until then")


def _switch(group: list[int], affinity: list[list[int] | None], m: TopoMatrix,
            cpu: CpuInfo | None, socket: int, cps: int) -> PcieSwitch:
    cores: set[int] = set()
    for g in group:
        for c in affinity[g] or []:
            cores.add(cpu.core_of(c) if cpu else c)
    whole = set(range(socket * cps, (socket + 1) * cps))
    numa = {m.numa_affinity[g] for g in group} - {None}
    node = numa.pop() if len(numa) == 1 else None
    first = affinity[group[0]]
    if node is None and cpu is not None and first:
        node = cpu.numa_of(first[0])
    narrow = cpu is not None and cores and cores != whole
    return PcieSwitch(tuple(group), format_cores(cores) if narrow else None, node)


def _nics(m: TopoMatrix, socket_of: dict[int, int]) -> tuple[NicInfo, ...]:
    out = []
    for nic in m.nics:
        near = tuple(g for g in range(m.gpus) if m.link(_gpu(g), nic) in _SAME_SWITCH)
        local = [socket_of[g] for g in range(m.gpus) if m.link(_gpu(g), nic) in _SAME_SOCKET]
        out.append(NicInfo(nic, local[0] if local else None, near))
    return tuple(out)
