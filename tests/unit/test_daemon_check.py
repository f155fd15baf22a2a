"""``hai-slurm daemon --check``: one line per check, exit 0 only when all pass; nothing written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner
from executor_world import make_world
from sqlalchemy import text

from hai_slurm.cli import cli
from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.check import run_checks
from hai_slurm.priority.store.engine import current_revision, downgrade, make_engine, upgrade
from hai_slurm.slurm_plugins.fake import FakeSlurm
from hai_slurm.slurm_plugins.types import ClusterSnapshot


class NoNodes(FakeSlurm):
    """A Slurm whose node list comes back empty (a partial answer)."""

    def snapshot(self) -> ClusterSnapshot:
        """The fake's snapshot without its nodes."""
        return replace(super().snapshot(), nodes=())


def _toml(tmp: Path, url: str, extra: str = "") -> str:
    path = tmp / "daemon.toml"
    path.write_text(f'state_dir = "{tmp}"\ndatabase_url = "{url}"\n{extra}')
    path.chmod(0o600)
    return str(path)


def test_all_ok_on_a_migrated_database_and_a_working_slurm(tmp_path: Path) -> None:
    """Config, database at head, Slurm with nodes: every line ok, 'all checks passed'."""
    world = make_world(tmp_path)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    lines, ok = run_checks(_toml(tmp_path, url), None, slurm=lambda: world.fake)
    assert ok, lines
    assert lines[0].startswith("ok   config") and "(current)" in lines[1]
    assert lines[2].startswith("ok   slurm") and "4 nodes" in lines[2]
    assert lines[-1] == "all checks passed"


def test_old_schema_is_ok_but_said_and_not_migrated(tmp_path: Path) -> None:
    """Behind: ok (the daemon migrates at start), the line says so; --check migrates nothing."""
    world = make_world(tmp_path)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    downgrade(upgrade(url), "0001")
    lines, ok = run_checks(_toml(tmp_path, url), None, slurm=lambda: world.fake)
    assert ok and "schema at revision 0001, behind 0002" in lines[1], lines
    assert current_revision(make_engine(url)) == "0001"


def test_unknown_revision_unreachable_db_bad_config_and_slurm_down_fail(tmp_path: Path) -> None:
    """Each broken piece gives its FAIL line and exit 1 through the command."""
    world = make_world(tmp_path)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = upgrade(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    lines, ok = run_checks(_toml(tmp_path, url), None, slurm=lambda: world.fake)
    assert not ok and lines[1].startswith("FAIL database") and "'9999'" in lines[1], lines
    assert lines[-1].startswith("some checks failed")
    bad = _toml(tmp_path, "mysql+pymysql://hai:secret@127.0.0.1:1/hai")
    empty = NoNodes()
    lines, ok = run_checks(bad, None, slurm=lambda: empty)
    assert not ok and lines[1].startswith("FAIL database") and "secret" not in lines[1], lines
    assert lines[2].startswith("FAIL slurm") and "no nodes" in lines[2], lines

    def down() -> FakeSlurm:
        raise SlurmError("squeue: error: Unable to contact slurm controller")

    lines, ok = run_checks(bad, None, slurm=down)
    assert "FAIL slurm: squeue: error: Unable to contact" in lines[2]
    config = tmp_path / "bad.toml"
    config.write_text('[intervals]\ncycle = "soon"\n')
    res = CliRunner().invoke(cli, ["daemon", "--check", "--config", str(config)])
    assert res.exit_code == 1 and res.output.startswith("FAIL config:"), res.output


def test_redis_configured_but_unreachable_fails(tmp_path: Path) -> None:
    """redis_url set (and used): PING must answer; the password is masked in the line."""
    world = make_world(tmp_path)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    path = _toml(tmp_path, url, 'redis_url = "redis://:pw123@127.0.0.1:1/0"\n')
    lines, ok = run_checks(path, None, slurm=lambda: world.fake)
    assert not ok and lines[3].startswith("FAIL redis") and "pw123" not in lines[3], lines


def test_missing_state_dir_is_created_by_the_daemon(tmp_path: Path) -> None:
    """Built-in defaults with a state dir that does not exist yet: ok when it can be created
    (the daemon creates it); --check itself creates nothing."""
    world = make_world(tmp_path)
    state = tmp_path / "new" / "state"
    lines, ok = run_checks(None, str(state), slurm=lambda: world.fake)
    assert ok and "does not exist yet; the daemon creates it" in lines[1], lines
    assert not state.exists()
