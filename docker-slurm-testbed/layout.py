"""Where the cluster's pieces live: addresses, ports and directories.

The same :class:`~.shape.ClusterShape` runs in two layouts. The local layout (:func:`local_layout`)
puts every daemon on 127.0.0.1 with its own port and every file under one state directory; the
Docker layout (built by the Docker mode) gives each node a container hostname and default ports.
:mod:`.render` turns ``(shape, layout)`` into a :mod:`hai_slurm.conf` description and deployment,
then into configuration text, and never looks anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

from hai_slurm.conf.deployment import DEFAULT_SLURM_VERSION
from hai_slurm.errors import ConfigError
from hai_slurm.slurm_formats import SlurmVersion

from .shape import ClusterShape


@dataclass(frozen=True)
class NodeLayout:
    """How slurmctld reaches one compute node; ``port`` None means Slurm's default (6818)."""

    name: str
    hostname: str
    addr: str
    port: int | None


@dataclass(frozen=True)
class Layout:
    """Addresses and paths, as the daemons see them (inside containers for Docker).

    ``multiple_slurmd``: several slurmd on one host, so slurmd's spool dir, log and pid file get
    ``-%n`` (node name, expanded by Slurm). ``munge_socket`` None means munge's default socket.
    ``slurm_version`` is the release the daemons run (it decides a few moved keys).
    """

    controller_hostname: str
    controller_addr: str
    controller_port: int
    nodes: tuple[NodeLayout, ...]
    dbd_hostname: str
    dbd_addr: str
    dbd_port: int
    storage_host: str
    storage_port: int
    storage_user: str
    storage_pass: str
    storage_db: str
    etc_dir: str
    state_save_dir: str
    log_dir: str
    run_dir: str
    device_dir: str
    spool_dir: str
    multiple_slurmd: bool
    munge_socket: str | None
    slurm_user: str = "root"
    slurm_version: SlurmVersion = DEFAULT_SLURM_VERSION

    @property
    def slurmctld_log_file(self) -> str:
        """slurmctld's log file."""
        return f"{self.log_dir}/slurmctld.log"

    @property
    def slurmdbd_log_file(self) -> str:
        """slurmdbd's log file."""
        return f"{self.log_dir}/slurmdbd.log"

    @property
    def slurm_conf(self) -> str:
        """Path of slurm.conf (what clients need in ``SLURM_CONF``)."""
        return f"{self.etc_dir}/slurm.conf"


@dataclass(frozen=True)
class Ports:
    """TCP ports of the local testbed; all on 127.0.0.1 (slurmd: base, base+1, ...).

    The defaults stay clear of a system Slurm (6817-6819), MariaDB (3306) and Redis (6379).
    ``OPTIONS`` names the CLI option that changes each port, for error messages.
    """

    slurmctld: int = 16817
    slurmdbd: int = 16819
    mariadb: int = 16806
    redis: int = 16379
    slurmd_base: int = 16901

    OPTIONS: ClassVar[Mapping[str, str]] = MappingProxyType({
        "slurmctld": "--slurmctld-port",
        "slurmdbd": "--slurmdbd-port",
        "mariadb": "--mariadb-port",
        "redis": "--redis-port",
        "slurmd_base": "--slurmd-port-base",
    })

    def __post_init__(self) -> None:
        for name in self.OPTIONS:
            value = getattr(self, name)
            if not 1024 <= value <= 65535:
                raise ConfigError("port must be from 1024 to 65535", key=self.OPTIONS[name],
                                  value=value)

    def wanted(self, shape: ClusterShape) -> list[tuple[int, str, str]]:
        """Every port the testbed will listen on: ``(port, component, option)``."""
        out = [(self.slurmctld, "slurmctld", self.OPTIONS["slurmctld"]),
               (self.redis, "redis", self.OPTIONS["redis"])]
        if shape.accounting:
            out += [(self.slurmdbd, "slurmdbd", self.OPTIONS["slurmdbd"]),
                    (self.mariadb, "mariadb", self.OPTIONS["mariadb"])]
        for i, name in enumerate(shape.node_names):
            out.append((self.slurmd_base + i, f"slurmd {name}", self.OPTIONS["slurmd_base"]))
        seen: dict[int, str] = {}
        for port, component, option in out:
            if not 1 <= port <= 65535:
                raise ConfigError(f"{component} would listen on port {port}, outside 1-65535",
                                  key=option, value=port)
            if port in seen:
                raise ConfigError(f"port {port} is given to both {seen[port]} and {component}",
                                  key=option, value=port)
            seen[port] = component
        return out


def local_layout(shape: ClusterShape, ports: Ports, state_dir: Path, hostname: str,
                 storage_pass: str,
                 slurm_version: SlurmVersion = DEFAULT_SLURM_VERSION) -> Layout:
    """Everything on 127.0.0.1 with one port per node, every path under ``state_dir``."""
    root = str(state_dir.resolve())
    nodes = tuple(NodeLayout(name, hostname, "127.0.0.1", ports.slurmd_base + i)
                  for i, name in enumerate(shape.node_names))
    return Layout(
        controller_hostname=hostname, controller_addr="127.0.0.1",
        controller_port=ports.slurmctld, nodes=nodes,
        dbd_hostname=hostname, dbd_addr="127.0.0.1", dbd_port=ports.slurmdbd,
        storage_host="127.0.0.1", storage_port=ports.mariadb, storage_user="slurm",
        storage_pass=storage_pass, storage_db="slurm_acct_db",
        etc_dir=f"{root}/etc", state_save_dir=f"{root}/ctld", log_dir=f"{root}/log",
        run_dir=f"{root}/run", device_dir=f"{root}/dev",
        spool_dir=f"{root}/spool/slurmd", multiple_slurmd=True,
        munge_socket=f"{root}/munge/munge.socket", slurm_version=slurm_version,
    )
