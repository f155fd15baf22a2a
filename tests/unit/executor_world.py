"""A fake world for executor unit tests: FakeSlurm, a fake clock, and victims that react.

Each victim has a :class:`Behaviour`. When the executor waits (it sleeps through the clock), the
world moves time on, lets FakeSlurm schedule, and lets every signalled victim do what its
behaviour says: write ``phase.json`` (saving) and ``ack.json`` into its real control directory
(owned by the test's uid, so :func:`read_job_report` trusts them) and exit 75 or keep running.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from hai_slurm.checkpoint.protocol import (
    Ack,
    Phase,
    make_phase,
    prepare_control_dir,
    write_ack,
    write_phase,
)
from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.clock import FakeClock
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.loop import Daemon
from hai_slurm.priority.daemon.planning import SnapshotPlanner
from hai_slurm.priority.daemon.save_times import SaveTimes
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.types import ExecutorSettings
from hai_slurm.priority.planner.testing import gpu_cluster
from hai_slurm.priority.planner.types import PlannerConfig, PlanningResult
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.lock import LeaderLock
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.fake import DEFAULT_VERSION, FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import JobState

T0 = 1_800_000_000


@dataclass(frozen=True)
class Behaviour:
    """How a victim answers: ack ``ack_after`` s after the request (None: never), show
    ``saving`` from ``saving_from`` s, exit 75 after acking or keep running, or end by itself
    ``completes_after`` s after the request."""

    ack_after: float | None = 1.0
    saving_from: float | None = None
    exits: bool = True
    step: int = 100
    completes_after: float | None = None
    dies_after: float | None = None
    """End ``dies_after`` s after the request without an ack, in state ``dies_as`` (a full disk:
    exit 1; a step killed by the signal)."""
    dies_as: JobState = JobState.FAILED
    ack_lag: float = 0.0
    """Write the ack this long *after* the job ended (its state flips at ``ack_after``)."""
    exit_lag: float = 0.0
    """Slurm sees the job end this long after the ack (slurmctld slow, e.g. restarting)."""
    slurm_requeues: bool = False
    """Slurm requeues the job the moment it ends (``RequeueExit=75``), not held."""
    misses_first: bool = False
    """The first request reaches no process (sent while the step's task had not started yet):
    the victim reacts from the second request on."""


@dataclass
class World:
    """FakeSlurm + fake clock + reacting victims (see the module docstring)."""

    tmp: Path
    fake: FakeSlurm
    repo: Repository
    clock: WorldClock = field(init=False)
    behaviour: dict[int, Behaviour] = field(default_factory=dict)
    asked: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.clock = WorldClock(self, float(T0))

    def victim(self, name: str, behaviour: Behaviour | None = None, *, gpus: int = 8,
               nodes: int = 1, team: str = "team-a", grace: int = 30,
               checkpoint: bool = True, cpus: int = 1) -> int:
        """Submit and start a victim job (``cpus`` per node) with a checkpoint dir under
        tmp."""
        ckdir = self.tmp / f"ck-{name}"
        info = HaiJobInfo(priority="LOW", job_class="LOW", team=team, preemptible=True,
                          grace=grace, source=ClassOrigin.DIRECTIVE,
                          checkpoint_dir=str(ckdir) if checkpoint else None)
        jid = self.fake.submit(name=name, uid=os.getuid(), account=team, qos="low", nodes=nodes,
                               gpus_per_node=gpus, cpus_per_node=cpus,
                               admin_comment=format_admin_comment(info))
        started = self.fake.schedule()
        assert jid in started, f"victim {name} did not start"
        if checkpoint:
            prepare_control_dir(ckdir / ".hai" / str(jid))
        self.behaviour[jid] = behaviour or Behaviour()
        return jid

    def pending(self, name: str, *, gpus: int = 8, nodes: int = 1, team: str = "team-b",
                qos: str = "high", priority: int = 10, cls: str = "HIGH",
                user: str = "alice") -> int:
        """Submit a job of class ``cls`` that has to wait."""
        info = HaiJobInfo(priority=cls, job_class=cls, team=team, preemptible=True,
                          grace=30, source=ClassOrigin.DIRECTIVE)
        return self.fake.submit(name=name, user=user, uid=os.getuid(), account=team, qos=qos,
                                nodes=nodes,
                                gpus_per_node=gpus, priority=priority,
                                admin_comment=format_admin_comment(info))

    def control(self, jid: int) -> Path:
        """The victim's control directory."""
        return self.tmp / f"ck-{self.fake.jobs[jid].name}" / ".hai" / str(jid)

    def tick(self) -> None:
        """Let the victims react to requests, then let Slurm schedule."""
        now = self.clock.now
        heard: dict[int, int] = {}
        for rec in self.fake.signals:
            heard[rec.job_id] = heard.get(rec.job_id, 0) + 1
            b = self.behaviour.get(rec.job_id)
            if b is not None and b.misses_first and heard[rec.job_id] == 1:
                continue
            self.asked.setdefault(rec.job_id, now)
        for jid, asked in self.asked.items():
            b = self.behaviour.get(jid)
            j = self.fake.jobs[jid]
            if b is None or j.restart_count > 0:
                continue
            ctl = self.control(jid)
            since = now - asked
            acked = (ctl / "ack.json").exists()
            if j.state is not JobState.RUNNING:  # ended: only a lagging ack may still land
                if (b.ack_lag and b.ack_after is not None and not acked
                        and since >= b.ack_after + b.ack_lag):
                    self._ack(jid, b, now)
                continue
            if b.completes_after is not None and since >= b.completes_after:
                self.fake.finish(jid, JobState.COMPLETED)
                continue
            if b.dies_after is not None and since >= b.dies_after:
                self.fake.finish(jid, b.dies_as)
                if b.slurm_requeues:
                    self.fake.requeue_any([jid], hold=False)
                continue
            if b.ack_after is not None and since >= b.ack_after and b.ack_lag:
                self.fake.finish(jid, JobState.FAILED)  # the ack lands after the job's end
                continue
            if b.ack_after is not None and since >= b.ack_after and not acked:
                self._ack(jid, b, now)
                if b.exits and not b.exit_lag:
                    self.fake.finish(jid, JobState.FAILED)
            elif (acked and b.exits and b.ack_after is not None
                  and since >= b.ack_after + b.exit_lag):
                self.fake.finish(jid, JobState.FAILED)
            elif b.saving_from is not None and since >= b.saving_from:
                write_phase(ctl, replace(make_phase(str(jid), j.restart_count, Phase.SAVING,
                                                    b.step), time=now))
        self.fake.now = int(now)
        self.fake.schedule()

    def _ack(self, jid: int, b: Behaviour, now: float) -> None:
        j = self.fake.jobs[jid]
        ctl = self.control(jid)
        write_ack(ctl, Ack(job_id=str(jid), restart_count=j.restart_count, step=b.step,
                           sha256="0" * 64, checkpoint=f"ckpt-step{b.step}.pkl", time=now,
                           exit_code=75, request_signal="SIGUSR2"))
        write_phase(ctl, replace(make_phase(str(jid), j.restart_count, Phase.SAVED, b.step),
                                 time=now))

    def executor(self, **settings: float) -> PreemptionExecutor:
        """An executor wired to this world."""
        return PreemptionExecutor(self.fake, self.repo, clock=self.clock,
                                  settings=ExecutorSettings(**settings))  # type: ignore[arg-type]


class WorldClock(FakeClock):
    """A fake clock whose waits let the world move."""

    def __init__(self, world: World, now: float) -> None:
        super().__init__(now)
        self.world = world

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Jump over the wait, then let the world react."""
        result = super().wait(stop, seconds)
        self.world.tick()
        return result


def make_world(tmp: Path, nodes: int = 4, gpus: int = 8,
               partitions: Mapping[str, tuple[str, ...]] | None = None,
               version: SlurmVersion = DEFAULT_VERSION) -> World:
    """A world with ``nodes`` nodes of ``gpus`` GPUs and a migrated SQLite store; each node is
    in partition ``main`` and in those of ``partitions`` that list it; the fake answers as
    Slurm ``version``."""
    extra = partitions or {}
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=gpus, partitions=(
        "main", *(p for p, members in extra.items() if f"n{i}" in members)))
        for i in range(1, nodes + 1)], now=T0, version=version)
    repo = Repository(upgrade(f"sqlite:///{tmp / 'state.db'}"))
    return World(tmp, fake, repo)


def plan_for_high_job(world: World, tmp: Path, partition: str = "", *,
                      save_times: SaveTimes | None = None, begin_in: int | None = None,
                      gpus: int = 8, exclusive: str = "", cpus: int = 1
                      ) -> tuple[PlanningResult, int]:
    """An hour on, a HIGH job of ``gpus`` GPUs and ``cpus`` CPUs on one node (team-b, waited
    10 min; in ``partition`` when given; with ``sbatch --begin`` ``begin_in`` seconds away when
    given; ``exclusive`` as :attr:`Job.exclusive`): one daemon cycle with the planner
    (``min_run_time`` 1 min); its pass and the job's id."""
    world.fake.advance(world.fake.now + 3600)
    world.clock.now = float(world.fake.now)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    bene = world.fake.submit(name="bene", uid=1000, account="team-b", qos="high",
                             partition=partition, nodes=1, gpus_per_node=gpus,
                             cpus_per_node=cpus, admin_comment=format_admin_comment(info),
                             now=world.fake.now - 600,
                             begin_time=None if begin_in is None else world.fake.now + begin_in,
                             exclusive=exclusive)
    cfg = replace(DaemonConfig(), database_url="sqlite://", state_dir=str(tmp))
    planner = SnapshotPlanner(gpu_cluster(2, 2), PlannerConfig(min_run_time=60.0),
                              save_times=save_times)
    lock = LeaderLock(upgrade(f"sqlite:///{tmp / 'state.db'}"))
    daemon = Daemon(world.fake, world.repo, lock, config=cfg, clock=world.clock,
                    planner=planner, executor=world.executor(), interval=1.0)
    report = daemon.run_once()
    assert report.outcome.value == "ok", report.reason
    assert planner.last is not None
    return planner.last, bene
