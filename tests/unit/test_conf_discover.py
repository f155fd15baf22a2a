"""Discovery from real `nvidia-smi topo -m` samples (tests/data/topo), synthetic matrices of 1 to 16
GPUs, malformed inputs and the subprocess adapter.

Expected values below were read off each matrix by hand (see tests/data/topo/SOURCES.md).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.conf.description import parse_description
from hai_slurm.conf.discover import SIBLINGS_NOTE, Discovery, build_node_type
from hai_slurm.conf.discover_parse import (
    GpuInfo,
    parse_gpu_list,
    parse_lscpu,
    parse_topo_matrix,
)
from hai_slurm.conf.discover_run import discover, file_sources, run_command
from hai_slurm.conf.model import NodeType, NvlinkGroup, PcieSwitch, Socket, link_score
from hai_slurm.conf.toml_out import render_discovery, render_node_type
from hai_slurm.conf.validate import format_cores
from hai_slurm.errors import ConfigError

TOPO = Path(__file__).parents[1] / "data" / "topo"


def _discover(name: str, lscpu: bool = False) -> Discovery:
    return discover("t", file_sources(str(TOPO / name),
                                      lscpu=str(TOPO / "dgx-a100.lscpu.txt") if lscpu else None),
                    1_000_000)


def _groups(nt: NodeType) -> list[list[tuple[int, ...]]]:
    return [[sw.gpus for sw in s.pcie_switches] for s in nt.sockets]


def _links(nt: NodeType, gpu: int) -> list[int]:
    return [link_score(nt, gpu, o) for o in range(nt.gpu_count)]


def test_dgx_a100_with_lscpu() -> None:
    """NVSwitch box, NPS4: pairs share a PCIe switch (via their NICs), narrow cores and NUMA."""
    d = _discover("dgx-a100.txt", lscpu=True)
    nt = d.node_type
    assert (len(nt.sockets), nt.cores_per_socket, nt.threads_per_core) == (2, 64, 2)
    assert _groups(nt) == [[(0, 1), (2, 3)], [(4, 5), (6, 7)]]
    switches = [sw for s in nt.sockets for sw in s.pcie_switches]
    assert [sw.cores for sw in switches] == ["48-63", "16-31", "112-127", "80-95"]
    assert [sw.numa for sw in switches] == [3, 1, 7, 5]
    assert nt.nvlink == (NvlinkGroup((0, 1, 2, 3, 4, 5, 6, 7), 12),)
    assert _links(nt, 0) == [-1, 14, 14, 14, 14, 14, 14, 14]
    assert [(n.name, n.socket, n.near_gpus) for n in d.nics][:3] == [
        ("mlx5_0", 0, (0, 1)), ("mlx5_1", 0, (0, 1)), ("mlx5_2", 0, (2, 3))]
    assert [(n.name, n.socket, n.near_gpus) for n in d.nics][8:] == [
        ("mlx5_8", None, ()), ("mlx5_9", None, ())]
    assert d.warnings == ()
    assert d.notes == (SIBLINGS_NOTE,)  # the lscpu summary does not name SMT siblings


def test_dgx_a100_without_lscpu_guesses_sockets_from_affinity() -> None:
    """Without lscpu, each distinct CPU affinity (a NUMA node here) counts as a socket, and cores
    and threads are 0 placeholders; warned."""
    d = _discover("dgx-a100.txt")
    assert _groups(d.node_type) == [[(2, 3)], [(0, 1)], [(6, 7)], [(4, 5)]]
    assert (d.node_type.cores_per_socket, d.node_type.threads_per_core) == (0, 0)
    assert any("--lscpu" in w for w in d.warnings)


def test_dgx1_hybrid_cube_mesh() -> None:
    """Mixed NV1/NV2; only GPU2/GPU3 are provably on one PCIe switch (PIX to mlx5_0)."""
    d = _discover("dgx1-class-v100-sxm2.txt")
    nt = d.node_type
    assert _groups(nt) == [[(0,), (1,), (2, 3)], [(4,), (5,), (6,), (7,)]]
    assert (nt.cores_per_socket, nt.threads_per_core) == (0, 0)  # no lscpu: to fill in
    assert len(nt.nvlink) == 16  # one group per linked pair
    assert nt.nvlinks(0, 3) == 2 and nt.nvlinks(0, 1) == 1 and nt.nvlinks(0, 5) == 0
    assert _links(nt, 0) == [-1, 3, 3, 4, 4, 0, 0, 0]
    assert _links(nt, 2) == [3, 4, -1, 4, 0, 0, 3, 0]
    assert _links(nt, 7) == [0, 0, 0, 3, 4, 3, 4, -1]
    assert [(n.name, n.socket, n.near_gpus) for n in d.nics] == [("mlx5_0", 0, (2, 3))]
    assert [sw.numa for s in nt.sockets for sw in s.pcie_switches] == [None] * 7


def test_della_two_pcie_gpus() -> None:
    """One GPU per socket, no NVLink, NUMA 0 and 1, NICs on their own sockets."""
    d = _discover("princeton-della-2xa100-pcie.txt")
    nt = d.node_type
    assert _groups(nt) == [[(0,)], [(1,)]]
    assert nt.cores_per_socket == 0  # no lscpu: to fill in
    assert [sw.numa for s in nt.sockets for sw in s.pcie_switches] == [0, 1]
    assert nt.nvlink == ()
    assert _links(nt, 0) == [-1, 0]
    assert [(n.name, n.socket, n.near_gpus) for n in d.nics] == [
        ("mlx5_0", 0, ()), ("mlx5_1", 1, ())]


def test_traverse_nvlink_pairs_and_sparse_numa() -> None:
    """NV3 inside each pair, SYS between pairs; NUMA ids 0 and 8 are kept as they are."""
    d = _discover("princeton-traverse-ibm-ac922-4xv100.txt")
    nt = d.node_type
    assert _groups(nt) == [[(0,), (1,)], [(2,), (3,)]]
    assert [sw.numa for s in nt.sockets for sw in s.pcie_switches] == [0, 0, 8, 8]
    assert nt.nvlink == (NvlinkGroup((0, 1), 3), NvlinkGroup((2, 3), 3))
    assert _links(nt, 0) == [-1, 5, 0, 0]
    assert _links(nt, 3) == [0, 0, 5, -1]
    assert [n.socket for n in d.nics] == [0, 0, 1, 1]


@pytest.mark.parametrize("sample", sorted(p.name for p in TOPO.glob("*.txt")
                                          if "lscpu" not in p.name))
def test_discovered_toml_reads_back(sample: str) -> None:
    """The printed TOML (without lscpu: once cores and threads are filled in) is a valid node
    type that parses back to the same value."""
    d = discover("found", file_sources(str(TOPO / sample)), 16000)
    text = render_discovery(d, sample)
    text = text.replace("cores_per_socket = 0", "cores_per_socket = 8").replace(
        "threads_per_core = 0", "threads_per_core = 2")
    data = tomllib.loads(text + '[cluster]\nname = "c"\n[[nodes]]\nnames = "n1"\ntype = "found"\n')
    desc = parse_description(data, "discovered.toml")
    assert desc.node_types == (replace(d.node_type, cores_per_socket=8, threads_per_core=2),)


# ---- synthetic matrices ----------------------------------------------------------------------
def cpu_id(layout: str, sockets: int, cores: int, threads: int, s: int, k: int, t: int) -> int:
    """The OS id of socket ``s``, core ``k``, thread ``t`` in a CPU numbering seen on real
    machines: ``x86`` (socket 0's cores, socket 1's..., then the second threads likewise),
    ``interleaved`` (dual-socket Intel: socket 0 has 0,2,4..., socket 1 has 1,3,5...) and
    ``power`` (a core's threads are consecutive)."""
    if layout == "x86":
        return s * cores + k + t * sockets * cores
    if layout == "interleaved":
        return k * sockets + s + t * sockets * cores
    return (s * cores + k) * threads + t


def lscpu_text(layout: str, sockets: int, cores: int, threads: int, parseable: bool) -> str:
    """``lscpu`` (summary, one NUMA node per socket) or ``lscpu -p=CPU,CORE,SOCKET,NODE`` for a
    machine numbered as ``layout`` says."""
    ids = {(s, k, t): cpu_id(layout, sockets, cores, threads, s, k, t) for s in range(sockets)
           for k in range(cores) for t in range(threads)}
    if parseable:
        rows = sorted((c, s * cores + k, s) for (s, k, _), c in ids.items())
        return "# comment\n# CPU,Core,Socket,Node\n" + "".join(
            f"{c},{core},{s},{s}\n" for c, core, s in rows)
    arch = "ppc64le" if layout == "power" else "x86_64"
    return (f"Architecture: {arch}\nCPU(s): {len(ids)}\nThread(s) per core: {threads}\n"
            f"Core(s) per socket: {cores}\nSocket(s): {sockets}\n" + "".join(
                f"NUMA node{s} CPU(s): "
                f"{format_cores([c for (si, _, _), c in ids.items() if si == s])}\n"
                for s in range(sockets)))


def _matrix(nt: NodeType, tabs: bool, layout: str = "x86", parseable: bool = False
            ) -> tuple[str, str]:
    """A topo -m matrix and lscpu text for ``nt`` (one NIC per PCIe switch, like DGX boxes), its
    CPUs numbered as ``layout`` says (see :func:`cpu_id`)."""
    n = nt.gpu_count
    sw = [(si, wi) for si, s in enumerate(nt.sockets) for wi, _ in enumerate(s.pcie_switches)]
    shape = (len(nt.sockets), nt.cores_per_socket, nt.threads_per_core)

    def code(a: int, b: int) -> str:
        if a == b:
            return "X"
        if nt.nvlinks(a, b):
            return f"NV{nt.nvlinks(a, b)}"
        (sa, wa), (sb, wb) = nt.switch_of(a), nt.switch_of(b)
        return "SYS" if sa != sb else ("PXB" if wa == wb else "NODE")

    def gpu_nic(g: int, k: int) -> str:
        sg, wg = nt.switch_of(g)
        return "PIX" if (sg, wg) == sw[k] else ("NODE" if sg == sw[k][0] else "SYS")

    def nic_nic(a: int, b: int) -> str:
        return "X" if a == b else ("NODE" if sw[a][0] == sw[b][0] else "SYS")

    def affinity(g: int) -> str:
        s = nt.socket_of(g)
        return format_cores([cpu_id(layout, *shape, s, k, t) for k in range(shape[1])
                             for t in range(shape[2])])

    sep = "\t" if tabs else "    "
    names = [f"GPU{i}" for i in range(n)] + [f"NIC{k}" for k in range(len(sw))]
    rows = [sep + sep.join([*names, "CPU Affinity", "NUMA Affinity"])]
    for g in range(n):
        cells = [code(g, o) for o in range(n)] + [gpu_nic(g, k) for k in range(len(sw))]
        rows.append(sep.join([f"GPU{g}", *cells, affinity(g), str(nt.socket_of(g))]))
    for k in range(len(sw)):
        cells = [gpu_nic(g, k) for g in range(n)] + [nic_nic(k, o) for o in range(len(sw))]
        rows.append(sep.join([f"NIC{k}", *cells]))
    rows += ["", "Legend:", "", "  X    = Self", "", "NIC Legend:", ""]
    rows += [f"  NIC{k}: mlx5_{k}" for k in range(len(sw))]
    return "\n".join(rows) + "\n", lscpu_text(layout, *shape, parseable)


@st.composite
def _node_types(draw: st.DrawFn) -> NodeType:
    n = draw(st.integers(1, 16))
    n_sockets = draw(st.integers(1, 4))
    order = draw(st.permutations(list(range(n))))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=n - 1, unique=True)))
    chunks = [sorted(order[a:b]) for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    sockets: list[list[PcieSwitch]] = [[] for _ in range(n_sockets)]
    for chunk in chunks:
        sockets[draw(st.integers(0, n_sockets - 1))].append(
            PcieSwitch(tuple(chunk), None, None))
    socks = []
    for si, sws in enumerate(sockets):
        sws.sort(key=lambda s: s.gpus[0])
        socks.append(Socket(tuple(PcieSwitch(s.gpus, None, si) for s in sws)))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    mode = draw(st.sampled_from(["none", "all", "some"]))
    if mode == "all" and pairs:
        nv: tuple[NvlinkGroup, ...] = (NvlinkGroup(tuple(range(n)), draw(st.integers(1, 18))),)
    elif mode == "some" and pairs:
        chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs)))
        nv = tuple(NvlinkGroup(p, draw(st.integers(1, 4))) for p in sorted(chosen))
    else:
        nv = ()
    return NodeType("t", tuple(socks), draw(st.integers(1, 8)), draw(st.integers(1, 2)),
                    memory_mb=draw(st.integers(1024, 10**6)), nvlink=nv)


def _nv_pairs(nt: NodeType) -> dict[tuple[int, int], int]:
    n = nt.gpu_count
    return {(a, b): nt.nvlinks(a, b) for a in range(n) for b in range(n)}


@settings(max_examples=150, deadline=None)
@given(_node_types(), st.booleans(), st.sampled_from(["x86", "interleaved", "power"]),
       st.booleans())
def test_synthetic_matrix_round_trip(nt: NodeType, tabs: bool, layout: str,
                                     parseable: bool) -> None:
    """Rendering a node type as topo -m + lscpu and discovering it gives the node type back
    (1 to 16 GPUs, 1 to 4 sockets, either matrix layout, three CPU numberings, lscpu summary or
    -p); gres Links agree too."""
    topo, lscpu = _matrix(nt, tabs, layout, parseable)
    found = build_node_type("t", parse_topo_matrix(topo), None, parse_lscpu(lscpu),
                            nt.memory_mb).node_type
    assert _nv_pairs(found) == _nv_pairs(nt)
    strip = {"nvlink": ()}
    assert NodeType(**{**found.__dict__, **strip}) == NodeType(**{**nt.__dict__, **strip})
    for g in range(nt.gpu_count):
        assert _links(found, g) == _links(nt, g)


# ---- malformed input -------------------------------------------------------------------------
_DELLA = (TOPO / "princeton-della-2xa100-pcie.txt").read_text()
_DELLA_LSCPU = ("CPU(s): 128\nThread(s) per core: 1\nCore(s) per socket: 64\nSocket(s): 2\n"
                "NUMA node0 CPU(s): 0-63\nNUMA node1 CPU(s): 64-127\n")


@pytest.mark.parametrize(("text", "line", "fragment"), [
    (_DELLA.replace("GPU1\tSYS\t X ", "GPU1\tFOO\t X "), 3, "unknown link 'FOO'"),
    (_DELLA.replace("GPU0\t X \tSYS", "GPU0\tSYS\tSYS"), 2, "'X' belongs on the diagonal"),
    (_DELLA.replace("GPU1\tSYS\t X \tSYS\tNODE\t64-127\t1", "GPU1\tSYS\t X \tSYS"), 3,
     "3 cells"),
    (_DELLA.replace("GPU1\tSYS\t X \tSYS\tNODE", "GPU1\tNODE\t X \tSYS\tNODE"), 2,
     "not symmetric"),
    (_DELLA.replace("0-63\t0", "0-x\t0"), 2, "bad CPU Affinity"),
    (_DELLA.replace("mlx5_1\tSYS", "mlx5_7\tSYS"), 5, "not a column"),
    ("hello\nworld\n", 1, "no header with GPU0"),
])
def test_malformed_matrix_names_the_line(text: str, line: int, fragment: str) -> None:
    """Each kind of damage is reported with the file and the line number."""
    with pytest.raises(ConfigError) as err:
        parse_topo_matrix(text, "della.txt")
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"della.txt: line {line}: ")


def test_gpu_lists_both_formats() -> None:
    """`nvidia-smi -L` and the CSV query give models, bus ids and UUIDs."""
    listing = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
               "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)\n")
    gpus = parse_gpu_list(listing)
    assert [(g.index, g.name, g.uuid) for g in gpus] == [
        (0, "NVIDIA A100-SXM4-40GB", "GPU-aaaa"), (1, "NVIDIA A100-SXM4-40GB", "GPU-bbbb")]
    csv_text = ("index, name, pci.bus_id, uuid\n"
                "0, NVIDIA A100-PCIE-40GB, 00000000:21:00.0, GPU-1\n"
                "1, NVIDIA A100-PCIE-40GB, 00000000:81:00.0, GPU-2\n")
    gpus = parse_gpu_list(csv_text, "query.csv")
    assert [g.bus_id for g in gpus] == ["00000000:21:00.0", "00000000:81:00.0"]
    d = build_node_type("della", parse_topo_matrix(_DELLA), gpus)
    assert d.node_type.gpu_model == "A100-PCIE-40GB"


@pytest.mark.parametrize(("name", "feature"), [
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("Tesla V100 SXM2", "V100-SXM2"),
    ("NVIDIA GeForce RTX 3090 (rev, a)", "GeForce-RTX-3090-rev-a"),
    ("NVIDIA H100 80GB HBM3", "H100-80GB-HBM3"),
])
def test_gpu_model_is_a_feature_validation_accepts(name: str, feature: str) -> None:
    """Spaces and characters Slurm cannot take in Features= become '-' (the feature the
    description's gpu_model check suggests, too)."""
    d = build_node_type("t", parse_topo_matrix(_DELLA), (GpuInfo(0, name), GpuInfo(1, name)),
                        parse_lscpu(_DELLA_LSCPU), memory_mb=16000)
    assert d.node_type.gpu_model == feature
    desc = parse_description({"cluster": {"name": "c"}, "nodes": [{"names": "n1", "type": "t"}],
                              "node_types": tomllib.loads(render_node_type(d.node_type))[
                                  "node_types"]})
    assert desc.node_types[0].gpu_model == feature


@pytest.mark.parametrize(("text", "fragment"), [
    ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n"
     "  MIG 3g.20gb     Device  0: (UUID: MIG-b)\n", "line 2: GPU GPU0 is in MIG mode"),
    ("index, name, mig.mode.current\n0, NVIDIA A100, Enabled\n", "line 2: GPU GPU0 is in MIG"),
    ("GPU 0 A100\n", "line 1: expected 'GPU <n>: <name>"),
    ("GPU 1: A100 (UUID: x)\n", "indices must be 0..0"),
    ("index, name\nzero, A100\n", "line 2: index is not a number"),
])
def test_gpu_list_errors(text: str, fragment: str) -> None:
    """MIG is refused with advice; malformed lists name the line."""
    with pytest.raises(ConfigError) as err:
        parse_gpu_list(text, "gpus.txt")
    assert fragment in str(err.value)


def test_mixed_models_and_count_mismatch_refused() -> None:
    """A node mixing GPU models, or a GPU list that disagrees with the matrix, is refused."""
    m = parse_topo_matrix(_DELLA)
    mixed = parse_gpu_list("GPU 0: A100 (UUID: a)\nGPU 1: V100 (UUID: b)\n")
    with pytest.raises(ConfigError, match="mixes GPU models"):
        build_node_type("x", m, mixed)
    with pytest.raises(ConfigError, match="GPU list has 1 GPUs but topo -m shows 2"):
        build_node_type("x", m, parse_gpu_list("GPU 0: A100 (UUID: a)\n"))


def test_more_than_16_gpus_refused() -> None:
    """Discovery handles 1 to 16 GPUs per node and says so otherwise."""
    socks = (Socket((PcieSwitch(tuple(range(17)), None, 0),)),)
    topo, lscpu = _matrix(NodeType("big", socks, 4), tabs=True)
    with pytest.raises(ConfigError, match="17 GPUs: discovery handles 1 to 16"):
        build_node_type("big", parse_topo_matrix(topo), None, parse_lscpu(lscpu))


def test_lscpu_errors() -> None:
    """Missing keys and inconsistent counts are reported with the key and line."""
    with pytest.raises(ConfigError, match="no 'Socket\\(s\\)' line"):
        parse_lscpu("CPU(s): 4\n", "lscpu.txt")
    with pytest.raises(ConfigError, match=r"lscpu\.txt: line 2: Socket\(s\) is not a number"):
        parse_lscpu("CPU(s): 4\nSocket(s): two\n", "lscpu.txt")
    with pytest.raises(ConfigError, match="offline CPUs"):
        parse_lscpu("CPU(s): 5\nSocket(s): 1\nCore(s) per socket: 4\nThread(s) per core: 1\n")


def test_run_command_errors_are_clear(tmp_path: Path) -> None:
    """The live adapter reports a missing tool, a failure and a timeout without tracebacks."""
    with pytest.raises(ConfigError, match=r"not found on PATH.*--topo"):
        run_command(["hai-no-such-tool-xyz"])
    with pytest.raises(ConfigError, match="failed \\(1\\)"):
        run_command(["false"])
    with pytest.raises(ConfigError, match="did not finish within"):
        run_command(["sleep", "5"], timeout=0.2)
    assert run_command(["echo", "ok"]).strip() == "ok"


def test_render_node_type_is_valid_toml() -> None:
    """A hand-made node type with cores and NUMA survives TOML and parsing unchanged."""
    nt = NodeType("x-1", (Socket((PcieSwitch((0, 1), "0-3", 2),)), Socket(())), 4, 2, 64000,
                  "A100", "/dev/nvidia{index}", (NvlinkGroup((0, 1), 4),))
    data = tomllib.loads(render_node_type(nt) + '[cluster]\nname="c"\n'
                         '[[nodes]]\nnames="a1"\ntype="x-1"\n')
    assert parse_description(data).node_types == (nt,)


def test_newer_layout_with_gpu_numa_id_and_ansi() -> None:
    """A `GPU NUMA ID` column, N/A values and ANSI underlining (newer drivers) are understood."""
    lines = _DELLA.splitlines()
    lines[0] = "\x1b[4m" + lines[0] + "\tGPU NUMA ID\x1b[0m"
    lines[1] += "\tN/A"
    lines[2] = lines[2].replace("64-127\t1", "N/A\tN/A") + "\tN/A"
    m = parse_topo_matrix("\n".join(lines) + "\n")
    assert m.cpu_affinity == ("0-63", None) and m.numa_affinity == (0, None)
    assert m.nics == ("mlx5_0", "mlx5_1") and m.link("GPU1", "mlx5_1") == "NODE"
