"""The simulated cluster: a cluster description, from a TOML file or the Alibaba node list.

Both end in :meth:`hai_slurm.conf.topology.Topology.from_description`, the tree the daemon's
planner uses. The Alibaba node list (``openb_node_list_gpu_node.csv``) has no network or PCIe
layout, so :func:`alibaba_description` assumes one (and says so): nodes with up to 2 GPUs have one
socket and one PCIe switch; bigger nodes two sockets, each with PCIe switches of 2 GPUs; leaf
switches of ``nodes_per_leaf`` consecutive nodes in file order under one spine.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from hai_slurm.conf.description import decode_utf8, load_description
from hai_slurm.conf.model import ClusterDescription, NodeGroup, NodeType, PcieSwitch, Socket, Switch
from hai_slurm.conf.topology import Topology
from hai_slurm.errors import ConfigError

MAX_NODE_GPUS = 64
"""The most GPUs a node of an Alibaba node list may have (the v2023 list has at most 8)."""


def node_type(gpus: int, cpus: int, memory_mb: int, model: str) -> NodeType:
    """The assumed layout of a node with ``gpus`` GPUs (see the module docstring)."""
    if gpus <= 2:
        sockets: tuple[Socket, ...] = (Socket((PcieSwitch(tuple(range(gpus))),)),)
    else:
        half = (gpus + 1) // 2
        sockets = tuple(Socket(tuple(PcieSwitch(tuple(range(s + i, min(s + i + 2, e))))
                                     for i in range(0, e - s, 2)))
                        for s, e in ((0, half), (half, gpus)))
    per_socket = max(1, cpus // len(sockets))
    return NodeType(name=f"{model or 'gpu'}-{gpus}g", sockets=sockets,
                    cores_per_socket=per_socket, memory_mb=max(1, memory_mb), gpu_model=model)


def alibaba_description(path: str | Path, *, nodes_per_leaf: int = 32,
                        every: int = 1) -> ClusterDescription:
    """The cluster of an Alibaba v2023 node list (columns sn, cpu_milli, memory_mib, gpu, model).

    ``every`` > 1 keeps one GPU node in ``every`` (the 1st, the ``every+1``-th, ... in file
    order): a smaller cluster with the same mix of node types, to put the trace under load.
    """
    if every < 1:
        raise ConfigError("keep one node in N needs N >= 1", key="--keep-one-node-in", value=every)
    if nodes_per_leaf < 1:
        raise ConfigError("nodes per leaf switch must be >= 1", key="--nodes-per-leaf",
                          value=nodes_per_leaf)
    p = Path(path)
    types: dict[str, NodeType] = {}
    groups: list[NodeGroup] = []
    seen = 0
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the node list: {err.strerror}", source=str(p)) from None
    reader = csv.DictReader(io.StringIO(decode_utf8(raw, str(p), kind="CSV files"),
                                        newline=""))
    need = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
    try:
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"line 1: header lacks column(s) {', '.join(missing)}",
                              source=str(p))
        for row in reader:
            if None in row.values() or None in row:
                extra = row.pop(None, None) or []
                count = sum(v is not None for v in row.values()) + len(extra)
                raise ConfigError(f"line {reader.line_num}: has {count} fields, the header "
                                  f"{len(row)}", source=str(p), value=row)
            try:
                gpus, cpus = int(row["gpu"]), int(row["cpu_milli"]) // 1000
                memory = int(row["memory_mib"])
            except ValueError:
                raise ConfigError(f"line {reader.line_num}: gpu, cpu_milli and memory_mib "
                                  "must be whole numbers", source=str(p),
                                  value=row) from None
            if gpus < 1:
                continue
            if gpus > MAX_NODE_GPUS:
                raise ConfigError(f"line {reader.line_num}: gpu {gpus} is more GPUs than a node "
                                  f"holds (at most {MAX_NODE_GPUS})", source=str(p),
                                  key="gpu", value=gpus)
            seen += 1
            if (seen - 1) % every:
                continue
            nt = node_type(gpus, cpus, memory, row["model"])
            types.setdefault(nt.name, nt)
            groups.append(NodeGroup(row["sn"], nt.name))
    except csv.Error as err:
        raise ConfigError(f"line {reader.line_num}: not CSV ({err})", source=str(p)) from None
    if not groups:
        raise ConfigError("the node list has no GPU node", source=str(p))
    leaves = [Switch(f"leaf{i // nodes_per_leaf + 1}",
                     nodes=",".join(g.nodes for g in groups[i:i + nodes_per_leaf]))
              for i in range(0, len(groups), nodes_per_leaf)]
    spine = Switch("spine", switches=tuple(s.name for s in leaves))
    return ClusterDescription(p.stem, tuple(types.values()), tuple(groups), (*leaves, spine),
                              source=str(p))


def load_topology(path: str | Path, *, nodes_per_leaf: int = 32, every: int = 1) -> Topology:
    """A ``.csv`` Alibaba node list or a cluster description TOML, as a topology tree."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return Topology.from_description(alibaba_description(
            p, nodes_per_leaf=nodes_per_leaf, every=every))
    if every != 1:
        raise ConfigError("keeping one node in N works on an Alibaba node list (.csv) only",
                          source=str(p), key="--keep-one-node-in", value=every)
    return Topology.from_description(load_description(p))
