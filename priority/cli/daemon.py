"""``hai-slurm daemon``: run the priority daemon (or one cycle with ``--once``)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import click

from hai_slurm.errors import ConfigError, HaiSlurmError
from hai_slurm.priority.config.loader import (
    DaemonConfig,
    check_cycle,
    lease_outlasts,
    load_config,
)
from hai_slurm.priority.daemon.factory import build_daemon, describe_preemption, tune_gc
from hai_slurm.priority.daemon.loop import Outcome
from hai_slurm.priority.daemon.metrics import DaemonMetrics
from hai_slurm.priority.store.engine import default_sqlite_url, masked

DEFAULT_STATE_DIR = "/var/lib/hai-slurm"


def daemon_config(config_path: str | None, state_dir: str | None,
                  interval: float | None) -> DaemonConfig:
    """The configuration file (or the built-in defaults with SQLite under ``state_dir``)."""
    if config_path:
        cfg = load_config(config_path)
        if state_dir:
            raise ConfigError("--state-dir only applies without --config; set state_dir and "
                              "database_url in the file instead", source=config_path)
    else:
        directory = Path(state_dir or DEFAULT_STATE_DIR)
        cfg = DaemonConfig(state_dir=str(directory),
                           database_url=default_sqlite_url(directory))
    if interval is not None:
        try:
            check_cycle(interval)
        except ValueError as err:
            raise ConfigError(str(err), key="--interval", value=interval) from None
        if not lease_outlasts(interval, cfg.intervals.lock_ttl):
            raise ConfigError(f"must be shorter than intervals.lock_ttl "
                              f"({cfg.intervals.lock_ttl:g} s), or the leader lease expires "
                              "between two cycles", key="--interval", value=interval)
        cfg = dataclasses.replace(cfg, intervals=dataclasses.replace(cfg.intervals,
                                                                     cycle=interval))
    return cfg


def serve_metrics(metrics: DaemonMetrics, port: int, addr: str) -> None:
    """Start the Prometheus endpoint; a busy port or an address not of this host is a
    :class:`ConfigError` naming ``metrics_port`` and ``--metrics-addr``."""
    try:
        metrics.serve(port, addr)
    except OSError as err:
        raise ConfigError(f"cannot serve metrics on {addr}:{port} ({err.strerror or err}); "
                          "free the port, set metrics_port to another (0 turns the endpoint "
                          "off) or fix --metrics-addr", key="metrics_port", value=port) from None


@click.command("daemon")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="HAI_SLURM_CONFIG", help="Daemon configuration TOML (default: built-in).")
@click.option("--once", is_flag=True, help="Run one cycle and exit (tests, cron).")
@click.option("--interval", type=float, default=None,
              help="Seconds between cycles (overrides intervals.cycle).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help=f"Without --config: where the SQLite database lives (default "
                   f"{DEFAULT_STATE_DIR}).")
@click.option("--metrics-addr", default="0.0.0.0", show_default=True,  # noqa: S104
              help="Address of the Prometheus endpoint (port: metrics_port; 0 turns it off).")
@click.option("--no-preempt", is_flag=True,
              help="Write priorities only: no preemption planner or executor (same as "
                   "[planner] enabled = false).")
@click.option("--shadow", is_flag=True,
              help="Decide and log what would be written (priorities, holds, requeues, "
                   "signals) and whom it would preempt, and write nothing to Slurm; would-be "
                   "plans: hai-slurm preempt history --shadow.")
@click.option("--check", "check_only", is_flag=True,
              help="Check the configuration, the database (reachable, schema current), Slurm "
                   "and Redis (if configured), print one line each, exit 0 or 1; starts "
                   "nothing (systemd's ExecStartPre).")
@click.option("--migrate", is_flag=True,
              help="Bring the database's schema to this version's revision and exit (the "
                   "daemon also does it at start; back the database up first).")
def daemon(config_path: str | None, once: bool, interval: float | None, state_dir: str | None,
           metrics_addr: str, no_preempt: bool, shadow: bool, check_only: bool,
           migrate: bool) -> None:
    """Run the priority daemon: snapshot Slurm, decide, write back what changed, preempt
    (checkpoint, then requeue) where a waiting job of a higher class deserves it, repeat."""
    if check_only:
        from hai_slurm.priority.daemon.check import run_checks

        lines, ok = run_checks(config_path, state_dir)
        for line in lines:
            click.echo(line)
        if not ok:
            raise SystemExit(1)
        return
    if migrate:
        from hai_slurm.priority.daemon.loop import open_store
        from hai_slurm.priority.store.engine import current_revision, head_revision, make_engine

        cfg = daemon_config(config_path, state_dir, interval)
        before = current_revision(make_engine(cfg.database_url)) if not \
            cfg.database_url.startswith("sqlite:///") or Path(
                cfg.database_url[len("sqlite:///"):]).exists() else None
        open_store(cfg)
        click.echo(f"database {masked(cfg.database_url)}: schema at revision {head_revision()}"
                   + (" (was already)" if before == head_revision() else
                      f" (was {before or 'empty'})"))
        return
    if logging.getLogger().level > logging.INFO:
        logging.getLogger("hai_slurm.priority").setLevel(logging.INFO)
        # which Slurm backend (pyslurm or the CLI) and why, once at start
        logging.getLogger("hai_slurm.slurm_plugins.adapter").setLevel(logging.INFO)
    cfg = daemon_config(config_path, state_dir, interval)
    preempt = False if no_preempt else None
    tune_gc()
    d = build_daemon(cfg, preempt=preempt, shadow=True) if shadow else \
        build_daemon(cfg, preempt=preempt)
    if cfg.metrics_port and not once:
        serve_metrics(d.metrics, cfg.metrics_port, metrics_addr)
    logging.getLogger("hai_slurm.priority.daemon.loop").warning(
        "daemon %s starting: database %s, cycle every %g s%s; %s", d.owner,
        masked(cfg.database_url), cfg.intervals.cycle,
        f", metrics on {metrics_addr}:{cfg.metrics_port}" if cfg.metrics_port and not once
        else "", describe_preemption(d))
    report = d.run(once=once)
    if once and report is not None and report.outcome is Outcome.SKIPPED:
        raise HaiSlurmError(f"the cycle was skipped, nothing written: {report.reason}")
