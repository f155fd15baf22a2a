"""Shared builders for the daemon's unit tests: FakeSlurm + SQLite file + FakeClock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.priority.clock import FakeClock
from hai_slurm.priority.config.loader import DaemonConfig, Intervals
from hai_slurm.priority.daemon.loop import Daemon, open_store
from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.fake import FakeSlurm
from hai_slurm.slurm_plugins.types import ClusterSnapshot, SlurmClient

T0 = 1_800_000_000


def record(cls: PriorityClass | str, team: str = "vision", *, preemptible: bool = True,
           source: ClassOrigin = ClassOrigin.DIRECTIVE) -> str:
    """The admin_comment job_submit.lua would write for a job of ``cls`` in ``team``."""
    name = cls.value if isinstance(cls, PriorityClass) else cls
    job_class = name if name != "AUTO" else "NORMAL"
    return format_admin_comment(HaiJobInfo(priority=name, job_class=job_class, team=team,
                                           preemptible=preemptible, grace=60, source=source))


def config(tmp: Path, policy: PolicyConfig | None = None, *, cycle: float = 10.0,
           lock_ttl: float = 30.0, backoff_max: float = 60.0,
           writes_per_cycle: int = 1000) -> DaemonConfig:
    """A daemon configuration with its SQLite database under ``tmp``."""
    return DaemonConfig(policy=policy or PolicyConfig(),
                        intervals=Intervals(cycle=cycle, lock_ttl=lock_ttl,
                                            backoff_max=backoff_max,
                                            writes_per_cycle=writes_per_cycle),
                        state_dir=str(tmp), database_url=f"sqlite:///{tmp}/hai-slurm.db",
                        metrics_port=0)


@dataclass
class Rig:
    """One fake cluster, one clock, one database: daemons are made on demand."""

    slurm: FakeSlurm
    clock: FakeClock
    cfg: DaemonConfig

    def daemon(self, owner: str = "d1", client: SlurmClient | None = None) -> Daemon:
        """A new daemon process stand-in (new repository and lock objects on the same file)."""
        repo, lock = open_store(self.cfg)
        return Daemon(client or self.slurm, repo, lock, config=self.cfg, clock=self.clock,
                      owner=owner)

    def tick(self, seconds: float = 0.0) -> None:
        """Move both clocks (the daemon's and the fake cluster's) forward."""
        self.clock.advance(seconds)
        self.slurm.advance(int(self.clock.now))

    def submit(self, cls: PriorityClass | str, team: str = "vision", *, gpus: int = 1,
               comment: str = "", **kw: object) -> int:
        """Queue a job of class ``cls`` for ``team`` (admin_comment as the plugin writes it)."""
        return self.slurm.submit(admin_comment=record(cls, team), comment=comment,
                                 account=team, gpus_per_node=gpus, **kw)  # type: ignore[arg-type]


def rig(tmp: Path, policy: PolicyConfig | None = None, *, writes_per_cycle: int = 1000,
        **intervals: float) -> Rig:
    """A rig at ``T0`` with 4 nodes x 8 GPUs."""
    return Rig(FakeSlurm(now=T0), FakeClock(float(T0)),
               config(tmp, policy, writes_per_cycle=writes_per_cycle, **intervals))


class Broken:
    """A SlurmClient whose snapshots are doctored (partial or stale); writes go to the fake."""

    def __init__(self, slurm: FakeSlurm, doctor: object) -> None:
        self._slurm = slurm
        self._doctor = doctor

    def __getattr__(self, name: str) -> object:
        return getattr(self._slurm, name)

    def snapshot(self) -> ClusterSnapshot:
        snap = self._slurm.snapshot()
        return self._doctor(snap)  # type: ignore[operator,no-any-return]
