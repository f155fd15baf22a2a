"""``hai-slurm status``: classes, teams and quota use, jobs past half their bound, open and
recent plans; refreshed every few seconds on a terminal, one frame with ``--once``.

Plain text (the daemon extra has no terminal-UI library; ``rich`` is not a dependency): on a
terminal each frame clears the screen first; piped, frames are separated by a blank line. Reads
Slurm and the daemon's database, writes neither.
"""

from __future__ import annotations

import sys
import time

import click

from hai_slurm.errors import HaiSlurmError


@click.command("status")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="HAI_SLURM_CONFIG", help="Daemon configuration (its database and policy).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Without --config: the daemon's state dir (SQLite database inside).")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", type=click.FloatRange(min=0.5), default=5.0, show_default=True,
              help="Seconds between frames.")
def status(config_path: str | None, state_dir: str | None, once: bool, interval: float) -> None:
    """What the daemon sees now: classes, teams, quota use, late jobs, plans."""
    from hai_slurm.priority.cli.daemon import daemon_config
    from hai_slurm.priority.daemon.live import open_repository
    from hai_slurm.priority.daemon.status import gather, render
    from hai_slurm.slurm_plugins.adapter import make_client

    cfg = daemon_config(config_path, state_dir, None)
    repo = open_repository(cfg)
    slurm = make_client()
    tty = sys.stdout.isatty()
    first = True
    try:
        while True:
            try:
                frame = "\n".join(render(gather(slurm, repo, cfg)))
            except HaiSlurmError as err:
                if once:
                    raise
                frame = f"hai-slurm status: cannot read the cluster or the database: {err}"
            if tty and not once:
                click.echo("\x1b[H\x1b[2J" + frame)
            else:
                click.echo(frame if first else "\n" + frame)
            first = False
            if once:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
