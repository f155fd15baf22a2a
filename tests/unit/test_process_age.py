"""The checkpoint library's process age (``restart_seconds`` in ``phase.json`` starts from it):
read from ``/proc``, in a real child process, whatever its command name holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hai_slurm.checkpoint import checkpointer

_CHILD = """
import sys, time
if len(sys.argv) > 2:   # the command name /proc/self/stat shows (at most 15 bytes)
    open("/proc/self/comm", "w").write(sys.argv[2])
time.sleep(float(sys.argv[1]))
from hai_slurm.checkpoint.checkpointer import _process_age
print(repr(_process_age()))
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="needs Linux /proc (the library reads its start there)")


def _age_of_child(sleep: float, *name: str) -> float:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(sleep), *name], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return float(out)   # the child prints repr() of a float, or None (then this fails)


def test_age_counts_from_the_process_start() -> None:
    """A child that slept 1.5 s before asking is at least that old, and not minutes old (the
    clock-tick field is the 22nd of /proc/self/stat: the wrong field gives nonsense)."""
    age = _age_of_child(1.5)
    assert 1.5 <= age < 30


def test_command_name_with_spaces_and_parentheses() -> None:
    """The command name sits in parentheses and may hold spaces and ')' (a job can name its
    process anything): the fields are counted from the last ')'."""
    age = _age_of_child(0.5, "a ) 1 2 (x) y")
    assert 0.5 <= age < 30


def test_unreadable_proc_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /proc cannot be read (another OS, a locked-down container) the age is unknown, and
    the checkpointer then counts from its own creation."""
    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(checkpointer.Path, "read_bytes", refuse)
    assert checkpointer._process_age() is None
