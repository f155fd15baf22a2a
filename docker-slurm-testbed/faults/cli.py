"""``hai-slurm selftest faults``: the fault tier on a testbed it brings up (or ``--state-dir``).

By default the full form: every case, the daemon SIGKILLed through 50 cycles, slurmctld killed in
every plan phase (about 10 min on a 2-core machine). ``tests/faults`` runs the CI form
(:func:`ci_cases`, :func:`ci_options`). One line per case with each check's result; exit 1 on
any failure.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from .cases import CASES, PHASES, CaseResult, Options, run_case

CI_CYCLES = 12
"""Cycles of the daemon-kill case in the CI form (the full form: 50)."""


FULL_ONLY = ("slurmd-dies",)
"""Cases only the full form runs (and ``HAI_FAULT_CASES`` when it names them): slurmd-dies took
139 s in CI, the longest test of the suite (most of it waiting for the node to return after
slurmd's restart). ``hai-slurm selftest faults`` still runs it, as does
``HAI_FAULT_CASES=slurmd-dies pytest tests/faults``."""


def ci_cases() -> list[str]:
    """The cases of the CI form: every case but :data:`FULL_ONLY`."""
    return [n for n in CASES if n not in FULL_ONLY]


def ci_options(seed: int) -> Options:
    """The CI form: ``CI_CYCLES`` cycles and one slurmctld phase, both chosen by ``seed``."""
    return Options(cycles=CI_CYCLES, phases=(PHASES[seed % len(PHASES)],), seed=seed)


def pick_cases(text: str | None) -> list[str]:
    """Case names from ``a,b`` (all when empty); a usage error names the known ones."""
    if not text:
        return list(CASES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise click.BadParameter(f"unknown case(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(CASES)}", param_hint="--cases")
    return names


def run_all(names: list[str], opts: Options, state_dir: Path | None, workdir: Path,
            echo: Callable[[str], None] = click.echo) -> list[CaseResult]:
    """Run the cases on one testbed; echo one line per case as it ends."""
    from .bed import testbed

    results = []
    with testbed(state_dir, echo) as bed:
        for name in names:
            echo(f"{name}: running")
            result = run_case(name, bed, opts, workdir / name, echo)
            echo(result.line())
            results.append(result)
    return results


@click.group()
def selftest() -> None:
    """Self-tests of the suite on a real local testbed."""


@selftest.command()
@click.option("--cases", "cases_text", metavar="A,B",
              help=f"Cases to run (default all: {', '.join(CASES)}; env HAI_FAULT_CASES).",
              envvar="HAI_FAULT_CASES")
@click.option("--cycles", default=50, show_default=True,
              help="Cycles of the daemon-kill case (SIGKILLs: one per 10 cycles).")
@click.option("--phases", "phases_text", default=",".join(PHASES), show_default=True,
              help="Plan phases in which the slurmctld case kills slurmctld.")
@click.option("--seed", default=0, show_default=True, help="Seed of every random choice.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Use the running testbed there (default: bring one up and down).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the cases' jobs, logs and databases go (default: a new temp dir).")
def faults(cases_text: str | None, cycles: int, phases_text: str, seed: int,
           state_dir: Path | None, workdir: Path | None) -> None:
    """Inject faults into a real testbed; each case ends with: no job lost, none left held,
    no checkpoint lost, counters consistent. Exit 1 if any case fails."""
    if os.geteuid() != 0:
        raise click.UsageError("the fault tier runs the local testbed and mounts a tmpfs: "
                               "run it as root")
    phases = tuple(p.strip() for p in phases_text.split(",") if p.strip())
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        raise click.BadParameter(f"phases are {', '.join(PHASES)}", param_hint="--phases")
    if cycles < 5:
        raise click.BadParameter("at least 5", param_hint="--cycles")
    names = pick_cases(cases_text)
    opts = Options(cycles=cycles, phases=phases, seed=seed)
    work = workdir or Path(tempfile.mkdtemp(prefix="hai-faults-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    click.echo(f"fault tier: cases {', '.join(names)}; daemon-kill {cycles} cycles, slurmctld "
               f"phases {', '.join(phases)}, seed {seed}; files in {work}")
    t0 = time.monotonic()
    results = run_all(names, opts, state_dir, work)
    failed = [r.name for r in results if not r.ok]
    click.echo(f"{len(results) - len(failed)} of {len(results)} case(s) passed in "
               f"{time.monotonic() - t0:.0f} s" + (f"; FAILED: {', '.join(failed)}"
                                                    if failed else ""))
    if failed:
        sys.exit(1)
