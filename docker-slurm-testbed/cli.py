"""``hai-slurm testbed ...`` commands."""

from __future__ import annotations

import click


@click.group()
def testbed() -> None:
    """Bring up, inspect and tear down the Slurm test cluster."""
