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
