"""The testbed's rendered configs for three shapes match golden copies byte for byte.

To accept an intended change, run
``HAI_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_testbed_golden.py`` and review
``git diff tests/unit/golden/testbed``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from hai_slurm.testbed.layout import Ports, local_layout
from hai_slurm.testbed.render import render_configs, sacctmgr_commands
from hai_slurm.testbed.shape import ClusterShape, PreemptionMode, parse_grace_times

GOLDEN = Path(__file__).parent / "golden" / "testbed"
UPDATE = os.environ.get("HAI_UPDATE_GOLDEN") == "1"
CASES = {
    "default-daemon": ClusterShape(),
    "native-2x4-grace": ClusterShape(nodes=2, gpus_per_node=4, preemption=PreemptionMode.NATIVE)
    .with_grace_times(parse_grace_times(["10", "LOW=30"])),
    "noacct-5x2-3leaf": ClusterShape(nodes=5, gpus_per_node=2, leaf_switch_count=3,
                                     accounting=False),
}


def _files(shape: ClusterShape) -> dict[str, str]:
    layout = local_layout(shape, Ports(), Path("/srv/testbed"), "host1", "secret")
    files = render_configs(shape, layout)
    files["sacctmgr.txt"] = "".join(shlex.join(cmd) + "\n" for cmd in sacctmgr_commands(shape))
    return files


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_files_match_golden(case: str) -> None:
    """Every rendered file equals its golden copy, and no golden file is left over."""
    files = _files(CASES[case])
    folder = GOLDEN / case
    if UPDATE:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
    assert sorted(p.name for p in folder.iterdir()) == sorted(files), \
        "set HAI_UPDATE_GOLDEN=1 to accept a new set of files"
    for name, text in files.items():
        assert text == (folder / name).read_text(encoding="utf-8"), (
            f"{case}/{name} differs from the golden copy; if intended, rerun with "
            "HAI_UPDATE_GOLDEN=1")


def test_site_scheduling_swaps_only_the_scheduler_parameters() -> None:
    """``site_scheduling``: the generated SchedulerParameters (Slurm's own pass intervals)
    replace the testbed's 1-s passes; nothing else in slurm.conf changes."""
    from hai_slurm.conf.deployment import SCHEDULER_PARAMETERS

    fast = _files(ClusterShape())["slurm.conf"].splitlines()
    site = _files(ClusterShape(site_scheduling=True))["slurm.conf"].splitlines()
    changed = [(a, b) for a, b in zip(fast, site, strict=True) if a != b]
    assert len(changed) == 1, changed
    before, after = changed[0]
    assert "sched_interval=1" in before
    assert after.startswith(f"SchedulerParameters={','.join(SCHEDULER_PARAMETERS)}")
    assert "sched_interval" not in after
