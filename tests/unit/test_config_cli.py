"""``hai-slurm config check FILE``: OK and a summary, or the error and exit code 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "priority" / "examples" / "daemon.toml"


def test_check_example_prints_ok_and_summary() -> None:
    """The shipped example passes and the summary shows its main settings."""
    out = CliRunner().invoke(cli, ["config", "check", str(EXAMPLE)])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"OK: {EXAMPLE}")
    assert "LOW 1d" in out.output and "HIGH 10m" in out.output
    assert "ABOVE_NORMAL -> NORMAL after 30m" in out.output
    assert "teams: 2 with quotas (96 GPUs)" in out.output


def test_check_bad_file_prints_the_error_and_exits_1(tmp_path: Path) -> None:
    """A typo in a key: one line naming file, line, key and the suggestion; exit code 1."""
    bad = tmp_path / "site.toml"
    bad.write_text('[aging]\nmax_clas = "HIGH"\n')
    out = CliRunner().invoke(cli, ["config", "check", str(bad)])
    assert out.exit_code == 1
    assert f"error: {bad}, line 2: aging.max_clas: unknown key (did you mean 'max_class'?)" \
        in out.output
    assert "Traceback" not in out.output


def test_check_missing_file_exits_1(tmp_path: Path) -> None:
    """A file that does not exist is reported, not a traceback."""
    out = CliRunner().invoke(cli, ["config", "check", str(tmp_path / "nope.toml")])
    assert out.exit_code == 1 and "cannot read the configuration" in out.output


def test_error_attributes_carry_key_and_value() -> None:
    """Callers can read the bad key and value from the exception."""
    with pytest.raises(ConfigError) as err:
        parse_config("[teams.a]\ngpus = -1\n", source="x.toml")
    assert err.value.key == "teams.a.gpus" and err.value.value == -1
    assert err.value.source == "x.toml, line 2"


def test_check_prints_the_effective_preemption_settings_and_the_first_try_note() -> None:
    """min_run_time, thresholds, grace caps and cross-leaf placement are shown; the default
    min_run_time comes with the note that names the first-try file, which itself has none."""
    out = CliRunner().invoke(cli, ["config", "check", str(EXAMPLE)]).output
    assert "victims run >= 2m" in out and "benefit > 1 x lost work" in out
    assert "grace caps: EXTREME_HIGH 10m" in out
    assert "else across the spine" in out
    assert "note: a job that has run less than 2m is never a victim" in out
    first = CliRunner().invoke(cli, ["config", "check", str(EXAMPLE.with_name("first-try.toml"))])
    assert first.exit_code == 0, first.output
    assert "victims run >= 10s" in first.output and "cycle every 1s" in first.output
    assert "restart cost 10s" in first.output
    assert "note:" not in first.output
