"""``hai-slurm status``: what one frame shows, from the same reads as ``priority explain``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from executor_world import make_world
from test_daemon_factory import SWITCHES, _config, _daemon, _fill_and_wait, step_between_cycles

from hai_slurm.cli import cli
from hai_slurm.priority.daemon.status import gather, render
from hai_slurm.slurm_plugins import adapter


def test_frame_shows_classes_teams_late_jobs_and_plans(tmp_path: Path) -> None:
    """After one real preemption: HIGH runs, the two requeued LOW victims wait; team use against
    quota; the done plan among the recent ones; a late job is listed with its share of the
    bound."""
    world = make_world(tmp_path)
    victims, bene = _fill_and_wait(world)
    cfg = _config(tmp_path, "[teams.team-a]\ngpus = 16\n[teams.team-b]\ngpus = 16\n")
    daemon = _daemon(world, cfg, switches=SWITCHES)
    assert daemon.run_once().outcome.value == "ok"  # starts the plan
    step_between_cycles(world, daemon)  # carries it out
    assert daemon.run_once().outcome.value == "ok"
    s = gather(world.fake, world.repo, cfg, now=world.clock.now)
    by_class = {c.cls.value: c for c in s.classes}
    assert by_class["HIGH"].running == 1 and by_class["HIGH"].gpus_running == 16
    assert by_class["LOW"].running == 2 and by_class["LOW"].pending == 2
    teams = {t.team: t for t in s.teams}
    assert teams["team-a"].gpus == 16 and teams["team-a"].quota_gpus == 16
    assert teams["team-b"].gpus == 16 and teams["team-a"].credit_gpu_hours > 0
    assert s.open_plans == () and [p.beneficiaries[0].job_id for p in s.recent_plans] == [bene]
    assert s.leader is not None and s.gpus == 32 and s.gpus_used == 32
    text = "\n".join(render(s))
    assert "Classes" in text and "Teams" in text and "Open plans (0)" in text
    assert f"for {bene} (team-b) from" in text
    assert re.search(r"team-a\s+16/16\s+100%", text), text
    assert len(victims) == 4


def test_late_jobs_are_those_past_half_their_bound(tmp_path: Path) -> None:
    """The HIGH job that waited its full 10 min is listed at 100 %; nothing else is."""
    world = make_world(tmp_path)
    _victims, bene = _fill_and_wait(world)
    cfg = _config(tmp_path)
    s = gather(world.fake, world.repo, cfg, now=world.clock.now)
    assert [(j.job_id, j.base.value) for j in s.late] == [(bene, "HIGH")]
    text = "\n".join(render(s))
    assert "Jobs past half their bound (1)" in text and "100% of 10m" in text


def test_status_once_prints_one_plain_frame(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``status --once`` (not a TTY): one frame, no escape codes; an empty database is a clear
    error."""
    world = make_world(tmp_path)
    _fill_and_wait(world)
    cfg = _config(tmp_path)
    monkeypatch.setattr(adapter, "make_client", lambda *a, **k: world.fake)
    toml = tmp_path / "daemon.toml"
    toml.write_text(f'state_dir = "{tmp_path}"\ndatabase_url = "{cfg.database_url}"\n')
    res = CliRunner().invoke(cli, ["status", "--once", "--config", str(toml)])
    assert res.exit_code == 0, res.output
    assert res.output.count("hai-slurm status ") == 1 and "\x1b" not in res.output
    assert "cluster: 4 nodes (4 available), 32/32 GPUs in use" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(cli, ["status", "--once", "--state-dir", str(empty)])
    assert res.exit_code == 1 and "holds no daemon state yet" in res.output, res.output
