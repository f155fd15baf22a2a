"""``hai-slurm demo`` on the session testbed: the README's first command, end to end."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from conftest import Testbed

from hai_slurm.cli import cli

pytestmark = pytest.mark.slow


def test_demo_preempts_two_victims_with_nothing_lost(testbed: Testbed) -> None:
    """The urgent job starts within seconds, two team-a jobs save, are requeued, resume from
    the step they saved at and end bit-identical to an uninterrupted run."""
    res = CliRunner().invoke(cli, ["demo", "--state-dir", str(testbed.state_dir),
                                   "--steps", "300", "--warmup", "11"])
    assert res.exit_code == 0, res.output
    out = res.output
    start = re.search(r"urgent job: submit -> start (\d+\.\d+) s", out)
    assert start is not None, out
    assert float(start.group(1)) < 5.0, out
    assert out.count("steps lost [0]") == 2, out
    assert out.count("result bit-identical to an uninterrupted run: yes") == 2, out
    assert re.search(r"plan 1 +\S+ \S+ +done", out), out
    assert "steps planned +" in out and "-> done +" in out
