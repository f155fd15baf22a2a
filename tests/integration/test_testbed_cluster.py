"""The session testbed has the shape it was asked for and runs multi-node GPU jobs."""

from __future__ import annotations

import re

from hai_slurm.conf.hostlist import compress
from hai_slurm.testbed.waiting import check, parse_oneliner, show_nodes, wait_for


def test_multi_node_job_sees_its_gpus_on_every_node(testbed, submit):
    """A job on all N nodes gets CUDA_VISIBLE_DEVICES with the GPUs it asked for on each node."""
    shape = testbed.shape
    job = submit("#!/bin/bash\nsrun bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'\n",
                 args=[f"--nodes={shape.nodes}", "--ntasks-per-node=1", "--gres=gpu:3"])
    submit.wait(job, "COMPLETED", timeout=60)
    lines = sorted(submit.output(job).split("\n"))
    per_node = dict(line.split(" ", 1) for line in lines if line)
    assert sorted(per_node) == sorted(shape.node_names)
    for node, gpus in per_node.items():
        assert len(gpus.split(",")) == 3, f"{node} saw CUDA_VISIBLE_DEVICES={gpus}"


def _cpu_ids(run, job_id: str) -> set[int]:
    out = check(run, ["scontrol", "show", "job", "-d", job_id])
    text = re.search(r"CPU_IDs=(\S+)", out)
    assert text, out
    ids: set[int] = set()
    for part in text.group(1).split(","):
        lo, _, hi = part.partition("-")
        ids.update(range(int(lo), int(hi or lo) + 1))
    return ids


def test_gpus_come_with_cores_of_their_socket(testbed, submit):
    """gres.conf Cores= is honoured: two 1-core jobs with half the GPUs each get one socket each."""
    shape = testbed.shape
    half = shape.gpus_per_node // 2
    socket_of_gpu = {p.index: p.socket for p in shape.gpu_placements()}
    seen = []
    for _ in range(2):
        job = submit(wrap="echo $CUDA_VISIBLE_DEVICES; sleep 300",
                     args=[f"--nodelist={shape.node_names[0]}", "--nodes=1", "--ntasks=1",
                           f"--gres=gpu:{half}", "--gres-flags=enforce-binding"])
        submit.wait(job, "RUNNING")
        wait_for(lambda j=job: submit.output(j).strip() or None, timeout=10,
                 describe=lambda: "job wrote no CUDA_VISIBLE_DEVICES")
        gpus = {int(g) for g in submit.output(job).strip().split(",")}
        cpus = _cpu_ids(testbed.run, job)
        sockets = {socket_of_gpu[g] for g in gpus} | {c // shape.cores_per_socket for c in cpus}
        assert len(gpus) == half
        assert len(sockets) == 1, f"job {job}: GPUs {sorted(gpus)} with cores {sorted(cpus)}"
        seen.append(sockets)
    assert seen[0] != seen[1], "the second job should have been placed on the other socket"


def test_scontrol_show_topology_matches_shape(testbed):
    """Every leaf switch holds the nodes the shape puts there, under one spine."""
    out = check(testbed.run, ["scontrol", "show", "topology"])
    switches = {f["SwitchName"]: f for f in map(parse_oneliner, out.splitlines()) if f}
    leaves = testbed.shape.leaf_switches()
    assert len(leaves) >= 2
    for leaf, nodes in leaves:
        assert switches[leaf]["Nodes"] == compress(nodes)
        assert switches[leaf]["Level"] == "0"
    assert switches["spine"]["Level"] == "1"
    assert switches["spine"]["Switches"] == compress([leaf for leaf, _ in leaves])


def test_scontrol_show_node_matches_shape(testbed):
    """Each node has the sockets, cores, memory and GPUs of the shape, and nothing more."""
    shape = testbed.shape
    nodes = {n["NodeName"]: n for n in show_nodes(testbed.run)}
    assert sorted(nodes) == sorted(shape.node_names)
    for node in nodes.values():
        assert int(node["CPUTot"]) == shape.cpus_per_node
        assert int(node["Sockets"]) == shape.sockets
        assert int(node["CoresPerSocket"]) == shape.cores_per_socket
        assert int(node["RealMemory"]) == shape.memory_mb
        assert node["Gres"].startswith(f"gpu:{shape.gpus_per_node}")
