"""The eight priority classes of hai-platform, in one place.

Each class has a scheduling weight (``EXTREME_HIGH`` 50 down to ``LOW`` 0) and one Slurm QOS of
the same name in lower case. Members are listed from highest to lowest: iteration is rank order.
"""

from __future__ import annotations

from enum import StrEnum


class PriorityClass(StrEnum):
    """A job's priority class; ``.value`` is the class name as users write it."""

    EXTREME_HIGH = "EXTREME_HIGH"
    VERY_HIGH = "VERY_HIGH"
    HIGH = "HIGH"
    ABOVE_NORMAL = "ABOVE_NORMAL"
    NORMAL = "NORMAL"
    UNDER_NORMAL = "UNDER_NORMAL"
    BELOW_NORMAL = "BELOW_NORMAL"
    LOW = "LOW"

    @property
    def weight(self) -> int:
        """The hai-platform priority value of the class (50 for EXTREME_HIGH ... 0 for LOW)."""
        return _WEIGHTS[self]

    @property
    def qos(self) -> str:
        """The name of the Slurm QOS that carries this class (the class name in lower case)."""
        return self.value.lower()

    def outranks(self, other: PriorityClass) -> bool:
        """Whether this class is strictly higher than ``other``."""
        return self.weight > other.weight


_WEIGHTS: dict[PriorityClass, int] = {
    PriorityClass.EXTREME_HIGH: 50,
    PriorityClass.VERY_HIGH: 40,
    PriorityClass.HIGH: 30,
    PriorityClass.ABOVE_NORMAL: 20,
    PriorityClass.NORMAL: 10,
    PriorityClass.UNDER_NORMAL: 8,
    PriorityClass.BELOW_NORMAL: 5,
    PriorityClass.LOW: 0,
}


class ClassOrigin(StrEnum):
    """Where a job's class came from: at submit time (the ``#HAI`` record's ``source``:
    directive, QOS or default) or from the daemon's policy later (aging, decay, demotion)."""

    DIRECTIVE = "directive"  # an explicit `#HAI --priority=...` line
    QOS = "qos"              # sbatch --qos=<a class's QOS>, no --priority directive
    DEFAULT = "default"      # neither: the configured (or the account's) default class
    AGING = "aging"          # promoted after waiting past its class's bound
    DECAY = "decay"          # ABOVE_NORMAL decayed to NORMAL after its running time
    DEMOTION = "demotion"    # its team preempted too often: one class lower
