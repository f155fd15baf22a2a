"""The ``hai-slurm`` console script: one click group per part of the suite.

Each part owns its command group in its own ``cli`` module; this module only assembles them and
turns :class:`~hai_slurm.errors.HaiSlurmError` into a clean one-line failure (exit code 1).
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from hai_slurm import __version__
from hai_slurm.errors import HaiSlurmError

#: Third-party modules that only an extra installs, and that extra (setup.cfg).
EXTRA_OF_MODULE = {
    "sqlalchemy": "daemon", "alembic": "daemon", "pymysql": "daemon", "redis": "daemon",
    "prometheus_client": "daemon", "docker": "testbed", "matplotlib": "sim", "numpy": "sim",
}


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """The message for a command that needs an extra which is not installed, else None."""
    top = (err.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return (f"this command needs the '{extra}' extra (module {top} is missing): "
            f"pip install 'hai-slurm[{extra}]'")


class _Group(click.Group):
    """Group that reports our own errors as messages, never as tracebacks."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except HaiSlurmError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(1)
        except ModuleNotFoundError as err:
            message = missing_extra(err)
            if message is None:
                raise
            click.echo(f"error: {message}", err=True)
            sys.exit(1)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="hai-slurm")
@click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
def cli(verbose: int) -> None:
    """Checkpoint-then-requeue preemption and priority classes for Slurm GPU clusters."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


#: Each part's command group: (command name, module, attribute). Imported when the CLI starts;
#: a group whose module needs a missing extra is replaced by a command that says which to install.
COMMANDS = (
    ("testbed", "hai_slurm.testbed.cli", "testbed"),
    ("conf", "hai_slurm.conf.cli", "conf"),
    ("config", "hai_slurm.priority.cli.admin", "config"),
    ("daemon", "hai_slurm.priority.cli.daemon", "daemon"),
    ("priority", "hai_slurm.priority.cli.admin", "priority"),
    ("preempt", "hai_slurm.priority.cli.preempt", "preempt"),
    ("status", "hai_slurm.priority.cli.status", "status"),
    ("simulate", "hai_slurm.priority.sim.cli", "simulate"),
    ("demo", "hai_slurm.demo", "demo"),
    ("selftest", "hai_slurm.testbed.faults.cli", "selftest"),
)


def _unavailable(name: str, message: str) -> click.Command:
    """A stand-in for a command group whose extra is not installed."""

    @click.command(name, context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True},
                   help=f"(not installed) {message}", add_help_option=False)
    def stand_in() -> None:
        click.echo(f"error: {message}", err=True)
        sys.exit(1)

    return stand_in


def _register() -> None:
    """Add each part's command group (imported here, after ``cli`` exists)."""
    for name, module, attribute in COMMANDS:
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as err:
            message = missing_extra(err)
            if message is None:
                raise
            command = _unavailable(name, message)
        cli.add_command(command, name)


_register()


def main() -> None:
    """Entry point of the console script."""
    cli(prog_name="hai-slurm")
