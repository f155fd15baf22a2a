"""How Slurm writes release numbers, durations and memory sizes: one reader for each.

Both the configuration generators (``hai_slurm.conf``) and the adapter (``hai_slurm.slurm_plugins``)
read these, and ``hai_slurm.priority`` reads sizes in its own configuration. So they live here,
below all three: standard library only, importing nothing else of hai_slurm. Errors are plain
:class:`ValueError`; each caller names the file, key or job and raises its own error.

Durations
    Slurm writes one time format everywhere (``time_str2secs`` in Slurm's source): ``M``,
    ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``, and ``UNLIMITED``/``INFINITE``. So
    ``"1-02"`` is always 1 day 2 hours (93,600 s) and ``"05:00"`` is 5 minutes. Only what a
    *bare number* means depends on the field, so every reader names its field's context:

    ==========================  ==========================================================
    :class:`DurationContext`    fields (a bare number means)
    ==========================  ==========================================================
    ``TIME_LIMIT``              ``sbatch --time``, squeue ``TIME_LIMIT``, partition
                                ``MaxTime``/``DefaultTime``, QOS ``MaxWall`` (minutes:
                                ``"30"`` = 1,800 s)
    ``GRACE_TIME``              partition and QOS ``GraceTime`` (seconds: ``"30"`` = 30 s;
                                ``scontrol`` prints ``GraceTime=30``, ``sacctmgr`` prints
                                ``00:00:30``)
    ==========================  ==========================================================

    :func:`duration_seconds` gives seconds; :func:`duration_minutes` rounds them up to whole
    minutes, as Slurm does for time limits ("second values are rounded up to the next minute").

Sizes
    :func:`size_mib`: a number (decimals allowed, as Slurm prints ``62.50G``) with an optional
    unit ``K``, ``M`` (the default), ``G``, ``T`` or ``P`` (powers of 1024, any case, optionally
    followed by ``B`` or ``iB``). Slurm counts memory in whole MiB and rounds a part of a MiB
    *up* (``--mem=512K`` asks for 1 MiB), so ``"1.7M"`` is 2 MiB and ``"1.2M"`` is 2 MiB too:
    a size is never made smaller than written.

Versions
    :class:`SlurmVersion`: ``major.minor.micro`` (``22.05.8``); ``series`` is the release
    (``"22.05"``), which is what the generators and the test data folders go by.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

INFINITE = -1
"""Stands for Slurm's INFINITE / UNLIMITED in integer fields (time limits, MaxTime, MaxWall)."""


# ---- versions ----------------------------------------------------------------------------------

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True, order=True)
class SlurmVersion:
    """A Slurm release, e.g. 22.05.8 (``micro`` 0 when only the series is known)."""

    major: int
    minor: int
    micro: int = 0

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """``"22.05"``, ``"22.05.8"``, ``"slurm 24.11.5"``, ``"slurm-wlm 22.05.8"`` -> version.

        Raises ValueError for text without a version; callers say where the text came from.
        """
        m = _VERSION.search(text or "")
        if m is None:
            raise ValueError(f"cannot read a Slurm version from {(text or '').strip()!r} "
                             "(expected YY.MM or YY.MM.N, such as 22.05 or 24.11.5)")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def series(self) -> str:
        """The release series, e.g. ``"22.05"`` (generated files and test data go by it)."""
        return f"{self.major:02d}.{self.minor:02d}"

    @property
    def has_preempt_parameters(self) -> bool:
        """``PreemptParameters=`` exists from 23.02 on; before, the options live in
        ``SchedulerParameters`` with a ``preempt_`` prefix (22.05 dies on the unknown key)."""
        return self >= SlurmVersion(23, 2)

    @property
    def gres_cores_whole_sockets(self) -> bool:
        """gres.conf ``Cores=`` must cover whole sockets. 24.11.5 and 26.05.5 drain a node whose
        GPU core range ends inside a socket ("GRES core specification 48-63 ... doesn't match
        socket boundaries", node INVAL); 22.05.8 takes any range. 23.x was not tried, so from
        23.02 on (whole sockets are accepted by every release)."""
        return self >= SlurmVersion(23, 2)


OLDEST_SUPPORTED = SlurmVersion(22, 5)
"""The oldest release hai-slurm generates for and talks to (squeue --json with openapi v0.0.38)."""


# ---- durations ---------------------------------------------------------------------------------

class DurationContext(StrEnum):
    """The kind of Slurm field a duration comes from; it decides what a bare number means."""

    TIME_LIMIT = "time_limit"
    """``--time``, ``TIME_LIMIT``, ``MaxTime``, ``DefaultTime``, ``MaxWall``: bare = minutes."""
    GRACE_TIME = "grace_time"
    """``GraceTime`` of a partition or QOS: bare = seconds."""


_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_UNLIMITED = ("UNLIMITED", "INFINITE")
_UNSET = ("", "NONE", "N/A", "(NULL)")


def duration_seconds(text: str, context: DurationContext) -> int | None:
    """Seconds in a Slurm duration read in ``context`` (see the module docstring).

    :data:`INFINITE` for ``UNLIMITED``/``INFINITE``; ``None`` for empty, ``NONE``, ``N/A``.
    Raises ValueError for anything else that is not one of Slurm's time formats.
    """
    value = text.strip()
    if value.upper() in _UNLIMITED:
        return INFINITE
    if value.upper() in _UNSET:
        return None
    m = _DURATION.fullmatch(value)
    if m is None:
        raise ValueError(f"cannot read duration {text!r}; expected minutes, M:S, H:M:S, D-H, "
                         "D-H:M, D-H:M:S or UNLIMITED")
    days, a, b, c = m.groups()
    if days is not None:                          # D-H, D-H:M, D-H:M:S
        h, mi, s = int(a), int(b or 0), int(c or 0)
    elif c is not None:                           # H:M:S
        h, mi, s = int(a), int(b), int(c)
    elif b is not None:                           # M:S
        h, mi, s = 0, int(a), int(b)
    elif context is DurationContext.GRACE_TIME:   # a bare number of seconds
        h, mi, s = 0, 0, int(a)
    else:                                         # a bare number of minutes
        h, mi, s = 0, int(a), 0
    return ((int(days or 0) * 24 + h) * 60 + mi) * 60 + s


def duration_minutes(text: str, context: DurationContext) -> int | None:
    """:func:`duration_seconds` in whole minutes, seconds rounded up (``INFINITE``/None kept)."""
    seconds = duration_seconds(text, context)
    if seconds is None or seconds == INFINITE:
        return seconds
    return -(-seconds // 60)


# ---- sizes -------------------------------------------------------------------------------------

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([KMGTP])(?:I?B)?)?")
_MIB_PER_UNIT = {"K": Fraction(1, 1024), "M": Fraction(1), "G": Fraction(1024),
                 "T": Fraction(1024**2), "P": Fraction(1024**3)}


def size_mib(text: str) -> int:
    """Whole MiB in a Slurm size such as ``16000M``, ``62.50G``, ``1T``, ``512K`` or ``300``.

    A bare number is MiB; a part of a MiB is rounded up (``"1.7M"`` and ``"512K"`` give 2 and 1).
    Raises ValueError for anything else.
    """
    m = _SIZE.fullmatch(text.strip().upper())
    if m is None:
        raise ValueError(f"cannot read memory size {text!r}; expected a number with an optional "
                         "unit K, M, G, T or P (e.g. 16000M, 62.50G)")
    return math.ceil(Fraction(m.group(1)) * _MIB_PER_UNIT[m.group(2) or "M"])
