"""What the test cluster looks like: nodes, fake GPUs, sockets, switches, accounting, preemption.

:class:`ClusterShape` is a frozen value, validated on construction; both the local-process mode and
the Docker mode render their configuration from the same shape (see :mod:`.render`, which turns it
into a :mod:`hai_slurm.conf` cluster description). :class:`PreemptionMode` is conf's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.deployment import PreemptionMode
from hai_slurm.errors import ConfigError

__all__ = ["ClusterShape", "GpuPlacement", "PreemptionMode", "parse_grace_times",
           "parse_preemption"]

def _default_grace() -> tuple[tuple[PriorityClass, int], ...]:
    return tuple((cls, 0) for cls in PriorityClass)


@dataclass(frozen=True)
class GpuPlacement:
    """Where fake GPU ``index`` sits inside a node: its CPU socket and PCIe switch (node-wide)."""

    index: int
    socket: int
    switch: int


@dataclass(frozen=True)
class ClusterShape:
    """N nodes x G fake GPUs, with the CPU/PCIe layout, topology and policy knobs of the testbed.

    ``grace_times`` gives the native-mode ``GraceTime`` (seconds) of each class's QOS: the time a
    preempted job of that class gets between SIGTERM and being requeued. ``cred_expire`` is how
    long a requeued job must wait before it may start again (Slurm's default 121 s is too slow
    for tests). ``site_scheduling``: the generated slurm.conf's own ``SchedulerParameters`` (what
    a site runs: Slurm's 60-s main scheduling pass, backfill every 10 s) instead of the
    testbed's, which schedule every second so tests need not wait (at 10,000 pending jobs that
    keeps slurmctld's job lock busy, and every query waits for it: ``bench/priority_cycle_slurm.py
    --site-scheduling`` measures both).
    """

    nodes: int = 4
    gpus_per_node: int = 8
    sockets: int = 2
    pcie_switches_per_socket: int = 2
    cores_per_socket: int = 8
    memory_mb: int = 64000
    leaf_switch_count: int = 2
    accounting: bool = True
    preemption: PreemptionMode = PreemptionMode.DAEMON
    grace_times: tuple[tuple[PriorityClass, int], ...] = field(default_factory=_default_grace)
    cred_expire: int = 10
    cluster_name: str = "hai"
    partition: str = "main"
    site_scheduling: bool = False

    def __post_init__(self) -> None:
        _check_range("nodes", self.nodes, 1, 256)
        _check_range("gpus_per_node", self.gpus_per_node, 1, 64)
        _check_range("sockets", self.sockets, 1, 8)
        _check_range("pcie_switches_per_socket", self.pcie_switches_per_socket, 1, 16)
        _check_range("cores_per_socket", self.cores_per_socket, 1, 512)
        _check_range("memory_mb", self.memory_mb, 100, 1 << 24)
        _check_range("cred_expire", self.cred_expire, 5, 3600)
        if self.leaf_switch_count < 1:
            raise ConfigError("needs at least 1 leaf switch under the spine",
                              source="cluster shape", key="leaf_switch_count",
                              value=self.leaf_switch_count)
        if self.leaf_switch_count > self.nodes:
            raise ConfigError(
                f"cannot spread {self.nodes} node(s) over {self.leaf_switch_count} leaf switches; "
                f"use at least {self.leaf_switch_count} nodes or fewer leaf switches",
                source="cluster shape", key="leaf_switch_count", value=self.leaf_switch_count)
        if self.preemption is PreemptionMode.NATIVE and not self.accounting:
            raise ConfigError(
                "native preemption works through QOS, and QOS needs accounting (slurmdbd); "
                "drop --no-accounting or use --preemption daemon",
                source="cluster shape", key="preemption", value=self.preemption.value)
        seen = [cls for cls, _ in self.grace_times]
        if sorted(seen) != sorted(PriorityClass) or len(seen) != len(set(seen)):
            raise ConfigError("must give exactly one grace time per priority class",
                              source="cluster shape", key="grace_times", value=seen)
        for cls, seconds in self.grace_times:
            _check_range(f"grace_times[{cls.value}]", seconds, 0, 86400)
        for key, name in (("cluster_name", self.cluster_name), ("partition", self.partition)):
            if not name.isascii() or not name.replace("_", "").isalnum() or not name[:1].isalpha():
                raise ConfigError("must be letters, digits and _ and start with a letter",
                                  source="cluster shape", key=key, value=name)

    @property
    def node_names(self) -> tuple[str, ...]:
        """``n1`` ... ``nN``."""
        return tuple(f"n{i}" for i in range(1, self.nodes + 1))

    @property
    def cpus_per_node(self) -> int:
        """Cores per node (one thread per core)."""
        return self.sockets * self.cores_per_socket

    def leaf_switches(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """``(leaf name, node names)`` for each leaf switch; nodes split as evenly as possible."""
        names = self.node_names
        count = self.leaf_switch_count
        out: list[tuple[str, tuple[str, ...]]] = []
        start = 0
        for leaf in range(count):
            size = self.nodes // count + (1 if leaf < self.nodes % count else 0)
            out.append((f"leaf{leaf + 1}", names[start:start + size]))
            start += size
        return tuple(out)

    def gpu_placements(self) -> tuple[GpuPlacement, ...]:
        """Each GPU's socket and PCIe switch; GPUs fill switches in contiguous, even blocks."""
        switches = self.sockets * self.pcie_switches_per_socket
        placements = []
        for index in range(self.gpus_per_node):
            switch = index * switches // self.gpus_per_node
            placements.append(GpuPlacement(index, switch // self.pcie_switches_per_socket, switch))
        return tuple(placements)

    def grace_time(self, cls: PriorityClass) -> int:
        """The native-mode GraceTime of ``cls``'s QOS in seconds."""
        return dict(self.grace_times)[cls]

    def with_grace_times(self, times: Mapping[PriorityClass, int]) -> ClusterShape:
        """A copy with the given classes' grace times replaced."""
        merged = dict(self.grace_times) | dict(times)
        return _replace(self, grace_times=tuple((cls, merged[cls]) for cls in PriorityClass))

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (used in the testbed's state file)."""
        data = asdict(self)
        data["preemption"] = self.preemption.value
        data["grace_times"] = {cls.value: seconds for cls, seconds in self.grace_times}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ClusterShape:
        """Inverse of :meth:`to_json`; unknown keys are an error naming the key."""
        kwargs = dict(data)
        known = set(cls.__dataclass_fields__)
        for key in kwargs:
            if key not in known:
                raise ConfigError("unknown cluster shape key", source="cluster shape", key=key)
        if "preemption" in kwargs:
            kwargs["preemption"] = parse_preemption(str(kwargs["preemption"]))
        grace = kwargs.pop("grace_times", None)
        shape = cls(**kwargs)  # type: ignore[arg-type]
        if isinstance(grace, Mapping):
            shape = shape.with_grace_times(parse_grace_times(
                f"{k}={v}" for k, v in grace.items()))
        return shape


def _replace(shape: ClusterShape, **changes: object) -> ClusterShape:
    data = {name: getattr(shape, name) for name in shape.__dataclass_fields__}
    data.update(changes)
    return ClusterShape(**data)


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"must be an integer from {low} to {high}, got {value!r}",
                          source="cluster shape",
                          key=key, value=value)


def parse_preemption(text: str) -> PreemptionMode:
    """``daemon`` or ``native`` (any case) to :class:`PreemptionMode`."""
    try:
        return PreemptionMode(text.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in PreemptionMode)
        raise ConfigError(f"must be one of {choices}", key="preemption", value=text) from None


def parse_grace_times(items: Iterable[str]) -> dict[PriorityClass, int]:
    """Parse ``SECONDS`` (every class) or ``CLASS=SECONDS`` items, later items winning."""
    out: dict[PriorityClass, int] = {}
    for item in items:
        name, sep, seconds_text = item.partition("=")
        if not sep:
            name, seconds_text = "", item
        try:
            seconds = int(seconds_text)
        except ValueError:
            raise ConfigError("seconds must be an integer", key="grace-time", value=item) from None
        if not name:
            out.update(dict.fromkeys(PriorityClass, seconds))
            continue
        try:
            out[PriorityClass(name.strip().upper())] = seconds
        except ValueError:
            names = ", ".join(c.value for c in PriorityClass)
            raise ConfigError(f"unknown priority class {name!r} (one of {names})",
                              key="grace-time", value=item) from None
    return out
