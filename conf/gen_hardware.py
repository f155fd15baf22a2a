"""gres.conf and topology.conf from a description (pure: description -> text).

gres.conf: ``AutoDetect=off`` and one line per GPU, because Slurm accepts ``Links=`` only on a
line with a single device file. ``Cores=`` is the PCIe switch's ``cores`` when known (discovered
NUMA affinity), else every core of the GPU's socket; for releases that accept only whole sockets
(``SlurmVersion.gres_cores_whole_sockets``, 23.02 on) it is always the whole socket. ``Links=``
scores come from :func:`hai_slurm.conf.model.link_score` (-1 self, 0 other socket, 1 same socket,
2 same PCIe switch, 2+n for n bonded NVLinks). topology.conf: one ``SwitchName`` line per switch,
leaves first.
"""

from __future__ import annotations

from hai_slurm.conf.hostlist import compress, expand
from hai_slurm.conf.model import ClusterDescription, NodeType, link_score
from hai_slurm.conf.validate import format_cores


def gpu_cores(nt: NodeType, gpu: int, *, whole_sockets: bool = False) -> str:
    """Slurm core ids (``Cores=``) close to ``gpu``: its PCIe switch's cores if known and the
    release takes sub-socket ranges, else its socket's."""
    si, wi = nt.switch_of(gpu)
    sw = nt.sockets[si].pcie_switches[wi]
    if sw.cores is not None and not whole_sockets:
        return sw.cores
    first = si * nt.cores_per_socket
    return format_cores(list(range(first, first + nt.cores_per_socket)))


def gres_lines(nt: NodeType, nodes: str, *, whole_sockets: bool = False) -> list[str]:
    """gres.conf lines of the nodes ``nodes`` (hostlist) of type ``nt``."""
    out = []
    count = nt.gpu_count
    node_names = expand(nodes)
    per_node = "{node}" in nt.device_pattern
    targets = [(n, [n]) for n in node_names] if per_node else [(None, node_names)]
    for node, names in targets:
        for g in range(count):
            links = ",".join(str(link_score(nt, g, o)) for o in range(count))
            device = nt.device_pattern.format(index=g, node=node or "")
            out.append(f"NodeName={compress(names)} Name=gpu File={device} "
                       f"Cores={gpu_cores(nt, g, whole_sockets=whole_sockets)} Links={links}")
    return out


def render_gres_conf(desc: ClusterDescription, header: str, *,
                     whole_sockets: bool = False) -> str:
    """The whole gres.conf (``whole_sockets``: ``Cores=`` never narrower than a socket)."""
    lines = [header, "# One line per GPU: Slurm takes Links= only on single-device lines.",
             "# Links: -1 self, 0 other socket, 1 same socket, 2 same PCIe switch, "
             "2+n n NVLinks."]
    narrow = any(sw.cores is not None for nt in desc.node_types for s in nt.sockets
                 for sw in s.pcie_switches)
    if whole_sockets and narrow:
        lines.append("# Cores= are whole sockets: this Slurm release drains a node whose GPU "
                     "cores stop inside a socket.")
    lines.append("AutoDetect=off")
    for nt in desc.node_types:
        groups = [g.nodes for g in desc.node_groups if g.type == nt.name]
        if not groups or nt.gpu_count == 0:
            continue
        names = [n for g in groups for n in expand(g)]
        lines.append(f"# node type {nt.name}: {nt.gpu_count}x {nt.gpu_model or 'GPU'}")
        lines.extend(gres_lines(nt, compress(names), whole_sockets=whole_sockets))
    return "\n".join(lines) + "\n"


def render_topology_conf(desc: ClusterDescription, header: str) -> str | None:
    """The topology.conf (tree), or None when the description has no switches."""
    if not desc.switches:
        return None
    lines = [header, "# Leaf switches list nodes; upper switches list switches (topology/tree)."]
    for sw in desc.switches:
        if sw.nodes is not None:
            lines.append(f"SwitchName={sw.name} Nodes={compress(expand(sw.nodes))}")
    for sw in desc.switches:
        if sw.switches:
            lines.append(f"SwitchName={sw.name} Switches={compress(sw.switches)}")
    return "\n".join(lines) + "\n"
