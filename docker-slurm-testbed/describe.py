"""The testbed as a :mod:`hai_slurm.conf` cluster description plus a deployment (pure).

:func:`cluster_description` turns a :class:`~.shape.ClusterShape` into the same kind of value a
site writes in TOML (node type with sockets, PCIe switches and GPUs; nodes; leaf switches under a
spine; the partition; the eight classes with QOS names, grace times and who preempts whom; the
demo teams), and :func:`deployment` turns a :class:`~.layout.Layout` into conf's
:class:`~hai_slurm.conf.deployment.Deployment` (addresses, ports, paths, munge socket, test-speed
scheduling). conf's generators then write every file, so the testbed has no Slurm syntax of its own.
"""

from __future__ import annotations

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.deployment import SCHEDULER_PARAMETERS as SITE_SCHEDULER_PARAMETERS
from hai_slurm.conf.deployment import Deployment, NodeEndpoint
from hai_slurm.conf.hostlist import compress
from hai_slurm.conf.model import (
    ClassPolicy,
    ClusterDescription,
    NodeGroup,
    NodeType,
    Partition,
    PcieSwitch,
    Socket,
    Switch,
    Team,
)
from hai_slurm.conf.validate import validate

from .layout import Layout
from .shape import ClusterShape

SOURCE = "the testbed's ClusterShape"
"""The description's source, named in errors and in the generated files' header."""

NODE_TYPE = "testbed"
DEMO_TEAMS = ("team-a", "team-b")
"""Accounts for the demo teams; root is a user of both (default account: the first)."""

SCHEDULER_PARAMETERS = ("bf_interval=1", "sched_interval=1", "sched_min_interval=100000")
"""Schedule within about a second (tests wait for jobs to start)."""

EXTRA_SETTINGS = (("MessageTimeout", "20"), ("SlurmdTimeout", "60"))
"""Generous timeouts on a busy 2-core machine. MinJobAge is the generator's (daemon mode:
ended jobs stay requeueable for 65 min, as on a real cluster; native mode: Slurm's 300 s)."""


def _node_type(shape: ClusterShape, device_dir: str) -> NodeType:
    switches: dict[int, list[int]] = {}
    for gpu in shape.gpu_placements():
        switches.setdefault(gpu.switch, []).append(gpu.index)
    per_socket = shape.pcie_switches_per_socket
    sockets = tuple(
        Socket(tuple(PcieSwitch(tuple(switches[w]))
                     for w in range(s * per_socket, (s + 1) * per_socket) if w in switches))
        for s in range(shape.sockets))
    return NodeType(name=NODE_TYPE, sockets=sockets, cores_per_socket=shape.cores_per_socket,
                    memory_mb=shape.memory_mb, device_pattern=f"{device_dir}/nvidia{{index}}")


def cluster_description(shape: ClusterShape, device_dir: str = "/dev") -> ClusterDescription:
    """The shape as a validated cluster description (fake GPUs are ``DEVICE_DIR/nvidiaN``)."""
    leaves = shape.leaf_switches()
    classes = tuple(
        ClassPolicy(cls, cls.qos, grace_time_s=shape.grace_time(cls),
                    preempts=tuple(o for o in PriorityClass if cls.outranks(o)))
        for cls in PriorityClass)
    all_classes = tuple(PriorityClass)
    desc = ClusterDescription(
        name=shape.cluster_name,
        node_types=(_node_type(shape, device_dir),),
        node_groups=(NodeGroup(compress(shape.node_names), NODE_TYPE),),
        switches=(*(Switch(leaf, nodes=compress(nodes)) for leaf, nodes in leaves),
                  Switch("spine", switches=tuple(leaf for leaf, _ in leaves))),
        partitions=(Partition(shape.partition, "ALL", default=True),),
        classes=classes,
        teams=tuple(Team(name, classes=all_classes, users=("root",)) for name in DEMO_TEAMS),
        source=SOURCE)
    validate(desc)
    return desc


def deployment(shape: ClusterShape, layout: Layout) -> Deployment:
    """Where and how the testbed's daemons run, as conf's deployment value."""
    return Deployment(
        slurm_version=layout.slurm_version,
        preemption=shape.preemption,
        accounting=shape.accounting,
        controller_host=layout.controller_hostname,
        controller_addr=layout.controller_addr,
        controller_port=layout.controller_port,
        accounting_host=layout.dbd_addr,
        accounting_port=layout.dbd_port,
        slurm_user=layout.slurm_user,
        state_dir=layout.state_save_dir,
        spool_dir=layout.spool_dir,
        log_dir=layout.log_dir,
        run_dir=layout.run_dir,
        cred_expire_s=shape.cred_expire,
        # No cgroups: several slurmd share one host (and containers lack the cgroup mounts).
        proctrack_type="proctrack/linuxproc",
        task_plugin="task/none",
        multiple_slurmd=layout.multiple_slurmd,
        config_overrides=True,
        job_submit_lua=True,
        munge_socket=layout.munge_socket,
        scheduler_parameters=(SITE_SCHEDULER_PARAMETERS if shape.site_scheduling
                              else SCHEDULER_PARAMETERS),
        extra_settings=EXTRA_SETTINGS,
        endpoints={n.name: NodeEndpoint(n.addr, n.port, n.hostname) for n in layout.nodes},
    )


def accounting_deployment(shape: ClusterShape) -> Deployment:
    """The deployment facts the accounting set-up depends on (no layout needed)."""
    return Deployment(preemption=shape.preemption, accounting=shape.accounting)
