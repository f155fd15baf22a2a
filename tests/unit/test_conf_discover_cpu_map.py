"""Discovery's CPU map: GPUs on the right socket and Slurm core ids whatever the CPU numbering
(interleaved dual-socket Intel, POWER9 SMT4, sparse /sys ids), placements the matrix contradicts
refused, and no cores/threads guessed without a CPU source.

gres.conf ``Cores=`` are Slurm's abstract core ids: socket ``s`` core ``k`` is
``s * cores_per_socket + k`` (gres.conf(5), Cores, NOTE), so the expected values below are read
off each machine's CPU -> core -> socket map by hand.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.conf.description import parse_description
from hai_slurm.conf.discover import NO_CPU_WARNING, build_node_type
from hai_slurm.conf.discover_parse import parse_lscpu, parse_topo_matrix
from hai_slurm.conf.discover_run import Sources, discover, sysfs_cpu_map
from hai_slurm.conf.model import NodeType
from hai_slurm.conf.toml_out import render_discovery
from hai_slurm.errors import ConfigError

TOPO = Path(__file__).parents[1] / "data" / "topo"
TRAVERSE = TOPO / "princeton-traverse-ibm-ac922-4xv100.txt"


def _topo(links: list[list[str]], affinity: list[str], numa: list[str] | None = None) -> str:
    """A tab-separated topo -m of len(links) GPUs (no NICs)."""
    n = len(links)
    head = ["", *(f"GPU{i}" for i in range(n)), "CPU Affinity"] + (["NUMA Affinity"] if numa
                                                                    else [])
    rows = ["\t".join(head)]
    for g in range(n):
        rows.append("\t".join([f"GPU{g}", *links[g], affinity[g], *([numa[g]] if numa else [])]))
    return "\n".join(rows) + "\n\nLegend:\n"


def _two(code: str) -> list[list[str]]:
    return [[" X ", code], [code, " X "]]


def _groups(nt: NodeType) -> list[list[tuple[int, ...]]]:
    return [[sw.gpus for sw in s.pcie_switches] for s in nt.sockets]


def _cores(nt: NodeType) -> list[str | None]:
    return [sw.cores for s in nt.sockets for sw in s.pcie_switches]


# ---- the review's repros -------------------------------------------------------------------
INTERLEAVED_SUMMARY = """Architecture:        x86_64
CPU(s):              16
On-line CPU(s) list: 0-15
Thread(s) per core:  1
Core(s) per socket:  8
Socket(s):           2
NUMA node(s):        2
NUMA node0 CPU(s):   0,2,4,6,8,10,12,14
NUMA node1 CPU(s):   1,3,5,7,9,11,13,15
"""
INTERLEAVED_TOPO = _topo(_two("SYS"), ["0,2,4,6,8,10,12,14", "1,3,5,7,9,11,13,15"])


def test_interleaved_numbering_summary_puts_each_gpu_on_its_socket() -> None:
    """Review repro: socket 0 has CPUs 0,2,...,14 and socket 1 has 1,3,...,15. Each GPU's
    affinity is its whole socket, so GPU0 is alone on socket 0 and GPU1 on socket 1, with no
    narrower cores (before: both on socket 0 with cores "0,2,4,6..." and "1,3,5,7...")."""
    d = build_node_type("t", parse_topo_matrix(INTERLEAVED_TOPO), None,
                        parse_lscpu(INTERLEAVED_SUMMARY), 64000)
    assert _groups(d.node_type) == [[(0,)], [(1,)]]
    assert _cores(d.node_type) == [None, None]
    assert [sw.numa for s in d.node_type.sockets for sw in s.pcie_switches] == [0, 1]
    assert d.warnings == ()


def test_interleaved_smt_parseable_gives_slurm_core_ids() -> None:
    """Dual-socket Intel, interleaved, 4 cores x 2 threads per socket, SNC2 (two NUMA nodes per
    socket), from `lscpu -p=CPU,CORE,SOCKET,NODE`: CPU c is on socket c % 2; socket 0's cores
    are (0,8) (2,10) (4,12) (6,14). Each GPU's affinity is one NUMA node = 2 cores, so its
    Slurm cores are 0-1 / 2-3 on socket 0 and 4-5 / 6-7 on socket 1. All pairs are SYS, which on
    one socket is fine because their NUMA nodes differ."""
    lines = ["# CPU,Core,Socket,Node"]
    for c in range(16):
        s, k = c % 2, (c // 2) % 4
        lines.append(f"{c},{s * 4 + k},{s},{s * 2 + k // 2}")
    cpu = parse_lscpu("\n".join(lines) + "\n", "lscpu-p.txt")
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 4, 2)
    sys4 = [["SYS" if a != b else " X " for b in range(4)] for a in range(4)]
    topo = _topo(sys4, ["0,2,8,10", "4,6,12,14", "1,3,9,11", "5,7,13,15"], ["0", "1", "2", "3"])
    d = build_node_type("t", parse_topo_matrix(topo), None, cpu, 64000)
    assert _groups(d.node_type) == [[(0,), (1,)], [(2,), (3,)]]
    assert _cores(d.node_type) == ["0-1", "2-3", "4-5", "6-7"]
    assert d.warnings == () and d.notes == ()  # lscpu -p names the SMT siblings


POWER9_SUMMARY = """Architecture:        ppc64le
Byte Order:          Little Endian
CPU(s):              128
On-line CPU(s) list: 0-127
Thread(s) per core:  4
Core(s) per socket:  16
Socket(s):           2
NUMA node(s):        6
Model name:          POWER9, altivec supported
NUMA node0 CPU(s):   0-63
NUMA node8 CPU(s):   64-127
NUMA node252 CPU(s):
NUMA node253 CPU(s):
NUMA node254 CPU(s):
NUMA node255 CPU(s):
"""


def _power9_parseable() -> str:
    """POWER9 AC922 as `lscpu -p=CPU,CORE,SOCKET,NODE` would print it: SMT4, consecutive
    threads, socket (chip) ids 0 and 8 as in /sys."""
    return "# CPU,Core,Socket,Node\n" + "".join(
        f"{c},{c // 4},{0 if c < 64 else 8},{0 if c < 64 else 8}\n" for c in range(128))


@pytest.mark.parametrize("lscpu", [POWER9_SUMMARY, _power9_parseable()],
                         ids=["summary", "parseable"])
def test_power9_smt4_gpus_on_both_sockets(lscpu: str) -> None:
    """Review repro: the real Traverse matrix (GPU0/1 on CPUs 0-63, GPU2/3 on 64-127) with an
    SMT4 2 x 16-core lscpu. Before: all 4 GPUs on socket 0 with cores "0-31"."""
    m = parse_topo_matrix(TRAVERSE.read_text(), TRAVERSE.name)
    d = build_node_type("t", m, None, parse_lscpu(lscpu), 64000)
    nt = d.node_type
    assert (len(nt.sockets), nt.cores_per_socket, nt.threads_per_core) == (2, 16, 4)
    assert _groups(nt) == [[(0,), (1,)], [(2,), (3,)]]
    assert _cores(nt) == [None] * 4
    assert [n.socket for n in d.nics] == [0, 0, 1, 1]


def test_power9_narrow_affinity_uses_consecutive_threads() -> None:
    """On POWER a core's threads are consecutive: CPUs 64-79 are socket 1's cores 0-3, i.e.
    Slurm cores 16-19 (the x86 rule would have said 16,20,24,28...)."""
    topo = _topo(_two("SYS"), ["0-15", "64-79"], ["0", "8"])
    for lscpu in (POWER9_SUMMARY, _power9_parseable()):
        d = build_node_type("t", parse_topo_matrix(topo), None, parse_lscpu(lscpu), 64000)
        assert _cores(d.node_type) == ["0-3", "16-19"]


# ---- contradictions with the matrix are refused ---------------------------------------------
def test_same_socket_link_across_sockets_is_refused() -> None:
    """NODE means one NUMA node; a CPU map putting the two GPUs on two sockets is wrong."""
    topo = _topo(_two("NODE"), ["0,2,4,6,8,10,12,14", "1,3,5,7,9,11,13,15"])
    with pytest.raises(ConfigError, match=r"GPU0 and GPU1 are linked by NODE .* sockets 0 and 1"):
        build_node_type("t", parse_topo_matrix(topo), None, parse_lscpu(INTERLEAVED_SUMMARY))


def test_sys_on_one_socket_and_numa_node_is_refused() -> None:
    """SYS crosses sockets (or NUMA nodes): two SYS-linked GPUs in one NUMA node of one socket
    means the CPU map is not this machine's."""
    contiguous = ("# CPU,Core,Socket,Node\n"
                  + "".join(f"{c},{c},{c // 8},{c // 8}\n" for c in range(16)))
    topo = _topo(_two("SYS"), ["0-3", "4-7"])
    with pytest.raises(ConfigError, match=r"GPU0 and GPU1 are linked by SYS .* socket 0 of the "
                       r"CPU map, NUMA node 0: refusing to write a wrong gres.conf"):
        build_node_type("t", parse_topo_matrix(topo), None, parse_lscpu(contiguous))


def test_nvlink_across_sockets_and_sys_between_numa_nodes_are_fine() -> None:
    """The real DGX A100 (NV12 between every pair, across sockets; SYS between NPS4 NUMA nodes
    of one socket) is accepted with its real lscpu."""
    d = discover("t", Sources(topo=((TOPO / "dgx-a100.txt").read_text(), "topo"),
                              lscpu=((TOPO / "dgx-a100.lscpu.txt").read_text(), "lscpu")))
    assert _groups(d.node_type) == [[(0, 1), (2, 3)], [(4, 5), (6, 7)]]


def test_affinity_across_sockets_or_unknown_cpu_is_refused() -> None:
    """A GPU whose affinity spans both sockets, or names a CPU the map lacks, is not placed."""
    topo = _topo(_two("SYS"), ["0-15", "1,3"])
    with pytest.raises(ConfigError, match=r"GPU0's CPU Affinity 0-15 spans sockets \[0, 1\]"):
        build_node_type("t", parse_topo_matrix(topo), None, parse_lscpu(INTERLEAVED_SUMMARY))
    topo = _topo(_two("SYS"), ["0,2", "1,99"])
    with pytest.raises(ConfigError, match=r"GPU1's CPU Affinity 1,99 names CPU 99"):
        build_node_type("t", parse_topo_matrix(topo), None, parse_lscpu(INTERLEAVED_SUMMARY))


# ---- lscpu readers ---------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "fragment"), [
    ("CPU(s): 16\nThread(s) per core: 1\nCore(s) per socket: 8\nSocket(s): 2\n",
     r"no \"NUMA nodeN CPU\(s\)\" lines for 2 sockets"),
    ("CPU(s): 16\nThread(s) per core: 1\nCore(s) per socket: 8\nSocket(s): 2\n"
     "NUMA node0 CPU(s): 0-15\n", "do not split into 2 sockets of 8 CPUs"),
    ("CPU(s): 16\nThread(s) per core: 1\nCore(s) per socket: 8\nSocket(s): 2\n"
     "NUMA node0 CPU(s): 0-7\nNUMA node1 CPU(s): 0-7\n", "do not cover each CPU once"),
    ("# CPU,Core,Socket,Node\n0,0,0,0\n1,1,0,0\n2,2,1,0\n", r"different numbers of cores"),
    ("# CPU,Core,Socket,Node\n0,0,0,0\n1,0,0,0\n2,1,0,0\n", r"different numbers of threads"),
    ("# CPU,Core,Socket,Node\n0,0,0,0\n1,-,-,\n", r"line 3: CORE is empty \(an offline CPU\?\)"),
    ("# CPU,Node\n0,0\n", r"line 2: no CORE/SOCKET column"),
    ("# CPU,Core,Socket,Node\n0,0,0\n", r"line 2: 3 fields, the header names 4"),
    ("# CPU,Core,Socket,Node\n0,0,0,0\n0,1,0,0\n", "CPU 0 is listed twice"),
    ("# CPU,Core,Socket,Node\n", "no CPU lines"),
])
def test_lscpu_cpu_map_errors(text: str, fragment: str) -> None:
    """A CPU map that cannot say which CPU is on which socket is refused, naming the fix."""
    with pytest.raises(ConfigError, match=fragment):
        parse_lscpu(text, "lscpu.txt")


def test_sysfs_cpu_map(tmp_path: Path) -> None:
    """The live path reads /sys: sparse package ids (POWER9: 0 and 8) and per-package core ids
    are ranked; an offline CPU is left out... and then refused as uneven, as lscpu -p would be."""
    for c in range(8):
        d = tmp_path / f"cpu{c}"
        (d / "topology").mkdir(parents=True)
        (d / "topology" / "physical_package_id").write_text(f"{0 if c % 2 == 0 else 8}\n")
        (d / "topology" / "core_id").write_text(f"{(c // 2) * 4}\n")
        (d / f"node{0 if c % 2 == 0 else 8}").mkdir()
    (tmp_path / "cpufreq").mkdir()
    text = sysfs_cpu_map(str(tmp_path))
    cpu = parse_lscpu(text, str(tmp_path))
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 4, 1)
    assert [cpu.core_of(c) for c in range(8)] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert [cpu.numa_of(c) for c in range(2)] == [0, 8]
    (tmp_path / "cpu7" / "online").write_text("0\n")
    with pytest.raises(ConfigError, match="different numbers of cores"):
        parse_lscpu(sysfs_cpu_map(str(tmp_path)), str(tmp_path))
    with pytest.raises(ConfigError, match="cannot read the CPU topology"):
        sysfs_cpu_map(str(tmp_path / "missing"))


# ---- defect 2: no CPU source, no guessed cores ----------------------------------------------
def test_without_lscpu_cores_and_threads_are_placeholders_validation_refuses() -> None:
    """Review repro: the DGX A100 (2 x 64 cores x 2 threads) without lscpu was described as
    4 x 32 x 1. Now cores/threads are 0 with a FILL IN comment and a warning naming --lscpu,
    and validation refuses the printed TOML until they are filled in."""
    d = discover("dgx", Sources(topo=((TOPO / "dgx-a100.txt").read_text(), "topo")), 1_000_000)
    nt = d.node_type
    assert (nt.cores_per_socket, nt.threads_per_core) == (0, 0)
    assert NO_CPU_WARNING in d.warnings
    assert "--lscpu" in NO_CPU_WARNING and "lscpu -p=CPU,CORE,SOCKET,NODE" in NO_CPU_WARNING
    text = render_discovery(d, "dgx-a100.txt")
    assert "cores_per_socket = 0  # FILL IN" in text and "threads_per_core = 0  # FILL IN" in text
    data = tomllib.loads(text + '[cluster]\nname = "c"\n[[nodes]]\nnames = "n1"\ntype = "dgx"\n')
    with pytest.raises(ConfigError, match=r"node_types\.dgx\.cores_per_socket: must be at least "
                       r"1: fill in the node's cores per socket"):
        parse_description(data, "d.toml")
    data["node_types"]["dgx"]["cores_per_socket"] = 64
    with pytest.raises(ConfigError, match=r"threads_per_core: must be at least 1: fill in"):
        parse_description(data, "d.toml")


def test_cli_without_lscpu_warns_on_stderr() -> None:
    """`conf discover --topo` alone prints the placeholders and says to pass --lscpu."""
    res = CliRunner().invoke(cli, ["conf", "discover", "--topo", str(TOPO / "dgx-a100.txt"),
                                   "--memory-mb", "1000000"])
    assert res.exit_code == 0, res.output
    assert "warning: no CPU source" in res.stderr and "pass --lscpu" in res.stderr
    assert tomllib.loads(res.stdout)["node_types"]["discovered"]["cores_per_socket"] == 0


def test_cli_reads_lscpu_parseable(tmp_path: Path) -> None:
    """`--lscpu` takes `lscpu -p=CPU,CORE,SOCKET,NODE` output too."""
    path = tmp_path / "lscpu-p.txt"
    path.write_text(_power9_parseable())
    res = CliRunner().invoke(cli, ["conf", "discover", "--topo", str(TRAVERSE), "--lscpu",
                                   str(path), "--memory-mb", "500000"])
    assert res.exit_code == 0, res.output
    nt = tomllib.loads(res.stdout)["node_types"]["discovered"]
    assert (nt["cores_per_socket"], nt["threads_per_core"]) == (16, 4)
    assert [[sw["gpus"] for sw in s["pcie_switch"]] for s in nt["socket"]] == [
        [[0], [1]], [[2], [3]]]
