"""The fault tier in its CI form (``hai-slurm selftest faults`` runs the full form): every case of
:mod:`hai_slurm.testbed.faults.cases` on the session's testbed, each ending with the shared
checks (no job lost, none left held, no checkpoint lost, counters consistent).

The CI form keeps the tier within about 5 minutes on a 2-core machine: it leaves out
:data:`~hai_slurm.testbed.faults.cli.FULL_ONLY` (slurmd-dies), the daemon is SIGKILLed
through :data:`~hai_slurm.testbed.faults.cli.CI_CYCLES` cycles (the full form: 50), and
slurmctld is killed in one plan phase chosen by the seed (the full form: every phase).
``HAI_FAULT_CASES=a,b`` runs only those cases; ``HAI_FAULT_SEED=N`` fixes the seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hai_slurm.testbed.faults.bed import Testbed
from hai_slurm.testbed.faults.cases import CASES, run_case
from hai_slurm.testbed.faults.cli import ci_cases, ci_options

SELECTED = [n.strip() for n in os.environ.get("HAI_FAULT_CASES", "").split(",") if n.strip()]
unknown = sorted(set(SELECTED) - set(CASES))
if unknown:
    raise pytest.UsageError(f"HAI_FAULT_CASES names unknown case(s) {unknown}; known: "
                            f"{', '.join(CASES)}")


@pytest.mark.parametrize("name", SELECTED or ci_cases())
def test_fault_case(name: str, fault_testbed: Testbed, fault_seed: int,
                    tmp_path: Path) -> None:
    """One case, then its checks; the result line says what it covered."""
    tmp_path.chmod(0o755)  # the jobs write there
    result = run_case(name, fault_testbed, ci_options(fault_seed), tmp_path / name, print)
    print(result.line())
    assert result.ok, result.line()
