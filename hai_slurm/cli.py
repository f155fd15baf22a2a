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
    from hai_slurm.testbed.cli import testbed

    cli.add_command(testbed)
    from hai_slurm.conf.cli import conf; cli.add_command(conf)  # noqa: E702, I001
    from hai_slurm.priority.cli import config, priority
    cli.add_command(config)
    cli.add_command(priority)
    from hai_slurm.priority.daemon_cli import daemon; cli.add_command(daemon)  # noqa: E702, I001
    from hai_slurm.priority.sim.cli import simulate; cli.add_command(simulate)  # noqa: E702, I001
    from hai_slurm.priority.preempt_cli import preempt; cli.add_command(preempt)  # noqa: E702, I001
    from hai_slurm.demo import demo; cli.add_command(demo)  # noqa: E702, I001


_register()


def main() -> None:
    """Entry point of the console script."""
    cli(prog_name="hai-slurm")
