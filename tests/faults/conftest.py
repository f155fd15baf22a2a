"""The fault tier's fixtures: one testbed for the session (its own slot, see
:func:`hai_slurm.testbed.faults.bed.testbed`), the seed, and the marker.

Every test in this folder is marked ``faults``. ``HAI_FAULT_STATE_DIR=DIR`` runs the cases on
the healthy testbed there instead (they kill and restart its components).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hai_slurm.testbed.faults.bed import Testbed, testbed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/faults as ``faults``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)


@pytest.fixture(scope="session")
def fault_testbed() -> Iterator[Testbed]:
    """The session's testbed for the fault cases."""
    if os.geteuid() != 0:
        pytest.fail("the fault tier runs the local testbed and mounts a tmpfs: run as root")
    reuse = os.environ.get("HAI_FAULT_STATE_DIR")
    with testbed(Path(reuse) if reuse else None, print) as bed:
        yield bed


@pytest.fixture(scope="session")
def fault_seed() -> int:
    """``HAI_FAULT_SEED``, else the day's number (so the CI form's choices rotate daily)."""
    return int(os.environ.get("HAI_FAULT_SEED") or int(time.time() // 86400))
