"""The thin adapter of discovery: run ``nvidia-smi`` and read the CPU map from /sys on this node,
or read saved outputs from files, then hand the text to the pure parsers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.conf.discover import UNKNOWN_MEMORY_MB, Discovery, build_node_type
from hai_slurm.conf.discover_parse import (
    CpuInfo,
    GpuInfo,
    parse_gpu_list,
    parse_lscpu,
    parse_topo_matrix,
)
from hai_slurm.errors import ConfigError

TIMEOUT_S = 30.0
QUERY = ["nvidia-smi", "--query-gpu=index,name,pci.bus_id,uuid", "--format=csv"]


@dataclass(frozen=True)
class Sources:
    """Texts to discover from, with the name each came from (for error messages)."""

    topo: tuple[str, str]
    gpus: tuple[str, str] | None = None
    mig_check: tuple[str, str] | None = None
    lscpu: tuple[str, str] | None = None


def run_command(argv: list[str], timeout: float = TIMEOUT_S) -> str:
    """Output of ``argv`` (LC_ALL=C); a clear :class:`ConfigError` if it is missing or fails."""
    if shutil.which(argv[0]) is None:
        raise ConfigError(f"{argv[0]} not found on PATH; run discovery on a GPU node or pass "
                          "saved outputs with --topo/--gpus/--lscpu", key=argv[0])
    env = {**os.environ, "LC_ALL": "C"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)
    except subprocess.TimeoutExpired as err:
        raise ConfigError(f"{' '.join(argv)} did not finish within {timeout:.0f} s",
                          key=argv[0]) from err
    if done.returncode != 0:
        raise ConfigError(f"{' '.join(argv)} failed ({done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[:300]}", key=argv[0])
    return done.stdout


SYS_CPU = "/sys/devices/system/cpu"


def sysfs_cpu_map(root: str = SYS_CPU) -> str:
    """This node's CPU map as ``lscpu -p=CPU,CORE,SOCKET,NODE`` text, read from
    ``cpu*/topology/{physical_package_id,core_id}`` and the ``cpu*/node*`` links of ``root``
    (offline CPUs, which have no topology, are left out; the parser refuses uneven sockets)."""
    base = Path(root)
    rows = []
    try:
        entries = sorted((int(d.name[3:]), d) for d in base.iterdir()
                         if re.fullmatch(r"cpu[0-9]+", d.name))
        for cpu, d in entries:
            topo = d / "topology"
            online = d / "online"
            if not topo.is_dir() or (online.is_file()
                                     and online.read_text(encoding="utf-8").strip() == "0"):
                continue
            package = (topo / "physical_package_id").read_text(encoding="utf-8").strip()
            core = (topo / "core_id").read_text(encoding="utf-8").strip()
            nodes = [n.name[4:] for n in d.iterdir() if re.fullmatch(r"node[0-9]+", n.name)]
            if package.startswith("-"):
                raise ConfigError(f"cpu{cpu}: the kernel does not know its socket "
                                  f"(physical_package_id {package}); pass a saved lscpu",
                                  source=root)
            rows.append(f"{cpu},{core},{package},{nodes[0] if len(nodes) == 1 else ''}")
    except OSError as err:
        raise ConfigError(f"cannot read the CPU topology: {err.strerror or err}; run discovery "
                          "on a Linux GPU node or pass saved outputs with --topo/--lscpu",
                          source=root) from err
    if not rows:
        raise ConfigError("no CPU topology found; pass saved outputs with --topo/--lscpu",
                          source=root)
    return "# CPU,Core,Socket,Node\n" + "\n".join(rows) + "\n"


def live_sources() -> Sources:
    """Run nvidia-smi on this node and read its CPU map from /sys."""
    return Sources(topo=(run_command(["nvidia-smi", "topo", "-m"]), "nvidia-smi topo -m"),
                   gpus=(run_command(QUERY), " ".join(QUERY)),
                   mig_check=(run_command(["nvidia-smi", "-L"]), "nvidia-smi -L"),
                   lscpu=(sysfs_cpu_map(), SYS_CPU))


def _read(path: str) -> tuple[str, str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace"), path
    except OSError as err:
        raise ConfigError(f"cannot read: {err.strerror}", source=path) from err


def file_sources(topo: str, gpus: str | None = None, lscpu: str | None = None) -> Sources:
    """Saved outputs: ``topo`` (``nvidia-smi topo -m``), ``gpus`` (``-L`` or the CSV query),
    ``lscpu`` (``LC_ALL=C lscpu`` or ``lscpu -p=CPU,CORE,SOCKET,NODE``)."""
    return Sources(topo=_read(topo), gpus=_read(gpus) if gpus else None,
                   lscpu=_read(lscpu) if lscpu else None)


def memory_mb(meminfo: str = "/proc/meminfo") -> int:
    """This machine's memory in MiB, minus 5 % that the OS keeps (Slurm's RealMemory);
    :data:`UNKNOWN_MEMORY_MB` when it cannot be read."""
    try:
        text = Path(meminfo).read_text(encoding="utf-8")
    except OSError:
        return UNKNOWN_MEMORY_MB
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.M)
    return int(int(m.group(1)) / 1024 * 0.95) if m else UNKNOWN_MEMORY_MB


def minor_mismatches(gpus: tuple[GpuInfo, ...], proc: str = "/proc/driver/nvidia/gpus"
                     ) -> list[str]:
    """GPUs whose /dev/nvidiaN minor differs from their index (File= would be wrong)."""
    out = []
    for g in gpus:
        if not g.bus_id:
            continue
        # nvidia-smi prints an 8-digit PCI domain (00000000:21:00.0), /proc uses 4 (0000:...)
        path = Path(proc) / g.bus_id.lower()[4:] / "information"
        if path.is_file():
            m = re.search(r"Device Minor:\s*(\d+)", path.read_text(encoding="utf-8"))
            if m and int(m.group(1)) != g.index:
                out.append(f"GPU{g.index} is /dev/nvidia{m.group(1)}: fix device_pattern/File=")
    return out


def discover(name: str, src: Sources, mem_mb: int = UNKNOWN_MEMORY_MB) -> Discovery:
    """Parse the sources and build the node type called ``name``."""
    matrix = parse_topo_matrix(*src.topo)
    gpus = parse_gpu_list(*src.gpus) if src.gpus else None
    if src.mig_check:
        parse_gpu_list(*src.mig_check)  # raises on MIG devices
    cpu: CpuInfo | None = parse_lscpu(*src.lscpu) if src.lscpu else None
    return build_node_type(name, matrix, gpus, cpu, mem_mb)
