"""Shadow mode (``hai-slurm daemon --shadow``): the daemon decides, logs and records, and writes
nothing to Slurm; what it reads back is Slurm's own state, never its own would-be actions."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from executor_world import World, make_world
from test_daemon_factory import SWITCHES, _config, _daemon, _fill_and_wait

from hai_slurm.cli import cli
from hai_slurm.priority.daemon.factory import describe_preemption
from hai_slurm.priority.daemon.metrics import sample
from hai_slurm.priority.daemon.plan_metrics import ObservedExecutor
from hai_slurm.priority.executor.shadow import ShadowExecutor
from hai_slurm.priority.store.shadow import ShadowPlans
from hai_slurm.slurm_plugins import shadow as shadow_module
from hai_slurm.slurm_plugins.shadow import ShadowSlurm
from hai_slurm.slurm_plugins.types import JobState, SlurmClient


def _state(world: World) -> list[tuple[int, str, int, bool, int]]:
    """Every job's state, priority, hold and restart count as Slurm (the fake) has them."""
    return sorted((j.job_id, j.state.value, j.priority, j.held, j.restart_count)
                  for j in world.fake.snapshot().jobs)


def test_every_protocol_method_is_a_read_or_a_write() -> None:
    """A method added to SlurmClient must be classified (and the wrapper must implement it),
    or a new write could reach Slurm in shadow mode."""
    methods = {name for name in dir(SlurmClient) if not name.startswith("_")}
    assert methods == shadow_module.READS | shadow_module.WRITES
    assert not shadow_module.READS & shadow_module.WRITES
    for name in methods:
        assert name in ShadowSlurm.__dict__, f"ShadowSlurm does not implement {name}"


def test_writes_through_the_wrapper_reach_nothing(tmp_path: Path) -> None:
    """Each write method is recorded and returns 'nothing done'; Slurm is untouched."""
    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    before = _state(world)
    s = ShadowSlurm(world.fake)
    results = [s.set_priorities({bene: 99}), s.set_priority(bene, 98), s.signal(victims),
               s.requeue(victims[0]), s.requeue_hold(victims[0]), s.hold(bene), s.release(bene),
               s.set_admin_comment(bene, "x"), s.cancel(bene), s.set_req_nodes(bene, "n1"),
               s.set_job_reservation(bene, "hai-plan-1")]
    assert all(r.done == () and r.commands == 0 for r in results)
    assert s.requeue_any(victims, hold=True) == ()
    assert s.split_array_task(bene) == bene
    s.create_reservation("hai-plan-1", ["n1"], ["alice"], 5)
    s.update_reservation("hai-plan-1", ["n1", "n2"], ["alice", "bob"], 9)
    assert s.end_reservation("hai-plan-1") is False
    assert s.reservations("hai-plan-") == () == world.fake.reservations()
    assert world.fake.writes == []
    assert _state(world) == before
    assert {w.kind for w in s.recent} == shadow_module.WRITES - {"set_priority"}  # = priorities
    assert s.job_facts([bene])[bene].pending  # reads pass through


def test_shadow_daemon_records_the_plan_and_changes_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Four LOW jobs fill the GPUs, a HIGH job waits: the shadow daemon records one would-be
    plan (two victims on one leaf), logs it and the would-be priorities, signals nobody, and
    Slurm's jobs, priorities and holds are exactly as before, cycle after cycle."""
    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    before = _state(world)
    cfg = _config(tmp_path)
    daemon = _daemon(world, cfg, switches=SWITCHES, shadow=True)
    assert isinstance(daemon.slurm, ShadowSlurm)
    assert isinstance(daemon.executor, ObservedExecutor)
    assert isinstance(daemon.executor.inner, ShadowExecutor)
    assert describe_preemption(daemon).startswith("SHADOW MODE: nothing is written to Slurm")
    with caplog.at_level(logging.INFO, logger="hai_slurm.priority"):
        for _ in range(3):
            report = daemon.run_once()
            assert report.outcome.value == "ok", report.reason
            world.clock.now += 5
    assert world.fake.writes == []
    assert _state(world) == before
    assert world.repo.history() == []  # no real plan, nothing a real daemon could resume
    assert world.repo.event_counts(0) == {}  # no fairness events for a preemption not done
    (plan,) = ShadowPlans(world.repo.engine).history()  # recorded once, not every cycle
    assert plan.beneficiary.job_id == bene and plan.beneficiary_class == "HIGH"
    assert len(plan.victims) == 2 and {v.job_id for v in plan.victims} < set(victims)
    assert all(v.priority_class == "LOW" and v.team == "team-a" for v in plan.victims)
    assert any(a.startswith("scancel --signal=USR2") for a in plan.actions)
    assert any("requeuehold" in a for a in plan.actions)
    text = caplog.text
    assert f"shadow plan {plan.plan_id}: would preempt" in text
    assert "shadow: would set Priority=" in text
    assert text.count("shadow: would set Priority=") == text.count(
        "shadow: would set Priority=", 0, text.index("shadow plan"))  # logged once, not per cycle
    assert sample(daemon.metrics, "hai_priority_shadow") == 1
    assert sample(daemon.metrics, "hai_shadow_plans_total",
                  {"priority_class": "HIGH", "team": "team-b"}) == 1
    assert sample(daemon.metrics, "hai_priority_slurm_writes_total") == 0
    assert sample(daemon.metrics, "hai_shadow_writes_total", {"kind": "set_priorities"}) > 0


def test_shadow_reads_slurm_not_its_own_decisions(tmp_path: Path) -> None:
    """A would-be hold or requeue is not believed: the next cycle sees the victims running and
    the competitors not held (Slurm's truth), and tracked priorities stay Slurm's."""
    world = make_world(tmp_path)
    _victims, bene = _fill_and_wait(world)
    other = world.fake.submit(name="other", uid=1000, account="team-c", qos="normal", nodes=1,
                              gpus_per_node=8, now=world.fake.now - 60)
    daemon = _daemon(world, _config(tmp_path), switches=SWITCHES, shadow=True)
    daemon.run_once()
    assert isinstance(daemon.slurm, ShadowSlurm)
    assert any(w.kind == "set_priorities" for w in daemon.slurm.recent)
    snap = daemon.slurm.snapshot()
    assert not snap.job(other).held  # type: ignore[union-attr]
    assert snap.job(bene).state is JobState.PENDING  # type: ignore[union-attr]
    tracked = world.repo.load_jobs()
    assert tracked[bene].priority in (None, world.fake.jobs[bene].priority)


def test_history_shadow_lists_would_be_plans(tmp_path: Path) -> None:
    """``preempt history --shadow`` prints the shadow plan with its commands; without the flag
    there is no real plan."""
    world = make_world(tmp_path)
    _victims, bene = _fill_and_wait(world)
    cfg = _config(tmp_path)
    daemon = _daemon(world, cfg, switches=SWITCHES, shadow=True)
    assert daemon.run_once().outcome.value == "ok"
    toml = tmp_path / "daemon.toml"
    toml.write_text(f'state_dir = "{tmp_path}"\ndatabase_url = "{cfg.database_url}"\n')
    res = CliRunner().invoke(cli, ["preempt", "history", "--shadow", "--config", str(toml)])
    assert res.exit_code == 0, res.output
    assert f"for   job {bene} (HIGH, team-b" in res.output
    assert "not carried out" in res.output and "would scontrol" in res.output
    res = CliRunner().invoke(cli, ["preempt", "history", "--config", str(toml)])
    assert res.exit_code == 0 and "no preemption plans recorded" in res.output
    res = CliRunner().invoke(cli, ["preempt", "history", "--shadow", "--team", "nobody",
                                   "--config", str(toml)])
    assert "no shadow plans recorded for team nobody" in res.output


def test_no_preempt_shadow_still_writes_nothing(tmp_path: Path) -> None:
    """Priorities only, in shadow mode: the writes are logged, none done."""
    world = make_world(tmp_path)
    _fill_and_wait(world)
    before = _state(world)
    daemon = _daemon(world, dataclasses.replace(_config(tmp_path)), preempt=False,
                     switches=SWITCHES, shadow=True)
    assert daemon.run_once().outcome.value == "ok"
    assert world.fake.writes == [] and _state(world) == before
    assert describe_preemption(daemon).endswith("preemption off (priorities only)")


def test_history_shadow_on_an_old_schema_says_to_migrate(tmp_path: Path) -> None:
    """A database still at revision 0001 (before shadow plans): a clear error naming the fix,
    and ``daemon --migrate`` brings it to head."""
    from hai_slurm.priority.store.engine import downgrade, head_revision, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    downgrade(upgrade(url), "0001")
    toml = tmp_path / "daemon.toml"
    toml.write_text(f'state_dir = "{tmp_path}"\ndatabase_url = "{url}"\n')
    res = CliRunner().invoke(cli, ["preempt", "history", "--shadow", "--config", str(toml)])
    assert res.exit_code == 1
    assert "schema revision 0001" in res.output and "daemon --migrate" in res.output
    res = CliRunner().invoke(cli, ["daemon", "--migrate", "--config", str(toml)])
    assert res.exit_code == 0, res.output
    assert f"schema at revision {head_revision()} (was 0001)" in res.output
    res = CliRunner().invoke(cli, ["preempt", "history", "--shadow", "--config", str(toml)])
    assert res.exit_code == 0 and "no shadow plans recorded" in res.output


def test_unfinished_real_plan_is_left_alone(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A plan a killed real daemon left signalled is not recovered in shadow mode (that would
    requeue and release): it stays unfinished, nothing is written, and the log says why."""
    from hai_slurm.priority.store import PlanJob, PlanState, VictimState

    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    plan = world.repo.create_plan(at=world.clock.now, beneficiaries=[PlanJob(bene, "team-b", "b")],
                                  victims=[PlanJob(victims[0], "team-a", "a", 8)], reason="r")
    world.repo.update_victims(plan.plan_id, [victims[0]], VictimState.ASKED, at=world.clock.now)
    world.repo.transition_plan(plan.plan_id, PlanState.SIGNALLED, at=world.clock.now)
    before = _state(world)
    daemon = _daemon(world, _config(tmp_path), switches=SWITCHES, shadow=True)
    with caplog.at_level(logging.WARNING, logger="hai_slurm.priority"):
        assert daemon.run_once().outcome.value == "ok"
    assert world.fake.writes == [] and _state(world) == before
    assert world.repo.get_plan(plan.plan_id).state is PlanState.SIGNALLED
    assert f"unfinished plan {plan.plan_id} (signalled, left by a real daemon) is left alone" \
        in caplog.text
