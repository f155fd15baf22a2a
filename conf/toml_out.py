"""Write node types (what discovery finds) as description TOML. Pure.

Only the description's own small vocabulary is written (strings, integers, booleans, lists of
integers), so no TOML library is needed; :func:`tomllib.loads` reads the result back.
"""

from __future__ import annotations

import json

from hai_slurm.conf.discover import Discovery
from hai_slurm.conf.model import NodeType
from hai_slurm.conf.validate import MIN_MEMORY_MB

_MEMORY_TODO = "  # FILL IN: the node's memory in MiB (Slurm RealMemory)"
_CORES_TODO = "  # FILL IN: `lscpu` Core(s) per socket (Slurm CoresPerSocket)"
_THREADS_TODO = "  # FILL IN: `lscpu` Thread(s) per core (Slurm ThreadsPerCore)"


def _s(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def _ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def render_node_type(nt: NodeType) -> str:
    """``[node_types.<name>]`` with its sockets, PCIe switches and NVLink groups."""
    p = f"node_types.{nt.name}" if nt.name.replace("-", "").replace("_", "").isalnum() \
        else f"node_types.{_s(nt.name)}"
    lines = [f"[{p}]",
             f"gpu_model = {_s(nt.gpu_model)}",
             f"gpus = {nt.gpu_count}",
             f"cores_per_socket = {nt.cores_per_socket}"
             f"{_CORES_TODO if nt.cores_per_socket < 1 else ''}",
             f"threads_per_core = {nt.threads_per_core}"
             f"{_THREADS_TODO if nt.threads_per_core < 1 else ''}",
             f"memory_mb = {nt.memory_mb}{_MEMORY_TODO if nt.memory_mb < MIN_MEMORY_MB else ''}",
             f"device_pattern = {_s(nt.device_pattern)}"]
    if nt.nvlink:
        items = ", ".join(f"{{ gpus = {_ints(g.gpus)}, links = {g.links} }}" for g in nt.nvlink)
        lines.append(f"nvlink = [{items}]")
    for si, sock in enumerate(nt.sockets):
        lines += ["", f"[[{p}.socket]]  # socket {si}"]
        for sw in sock.pcie_switches:
            lines.append(f"[[{p}.socket.pcie_switch]]")
            lines.append(f"gpus = {_ints(sw.gpus)}")
            if sw.cores is not None:
                lines.append(f"cores = {_s(sw.cores)}")
            if sw.numa is not None:
                lines.append(f"numa = {sw.numa}")
    return "\n".join(lines) + "\n"


def render_discovery(d: Discovery, source_note: str) -> str:
    """The node type plus comments: where it came from, warnings, notes, NICs seen."""
    head = [f"# Discovered by `hai-slurm conf discover` from {source_note}.",
            "# Review, then paste into the cluster description and add [[nodes]] for it."]
    head += [f"# WARNING: {w}" for w in d.warnings]
    head += [f"# NOTE: {n}" for n in d.notes]
    for nic in d.nics:
        where = f"socket {nic.socket}" if nic.socket is not None else "no GPU's socket"
        near = f", same PCIe switch as GPUs {list(nic.near_gpus)}" if nic.near_gpus else ""
        head.append(f"# NIC {nic.name}: {where}{near}")
    return "\n".join(head) + "\n" + render_node_type(d.node_type)
