"""A job's size in CPUs and memory from what ``squeue --json`` reports. Pure, no I/O.

The TRES strings (``tres_alloc_str``, ``tres_req_str``, e.g.
``cpu=4,mem=16G,node=1,billing=4,gres/gpu=2``) have the same shape from 22.05 to 26.05 and count
the whole job, so they come first. A job that runs is measured by what Slurm allocated: when that
string has no ``mem`` item, the cluster does not treat memory as a consumable resource
(``SelectTypeParameters=CR_Core``) and the job holds none, even though its request names a whole
node's memory. A pending job is measured by its request. The memory fields (``memory_per_node``,
``memory_per_cpu``: MiB, plain in openapi v0.0.38, wrapped later) are the fallback when no TRES
string has the value. Sizes such as ``62.50G`` are read by :func:`~hai_slurm.slurm_formats.size_mib`
(whole MiB, rounded up).
"""

from __future__ import annotations

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import size_mib

_MEM_PER_CPU = 1 << 63
"""Slurm's MEM_PER_CPU flag bit, in case a release leaves it in a memory field."""


def tres_items(spec: str) -> dict[str, str]:
    """The ``key=value`` items of a TRES string (empty for ``""``, ``(null)``, ``N/A``)."""
    out: dict[str, str] = {}
    for item in spec.split(","):
        key, sep, value = item.strip().partition("=")
        if sep and key:
            out[key] = value.strip()
    return out


def _mem(value: str, where: str) -> int:
    """A TRES ``mem`` value in MiB (:func:`~hai_slurm.slurm_formats.size_mib`), or SlurmError."""
    try:
        return size_mib(value)
    except ValueError as err:
        raise SlurmError(f"{where}: {err}") from None


def _count(value: str, where: str) -> int:
    if not value.isdigit():
        raise SlurmError(f"{where}: expected a whole number of CPUs, got {value!r}")
    return int(value)


def _mib(value: int | None) -> int:
    """A memory field in MiB: unset, infinite (negative) and 0 ("the whole node") give 0."""
    if value is None or value <= 0:
        return 0
    return value & ~_MEM_PER_CPU if value >= _MEM_PER_CPU else value


def job_size(*, running: bool, alloc: str, req: str, cpus: int | None,
             memory_per_node: int | None, memory_per_cpu: int | None, node_count: int,
             where: str) -> tuple[int, int]:
    """``(cpus, memory MiB)`` of the whole job (see the module doc for which source wins).

    ``alloc`` and ``req`` are the TRES strings, the other values the parsed ``cpus``,
    ``memory_per_node`` and ``memory_per_cpu`` fields (None when absent). An item that is there
    but unreadable raises :class:`~hai_slurm.errors.SlurmError` naming the job and the string.
    """
    allocated = tres_items(alloc) if running else {}
    requested = tres_items(req)
    if allocated:
        cpu_text = allocated.get("cpu") or requested.get("cpu")
        mem_text: str | None = allocated.get("mem", "0")
        mem_where = f"{where}: tres_alloc_str mem"
    else:
        cpu_text, mem_text = requested.get("cpu"), requested.get("mem")
        mem_where = f"{where}: tres_req_str mem"
    n_cpus = (_count(cpu_text, f"{where}: tres cpu") if cpu_text
              else max(cpus or 0, 0))
    if mem_text is not None:
        return n_cpus, _mem(mem_text, mem_where)
    per_node, per_cpu = _mib(memory_per_node), _mib(memory_per_cpu)
    if per_node:
        return n_cpus, per_node * max(node_count, 1)
    return n_cpus, per_cpu * n_cpus
