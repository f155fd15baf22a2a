"""The daemon configuration reading teams and class facts from the cluster description."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.classes import PriorityClass as P
from hai_slurm.cli import cli
from hai_slurm.conf.description import load_description
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import load_config, parse_config
from hai_slurm.priority.policy.settings import DEFAULT_CLASSES, DeadlineAction

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "priority" / "examples" / "daemon-with-cluster.toml"
CLUSTER_EXAMPLE = ROOT / "conf" / "examples" / "cluster.toml"

# 2 nodes x 4 GPUs. HIGH may not preempt NORMAL, so NORMAL is preempted only by VERY_HIGH and
# EXTREME_HIGH; nobody preempts EXTREME_HIGH (it may opt out of preemption by default).
DESCRIPTION = """
format = 1
[cluster]
name = "lab"
[node_types.box]
cores_per_socket = 8
memory_mb = 64000
[[node_types.box.socket]]
[[node_types.box.socket.pcie_switch]]
gpus = [0, 1, 2, 3]
[[nodes]]
names = "n[1-2]"
type = "box"
[classes]
default_grace_time = 90
[classes.HIGH]
preempts = ["LOW"]
max_grace = 900
[classes.LOW]
grace_time = 30
allow_non_preemptible = true
[teams.vision]
gpu_quota = 5
classes = ["HIGH", "NORMAL", "LOW"]
[teams.nlp]
gpu_quota = 3
"""


def _write(tmp_path: Path, daemon: str, description: str = DESCRIPTION) -> Path:
    """A daemon file in tmp_path/etc naming ../share/cluster.toml (a relative path)."""
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "cluster.toml").write_text(description)
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "daemon.toml"
    path.write_text('cluster = "../share/cluster.toml"\n' + daemon)
    return path


def test_quotas_classes_and_grace_caps_come_from_the_description(tmp_path: Path) -> None:
    """Teams and class facts are the description's; the daemon file's policy knobs still apply."""
    path = _write(tmp_path, '[classes.HIGH]\nmax_wait = "20m"\non_deadline = "force"\n'
                            '[team_defaults]\ngpus = 1\n')
    cfg = load_config(path)
    assert cfg.description is not None
    assert cfg.description.source == str((tmp_path / "share" / "cluster.toml").resolve())
    teams = cfg.policy.teams
    assert set(teams) == {"vision", "nlp"}
    assert teams["vision"].gpus == 5 and teams["nlp"].gpus == 3
    assert teams["vision"].allowed_classes == {P.HIGH, P.NORMAL, P.LOW}
    assert teams["nlp"].allowed_classes == {c for c in P if c.weight <= P.NORMAL.weight}
    assert teams["vision"].class_gpus == {} and teams["vision"].cpus is None
    assert cfg.policy.quota("stray").gpus == 1
    classes = cfg.policy.classes
    assert classes[P.HIGH].grace_cap == 900 and classes[P.HIGH].max_wait == 1200
    assert classes[P.HIGH].on_deadline is DeadlineAction.FORCE
    assert classes[P.LOW].grace_cap == 30 and classes[P.NORMAL].grace_cap == 90
    assert classes[P.LOW].max_wait == DEFAULT_CLASSES["LOW"][0]
    optional = {c for c, policy in classes.items() if policy.preemptible_optional}
    assert optional == {P.EXTREME_HIGH, P.LOW}


def test_without_cluster_the_daemon_file_is_the_source() -> None:
    """No `cluster` key: inline teams and the embedded class defaults, as before."""
    cfg = parse_config("[teams.a]\ngpus = 4\n[classes.LOW]\ngrace_cap = 45\n")
    assert cfg.description is None
    assert cfg.policy.teams["a"].gpus == 4
    assert cfg.policy.classes[P.LOW].grace_cap == 45
    assert cfg.policy.classes[P.HIGH].grace_cap == DEFAULT_CLASSES["HIGH"][1]


def test_team_in_both_files_is_an_error_naming_both(tmp_path: Path) -> None:
    """[teams.vision] in the daemon file too: refused, with both files, the line and the key."""
    path = _write(tmp_path, "\n[teams.vision]\ngpus = 64\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}, line 3: teams.vision: defined in both {path} and the "
                           f"cluster description {(tmp_path / 'share' / 'cluster.toml').resolve()}")
    assert "keep it in the cluster description" in text
    assert info.value.key == "teams.vision"


def test_team_only_in_the_daemon_file_is_an_error_too(tmp_path: Path) -> None:
    """With `cluster`, a team defined only in the daemon file would be a second source."""
    path = _write(tmp_path, "[teams.robotics]\ngpus = 2\n")
    with pytest.raises(ConfigError, match=r"teams\.robotics: teams come from the cluster "
                       r"description .*cluster\.toml when `cluster` is set; add "
                       r"\[teams\.robotics\]"):
        load_config(path)


@pytest.mark.parametrize(("key", "value", "theirs"), [
    ("grace_cap", '"5m"', "classes.NORMAL.max_grace"),
    ("preemptible_optional", "true", "classes.NORMAL.allow_non_preemptible"),
])
def test_class_fact_in_both_files_is_an_error_naming_both(
        tmp_path: Path, key: str, value: str, theirs: str) -> None:
    """A class fact the description owns may not be set in the daemon file as well."""
    path = _write(tmp_path, f'[classes.normal]\nmax_wait = "1h"\n{key} = {value}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}, line 4: classes.normal.{key} = ")
    assert f"defined in both {path} and the cluster description " in text
    assert f"(there: {theirs}" in text and "keep it in the cluster description" in text


def test_missing_description_names_the_key_and_the_path(tmp_path: Path) -> None:
    """A `cluster` path that does not exist: error on the key, with the resolved path."""
    path = tmp_path / "daemon.toml"
    path.write_text('metrics_port = 0\ncluster = "nowhere/cluster.toml"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(
        f"{path}, line 2: cluster = 'nowhere/cluster.toml': the cluster description "
        f"{tmp_path.resolve() / 'nowhere' / 'cluster.toml'} does not exist")
    assert info.value.key == "cluster"


def test_bad_description_reports_its_own_file_and_key(tmp_path: Path) -> None:
    """An error inside the description surfaces as the description's error, naming its file."""
    bad = DESCRIPTION.replace("gpu_quota = 3", "gpu_quota = 3\ngpu_qouta = 1")
    path = _write(tmp_path, "", description=bad)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str((tmp_path / "share" / "cluster.toml").resolve())
    assert info.value.key == "teams.nlp.gpu_qouta"
    assert "unknown key" in str(info.value)


def test_bad_description_quota_is_the_description_validators_error(tmp_path: Path) -> None:
    """Whole-description checks (quotas within the cluster's 8 GPUs) apply through the daemon."""
    path = _write(tmp_path, "", description=DESCRIPTION.replace("gpu_quota = 5", "gpu_quota = 50"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str((tmp_path / "share" / "cluster.toml").resolve())
    assert "teams.vision.gpu_quota" in str(info.value)


def test_shipped_example_pair_agrees_with_the_cluster_example() -> None:
    """daemon-with-cluster.toml loads and its teams are conf/examples/cluster.toml's."""
    cfg = load_config(EXAMPLE)
    desc = load_description(CLUSTER_EXAMPLE)
    assert cfg.description == desc
    assert {n: q.gpus for n, q in cfg.policy.teams.items()} == {
        t.name: t.gpu_quota or 0 for t in desc.teams}


def test_example_pair_loads_in_the_installed_package_layout(tmp_path: Path) -> None:
    """The relative `cluster` path also holds in hai_slurm/{priority,conf}/examples."""
    pkg = tmp_path / "site-packages" / "hai_slurm"
    for sub, src in (("priority", EXAMPLE), ("conf", CLUSTER_EXAMPLE)):
        (pkg / sub / "examples").mkdir(parents=True)
        shutil.copy(src, pkg / sub / "examples" / src.name)
    cfg = load_config(pkg / "priority" / "examples" / EXAMPLE.name)
    assert cfg.description is not None
    assert cfg.description.source == str((pkg / "conf" / "examples" / "cluster.toml").resolve())


def test_config_check_says_where_teams_and_classes_came_from(tmp_path: Path) -> None:
    """`hai-slurm config check` names the description, or the daemon file without one."""
    path = _write(tmp_path, "")
    out = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert out.exit_code == 0, out.output
    where = (tmp_path / "share" / "cluster.toml").resolve()
    assert f"from the cluster description {where} (key `cluster`)" in out.output
    assert "teams: 2 with quotas (8 GPUs)" in out.output
    assert "HIGH 15m" in out.output and "LOW 30s (--preemptible=no allowed)" in out.output
    inline = tmp_path / "inline.toml"
    inline.write_text("[teams.a]\ngpus = 2\n")
    out = CliRunner().invoke(cli, ["config", "check", str(inline)])
    assert out.exit_code == 0, out.output
    assert f"from {inline} (no `cluster` key" in out.output


def test_config_check_conflict_exits_1_with_the_message(tmp_path: Path) -> None:
    """The CLI shows the conflict as one error line, exit code 1, no traceback."""
    path = _write(tmp_path, "[classes.LOW]\ngrace_cap = 60\n")
    out = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert out.exit_code == 1
    assert "classes.LOW.grace_cap = 60: defined in both" in out.output
    assert "Traceback" not in out.output
