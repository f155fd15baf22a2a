"""Slurm's release numbers, durations and sizes: the one reader of each (hai_slurm.slurm_formats).

The disagreeing cases come from the two readers these replaced (issue 10): conf's sacctmgr reader
took ``"30"`` as 30 s and ``"1-02"`` as 86,402 s, the adapter's took them as 1,800 s and 93,600 s;
one size reader truncated ``"1.7M"`` to 1 MiB, the other rounded it to 2.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from hai_slurm.conf.deployment import target_version
from hai_slurm.errors import ConfigError, SlurmError
from hai_slurm.priority.policy.units import parse_size_mb
from hai_slurm.slurm_formats import (
    INFINITE,
    OLDEST_SUPPORTED,
    DurationContext,
    SlurmVersion,
    duration_minutes,
    duration_seconds,
    size_mib,
)
from hai_slurm.slurm_plugins.version import parse_version

LIMIT = DurationContext.TIME_LIMIT
GRACE = DurationContext.GRACE_TIME


@pytest.mark.parametrize(("text", "limit_s", "grace_s"), [
    ("30", 1800, 30),                 # the one case the context decides: a bare number
    ("1-02", 93600, 93600),           # days-hours, never days + 2 s
    ("1-02:30", 95400, 95400),        # days-hours:minutes
    ("1-02:03:04", 93784, 93784),     # days-hours:minutes:seconds
    ("05:00", 300, 300),              # minutes:seconds
    ("30:30", 1830, 1830),
    ("01:00:00", 3600, 3600),         # hours:minutes:seconds
    ("00:00:10", 10, 10),             # sacctmgr's GraceTime
    ("2-0", 172800, 172800),
    ("0", 0, 0),
])
def test_durations_mean_what_slurm_means_in_each_context(text: str, limit_s: int,
                                                         grace_s: int) -> None:
    """Time limits take a bare number as minutes, GraceTime as seconds; every other form is
    Slurm's one time format and reads the same in both."""
    assert duration_seconds(text, LIMIT) == limit_s
    assert duration_seconds(text, GRACE) == grace_s


def test_duration_minutes_round_seconds_up_and_keep_unlimited_and_unset() -> None:
    """Minutes are whole, seconds rounded up (Slurm's rule for --time); UNLIMITED and unset
    values pass through."""
    assert duration_minutes("1-00:00:00", LIMIT) == 1440
    assert duration_minutes("30:00", LIMIT) == 30 and duration_minutes("30", LIMIT) == 30
    assert duration_minutes("00:00:01", LIMIT) == 1 and duration_minutes("00:01:01", LIMIT) == 2
    for word in ("UNLIMITED", "infinite"):
        assert duration_minutes(word, LIMIT) == INFINITE == duration_seconds(word, GRACE)
    for unset in ("", "NONE", "N/A", "(null)", "  "):
        assert duration_minutes(unset, LIMIT) is None and duration_seconds(unset, GRACE) is None


@pytest.mark.parametrize("bad", ["soon", "1:2:3:4", "-5", "1-", "1.5", "1h"])
def test_unreadable_durations_say_which_formats_exist(bad: str) -> None:
    """Anything outside Slurm's time formats is a ValueError listing the formats."""
    with pytest.raises(ValueError, match=r"cannot read duration .*D-H:M:S or UNLIMITED"):
        duration_seconds(bad, LIMIT)


@pytest.mark.parametrize(("text", "mib"), [
    ("1.7M", 2),           # a part of a MiB is rounded up, never down
    ("1.2M", 2),           # up, not to the nearest
    ("512K", 1),           # as Slurm's --mem=512K
    ("2048K", 2), ("1K", 1), ("1025K", 2),
    ("16000M", 16000), ("62.50G", 64000), ("125G", 128000), ("1.5T", 1572864),
    ("1T", 1048576), ("1P", 1024**3), ("300", 300), ("4g", 4096), ("16GB", 16384),
    ("800MiB", 800), (" 2 G ", 2048), ("0", 0),
])
def test_sizes_are_whole_mib_rounded_up(text: str, mib: int) -> None:
    """Slurm's sizes in MiB: units are powers of 1024, a bare number is MiB, parts round up."""
    assert size_mib(text) == mib


@pytest.mark.parametrize("bad", ["lots", "", "1.7X", "-1G", "G", "800B", "1,5G"])
def test_unreadable_sizes_name_the_units(bad: str) -> None:
    """An unreadable size is a ValueError naming the accepted units and an example."""
    with pytest.raises(ValueError, match=r"cannot read memory size .*K, M, G, T or P"):
        size_mib(bad)


def test_config_sizes_and_slurm_sizes_agree() -> None:
    """The daemon's configuration reads sizes with the same rule (plus whole numbers of MiB)."""
    assert parse_size_mb("1.7M") == size_mib("1.7M") == 2
    assert parse_size_mb("512G") == 512 * 1024 and parse_size_mb(4096) == 4096
    for bad in ("lots", True, -1, 1.5):
        with pytest.raises(ValueError, match="not a size"):
            parse_size_mb(bad)


def test_one_version_type_for_generators_and_adapter() -> None:
    """The same SlurmVersion comes out of conf's and the adapter's readers; the generators go
    by the series, the adapter prints the full release."""
    conf_side = target_version("24.11.5")
    adapter_side = parse_version("slurm 24.11.5\n")
    assert conf_side == adapter_side == SlurmVersion(24, 11, 5)
    assert conf_side.series == "24.11" and str(adapter_side) == "24.11.5"
    assert SlurmVersion.parse("slurm-wlm 22.05.8") == SlurmVersion(22, 5, 8)
    assert str(SlurmVersion.parse("26.05")) == "26.05.0"
    assert target_version("22.05") == OLDEST_SUPPORTED
    assert SlurmVersion(22, 5, 8) < SlurmVersion(23, 2) < SlurmVersion(24, 11)
    assert not SlurmVersion(22, 5, 8).has_preempt_parameters
    assert SlurmVersion(23, 2).has_preempt_parameters
    assert SlurmVersion(24, 11).gres_cores_whole_sockets


def test_unreadable_or_too_old_versions_raise_each_callers_error() -> None:
    """ValueError from the type; conf says ConfigError, the adapter SlurmError."""
    with pytest.raises(ValueError, match="cannot read a Slurm version from 'latest'"):
        SlurmVersion.parse("latest")
    with pytest.raises(ConfigError, match="not a Slurm version"):
        target_version("latest")
    with pytest.raises(ConfigError, match=r"Slurm 21\.08 is older than the oldest release"):
        target_version("21.08.5")
    with pytest.raises(SlurmError, match=r"expected output like 'slurm 24\.11\.5'"):
        parse_version("scontrol: fatal: no config")


def test_the_shared_module_sits_below_conf_adapter_and_daemon() -> None:
    """Importing it loads no other hai_slurm module, so conf, slurm_plugins and priority can all
    use it without importing each other."""
    code = ("import sys, hai_slurm.slurm_formats; "
            "print(sorted(m for m in sys.modules if m.startswith('hai_slurm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "['hai_slurm', 'hai_slurm.slurm_formats']"
