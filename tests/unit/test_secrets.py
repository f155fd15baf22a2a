"""Secrets stay secret: masked in output, refused in world-readable files, kept out of argv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import load_config
from hai_slurm.testbed import services
from hai_slurm.testbed.layout import Ports, local_layout
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.urls import has_password, mask_password


@pytest.mark.parametrize(("url", "shown"), [
    ("mysql+pymysql://hai:s3cret@db:3306/hai", "mysql+pymysql://hai:***@db:3306/hai"),
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("redis://user:p@ss@host/0", "redis://user:***@host/0"),
    ("mysql+pymysql//u:s3cret@db/x", "mysql+pymysql//u:***@db/x"),
    ("redis://host:6379/0?password=s3cret&db=1", "redis://host:6379/0?password=***&db=1"),
    ("sqlite:////var/lib/hai-slurm/hai-slurm.db", "sqlite:////var/lib/hai-slurm/hai-slurm.db"),
    ("sqlite:///tmp/u:x@y.db", "sqlite:///tmp/u:x@y.db"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("mysql+pymysql://hai:s3cr?t@db.example/hai", "mysql+pymysql://hai:***@db.example/hai"),
    ("redis://:s3cr?t@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("redis://:a#b/c@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("redis://localhost:6379/0?password=p@ss", "redis://localhost:6379/0?password=***"),
    ("unix:///run/redis.sock?password=se@cret&db=0", "unix:///run/redis.sock?password=***&db=0"),
])
def test_mask_password(url: str, shown: str) -> None:
    """Passwords in the user part or the query are hidden; URLs without one are unchanged."""
    assert mask_password(url) == shown
    assert has_password(url) is (url != shown)


def _config(tmp_path: Path, mode: int, url: str) -> Path:
    path = tmp_path / "daemon.toml"
    path.write_text(f'state_dir = "{tmp_path}"\ndatabase_url = "{url}"\n')
    path.chmod(mode)
    return path


def test_config_check_masks_the_database_password(tmp_path: Path) -> None:
    """`config check` summarises the database URL without its password."""
    path = _config(tmp_path, 0o600, "mysql+pymysql://hai:s3cret@db:3306/hai")
    out = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert out.exit_code == 0, out.output
    assert "s3cret" not in out.output
    assert "mysql+pymysql://hai:***@db:3306/hai" in out.output


def test_config_check_masks_without_sqlalchemy(tmp_path: Path) -> None:
    """Masking works with click alone: `config check` masks where SQLAlchemy is not installed."""
    path = _config(tmp_path, 0o600, "mysql+pymysql://hai:s3cret@db:3306/hai")
    code = ("import sys; sys.modules['sqlalchemy'] = None; sys.modules['alembic'] = None; "
            "from click.testing import CliRunner; from hai_slurm.cli import cli; "
            f"r = CliRunner().invoke(cli, ['config', 'check', {str(path)!r}]); "
            "print(r.exit_code); print(r.output)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.startswith("0\n"), out.stdout + out.stderr
    assert "hai:***@db" in out.stdout and "s3cret" not in out.stdout


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o666])
def test_world_readable_config_with_a_password_is_refused(tmp_path: Path, mode: int) -> None:
    """The error names the file, the key and the chmod that fixes it."""
    path = _config(tmp_path, mode, "mysql+pymysql://hai:s3cret@db:3306/hai")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert str(path) in text and "database_url" in text and f"chmod 600 {path}" in text
    assert "s3cret" not in text


def test_redis_password_in_a_world_readable_config_is_refused(tmp_path: Path) -> None:
    """redis_url counts as much as database_url."""
    path = tmp_path / "daemon.toml"
    path.write_text(f'state_dir = "{tmp_path}"\nredis_url = "redis://:pw@127.0.0.1:6379/0"\n')
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="redis_url"):
        load_config(path)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400])
def test_private_config_with_a_password_is_read(tmp_path: Path, mode: int) -> None:
    """0600 (or group-only 0640) is accepted."""
    path = _config(tmp_path, mode, "mysql+pymysql://hai:s3cret@db:3306/hai")
    assert load_config(path).database_url.endswith("@db:3306/hai")


def test_world_readable_config_without_a_password_is_read(tmp_path: Path) -> None:
    """Nothing secret, nothing refused (the shipped examples are 0644)."""
    path = _config(tmp_path, 0o644, f"sqlite:///{tmp_path}/x.db")
    assert load_config(path).database_url == f"sqlite:///{tmp_path}/x.db"


def _ctx(tmp_path: Path) -> services.Ctx:
    shape = ClusterShape()
    layout = local_layout(shape, Ports(), tmp_path, "host1", "db-s3cret")
    bins = {"mariadb": "/usr/bin/mariadb", "redis-server": "/usr/bin/redis-server"}
    return services.Ctx(tmp_path, shape, Ports(), layout, {}, bins)


def test_database_password_goes_to_stdin_not_argv(tmp_path: Path) -> None:
    """`ps` and /proc/PID/cmdline show argv to every user: the SQL with the password is stdin."""
    argv, sql = services.database_setup(_ctx(tmp_path))
    assert not any("db-s3cret" in a for a in argv)
    assert "IDENTIFIED BY 'db-s3cret'" in sql


def test_redis_gets_a_password_from_a_private_file(tmp_path: Path) -> None:
    """requirepass is in redis.conf (0600), as is the password file; the URL carries it."""
    ctx = _ctx(tmp_path)
    password = services.redis_password(tmp_path)
    assert len(password) == 32
    assert (tmp_path / "redis" / "password").stat().st_mode & 0o777 == 0o600
    assert services.redis_password(tmp_path) == password  # made once
    assert f"requirepass {password}" in services.redis_config(ctx, password).splitlines()
    assert services.redis_url(tmp_path, 6379) == f"redis://:{password}@127.0.0.1:6379/0"


def test_non_utf8_daemon_config_is_a_clear_error(tmp_path: Path) -> None:
    """Latin-1 bytes give a ConfigError naming the file and line, not a UnicodeDecodeError."""
    path = tmp_path / "daemon.toml"
    path.write_bytes(b'state_dir = "/tmp"\n# caf\xe9\n')
    with pytest.raises(ConfigError, match=r"not UTF-8 .*0xe9 at line 2") as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_non_utf8_cluster_description_is_a_clear_error(tmp_path: Path) -> None:
    """The cluster description (``hai-slurm conf`` and the daemon's ``cluster`` key) too."""
    from hai_slurm.conf.description import load_description

    path = tmp_path / "cluster.toml"
    path.write_bytes(b'[cluster]\nname = "gr\xfcn"\n')
    with pytest.raises(ConfigError, match=r"not UTF-8 .*0xfc at line 2"):
        load_description(path)
    daemon = tmp_path / "daemon.toml"
    daemon.write_text(f'state_dir = "{tmp_path}"\ncluster = "cluster.toml"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(daemon)


def test_a_bad_url_is_reported_without_its_password(tmp_path: Path) -> None:
    """A wrong scheme is an error that shows the value, masked."""
    path = _config(tmp_path, 0o600, "postgres://hai:s3cret@db/hai")
    with pytest.raises(ConfigError, match="unsupported database URL scheme") as err:
        load_config(path)
    assert "s3cret" not in str(err.value) and "hai:***@db" in str(err.value)


def test_redis_failures_are_logged_without_the_password(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """The notifier's warning names the Redis URL, masked."""
    from hai_slurm.priority.executor.notify import RedisNotifier

    class Dead:
        def publish(self, channel: str, text: str) -> int:
            raise ConnectionError("refused")

    notifier = RedisNotifier("redis://:s3cret@127.0.0.1:1/0", client=Dead())
    assert not notifier.notify(1, plan_id=1, signal="USR2", deadline=0.0)
    assert "redis://:***@127.0.0.1:1/0" in caplog.text and "s3cret" not in caplog.text
