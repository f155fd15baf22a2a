"""Builders of planner inputs, for tests, the benchmark and the simulator.

:func:`gpu_cluster` makes a tree of identical 8-GPU nodes (2 sockets x 2 PCIe switches x 2 GPUs)
under leaf switches and one spine; :func:`holder` and :func:`waiting` fill every field with a
plausible default; :func:`synthetic_snapshot` fills a large cluster reproducibly.
"""

from __future__ import annotations

import random
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.model import ClusterDescription, NodeGroup, NodeType, PcieSwitch, Socket, Switch
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.priority.planner.types import Holder, PlanSnapshot, Waiting

#: A fixed "now" for tests (the same instant as :data:`hai_slurm.priority.policy.testing.NOW`).
NOW = 1_800_000_000.0

_NODE8 = NodeType(
    name="gpu8", cores_per_socket=16, memory_mb=256_000,
    sockets=(Socket((PcieSwitch((0, 1)), PcieSwitch((2, 3)))),
             Socket((PcieSwitch((4, 5)), PcieSwitch((6, 7))))))


def gpu_cluster(leaves: int, nodes_per_leaf: int) -> Topology:
    """``leaves`` leaf switches of ``nodes_per_leaf`` 8-GPU nodes each (n1, n2, ...), one spine."""
    width = len(str(leaves * nodes_per_leaf))
    groups, switches = [], []
    for leaf in range(leaves):
        first, last = leaf * nodes_per_leaf + 1, (leaf + 1) * nodes_per_leaf
        names = f"n[{first:0{width}d}-{last:0{width}d}]" if last > first else f"n{first:0{width}d}"
        groups.append(NodeGroup(names, "gpu8"))
        switches.append(Switch(f"leaf{leaf + 1}", nodes=names))
    switches.append(Switch("spine", switches=tuple(s.name for s in switches)))
    desc = ClusterDescription("plan-test", (_NODE8,), tuple(groups), tuple(switches))
    return Topology.from_description(desc)


def gpus(node: str, *indices: int) -> tuple[GpuRef, ...]:
    """GPU references on one node."""
    return tuple(GpuRef(node, i) for i in indices)


def holder(job_id: int, cls: PriorityClass, refs: tuple[GpuRef, ...], *, team: str = "t1",
           start: float = NOW - 7200, checkpoint: float | None = None,
           **fields: Any) -> Holder:
    """A running job (2 h old, checkpointed 10 min ago unless told); ``fields`` sets the rest."""
    return Holder(job_id=job_id, team=team, effective=cls, gpus=refs, start_time=start,
                  last_checkpoint=NOW - 600 if checkpoint is None else checkpoint, **fields)


def waiting(job_id: int, cls: PriorityClass, count: int, *, nodes: int | None = None,
            wait: float = 3600.0, team: str = "t9", **fields: Any) -> Waiting:
    """A pending job that has waited an hour unless told; ``fields`` sets the rest."""
    return Waiting(job_id=job_id, team=team, effective=cls, gpus=count, nodes=nodes, wait=wait,
                   **fields)


def snapshot(topology: Topology, running: list[Holder], pending: list[Waiting],
             taken_at: float = NOW) -> PlanSnapshot:
    """A snapshot taken at ``taken_at``."""
    return PlanSnapshot(topology, tuple(running), tuple(pending), taken_at)


def synthetic_snapshot(seed: int = 1, *, leaves: int = 25, nodes_per_leaf: int = 20,
                       running: int = 2_000, pending: int = 10_000,
                       teams: int = 50) -> PlanSnapshot:
    """A full cluster (500 x 8 GPUs by default) with jobs of every class, reproducibly.

    Running jobs of 1, 2 or 4 GPUs (a few whole nodes, and 16-GPU 2-node jobs) are packed node
    by node until ``running`` jobs exist or the GPUs run out; pending jobs ask for 1 to 32 GPUs.
    """
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    topo = gpu_cluster(leaves, nodes_per_leaf)
    names = [f"team{i:02d}" for i in range(teams)]
    classes = list(PriorityClass)
    weights = [1, 2, 6, 10, 30, 15, 20, 16]  # EXTREME_HIGH .. LOW
    nodes = [c.id for c in topo.cells_at(Level.NODE)]
    held: list[Holder] = []
    cursor = 0  # next free GPU, counted over nodes in order
    total = len(nodes) * 8
    while len(held) < running and cursor < total:
        aligned, roll = cursor % 8 == 0, rng.random()
        size = 16 if aligned and roll < 0.01 else 8 if aligned and roll < 0.04 else min(
            rng.choice((1, 1, 2, 2, 2, 4)), 8 - cursor % 8)
        if cursor + size > total:
            break
        refs = tuple(GpuRef(nodes[(cursor + k) // 8], (cursor + k) % 8) for k in range(size))
        cursor += size
        start = NOW - rng.uniform(60, 3 * 86400)
        held.append(Holder(
            job_id=1 + len(held), team=rng.choice(names), effective=rng.choices(classes,
                                                                                weights)[0],
            gpus=refs, start_time=start,
            last_checkpoint=start + rng.uniform(0, NOW - start) if rng.random() < 0.8 else None,
            borrowed=rng.random() < 0.15, protected=rng.random() < 0.05,
            preemptible=rng.random() < 0.95))
    waits = [Waiting(
        job_id=100_000 + j, team=rng.choice(names), effective=rng.choices(classes, weights)[0],
        gpus=rng.choice((1, 1, 2, 4, 8, 16, 32)), wait=rng.uniform(0, 2 * 86400))
        for j in range(pending)]
    waits.sort(key=lambda w: (-w.effective.weight, w.job_id))
    return PlanSnapshot(topo, tuple(held), tuple(waits), NOW)
