"""Read slurm.conf, gres.conf and topology.conf text back into a per-node view. Pure.

Used to check that generated files say what the description says (round-trip tests) and, on the
testbed, to compare with what ``scontrol show node`` / ``show topology`` report. It reads the
``Key=Value`` line format of these files (comments start at ``#``); it is not a full Slurm parser
(no ``Include``, no ``NodeName=DEFAULT``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hai_slurm.conf.hostlist import expand
from hai_slurm.errors import ConfigError


def parse_records(text: str, source: str = "<conf>") -> list[dict[str, str]]:
    """One dict per non-empty line; keys keep their spelling, a bare word maps to ``""``."""
    out = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        rec: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if not sep:
                raise ConfigError(f"expected Key=Value, got {token!r}", source=source,
                                  key=f"line {n}", value=raw)
            rec[key] = value
        out.append(rec)
    return out


@dataclass(frozen=True)
class GresGpu:
    """One gres.conf GPU line as it applies to one node."""

    file: str
    cores: str
    links: tuple[int, ...]


@dataclass(frozen=True)
class NodeView:
    """A node as slurm.conf and gres.conf describe it."""

    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int
    gpus: int
    features: str
    gres: tuple[GresGpu, ...]
    addr: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class SlurmView:
    """Nodes, switches (name -> (nodes, child switches)), partitions (name -> nodes) and the
    plain settings of slurm.conf."""

    nodes: dict[str, NodeView]
    switches: dict[str, tuple[frozenset[str], frozenset[str]]]
    partitions: dict[str, frozenset[str]]
    settings: dict[str, str]


def read_generated(slurm_conf: str, gres_conf: str, topology_conf: str | None = None
                   ) -> SlurmView:
    """Parse generated texts into a :class:`SlurmView`."""
    gres: dict[str, list[GresGpu]] = {}
    for rec in parse_records(gres_conf, "gres.conf"):
        if "NodeName" not in rec:
            continue
        gpu = GresGpu(rec["File"], rec.get("Cores", ""),
                      tuple(int(x) for x in rec["Links"].split(",")) if "Links" in rec else ())
        for node in expand(rec["NodeName"]):
            gres.setdefault(node, []).append(gpu)
    nodes: dict[str, NodeView] = {}
    partitions: dict[str, frozenset[str]] = {}
    settings: dict[str, str] = {}
    for rec in parse_records(slurm_conf, "slurm.conf"):
        if "NodeName" in rec:
            count = int(rec.get("Gres", "gpu:0").rsplit(":", 1)[1])
            for node in expand(rec["NodeName"]):
                nodes[node] = NodeView(
                    cpus=int(rec["CPUs"]), sockets=int(rec["Sockets"]),
                    cores_per_socket=int(rec["CoresPerSocket"]),
                    threads_per_core=int(rec["ThreadsPerCore"]),
                    memory_mb=int(rec["RealMemory"]), gpus=count,
                    features=rec.get("Features", ""), gres=tuple(gres.get(node, ())),
                    addr=rec.get("NodeAddr"),
                    port=int(rec["Port"]) if "Port" in rec else None)
        elif "PartitionName" in rec:
            names = rec["Nodes"]
            partitions[rec["PartitionName"]] = frozenset(
                nodes if names == "ALL" else expand(names))
        else:
            settings.update(rec)
    switches: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for rec in parse_records(topology_conf or "", "topology.conf"):
        switches[rec["SwitchName"]] = (
            frozenset(expand(rec["Nodes"])) if "Nodes" in rec else frozenset(),
            frozenset(expand(rec["Switches"])) if "Switches" in rec else frozenset())
    return SlurmView(nodes, switches, partitions, settings)
