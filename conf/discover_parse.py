"""Parsers for the outputs discovery reads: ``nvidia-smi topo -m``, ``nvidia-smi -L``,
``nvidia-smi --query-gpu=index,name,pci.bus_id,uuid --format=csv`` and ``lscpu`` (its summary,
or ``lscpu -p=CPU,CORE,SOCKET,NODE``). Pure.

Both layouts of ``topo -m`` are read: tab separated (newer drivers, ``NIC0``... columns plus a
"NIC Legend") and space aligned (older drivers, NICs named ``mlx5_0``). Columns other than
``GPU<n>`` before the affinity columns are NICs (or other PCIe devices): they are kept for the
report and to find GPUs behind a common PCIe switch. ``CPU Affinity``, ``NUMA Affinity`` and
``GPU NUMA ID`` are read; ``N/A`` means unknown. Every error names the source and line.

MIG: a GPU in MIG mode is refused with a clear message (``nvidia-smi -L`` lists ``MIG`` devices, or
a ``mig.mode.current`` column says Enabled). hai-slurm's levels place whole GPUs; MIG slices would
need ``gres.conf`` with MIG types (Slurm's AutoDetect=nvml), which this generator does not write.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from hai_slurm.errors import ConfigError

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINK = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV(\d+))$")
_GPU = re.compile(r"^GPU(\d+)$")
ATTRIBUTE_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@dataclass(frozen=True)
class TopoMatrix:
    """``nvidia-smi topo -m``: device names (GPUs first), link codes and affinities."""

    gpus: int
    nics: tuple[str, ...]
    links: dict[tuple[str, str], str]
    cpu_affinity: tuple[str | None, ...]
    numa_affinity: tuple[int | None, ...]

    def link(self, a: str, b: str) -> str:
        """Link code between devices ``a`` and ``b`` (``GPU0``, ``mlx5_0``...): X, SYS, NV12..."""
        return self.links[(a, b)]


def _err(source: str, line: int, message: str, value: object = None) -> ConfigError:
    return ConfigError(message, source=source, key=f"line {line}", value=value)


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return [c for c in re.split(r"\s{2,}", line.strip()) if c]


def parse_topo_matrix(text: str, source: str = "nvidia-smi topo -m") -> TopoMatrix:
    """Parse the matrix; raises :class:`ConfigError` naming the line of any problem."""
    lines = [_ANSI.sub("", ln).rstrip("\r\n") for ln in text.splitlines()]
    head = next((i for i, ln in enumerate(lines) if re.search(r"(^|\s)GPU0(\s|$)", ln)), None)
    if head is None:
        raise _err(source, 1, "no header with GPU0: is this `nvidia-smi topo -m` output? "
                   "(no GPUs visible, or a different command)")
    header = _cells(lines[head])
    if "\t" in lines[head] and header and header[0] == "":
        header = header[1:]
    devices = [h for h in header if h not in ATTRIBUTE_COLUMNS]
    attrs = [h for h in header if h in ATTRIBUTE_COLUMNS]
    if header[:len(devices)] != devices:
        raise _err(source, head + 1, "device columns must come before the affinity columns",
                   lines[head])
    gpu_cols = [d for d in devices if _GPU.match(d)]
    if [int(_GPU.match(g).group(1)) for g in gpu_cols  # type: ignore[union-attr]
            ] != list(range(len(gpu_cols))) or devices[:len(gpu_cols)] != gpu_cols:
        raise _err(source, head + 1, "GPU columns must be GPU0, GPU1, ... before other devices",
                   gpu_cols)
    legend = {}
    for ln in lines:
        m = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", ln)
        if m:
            legend[m.group(1)] = m.group(2)
    links: dict[tuple[str, str], str] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, int | None] = {}
    rows: list[str] = []
    for offset, raw in enumerate(lines[head + 1:]):
        lineno = head + 2 + offset
        if not raw.strip() or raw.strip().startswith("Legend"):
            break
        if "\t" in raw:
            cells = _cells(raw)
            label, values = cells[0], cells[1:]
        else:
            parts = raw.split()
            label, values = parts[0], parts[1:]
        if label not in devices:
            raise _err(source, lineno, f"row {label!r} is not a column of the header", raw)
        if label in rows:
            raise _err(source, lineno, f"row {label!r} appears twice", raw)
        rows.append(label)
        if len(values) < len(devices):
            raise _err(source, lineno, f"row {label} has {len(values)} cells, expected "
                       f"{len(devices)} devices", raw)
        for col, code in zip(devices, values, strict=False):
            if not _LINK.match(code):
                raise _err(source, lineno, f"unknown link {code!r} between {label} and {col} "
                           "(known: X, SYS, NODE, PHB, PXB, PIX, NV<n>)", code)
            if (code == "X") != (col == label):
                raise _err(source, lineno, f"{label}/{col}: 'X' belongs on the diagonal only",
                           code)
            links[(label, col)] = code
        extra = [v for v in values[len(devices):] if v != ""]
        if label in gpu_cols:
            if len(extra) > len(attrs):
                raise _err(source, lineno, f"row {label} has more cells than the header", raw)
            by_name = dict(zip(attrs, extra, strict=False))
            aff = by_name.get("CPU Affinity")
            cpu[label] = None if aff in (None, "N/A") else aff
            if aff not in (None, "N/A"):
                try:
                    parse_cpu_list(aff or "")
                except ConfigError as err:
                    raise _err(source, lineno, f"bad CPU Affinity for {label}: "
                               + str(err).split(": ", 1)[-1], aff) from None
            node = by_name.get("NUMA Affinity")
            digits = node is not None and node.isascii() and node.isdigit()
            if node not in (None, "N/A") and not digits:
                raise _err(source, lineno, f"bad NUMA Affinity {node!r} for {label}", node)
            numa[label] = int(node) if node is not None and digits else None
    missing = [d for d in devices if d not in rows]
    if missing:
        raise _err(source, head + 1 + len(rows) + 1, f"rows missing for {missing}")
    for (a, b), code in links.items():
        if links[(b, a)] != code:
            raise _err(source, head + 2 + rows.index(a),
                       f"matrix is not symmetric: {a}-{b} is {code} but {b}-{a} is "
                       f"{links[(b, a)]}", code)
    named = {d: legend.get(d, d) for d in devices}
    return TopoMatrix(
        gpus=len(gpu_cols),
        nics=tuple(named[d] for d in devices[len(gpu_cols):]),
        links={(named[a], named[b]): c for (a, b), c in links.items()},
        cpu_affinity=tuple(cpu.get(g) for g in gpu_cols),
        numa_affinity=tuple(numa.get(g) for g in gpu_cols))


@dataclass(frozen=True)
class GpuInfo:
    """One GPU from ``nvidia-smi -L`` or ``--query-gpu``."""

    index: int
    name: str
    bus_id: str | None = None
    uuid: str | None = None


def _mig_error(source: str, line: int, gpu: str) -> ConfigError:
    return _err(source, line, f"GPU {gpu} is in MIG mode. hai-slurm places whole GPUs; disable "
                "MIG (nvidia-smi -i N -mig 0) or write gres.conf for MIG slices yourself "
                "(Slurm AutoDetect=nvml)", gpu)


def parse_gpu_list(text: str, source: str = "nvidia-smi -L") -> tuple[GpuInfo, ...]:
    """``nvidia-smi -L`` lines or ``--query-gpu=index,name,pci.bus_id,uuid --format=csv``."""
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if first.lower().startswith("index"):
        return _parse_query_csv(lines, source)
    out: list[GpuInfo] = []
    for i, ln in enumerate(lines, start=1):
        if not ln.strip():
            continue
        if re.match(r"^\s+MIG\b", ln):
            raise _mig_error(source, i, f"GPU{out[-1].index}" if out else "?")
        m = re.match(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?\s*$", ln)
        if not m:
            raise _err(source, i, "expected 'GPU <n>: <name> (UUID: ...)'", ln)
        out.append(GpuInfo(int(m.group(1)), m.group(2).strip(), None, m.group(3)))
    return _check_indices(out, source)


def _parse_query_csv(lines: list[str], source: str) -> tuple[GpuInfo, ...]:
    rows = list(csv.reader([ln for ln in lines if ln.strip()], skipinitialspace=True))
    head = [h.strip().lower() for h in rows[0]]
    if "index" not in head or "name" not in head:
        raise _err(source, 1, "the CSV needs index and name columns "
                   "(--query-gpu=index,name,pci.bus_id,uuid --format=csv)", lines[0])
    out: list[GpuInfo] = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(head):
            raise _err(source, n, f"{len(row)} fields, header has {len(head)}", ",".join(row))
        rec = dict(zip(head, (c.strip() for c in row), strict=True))
        if not rec["index"].isdigit():
            raise _err(source, n, "index is not a number", rec["index"])
        if rec.get("mig.mode.current", "").lower() == "enabled":
            raise _mig_error(source, n, f"GPU{rec['index']}")
        out.append(GpuInfo(int(rec["index"]), rec["name"], rec.get("pci.bus_id"),
                           rec.get("uuid")))
    return _check_indices(out, source)


def _check_indices(gpus: list[GpuInfo], source: str) -> tuple[GpuInfo, ...]:
    if [g.index for g in gpus] != list(range(len(gpus))):
        raise ConfigError(f"GPU indices must be 0..{len(gpus) - 1} in order, got "
                          f"{[g.index for g in gpus]}", source=source, key="index")
    if not gpus:
        raise ConfigError("no GPUs listed", source=source)
    return tuple(gpus)


@dataclass(frozen=True)
class CpuInfo:
    """Where each logical CPU is: its socket and core as Slurm counts them, and its NUMA node.

    Slurm's core ids (gres.conf ``Cores=``) are abstract: sockets in order, each socket's cores in
    order, so socket ``s`` core ``k`` is ``s * cores_per_socket + k``, whatever the OS numbers
    the CPUs. gres.conf(5), Cores, NOTE: "a logical core index must be specified instead of the
    physical core index ... Core 0 will be the first core on the first socket, while core 1 will
    be the second core on the first socket" (https://slurm.schedmd.com/gres.conf.html; same text
    in the 22.05 man page). Hence ``place`` maps each CPU to (socket rank, core rank in socket),
    the ranks taken from the real CPU -> core -> socket map, never from CPU id arithmetic.
    """

    sockets: int
    cores_per_socket: int
    threads_per_core: int
    place: dict[int, tuple[int, int]]
    numa: dict[int, int]
    exact: bool = True
    """False when the cores of a socket were inferred from the ``lscpu`` summary (which does not
    say which CPUs are SMT siblings), True from ``lscpu -p`` or /sys."""

    @property
    def cpus(self) -> int:
        """Number of logical CPUs."""
        return len(self.place)

    def socket_of(self, cpu: int) -> int:
        """Socket index (0, 1, ... in Slurm's order) of logical CPU ``cpu`` (KeyError if absent)."""
        return self.place[cpu][0]

    def core_of(self, cpu: int) -> int:
        """Slurm core id of logical CPU ``cpu`` (KeyError if absent)."""
        socket, rank = self.place[cpu]
        return socket * self.cores_per_socket + rank

    def numa_of(self, cpu: int) -> int | None:
        """NUMA node of logical CPU ``cpu``, if the source says."""
        return self.numa.get(cpu)


_MAX_ID_DIGITS = 9
PARSEABLE_HINT = "lscpu -p=CPU,CORE,SOCKET,NODE"


def cpu_info(rows: list[tuple[int, int, int, int | None]], source: str, exact: bool = True
             ) -> CpuInfo:
    """A :class:`CpuInfo` from ``(cpu, core id, socket id, NUMA node or None)`` rows. Ids may be
    sparse or per socket (/sys core ids, POWER9 package ids 0 and 8): sockets are ranked by id,
    cores by id within their socket. Every socket must have as many cores, and every core as many
    threads (Slurm's node line has one CoresPerSocket and ThreadsPerCore)."""
    if not rows:
        raise ConfigError("no CPUs listed", source=source)
    cores_of: dict[int, dict[int, list[int]]] = {}
    numa: dict[int, int] = {}
    seen: set[int] = set()
    for cpu, core, socket, node in rows:
        if cpu in seen:
            raise ConfigError(f"CPU {cpu} is listed twice", source=source, key="CPU", value=cpu)
        seen.add(cpu)
        cores_of.setdefault(socket, {}).setdefault(core, []).append(cpu)
        if node is not None:
            numa[cpu] = node
    counts = {s: len(c) for s, c in cores_of.items()}
    if len(set(counts.values())) > 1:
        raise ConfigError(f"sockets have different numbers of cores {dict(sorted(counts.items()))}"
                          " (offline CPUs?); Slurm's node line takes one CoresPerSocket",
                          source=source, key="CORE")
    threads = {len(cpus) for c in cores_of.values() for cpus in c.values()}
    if len(threads) > 1:
        raise ConfigError(f"cores have different numbers of threads {sorted(threads)} (offline "
                          "CPUs?); Slurm's node line takes one ThreadsPerCore", source=source,
                          key="CPU")
    place: dict[int, tuple[int, int]] = {}
    for si, socket in enumerate(sorted(cores_of)):
        for ci, core in enumerate(sorted(cores_of[socket])):
            for cpu in cores_of[socket][core]:
                place[cpu] = (si, ci)
    return CpuInfo(sockets=len(cores_of), cores_per_socket=counts.popitem()[1],
                   threads_per_core=threads.pop(), place=place, numa=numa, exact=exact)


def _is_parseable(text: str) -> bool:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first.startswith("#") or re.match(r"[0-9]+,", first) is not None


def parse_lscpu(text: str, source: str = "lscpu") -> CpuInfo:
    """``lscpu -p=CPU,CORE,SOCKET,NODE`` (exact; also what the live path builds from /sys) or
    the human-readable ``lscpu`` summary (run with ``LC_ALL=C``), told apart by their first
    line."""
    if _is_parseable(text):
        return _parse_lscpu_parseable(text, source)
    return _parse_lscpu_summary(text, source)


def _id(value: str, source: str, line: int, column: str) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= _MAX_ID_DIGITS):
        what = "is empty (an offline CPU?)" if value in ("", "-") else "is not a number"
        raise _err(source, line, f"{column} {what}", value)
    return int(value)


def _parse_lscpu_parseable(text: str, source: str) -> CpuInfo:
    """``lscpu -p=...``: comment lines start with '#', the last one before the data naming the
    columns (``# CPU,Core,Socket,Node``); without it, CPU,CORE,SOCKET,NODE in that order."""
    columns = ["CPU", "CORE", "SOCKET", "NODE"]
    rows: list[tuple[int, int, int, int | None]] = []
    for i, raw in enumerate(text.splitlines(), start=1):
        ln = raw.strip()
        if not ln:
            continue
        if ln.startswith("#"):
            names = [c.strip().upper() for c in ln[1:].split(",")]
            if not rows and "CPU" in names:
                columns = names
            continue
        cells = [c.strip() for c in ln.split(",")]
        need = [c for c in ("CPU", "CORE", "SOCKET") if c not in columns]
        if need:
            raise _err(source, i, f"no {'/'.join(need)} column: save `{PARSEABLE_HINT}`", ln)
        if len(cells) != len(columns):
            raise _err(source, i, f"{len(cells)} fields, the header names {len(columns)} "
                       f"({','.join(columns)})", ln)
        rec = dict(zip(columns, cells, strict=True))
        cpu = _id(rec["CPU"], source, i, "CPU")
        if cpu > MAX_CPU_ID:
            raise _err(source, i, f"CPU ids go up to {MAX_CPU_ID}", cpu)
        node = rec.get("NODE", "")
        rows.append((cpu, _id(rec["CORE"], source, i, "CORE"),
                     _id(rec["SOCKET"], source, i, "SOCKET"),
                     _id(node, source, i, "NODE") if node else None))
    if not rows:
        raise ConfigError(f"no CPU lines: is this `{PARSEABLE_HINT}` output?", source=source)
    return cpu_info(rows, source)


def _parse_lscpu_summary(text: str, source: str) -> CpuInfo:
    """The summary says how many sockets, cores and threads, and which CPUs each NUMA node has,
    but not which CPUs are on which socket: sockets are read off the NUMA nodes (in node id
    order, whole nodes adding up to one socket's CPUs each; interleaved lists such as 0,2,4...
    included). Within a socket, its sorted CPUs are split into cores the Linux way: on x86/ARM
    the first ``cores`` CPUs are each core's first thread, the next ``cores`` its second...;
    on POWER (``Architecture: ppc...``) a core's threads are consecutive."""
    values: dict[str, tuple[int, str]] = {}
    for i, ln in enumerate(text.splitlines(), start=1):
        key, sep, value = ln.partition(":")
        if sep and key.strip():
            values[key.strip()] = (i, value.strip())

    def num(key: str) -> int:
        if key not in values:
            raise ConfigError(f"no {key!r} line: is this `LC_ALL=C lscpu` (or "
                              f"`{PARSEABLE_HINT}`) output?", source=source, key=key)
        line, value = values[key]
        if not (value.isascii() and value.isdigit() and len(value) <= _MAX_ID_DIGITS):
            raise _err(source, line, f"{key} is not a number", value)
        return int(value)

    numa: dict[int, list[int]] = {}
    for k, (line, v) in values.items():
        m = re.fullmatch(r"NUMA node([0-9]{1,9}) CPU\(s\)", k)
        if m and v:
            try:
                numa[int(m.group(1))] = parse_cpu_list(v)
            except ConfigError as err:
                raise _err(source, line, f"{k}: " + str(err).split(": ", 1)[-1], v) from None
    cpus, sockets = num("CPU(s)"), num("Socket(s)")
    cores, threads = num("Core(s) per socket"), num("Thread(s) per core")
    if sockets * cores * threads != cpus or cpus == 0:
        raise ConfigError(
            f"{sockets} sockets x {cores} cores x {threads} threads != {cpus} CPUs "
            "(offline CPUs?)", source=source, key="CPU(s)", value=cpus)
    if cpus > MAX_CPU_ID + 1:
        raise ConfigError(f"{cpus} CPUs: discovery takes up to {MAX_CPU_ID + 1}", source=source,
                          key="CPU(s)", value=cpus)
    if "On-line CPU(s) list" in values:
        line, online_text = values["On-line CPU(s) list"]
        try:
            online = parse_cpu_list(online_text)
        except ConfigError as err:
            raise _err(source, line, "On-line CPU(s) list: " + str(err).split(": ", 1)[-1],
                       online_text) from None
        if len(set(online)) != cpus:
            raise _err(source, line, f"{len(set(online))} CPUs on line but CPU(s) says {cpus} "
                       f"(offline CPUs?); save `{PARSEABLE_HINT}` instead", online_text)
    else:
        online = list(range(cpus))
    per_socket = cores * threads
    if sockets == 1:
        groups = [sorted(set(online))]
    else:
        groups = _sockets_from_numa(numa, set(online), sockets, per_socket, source)
    power = values.get("Architecture", (0, ""))[1].startswith("ppc")
    rows: list[tuple[int, int, int, int | None]] = []
    node_of = {c: n for n, lst in numa.items() for c in lst}
    for si, members in enumerate(groups):
        for i, c in enumerate(members):
            rows.append((c, i // threads if power else i % cores, si, node_of.get(c)))
    return cpu_info(rows, source, exact=threads == 1)


def _sockets_from_numa(numa: dict[int, list[int]], online: set[int], sockets: int,
                       per_socket: int, source: str) -> list[list[int]]:
    """Whole NUMA nodes, in node id order, adding up to ``per_socket`` CPUs per socket."""
    hint = f"which CPUs are on which socket is unknown; save `{PARSEABLE_HINT}` instead"
    if not numa:
        raise ConfigError(f"no \"NUMA nodeN CPU(s)\" lines for {sockets} sockets: {hint}",
                          source=source, key="NUMA node0 CPU(s)")
    listed = [c for lst in numa.values() for c in lst]
    if len(listed) != len(set(listed)) or set(listed) != online:
        raise ConfigError(f"the NUMA nodes' CPU lists do not cover each CPU once: {hint}",
                          source=source, key="NUMA node0 CPU(s)")
    groups: list[list[int]] = [[]]
    for node in sorted(numa):
        if len(groups[-1]) == per_socket:
            groups.append([])
        groups[-1].extend(numa[node])
        if len(groups[-1]) > per_socket:
            break
    if len(groups) != sockets or any(len(g) != per_socket for g in groups):
        raise ConfigError(f"the NUMA nodes do not split into {sockets} sockets of {per_socket} "
                          f"CPUs (a NUMA node across sockets?): {hint}", source=source,
                          key="NUMA node0 CPU(s)")
    return [sorted(g) for g in groups]


MAX_CPU_ID = 65535
"""The highest logical CPU id discovery accepts (Linux builds allow at most 8192 CPUs)."""
_CPU_LIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")


def parse_cpu_list(text: str, source: str = "CPU list") -> list[int]:
    """``"48-63,176-191"`` -> logical CPU ids; a ConfigError for anything else (a bad syntax,
    a range that runs backwards, an id above :data:`MAX_CPU_ID`)."""
    if _CPU_LIST.fullmatch(text) is None:
        raise ConfigError(f"bad CPU list {text!r}: expected ids and ranges such as 0-15,32-47",
                          source=source, value=text)
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last > MAX_CPU_ID or last < first:
            raise ConfigError(f"bad CPU range {part!r} in {text!r}: "
                              + (f"CPU ids go up to {MAX_CPU_ID}" if last > MAX_CPU_ID
                                 else "it runs backwards"), source=source, value=text)
        out.extend(range(first, last + 1))
    return out
