"""`hai-slurm testbed` commands on their error and no-op paths (no cluster is started)."""

from __future__ import annotations

from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.testbed import docker_mode, local


def test_down_with_nothing_up_exits_0_quietly(tmp_path):
    """`down` on an empty state dir prints nothing and succeeds."""
    res = CliRunner().invoke(cli, ["testbed", "down", "--state-dir", str(tmp_path)])
    assert res.exit_code == 0
    assert res.output == ""


def test_env_and_status_without_testbed_fail_with_a_hint(tmp_path):
    """`env` says how to start a testbed; `status` reports none and exits 1."""
    res = CliRunner().invoke(cli, ["testbed", "env", "--state-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "hai-slurm testbed up --state-dir" in res.output
    res = CliRunner().invoke(cli, ["testbed", "status", "--state-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "no testbed in" in res.output


def test_native_preemption_without_accounting_is_refused(tmp_path):
    """The shape error names the setting and both ways out, before anything starts."""
    res = CliRunner().invoke(cli, ["testbed", "up", "--no-accounting", "--preemption", "native",
                                   "--state-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "preemption: native preemption works through QOS" in res.output
    assert "--preemption daemon" in res.output
    assert list(tmp_path.iterdir()) == []


def test_state_dir_comes_from_the_environment(tmp_path):
    """HAI_TESTBED_STATE_DIR is the default --state-dir."""
    res = CliRunner().invoke(cli, ["testbed", "env"], env={"HAI_TESTBED_STATE_DIR": str(tmp_path)})
    assert f"no testbed in {tmp_path}" in res.output


def test_down_without_docker_also_removes_a_recorded_docker_testbed(tmp_path):
    """A Docker testbed recorded in the state dir is torn down by plain `down` too; when that
    fails (here: no engine at DOCKER_HOST), the error says which command to run later."""
    assert local.DOCKER_STATE_FILE == docker_mode.STATE_FILE
    (tmp_path / local.DOCKER_STATE_FILE).write_text("{}")
    res = CliRunner().invoke(cli, ["testbed", "down", "--state-dir", str(tmp_path)],
                             env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert res.exit_code == 1
    assert f"a Docker testbed is recorded in {tmp_path}" in res.output
    assert f"hai-slurm testbed down --docker --state-dir {tmp_path}" in res.output
