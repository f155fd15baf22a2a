"""Loading and validating the daemon's TOML configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from hai_slurm.classes import PriorityClass as P
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import DaemonConfig, load_config, parse_config
from hai_slurm.priority.policy.settings import DeadlineAction

EXAMPLE = Path(__file__).resolve().parents[2] / "priority" / "examples" / "daemon.toml"


def test_empty_file_gives_the_documented_defaults() -> None:
    """Every key is optional: an empty file is the built-in configuration."""
    cfg = parse_config("")
    assert cfg.policy.default_class is P.NORMAL
    assert cfg.policy.classes[P.LOW].max_wait == 86400
    assert cfg.policy.classes[P.HIGH].max_wait == 600
    assert cfg.policy.decay.after == 1800
    assert cfg.database_url == "sqlite:////var/lib/hai-slurm/hai-slurm.db"
    assert cfg.redis_url is None


def test_example_file_loads_and_matches_defaults_where_it_says_so() -> None:
    """The shipped, commented example is valid and sets two example teams."""
    cfg = load_config(EXAMPLE)
    defaults = DaemonConfig().policy
    assert cfg.policy.classes == dict(defaults.classes)
    assert cfg.policy.aging == defaults.aging
    assert cfg.policy.fairness == defaults.fairness
    assert cfg.policy.compensation.cap == 7200
    vision = cfg.policy.teams["vision"]
    assert vision.gpus == 64 and vision.cpus == 1024 and vision.memory_mb == 8 * 1024**2
    assert vision.class_gpus == {P.HIGH: 16, P.ABOVE_NORMAL: 32}
    assert P.EXTREME_HIGH not in vision.allowed_classes
    assert cfg.policy.quota("unlisted").gpus == 0


def test_durations_sizes_and_class_names_in_all_accepted_forms() -> None:
    """Durations as seconds or with units; sizes with units; class names case-insensitive."""
    cfg = parse_config('''
default_class = "below-normal"
state_dir = "/srv/hai"
[classes.LOW]
max_wait = "1h30m"
grace_cap = 45
on_deadline = "FORCE"
[fairness]
window = "2d"
protect_for = "90s"
[teams.x]
gpus = 4
memory = "512G"
[teams.x.class_gpus]
high = 2
''')
    assert cfg.policy.default_class is P.BELOW_NORMAL
    assert cfg.policy.classes[P.LOW].max_wait == 5400
    assert cfg.policy.classes[P.LOW].grace_cap == 45
    assert cfg.policy.classes[P.LOW].on_deadline is DeadlineAction.FORCE
    assert cfg.policy.fairness.window == 172800 and cfg.policy.fairness.protect_for == 90
    assert cfg.policy.teams["x"].memory_mb == 512 * 1024
    assert cfg.policy.teams["x"].class_gpus == {P.HIGH: 2}
    assert cfg.database_url == "sqlite:////srv/hai/hai-slurm.db"


@pytest.mark.parametrize(("text", "expected"), [
    ('defualt_class = "HIGH"\n',
     ["line 1", "defualt_class", "unknown key", "did you mean 'default_class'"]),
    ('[fairness]\nwindow = "1h"\nprotect_aftr = 3\n',
     ["line 3", "fairness.protect_aftr", "did you mean 'protect_after'"]),
    ('[classes.HIHG]\nmax_wait = "1h"\n',
     ["line 1", "classes.HIHG", "unknown priority class 'HIHG'", "did you mean 'HIGH'",
      "allowed: EXTREME_HIGH"]),
    ('default_class = "NORMAL_"\n',
     ["default_class = 'NORMAL_'", "did you mean 'NORMAL'"]),
    ('[classes.HIGH]\nmax_wait = "10 minutes"\n',
     ["line 2", "classes.HIGH.max_wait = '10 minutes'", "not a duration", "'10m'"]),
    ('[classes.HIGH]\nmax_wait = 0\n', ["classes.HIGH.max_wait = 0", "longer than 0"]),
    ('[teams.vision]\ngpus = -4\n', ["line 2", "teams.vision.gpus = -4", "integer >= 0"]),
    ('[teams.vision]\ngpus = "eight"\n', ["teams.vision.gpus = 'eight'", "expected an integer"]),
    ('[teams.vision.class_gpus]\nHIGHH = 2\n', ["teams.vision.class_gpus.HIGHH",
                                                 "did you mean 'HIGH'"]),
    ('[teams.vision]\nallowed_classes = ["LOW", "MEDIUM"]\n',
     ["teams.vision.allowed_classes", "unknown priority class 'MEDIUM'"]),
    ('[classes.LOW]\non_deadline = "retry"\n', ["on_deadline = 'retry'", "'abort' or 'force'"]),
    ('[decay]\nfrom = "NORMAL"\nto = "HIGH"\n', ["decay.to", "below decay.from (NORMAL)"]),
    ('[intervals]\ncycle = "60s"\nlock_ttl = "30s"\n', ["intervals.lock_ttl",
                                                         "longer than intervals.cycle"]),
    ('database_url = "postgres://x"\n', ["database_url = 'postgres://x'", "mysql+pymysql://"]),
    ('metrics_port = 70000\n', ["metrics_port = 70000", "0 (off) to 65535"]),
    ('[aging]\nmax_step = 9\n', ["aging.max_step = 9", "1 to 7"]),
    ('[fairness]\ndemote_excess = -1\n', ["line 2", "fairness.demote_excess = -1", "0 to 100"]),
    ('[intervals]\ncycle = nan\n', ["intervals.cycle", "finite number of seconds"]),
    ('[intervals]\nlock_ttl = inf\n', ["intervals.lock_ttl", "finite number of seconds"]),
    ('redis_url = "redis://localhost:abc/0"\n', ["redis_url", "port is not a number"]),
    ('redis_url = "redis://localhost:6379/zero"\n', ["redis_url", "'zero' is not a number"]),
    ('redis_url = "unix://"\n', ["redis_url", "socket's path"]),
    ("x = [\n", ["not valid TOML"]),
    ('fairness = 3\n', ["fairness = 3", "expected a table"]),
    ('[fair_share]\nquantum = nan\n', ["fair_share.quantum = nan", "finite number"]),
    ('[fairness]\ndemote_excess = nan\n', ["fairness.demote_excess", "finite number"]),
    (f'[classes.HIGH]\nmax_wait = "{"9" * 400}s"\n', ["classes.HIGH.max_wait",
                                                        "finite number of seconds"]),
    ('[classes.high]\nmax_wait = "1m"\n[classes.HIGH]\nmax_wait = "20m"\n',
     ["classes.HIGH", "names class HIGH as 'high' does; keep one"]),
    ('[planner.class_weights]\nHIGH = 30\nhigh = 0\n',
     ["planner.class_weights.high", "names class HIGH as 'HIGH' does"]),
    ('[teams.v.class_gpus]\nLOW = 1\nlow = 2\n', ["teams.v.class_gpus.low", "keep one"]),
    ('[planner.class_min_run_time]\nLOW = 1\nLow = 2\n', ["class_min_run_time.Low"]),
    ('database_url = "sqlite://var/lib/hai.db"\n', ["database_url", "three slashes"]),
    ('database_url = "mysql+pymysql://hai:x@db:33o6/hai"\n', ["database_url",
                                                             "port is not a number"]),
    ('database_url = "mysql+pymysql://hai:x@/hai"\n', ["database_url", "no host"]),
    ('redis_url = "redis://:s3cr?t@127.0.0.1:6379/0"\n', ["redis_url", "percent-encode"]),
    ('[executor]\nsignal = "KILL"\n', ["executor.signal", "cannot be caught"]),
    ('[executor]\nsignal = "SIGSTOP"\n', ["executor.signal", "cannot be caught"]),
    ('[intervals]\ncycle = "0.01s"\n', ["intervals.cycle", "at least 1 s"]),
    ('[intervals]\nurgent_poll = "0.001s"\n', ["intervals.urgent_poll", "at least 0.1 s"]),
    ('[executor]\nstate_poll = "0.001s"\n', ["executor.state_poll", "at least 0.05 s"]),
])
def test_bad_configurations_name_file_line_key_value_and_what_is_allowed(
        text: str, expected: list[str]) -> None:
    """Each error message carries where, which key, the bad value and the allowed values."""
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="site.toml")
    message = str(err.value)
    assert message.startswith("site.toml")
    for part in expected:
        assert part in message, message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A path that cannot be read says so, naming the file."""
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(tmp_path / "absent.toml")


@pytest.mark.parametrize("text", [
    'database_url = "mysql+pymysql://hai:pw@/hai?unix_socket=/run/mysqld/mysqld.sock"\n',
    'redis_url = "redis://h:6379/0?password=p@ss"\n',
    'redis_url = "unix:///run/redis.sock?password=se@cret"\n',
    '[executor]\nsignal = "CONT"\n',
])
def test_forms_users_have_are_read(text: str) -> None:
    """A socket-only MySQL URL, a password with '@' in the query and SIGCONT (catchable) are
    read, not refused by the stricter checks."""
    parse_config(text)


def test_a_number_of_hundreds_of_digits_is_a_clear_error() -> None:
    """It overflowed to a traceback (OverflowError), past the nan/inf checks."""
    with pytest.raises(ConfigError, match=r"intervals\.cycle"):
        parse_config(f"[intervals]\ncycle = {'9' * 400}\n")
    with pytest.raises(ConfigError, match=r"fair_share\.quantum"):
        parse_config(f"[fair_share]\nquantum = {'9' * 400}\n")


def test_a_config_everyone_may_write_is_refused(tmp_path: Path) -> None:
    """The daemon file, and the cluster description it names, decide whose jobs are
    preempted: writable by every local user, they are refused with the chmod that fixes it;
    group-writable (a umask of 002) is the owner's choice."""
    (tmp_path / "cluster.toml").write_text(
        (Path(__file__).parents[2] / "conf" / "examples" / "cluster.toml").read_text())
    path = tmp_path / "daemon.toml"
    path.write_text(f'state_dir = "{tmp_path}"\ncluster = "cluster.toml"\n')
    for mode in (0o666, 0o646):
        path.chmod(mode)
        with pytest.raises(ConfigError, match=rf"chmod o-w {path}"):
            load_config(path)
    path.chmod(0o664)
    (tmp_path / "cluster.toml").chmod(0o666)
    with pytest.raises(ConfigError, match=r"cluster.toml: every local user may write"):
        load_config(path)
    (tmp_path / "cluster.toml").chmod(0o664)
    assert load_config(path).description is not None
