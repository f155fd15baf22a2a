"""The simulator's Slurm and the real testbed place the same small scenario the same way.

Jobs of 1, 2, 8, 1, 4 and 2 GPUs are submitted one at a time (each running before the next) to
the session testbed and, in the same order, to :class:`SimSlurm` built from the testbed's own
shape (nodes, sockets, PCIe switches, leaf switches). Both must pick the same node for every job
and the same number of GPUs. GPU indices inside a node differ today (strict xfail, see
below): Slurm's cons_tres and the planner's placement rule choose differently.
"""

from __future__ import annotations

import re

import pytest

from hai_slurm.conf.model import ClusterDescription, NodeGroup, NodeType, PcieSwitch, Socket, Switch
from hai_slurm.conf.topology import Topology
from hai_slurm.priority.sim.slurm import SimSlurm
from hai_slurm.testbed.waiting import check

SIZES = (1, 2, 8, 1, 4, 2)


def _topology(shape) -> Topology:
    per_socket = shape.pcie_switches_per_socket
    by_switch: dict[int, list[int]] = {}
    for p in shape.gpu_placements():
        by_switch.setdefault(p.switch, []).append(p.index)
    sockets = tuple(Socket(tuple(PcieSwitch(tuple(by_switch.get(s * per_socket + w, [])))
                                 for w in range(per_socket)))
                    for s in range(shape.sockets))
    nt = NodeType("bed", sockets, cores_per_socket=shape.cores_per_socket)
    leaves = [Switch(name, nodes=",".join(nodes)) for name, nodes in shape.leaf_switches()]
    desc = ClusterDescription("bed", (nt,), tuple(NodeGroup(n, "bed") for n in shape.node_names),
                              (*leaves, Switch("spine", switches=tuple(s.name for s in leaves))))
    return Topology.from_description(desc)


def _placement(run, job_id: str) -> tuple[str, tuple[int, ...]]:
    out = check(run, ["scontrol", "show", "job", "-d", job_id])
    m = re.search(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=gpu[^(]*\(IDX:([0-9,-]+)\)", out)
    assert m, out
    idx: list[int] = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        idx += range(int(lo), int(hi or lo) + 1)
    return m.group(1), tuple(idx)


def _scenario(testbed, submit):
    """(real placements, simulated placements): (node, GPU indices) per job, in order."""
    sim = SimSlurm(_topology(testbed.shape), now=0)
    real, simulated = [], []
    for size in SIZES:
        job = submit(wrap="sleep 300", args=["--nodes=1", "--ntasks=1", "--cpus-per-task=1",
                                             f"--gres=gpu:{size}"])
        submit.wait(job, "RUNNING", timeout=60)
        real.append(_placement(testbed.run, job))
        jid = sim.submit_gpus(gpus=size, nodes=1, name="x", user="u", account="a")
        assert sim.schedule() == (jid,)
        simulated.append((sim.jobs[jid].nodes[0], tuple(g.index for g in sim.gpus_of(jid))))
    return real, simulated


def test_sim_slurm_picks_the_same_nodes_as_the_testbed(testbed, submit):
    """Every job lands on the same node, with as many GPUs, on the real Slurm and in SimSlurm."""
    real, simulated = _scenario(testbed, submit)
    assert [(n, len(g)) for n, g in real] == [(n, len(g)) for n, g in simulated]


@pytest.mark.xfail(strict=True, reason=(
    "known difference, measured on Slurm 22.05: inside a node cons_tres spreads GPUs over the "
    "sockets (2 GPUs -> 4,5 next to a job on GPU 0; 4 GPUs -> 2,3,6,7), while SimSlurm uses the "
    "planner's placement (lowest, fullest cell: 2,3 then 4,5,6,7). Node choices agree."))
def test_sim_slurm_picks_the_same_gpu_indices_as_the_testbed(testbed, submit):
    """GPU indices inside the node agree too (they do not today: see the xfail reason)."""
    real, simulated = _scenario(testbed, submit)
    assert real == simulated
