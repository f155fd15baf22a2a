"""Read a cluster description (TOML, see ``conf/examples/cluster.toml``) into values.

Parsing checks shapes and types and refuses unknown keys (typos); :mod:`.validate` then checks
the description as a whole (unknown nodes in switches, overlaps, cycles, quotas...). Every error
is a :class:`ConfigError` naming the file, the key path
(``node_types.dgx.socket[1].pcie_switch[0].gpus``) and the bad value.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.deployment import Deployment, NodeEndpoint, PreemptionMode, target_version
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
    Team,
)
from hai_slurm.conf.validate import validate
from hai_slurm.errors import ConfigError

DEFAULT_GRACE_TIME_S = 60
# A team without ``classes`` may submit at NORMAL and below.
DEFAULT_TEAM_CLASSES = tuple(c for c in PriorityClass if c.weight <= PriorityClass.NORMAL.weight)


class _Reader:
    """Typed access to a TOML table that reports file, key path and value on every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, key: str, message: str, value: object = None) -> ConfigError:
        return ConfigError(message, source=self.source, key=key, value=value)

    def table(self, data: Mapping[str, Any], path: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.err(path, f"must be a table, not {data!r}", data)
        for k in data:
            if k not in allowed:
                raise self.err(f"{path}.{k}" if path else k,
                               f"unknown key (allowed: {', '.join(sorted(allowed))})", data[k])
        return data

    def get(self, data: Mapping[str, Any], key: str, path: str, typ: type, default: Any) -> Any:
        full = f"{path}.{key}" if path else key
        if key not in data:
            if default is _REQUIRED:
                raise self.err(full, "is required")
            return default
        value = data[key]
        if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.err(full, f"must be an integer, not {value!r}", value)
        if not isinstance(value, typ):
            raise self.err(full, f"must be a {typ.__name__}, not {value!r}", value)
        return value

    def int_list(self, data: Mapping[str, Any], key: str, path: str) -> tuple[int, ...]:
        full = f"{path}.{key}"
        value = self.get(data, key, path, list, _REQUIRED)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.err(full, f"must be a list of integers, not {value!r}", value)
        return tuple(value)

    def str_list(self, data: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        full = f"{path}.{key}"
        value = self.get(data, key, path, list, [])
        if not all(isinstance(v, str) for v in value):
            raise self.err(full, f"must be a list of strings, not {value!r}", value)
        return tuple(value)

    def classes(self, data: Mapping[str, Any], key: str, path: str) -> tuple[PriorityClass, ...]:
        names = self.str_list(data, key, path)
        return tuple(self.priority_class(n, f"{path}.{key}") for n in names)

    def priority_class(self, name: str, key: str) -> PriorityClass:
        try:
            return PriorityClass(name.upper())
        except ValueError:
            known = ", ".join(c.value for c in PriorityClass)
            raise self.err(key, f"unknown priority class {name!r} (known: {known})",
                           name) from None


_REQUIRED = object()


def _node_type(r: _Reader, name: str, data: Mapping[str, Any]) -> NodeType:
    path = f"node_types.{name}"
    r.table(data, path, {"gpu_model", "gpus", "cores_per_socket", "threads_per_core",
                         "memory_mb", "device_pattern", "socket", "nvlink"})
    sockets: list[Socket] = []
    raw_sockets = r.get(data, "socket", path, list, _REQUIRED)
    for si, raw in enumerate(raw_sockets):
        spath = f"{path}.socket[{si}]"
        r.table(raw, spath, {"pcie_switch"})
        switches: list[PcieSwitch] = []
        for wi, rawsw in enumerate(r.get(raw, "pcie_switch", spath, list, [])):
            wpath = f"{spath}.pcie_switch[{wi}]"
            r.table(rawsw, wpath, {"gpus", "cores", "numa"})
            switches.append(PcieSwitch(
                gpus=r.int_list(rawsw, "gpus", wpath),
                cores=r.get(rawsw, "cores", wpath, str, None),
                numa=r.get(rawsw, "numa", wpath, int, None)))
        sockets.append(Socket(tuple(switches)))
    links: list[NvlinkGroup] = []
    for li, raw in enumerate(r.get(data, "nvlink", path, list, [])):
        lpath = f"{path}.nvlink[{li}]"
        r.table(raw, lpath, {"gpus", "links"})
        links.append(NvlinkGroup(r.int_list(raw, "gpus", lpath),
                                 r.get(raw, "links", lpath, int, _REQUIRED)))
    nt = NodeType(
        name=name, sockets=tuple(sockets),
        cores_per_socket=r.get(data, "cores_per_socket", path, int, _REQUIRED),
        threads_per_core=r.get(data, "threads_per_core", path, int, 1),
        memory_mb=r.get(data, "memory_mb", path, int, _REQUIRED),
        gpu_model=r.get(data, "gpu_model", path, str, ""),
        device_pattern=r.get(data, "device_pattern", path, str, "/dev/nvidia{index}"),
        nvlink=tuple(links))
    declared = r.get(data, "gpus", path, int, None)
    if declared is not None and declared != nt.gpu_count:
        raise r.err(f"{path}.gpus", f"says {declared} GPUs but the socket/pcie_switch layout "
                    f"lists {nt.gpu_count}; fix one of them (gres would be gpu:{declared})",
                    declared)
    return nt


def _classes(r: _Reader, data: Mapping[str, Any]) -> tuple[ClassPolicy, ...]:
    raw = r.table(data, "classes", set(data))  # keys are checked as class names below
    default_grace = r.get(raw, "default_grace_time", "classes", int, DEFAULT_GRACE_TIME_S)
    given: dict[PriorityClass, Mapping[str, Any]] = {}
    for key, value in raw.items():
        if key != "default_grace_time":
            given[r.priority_class(key, f"classes.{key}")] = value
    out: list[ClassPolicy] = []
    for cls in PriorityClass:
        path = f"classes.{cls.value}"
        entry = r.table(given.get(cls, {}), path, {"qos", "grace_time", "preempts", "max_grace",
                                                   "allow_non_preemptible"})
        lower = tuple(c for c in PriorityClass if c.weight < cls.weight)
        out.append(ClassPolicy(
            cls=cls, qos=r.get(entry, "qos", path, str, cls.qos),
            grace_time_s=r.get(entry, "grace_time", path, int, default_grace),
            preempts=r.classes(entry, "preempts", path) if "preempts" in entry else lower,
            max_grace_s=r.get(entry, "max_grace", path, int, None),
            allow_non_preemptible=r.get(entry, "allow_non_preemptible", path, bool, None)))
    return tuple(out)


def parse_description(data: Mapping[str, Any], source: str = "<description>"
                      ) -> ClusterDescription:
    """Build and validate a :class:`ClusterDescription` from parsed TOML data."""
    r = _Reader(source)
    r.table(data, "", {"format", "cluster", "node_types", "nodes", "switch", "partition",
                       "classes", "teams", "deployment"})
    fmt = r.get(data, "format", "", int, 1)
    if fmt != 1:
        raise r.err("format", "unsupported description format (this version reads 1)", fmt)
    cluster = r.table(r.get(data, "cluster", "", dict, _REQUIRED), "cluster", {"name"})
    node_types = tuple(_node_type(r, n, d) for n, d in
                       r.get(data, "node_types", "", dict, _REQUIRED).items())
    groups: list[NodeGroup] = []
    for i, raw in enumerate(r.get(data, "nodes", "", list, _REQUIRED)):
        r.table(raw, f"nodes[{i}]", {"names", "type"})
        groups.append(NodeGroup(r.get(raw, "names", f"nodes[{i}]", str, _REQUIRED),
                                r.get(raw, "type", f"nodes[{i}]", str, _REQUIRED)))
    switches: list[Switch] = []
    for i, raw in enumerate(r.get(data, "switch", "", list, [])):
        p = f"switch[{i}]"
        r.table(raw, p, {"name", "nodes", "switches"})
        switches.append(Switch(r.get(raw, "name", p, str, _REQUIRED),
                               r.get(raw, "nodes", p, str, None), r.str_list(raw, "switches", p)))
    partitions: list[Partition] = []
    for i, raw in enumerate(r.get(data, "partition", "", list, [])):
        p = f"partition[{i}]"
        r.table(raw, p, {"name", "nodes", "default", "max_time"})
        partitions.append(Partition(
            r.get(raw, "name", p, str, _REQUIRED), r.get(raw, "nodes", p, str, "ALL"),
            r.get(raw, "default", p, bool, False), r.get(raw, "max_time", p, str, "INFINITE")))
    teams: list[Team] = []
    for name, raw in r.get(data, "teams", "", dict, {}).items():
        p = f"teams.{name}"
        r.table(raw, p, {"gpu_quota", "gpu_limit", "classes", "users"})
        classes = r.classes(raw, "classes", p) if "classes" in raw else DEFAULT_TEAM_CLASSES
        teams.append(Team(name=name, gpu_quota=r.get(raw, "gpu_quota", p, int, None),
                          classes=classes, users=r.str_list(raw, "users", p),
                          gpu_limit=r.get(raw, "gpu_limit", p, int, None)))
    desc = ClusterDescription(
        name=r.get(cluster, "name", "cluster", str, _REQUIRED), node_types=node_types,
        node_groups=tuple(groups), switches=tuple(switches),
        partitions=tuple(partitions) or (Partition("gpu", "ALL", True),),
        classes=_classes(r, r.get(data, "classes", "", dict, {})), teams=tuple(teams),
        source=source)
    validate(desc)
    return desc


_DEPLOYMENT_KEYS: dict[str, tuple[str, type]] = {
    # TOML key: (Deployment field, type)
    "accounting": ("accounting", bool),
    "controller_host": ("controller_host", str),
    "controller_addr": ("controller_addr", str),
    "controller_port": ("controller_port", int),
    "slurmd_port": ("slurmd_port", int),
    "accounting_host": ("accounting_host", str),
    "accounting_port": ("accounting_port", int),
    "slurm_user": ("slurm_user", str),
    "state_dir": ("state_dir", str),
    "spool_dir": ("spool_dir", str),
    "log_dir": ("log_dir", str),
    "run_dir": ("run_dir", str),
    "cred_expire": ("cred_expire_s", int),
    "min_job_age": ("min_job_age_s", int),
    "max_job_count": ("max_job_count", int),
    "proctrack_type": ("proctrack_type", str),
    "task_plugin": ("task_plugin", str),
    "multiple_slurmd": ("multiple_slurmd", bool),
    "config_overrides": ("config_overrides", bool),
    "job_submit_lua": ("job_submit_lua", bool),
    "munge_socket": ("munge_socket", str),
    "slurmctld_debug": ("slurmctld_debug", str),
    "slurmd_debug": ("slurmd_debug", str),
}


def parse_deployment(data: Mapping[str, Any], source: str = "<description>",
                     slurm_version: str | None = None) -> Deployment:
    """The ``[deployment]`` table (all keys optional); ``slurm_version`` overrides the file."""
    r = _Reader(source)
    p = "deployment"
    raw = r.table(r.get(data, "deployment", "", dict, {}), p,
                  {*_DEPLOYMENT_KEYS, "slurm_version", "preemption", "node",
                   "scheduler_parameters", "extra"})
    mode_text = r.get(raw, "preemption", p, str, PreemptionMode.DAEMON.value)
    try:
        mode = PreemptionMode(mode_text)
    except ValueError:
        raise r.err("deployment.preemption", "must be \"daemon\" or \"native\"",
                    mode_text) from None
    version_text = slurm_version or r.get(raw, "slurm_version", p, str, "22.05")
    try:
        version = target_version(version_text)
    except ConfigError as err:
        raise r.err("deployment.slurm_version", str(err), version_text) from None
    endpoints: dict[str, NodeEndpoint] = {}
    for node, ep in r.get(raw, "node", p, dict, {}).items():
        ep_path = f"deployment.node.{node}"
        r.table(ep, ep_path, {"addr", "port", "hostname"})
        endpoints[node] = NodeEndpoint(r.get(ep, "addr", ep_path, str, None),
                                       r.get(ep, "port", ep_path, int, None),
                                       r.get(ep, "hostname", ep_path, str, None))
    fields = {fld: r.get(raw, key, p, typ, None) for key, (fld, typ) in _DEPLOYMENT_KEYS.items()
              if key in raw}
    if "scheduler_parameters" in raw:
        fields["scheduler_parameters"] = r.str_list(raw, "scheduler_parameters", p)
    extra = r.get(raw, "extra", p, dict, {})
    for k, v in extra.items():
        if not isinstance(v, str | int):
            raise r.err(f"deployment.extra.{k}", "must be a string or integer", v)
    fields["extra_settings"] = tuple((k, str(v)) for k, v in extra.items())
    dep = Deployment(slurm_version=version, preemption=mode, endpoints=endpoints, **fields)
    try:
        dep.check()
    except ConfigError as err:
        raise ConfigError(str(err), source=source) from None
    return dep


def decode_utf8(raw: bytes, source: str, *, kind: str = "TOML files") -> str:
    """``raw`` as UTF-8 text (what ``kind`` must be), or a ConfigError naming the line and byte.
    A leading byte-order mark (Excel's "CSV UTF-8", Windows editors) is dropped: it would
    otherwise stick to the first column's name or key."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"not UTF-8 text ({kind} must be UTF-8): byte 0x{raw[err.start]:02x} at line "
            f"{line}, offset {err.start}; save the file as UTF-8 (e.g. `iconv -f latin1 -t "
            "utf-8`)", source=source) from None


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read: {err.strerror}", source=str(path)) from err
    try:
        return tomllib.loads(decode_utf8(raw, str(path)))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"not valid TOML: {err}", source=str(path)) from err


def load_description(path: str | Path) -> ClusterDescription:
    """Read and validate the description file at ``path``."""
    p = Path(path)
    return parse_description(_load_toml(p), source=str(p))


def load(path: str | Path, slurm_version: str | None = None
         ) -> tuple[ClusterDescription, Deployment]:
    """Description and deployment from one file (``slurm_version`` overrides the file's)."""
    p = Path(path)
    data = _load_toml(p)
    desc = parse_description(data, str(p))
    dep = parse_deployment(data, str(p), slurm_version)
    check_endpoints(desc, dep)
    return desc, dep


def check_endpoints(desc: ClusterDescription, dep: Deployment) -> None:
    """Every ``[deployment.node.X]`` must name a node of the description."""
    known = {n for n, _ in desc.nodes()}
    for node in dep.endpoints:
        if node not in known:
            raise ConfigError(f"unknown node {node!r} (not in any [[nodes]] names)",
                              source=desc.source, key=f"deployment.node.{node}", value=node)
