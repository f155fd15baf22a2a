"""The subprocess runner's environment: the locale and time zone Slurm's commands print in."""

from __future__ import annotations

import os
import subprocess

from hai_slurm.slurm_plugins.runner import SubprocessRunner


def test_commands_get_the_local_zone_read_once_unless_tz_is_set() -> None:
    """TZ=:/etc/localtime is the zone an unset TZ gives (so local times print the same) while
    glibc reads the file once instead of checking it for every time it formats; a TZ the
    daemon was started with is kept."""
    runner = SubprocessRunner(env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert runner.env["TZ"] == ":/etc/localtime" and runner.env["LC_ALL"] == "C"
    stamp = ["date", "-d", "@1796172925", "+%F %T %z"]
    unset = subprocess.run(stamp, capture_output=True, text=True, check=True,
                           env={"PATH": runner.env["PATH"]}).stdout
    assert runner(stamp).stdout == unset
    kept = SubprocessRunner(env={"TZ": "Asia/Tokyo", "PATH": runner.env["PATH"]})
    assert kept.env["TZ"] == "Asia/Tokyo"
    assert kept(stamp).stdout.strip().endswith("+0900")


def test_exact_output_keeps_carriage_returns() -> None:
    """Text mode turns ``\\r`` and ``\\r\\n`` into ``\\n``; ``exact`` keeps them, so a job name
    read from ``squeue -o`` equals the one ``squeue --json`` gives."""
    runner = SubprocessRunner(env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    argv = ["printf", "a\\rb\\r\\nc\\n\\303\\251"]
    assert runner(argv).stdout == "a\nb\nc\né"
    assert runner(argv, exact=True).stdout == "a\rb\r\nc\né"
    assert runner(["cat"], stdin="x\ry", exact=True).stdout == "x\ry"


def test_squeue_options_from_the_environment_are_not_passed_on() -> None:
    """``SQUEUE_ARRAY`` (``--array``, which beats ``--array-unique``: every pending task on a
    line of its own, on 22.05.8) or ``SQUEUE_STATES`` in the daemon's environment would change
    what its listings read; other variables are passed on."""
    runner = SubprocessRunner(env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                   "SQUEUE_ARRAY": "1", "SQUEUE_STATES": "RUNNING",
                                   "SLURM_BITSTR_LEN": "0", "KEEP": "x"})
    seen = dict(line.split("=", 1) for line in runner(["env"]).stdout.splitlines())
    assert not [k for k in seen if k.startswith("SQUEUE_")]
    assert seen["KEEP"] == "x" and seen["SLURM_BITSTR_LEN"] == "0"
