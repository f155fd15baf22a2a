"""``hai-slurm daemon`` options and live ``priority explain`` (FakeSlurm + SQLite)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_helpers import rig

from hai_slurm.classes import PriorityClass
from hai_slurm.cli import cli
from hai_slurm.errors import ConfigError, StateError
from hai_slurm.priority.cli import daemon as daemon_cli
from hai_slurm.priority.cli.daemon import daemon_config
from hai_slurm.priority.daemon.live import explain_live, open_repository
from hai_slurm.priority.daemon.loop import Daemon, Outcome


def test_defaults_put_sqlite_under_the_state_dir(tmp_path: Path) -> None:
    """Without --config the database is hai-slurm.db in --state-dir."""
    cfg = daemon_config(None, str(tmp_path / "state"), 5.0)
    assert cfg.database_url == f"sqlite:///{(tmp_path / 'state').resolve()}/hai-slurm.db"
    assert cfg.intervals.cycle == 5.0 and cfg.redis_url is None


@pytest.mark.parametrize("interval", [90.0, 0.2, 0.0, float("nan"), float("inf")])
def test_interval_not_shorter_than_the_lease_is_refused(tmp_path: Path,
                                                         interval: float) -> None:
    """An interval >= lock_ttl would let the lease expire between cycles, one under a second
    (or nan, which passed every comparison and made cycles run back to back) would load
    slurmctld: a clear error, saying which rule it breaks."""
    rule = (r"must be shorter than intervals.lock_ttl \(90 s\)" if 1 <= interval < math.inf
            else r"a cycle is at least 1 s \(each one reads every job")
    with pytest.raises(ConfigError, match=r"--interval: " + rule):
        daemon_config(None, str(tmp_path), interval)


def test_a_busy_metrics_port_is_a_clear_error() -> None:
    """The metrics endpoint's port in use, or an address not of this host: the error names
    metrics_port and the address (the daemon command printed a traceback)."""
    import socket

    from hai_slurm.priority.cli.daemon import serve_metrics
    from hai_slurm.priority.daemon.metrics import DaemonMetrics

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"metrics_port: cannot serve metrics on "
                                              rf"127.0.0.1:{port} \(.*\); free the port"):
            serve_metrics(DaemonMetrics(), port, "127.0.0.1")
    with pytest.raises(ConfigError, match="--metrics-addr"):
        serve_metrics(DaemonMetrics(), port, "no-such-host.invalid")


def test_cli_reports_a_bad_config_file(tmp_path: Path) -> None:
    """A bad file ends the command with the key and value, exit code 1."""
    bad = tmp_path / "d.toml"
    bad.write_text('[intervals]\ncycle = "soon"\n')
    res = CliRunner().invoke(cli, ["daemon", "--config", str(bad), "--once"])
    assert res.exit_code == 1
    assert "intervals.cycle" in res.output and "soon" in res.output


def test_once_exits_1_when_the_cycle_is_skipped(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``daemon --once`` (cron) must not report success when Slurm could not be read."""
    r = rig(tmp_path)
    r.submit(PriorityClass.HIGH)
    r.slurm.fail_snapshots = 1
    made: list[Daemon] = []

    def build(cfg: object, preempt: object = None) -> Daemon:
        made.append(r.daemon())
        return made[-1]

    monkeypatch.setattr(daemon_cli, "build_daemon", build)
    res = CliRunner().invoke(cli, ["daemon", "--state-dir", str(tmp_path), "--once"])
    assert res.exit_code == 1, res.output
    assert "error: the cycle was skipped, nothing written: Slurm query failed: squeue" in res.output
    assert r.slurm.writes == []
    report = made[0].run(once=True)  # the fault is gone: the next cycle succeeds
    assert report is not None and report.outcome is Outcome.OK and report.writes == 1


def test_live_explain_reads_slurm_and_the_store(tmp_path: Path) -> None:
    """explain without --snapshot: the job's class and place from Slurm now plus the store."""
    r = rig(tmp_path)
    job = r.submit(PriorityClass.HIGH)
    r.tick(30)
    d = r.daemon()
    d.run_once()
    text = explain_live(job, r.slurm, open_repository(r.cfg), r.cfg, now=r.clock.now)
    assert text.startswith(f"Job {job} (user alice, team vision) is pending")
    assert "requested HIGH with #HAI --priority" in text and "next cycle writes" not in text
    late = r.submit(PriorityClass.LOW)
    text = explain_live(late, r.slurm, open_repository(r.cfg), r.cfg, now=r.clock.now)
    assert "the daemon's next cycle writes" in text
    with pytest.raises(ConfigError, match="job 999 is neither pending nor running"):
        explain_live(999, r.slurm, open_repository(r.cfg), r.cfg, now=r.clock.now)


def test_live_explain_without_a_database_says_what_to_do(tmp_path: Path) -> None:
    """No daemon ran yet: the error says to start it or point --config at its database."""
    r = rig(tmp_path)
    with pytest.raises(StateError, match="holds no daemon state yet; start the daemon"):
        open_repository(r.cfg)
