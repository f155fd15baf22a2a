"""The ``hai-slurm`` console script: one click group per part of the suite.

Each part owns its command group in its own ``cli`` module; this module only assembles them and
turns :class:`~hai_slurm.errors.HaiSlurmError` into a clean one-line failure (exit code 1).
"""

from __future__ import annotations

import logging
import sys

import click

from hai_slurm import __version__
from hai_slurm.errors import HaiSlurmError


class _Group(click.Group):
    """Group that reports our own errors as messages, never as tracebacks."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except HaiSlurmError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(1)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="hai-slurm")
@click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
def cli(verbose: int) -> None:
    """Checkpoint-then-requeue preemption and priority classes for Slurm GPU clusters."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register() -> None:
    """Add each part's command group (imported here, after ``cli`` exists)."""
    from hai_slurm.conf.cli import conf
    from hai_slurm.demo import demo
    from hai_slurm.priority.cli.admin import config, priority
    from hai_slurm.priority.cli.daemon import daemon
    from hai_slurm.priority.cli.preempt import preempt
    from hai_slurm.priority.sim.cli import simulate
    from hai_slurm.testbed.cli import testbed

    for command in (testbed, conf, config, daemon, priority, preempt, simulate, demo):
        cli.add_command(command)


_register()


def main() -> None:
    """Entry point of the console script."""
    cli(prog_name="hai-slurm")
