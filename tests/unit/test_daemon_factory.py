"""The daemon as ``hai-slurm daemon`` builds it: planner and executor wired, preempting end to
end on FakeSlurm + SQLite; ``enabled = false`` / ``preempt=False`` runs the policy only."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world

from hai_slurm.classes import ClassOrigin
from hai_slurm.conf.topology import Level, Topology
from hai_slurm.priority.config.loader import DaemonConfig, parse_config
from hai_slurm.priority.daemon.factory import build_daemon, describe_preemption
from hai_slurm.priority.daemon.loop import Daemon
from hai_slurm.priority.daemon.metrics import sample
from hai_slurm.priority.daemon.plan_metrics import ObservedExecutor
from hai_slurm.priority.daemon.planning import SnapshotPlanner
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.planner.slurm_topology import DerivedTopology
from hai_slurm.priority.policy.state import EventKind
from hai_slurm.priority.store import PlanState
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.lock import LeaderLock
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.parse import parse_switches
from hai_slurm.slurm_plugins.types import JobState
from hai_slurm.testbed.describe import cluster_description
from hai_slurm.testbed.shape import ClusterShape

SWITCHES = parse_switches("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
                          "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[3-4]\n"
                          "SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]\n")


def _config(tmp: Path, extra: str = "") -> DaemonConfig:
    return parse_config(f"""
state_dir = "{tmp}"
database_url = "sqlite:///{tmp / 'state.db'}"
[planner]
min_run_time = "60s"
{extra}
""", source=str(tmp / "daemon.toml"))


def _daemon(world: World, cfg: DaemonConfig, **kw: object) -> Daemon:
    lock = LeaderLock(upgrade(cfg.database_url))  # the world's database
    return build_daemon(cfg, slurm=world.fake,
                        store=(world.repo, lock), clock=world.clock, interval=1.0,
                        **kw)  # type: ignore[arg-type]


def _fill_and_wait(world: World) -> tuple[list[int], int]:
    """Four LOW jobs on 4 x 8 GPUs for an hour; a HIGH job asking for 2 nodes x 8 GPUs."""
    victims = [world.victim(f"v{i}", Behaviour(ack_after=0.5)) for i in range(4)]
    world.fake.advance(world.fake.now + 3600)
    world.clock.now = float(world.fake.now)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    bene = world.fake.submit(name="bene", uid=1000, account="team-b", qos="high", nodes=2,
                             gpus_per_node=8, admin_comment=format_admin_comment(info),
                             now=world.fake.now - 600)
    return victims, bene


def step_between_cycles(world: World, daemon: Daemon, steps: int = 20) -> None:
    """The steps the daemon makes between two cycles while plans are open."""
    for _ in range(steps):
        world.clock.wait(daemon.stop_event, daemon.executor.poll_interval)  # type: ignore
        daemon.step_plans()


def test_built_daemon_has_planner_and_executor_and_preempts_end_to_end(tmp_path: Path) -> None:
    """Config -> build_daemon -> one cycle (starts the plan) and the steps between cycles: the
    HIGH job runs on one leaf's two nodes, two LOW victims acknowledged and were requeued, the
    plan is done with its fairness events."""
    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    cfg = _config(tmp_path, "[executor]\ndefault_grace = \"20s\"\n")
    daemon = _daemon(world, cfg, switches=SWITCHES)
    assert isinstance(daemon.planner, SnapshotPlanner)
    assert isinstance(daemon.executor, ObservedExecutor)  # feeds the preemption metrics
    assert isinstance(daemon.executor.inner, PreemptionExecutor)
    assert daemon.executor.inner.settings.default_deadline == 20
    assert daemon.planner.config.min_run_time == 60
    assert "preemption on" in describe_preemption(daemon)
    report = daemon.run_once()
    assert report.outcome.value == "ok", report.reason
    step_between_cycles(world, daemon)
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE, plan
    job = world.fake.jobs[bene]
    assert job.state is JobState.RUNNING
    assert set(job.nodes) in ({"n1", "n2"}, {"n3", "n4"})  # one leaf, from scontrol's switches
    assert sorted(world.fake.jobs[v].restart_count for v in victims) == [0, 0, 1, 1]
    counts = world.repo.event_counts(0)
    assert counts[("team-a", EventKind.PREEMPTED)] == 2
    assert counts[("team-b", EventKind.PREEMPTING)] == 1
    planner = daemon.planner
    assert isinstance(planner.source, DerivedTopology)
    assert planner.topology is not None
    assert [c.id for c in planner.topology.cells_at(Level.LEAF_SWITCH)] == ["leaf1", "leaf2"]


def test_a_cluster_description_gives_the_planner_its_topology(tmp_path: Path) -> None:
    """With a description (the testbed's, as the demo passes it) the planner uses its tree and
    no scontrol topology is read."""
    world = make_world(tmp_path)
    cfg = _config(tmp_path)
    desc = cluster_description(ClusterShape())
    daemon = _daemon(world, replace(cfg, description=desc))
    assert isinstance(daemon.planner, SnapshotPlanner)
    assert isinstance(daemon.planner.source, Topology)
    assert daemon.planner.source.gpus == Topology.from_description(desc).gpus
    assert "cluster description (32 GPUs)" in describe_preemption(daemon)


def test_enabled_false_or_no_preempt_runs_priorities_only(tmp_path: Path) -> None:
    """[planner] enabled = false, or preempt=False (--no-preempt): no planner, no executor, and
    the waiting HIGH job is left waiting while every LOW job keeps running."""
    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    off = _daemon(world, _config(tmp_path, "enabled = false"), switches=SWITCHES)
    assert off.planner is None and off.executor is None
    assert describe_preemption(off) == "preemption off (priorities only)"
    flag = _daemon(world, _config(tmp_path), preempt=False, switches=SWITCHES)
    assert flag.planner is None and flag.executor is None
    assert flag.run_once().outcome.value == "ok"
    assert world.fake.jobs[bene].state is JobState.PENDING
    assert all(world.fake.jobs[v].state is JobState.RUNNING for v in victims)
    assert world.repo.history() == []


def test_verdict_changes_are_logged_once_and_counted_by_class(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The daemon logs a pending job's planner verdict when it changes (not every cycle) and
    exports the count of verdicts per class."""
    world = make_world(tmp_path)
    d = _daemon(world, _config(tmp_path, "max_plans = 0"), switches=SWITCHES)
    _victims, bene = _fill_and_wait(world)
    with caplog.at_level(logging.INFO, logger="hai_slurm.priority.daemon.planning"):
        d.run_once()
        d.run_once()
    lines = [r.getMessage() for r in caplog.records if f"verdict for job {bene}" in r.message]
    assert len(lines) == 1 and "SKIPPED" in lines[0]
    assert sample(d.metrics, "hai_planner_verdicts",
                  {"priority_class": "HIGH", "verdict": "SKIPPED"}) == 1
    assert sample(d.metrics, "hai_planner_verdicts",
                  {"priority_class": "HIGH", "verdict": "PREEMPT"}) == 0
