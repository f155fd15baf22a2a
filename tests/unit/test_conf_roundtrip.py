"""generate -> parse -> same cluster: random descriptions rendered to Slurm's formats and read back.

The expected GPU links are derived from the topology model (``Topology.distance``), not from the
generator's own scoring function, so generator and model must agree.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.deployment import (
    Deployment,
    NodeEndpoint,
    PreemptionMode,
)
from hai_slurm.conf.generate import render_all
from hai_slurm.conf.hostlist import compress, expand
from hai_slurm.conf.model import (
    ClassPolicy,
    ClusterDescription,
    NodeGroup,
    NodeType,
    NvlinkGroup,
    Partition,
    PcieSwitch,
    Socket,
    Switch,
)
from hai_slurm.conf.parse_slurm import read_generated
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.conf.validate import validate
from hai_slurm.slurm_formats import SlurmVersion

_LINK_OF_LEVEL = {Level.GPU: -1, Level.PCIE_SWITCH: 2, Level.SOCKET: 1, Level.NODE: 0}


@st.composite
def _node_type(draw: st.DrawFn, name: str) -> NodeType:
    n = draw(st.integers(0, 8))
    n_sockets = draw(st.integers(1, 2))
    cps = draw(st.integers(1, 8))
    order = list(range(n))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=max(0, n - 1),
                                unique=True))) if n > 1 else []
    chunks = [order[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)] if n else []
    sockets: list[list[PcieSwitch]] = [[] for _ in range(n_sockets)]
    for chunk in chunks:
        si = draw(st.integers(0, n_sockets - 1))
        narrow = draw(st.booleans())
        cores = f"{si * cps}-{si * cps + cps // 2}" if narrow else None
        sockets[si].append(PcieSwitch(tuple(chunk), cores, None))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=4)) if pairs else []
    return NodeType(
        name=name, sockets=tuple(Socket(tuple(s)) for s in sockets), cores_per_socket=cps,
        threads_per_core=draw(st.integers(1, 2)), memory_mb=draw(st.integers(1024, 10**6)),
        gpu_model=draw(st.sampled_from(["", "A100", "H100-SXM5-80GB"])),
        device_pattern=draw(st.sampled_from(["/dev/nvidia{index}", "/d/{node}/nvidia{index}"])),
        nvlink=tuple(NvlinkGroup(p, draw(st.integers(1, 12))) for p in chosen))


@st.composite
def _cluster(draw: st.DrawFn) -> tuple[ClusterDescription, Deployment]:
    types = [draw(_node_type(f"t{i}")) for i in range(draw(st.integers(1, 3)))]
    groups: list[NodeGroup] = []
    all_nodes: list[str] = []
    for i, nt in enumerate(types):
        width = draw(st.integers(1, 3))
        start = draw(st.integers(0, 20))
        names = [f"{'abc'[i]}{str(v).zfill(width)}" for v in
                 range(start, start + draw(st.integers(1, 5)))]
        groups.append(NodeGroup(compress(names), nt.name))
        all_nodes += names
    switches: list[Switch] = []
    if draw(st.booleans()):
        n_leaves = draw(st.integers(1, min(3, len(all_nodes))))
        leaves: list[list[str]] = [[] for _ in range(n_leaves)]
        for k, node in enumerate(all_nodes):
            leaves[k % n_leaves if k < n_leaves else draw(st.integers(0, n_leaves - 1))].append(
                node)
        switches = [Switch(f"leaf{k}", compress(ns)) for k, ns in enumerate(leaves)]
        if n_leaves > 1 or draw(st.booleans()):  # one tree: several leaves need a spine
            switches.append(Switch("spine", None, tuple(s.name for s in switches)))
    part_nodes = draw(st.lists(st.sampled_from(all_nodes), min_size=1, unique=True))
    partitions = (Partition("all", "ALL", True), Partition("some", compress(part_nodes)))
    classes = tuple(ClassPolicy(c, c.qos, draw(st.integers(0, 600)),
                                tuple(v for v in PriorityClass if v.weight < c.weight))
                    for c in PriorityClass)
    desc = ClusterDescription("rt", tuple(types), tuple(groups), tuple(switches), partitions,
                              classes)
    validate(desc)
    mode = draw(st.sampled_from(list(PreemptionMode)))
    ports = {n: NodeEndpoint("127.0.0.1", 17000 + k, "h")
             for k, n in enumerate(all_nodes) if draw(st.booleans())}
    dep = Deployment(slurm_version=draw(st.sampled_from(
        [SlurmVersion(22, 5), SlurmVersion(23, 2), SlurmVersion(24, 11)])),
        preemption=mode, accounting=True, endpoints=ports)
    return desc, dep


def _expected_cores(nt: NodeType, gpu: int, whole_sockets: bool) -> list[int]:
    si, wi = nt.switch_of(gpu)
    text = nt.sockets[si].pcie_switches[wi].cores
    if text is None or whole_sockets:   # 23.02+ drains nodes with sub-socket Cores=
        return list(range(si * nt.cores_per_socket, (si + 1) * nt.cores_per_socket))
    lo, hi = text.split("-")
    return list(range(int(lo), int(hi) + 1))


def _cores(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


@settings(max_examples=120, deadline=None)
@given(_cluster())
def test_generate_then_parse_gives_the_description(case: tuple[ClusterDescription, Deployment]
                                                    ) -> None:
    """Nodes, GPUs (files, cores, links), switches, partitions, endpoints and QOS read back."""
    desc, dep = case
    files = render_all(desc, dep)
    view = read_generated(files["slurm.conf"], files["gres.conf"], files.get("topology.conf"))
    topo = Topology.from_description(desc)
    nodes = dict(desc.nodes())
    assert set(view.nodes) == set(nodes)
    for name, nt in nodes.items():
        got = view.nodes[name]
        assert (got.cpus, got.sockets, got.cores_per_socket, got.threads_per_core,
                got.memory_mb, got.gpus, got.features) == (
            nt.cpus, len(nt.sockets), nt.cores_per_socket, nt.threads_per_core, nt.memory_mb,
            nt.gpu_count, nt.gpu_model)
        assert len(got.gres) == nt.gpu_count
        for g, line in enumerate(got.gres):
            assert line.file == nt.device_pattern.format(index=g, node=name)
            assert _cores(line.cores) == _expected_cores(
                nt, g, dep.slurm_version.gres_cores_whole_sockets)
            expected = [2 + nt.nvlinks(g, o) if nt.nvlinks(g, o) else
                        _LINK_OF_LEVEL[topo.distance(GpuRef(name, g), GpuRef(name, o))]
                        for o in range(nt.gpu_count)]
            assert list(line.links) == expected
        ep = dep.endpoint(name)
        assert (got.addr, got.port) == (ep.addr, ep.port)
    assert {k: (set(v[0]), set(v[1])) for k, v in view.switches.items()} == {
        s.name: (set(expand(s.nodes)) if s.nodes else set(), set(s.switches))
        for s in desc.switches}
    assert view.partitions == {p.name: frozenset(nodes if p.nodes == "ALL" else expand(p.nodes))
                               for p in desc.partitions}
    native = dep.preemption is PreemptionMode.NATIVE
    assert view.settings["PreemptType"] == ("preempt/qos" if native else "preempt/none")
    assert ("PreemptParameters" in view.settings) == (
        native and dep.slurm_version >= SlurmVersion(23, 2))
    assert ("preempt_send_user_signal" in view.settings["SchedulerParameters"]) == (
        native and dep.slurm_version < SlurmVersion(23, 2))
    assert _qos_from_script(files["sacctmgr-setup.sh"]) == {
        cp.qos: (cp.cls.weight, {desc.class_policy(v).qos for v in cp.preempts} if native
                 else set(), cp.grace_time_s if native else 0) for cp in desc.classes}


def _qos_from_script(script: str) -> dict[str, tuple[int, set[str], int]]:
    """QOS -> (Priority, Preempt list, GraceTime) as the script would set them."""
    settings: dict[str, dict[str, str]] = {}
    preempt: dict[str, set[str]] = {}
    for line in script.splitlines():
        m = re.match(r"sm modify qos where name=(\S+) set (.*)$", line)
        if m and "Preempt=" not in m.group(2):
            settings[m.group(1)] = dict(i.split("=", 1) for i in shlex.split(m.group(2)))
        m = re.match(r"  \[(\S+)\]=(\S*)$", line)
        if m:
            preempt[m.group(1)] = set(filter(None, shlex.split(m.group(2) or "''")[0].split(",")))
    return {q: (int(kv["Priority"]), preempt.get(q, set()), int(kv["GraceTime"]))
            for q, kv in settings.items()}


def test_replacing_one_field_changes_output() -> None:
    """The round trip is sensitive: a changed memory size shows up in the parsed view."""
    nt = NodeType("t", (Socket((PcieSwitch((0,)),)),), 2, memory_mb=100)
    desc = ClusterDescription("c", (nt,), (NodeGroup("n[1-2]", "t"),),
                              classes=tuple(ClassPolicy(c, c.qos) for c in PriorityClass))
    dep = Deployment()
    before = read_generated(*[render_all(desc, dep)[f] for f in ("slurm.conf", "gres.conf")])
    desc2 = dataclasses.replace(desc, node_types=(dataclasses.replace(nt, memory_mb=200),))
    after = read_generated(*[render_all(desc2, dep)[f] for f in ("slurm.conf", "gres.conf")])
    assert before.nodes["n1"].memory_mb == 100 and after.nodes["n1"].memory_mb == 200
