"""``hai-slurm config`` and ``hai-slurm priority``: check a configuration, explain a job's place."""

from __future__ import annotations

from pathlib import Path

import click

from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import DaemonConfig, load_config
from hai_slurm.priority.policy.ladder import LADDER, URGENT_FROM
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.snapshot_json import Snapshot, parse_snapshot
from hai_slurm.priority.policy.units import format_duration
from hai_slurm.urls import mask_password


@click.group()
def config() -> None:
    """Validate the daemon's TOML configuration."""


def summary(cfg: DaemonConfig) -> list[str]:
    """A short human summary of a loaded configuration."""
    p = cfg.policy
    waits = ", ".join(f"{c.value} {format_duration(p.classes[c].max_wait)}"
                      for c in reversed(LADDER))
    fair = p.fairness
    lines = [
        f"default class {p.default_class.value}; aging up to {p.aging.max_class.value} "
        f"(step +1 class per {p.aging.depth_per_step} queued jobs, at most {p.aging.max_step})",
        f"max waits: {waits}",
        "grace caps: " + ", ".join(f"{c.value} {format_duration(p.classes[c].grace_cap)}"
                                   + (" (--preemptible=no allowed)"
                                      if p.classes[c].preemptible_optional else "")
                                   for c in reversed(LADDER)),
        f"decay: {p.decay.source.value} -> {p.decay.target.value} after "
        f"{format_duration(p.decay.after)} of running",
        f"fairness: window {format_duration(fair.window)}; protect for "
        f"{format_duration(fair.protect_for)} after > {fair.protect_after} preemptions (not "
        f"from {URGENT_FROM.value}+ jobs or jobs past their bound); demote "
        f"{fair.demote_from.value}+ after > {fair.demote_after} preemptions caused",
        f"teams: {len(p.teams)} with quotas ({sum(t.gpus for t in p.teams.values())} GPUs); "
        f"others get {p.team_default.gpus} GPUs",
        f"teams and class facts (grace caps, preemptible-optional): {_origin(cfg)}",
        f"database {mask_password(cfg.database_url)}; redis "
        f"{mask_password(cfg.redis_url) if cfg.redis_url else 'off'}; metrics port "
        f"{cfg.metrics_port or 'off'}; cycle every {format_duration(cfg.intervals.cycle)}, "
        + (f"at most {cfg.intervals.writes_per_cycle:,} priority writes each (the top of the "
           "queue first)" if cfg.intervals.writes_per_cycle else "every priority written each"),
        *_preempt_summary(cfg),
    ]
    return lines


def _preempt_summary(cfg: DaemonConfig) -> list[str]:
    """The ``[planner]`` and ``[executor]`` lines of :func:`summary`."""
    pre = cfg.preempt
    if not pre.enabled:
        return ["preemption: off ([planner] enabled = false): the daemon writes priorities only"]
    pl, ex = pre.planner, pre.executor
    topo = ("the cluster description's" if cfg.description is not None else
            "derived from Slurm's nodes (leaf switches from scontrol show topology, else flat)")
    misses = ", ".join(f"{c.value} {cfg.policy.classes[c].on_deadline.value}"
                       for c in reversed(LADDER))
    via = f"SIG{ex.signal}" + (" + Redis" if cfg.redis_url and pre.redis else "")
    urgent_min = pl.urgent_min_run
    return [
        f"preemption: on; planner: victims run >= {format_duration(pl.min_run_time)} ("
        f"{format_duration(urgent_min)} for urgent work), restart "
        f"cost {format_duration(pl.restart_cost)}, save cost (jobs with a checkpoint dir and "
        f"no --grace) {format_duration(pl.save_cost)}, preempt when benefit > "
        f"{pl.benefit_threshold:g} x lost work, borrowed victims' loss counted "
        f"{pl.borrowed_discount:g} x, <= {pl.max_plans} plans per cycle, snapshot "
        f"<= {format_duration(pl.max_staleness)} old; topology {topo}",
        f"executor: checkpoint request by {via}; deadline = the job's --grace (default "
        f"{format_duration(ex.default_deadline)}) capped by the class's grace cap; +"
        f"{format_duration(ex.saving_extension)} while saving; beneficiary start timeout "
        f"{format_duration(ex.start_timeout)}",
        f"on a missed deadline (beneficiary's class): {misses}",
        _urgent_summary(cfg),
        "multi-node jobs: " + ("under one leaf switch when one can hold them, else across the "
                               "spine (as topology/tree; a job's --switches=N limits it)"
                               if pl.allow_cross_leaf else "under one leaf switch only"),
        *([f"note: a job that has run less than {format_duration(pl.min_run_time)} is never a "
           f"victim (less than {format_duration(urgent_min)} for urgent work), so a first try "
           "with short test jobs shows no preemption; "
           "priority/examples/first-try.toml sets min_run_time = \"10s\" for that"]
          if pl.min_run_time > 60 else []),
    ]


def _urgent_summary(cfg: DaemonConfig) -> str:
    """The urgent path's line of :func:`summary`."""
    from hai_slurm.priority.daemon.urgent import URGENT_LOOKS

    poll = cfg.intervals.urgent_poll
    pl = cfg.preempt.planner
    no_save = ("the benefit test decides" if pl.urgent_no_save_wait is None
               else format_duration(pl.urgent_no_save_wait))
    bound = ("never takes a victim that cannot save" if pl.bound_no_save_wait is None else
             "takes a victim that cannot save once it waited "
             + format_duration(pl.bound_no_save_wait))
    waits = (f"; urgent work preempts whatever the benefit once it waited "
             f"{format_duration(pl.urgent_benefit_wait)} (victims that save on request), "
             f"{no_save} (a victim that cannot); a job below {URGENT_FROM.value} past its "
             f"bound {bound}")
    if poll <= 0:
        return ("urgent path: off ([intervals] urgent_poll = 0): new jobs are planned at the "
                "next cycle" + waits)
    looks = ", ".join(f"{t:g}" for t in URGENT_LOOKS)
    return (f"urgent path: pending jobs polled every {format_duration(poll)} between cycles; a "
            f"new job of {URGENT_FROM.value} or above is planned {looks} s after it is first "
            "seen" + waits)


def _origin(cfg: DaemonConfig) -> str:
    """Where the teams and class facts of ``cfg`` were read from."""
    if cfg.description is not None:
        return f"from the cluster description {cfg.description.source} (key `cluster`)"
    return f"from {cfg.source} (no `cluster` key; built-in defaults where not set)"


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
    """Validate FILE; print OK and a summary, or the error (exit code 1)."""
    cfg = load_config(file)
    click.echo(f"OK: {file}")
    for line in summary(cfg):
        click.echo(f"  {line}")


@click.group()
def priority() -> None:
    """Inspect the priority policy's decisions."""


@priority.command("explain")
@click.argument("jobid", type=int)
@click.option("--snapshot", "snapshot_path", type=click.Path(dir_okay=False),
              help="JSON file with the policy's inputs (see "
                   "hai_slurm.priority.policy.snapshot_json); without it: Slurm's queue now "
                   "and the daemon's database.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="HAI_SLURM_CONFIG", help="Daemon configuration (default: built-in).")
def explain(jobid: int, snapshot_path: str | None, config_path: str | None) -> None:
    """Explain in plain words why JOBID has its place."""
    from hai_slurm.priority.daemon.live import (
        borrowed_discount,
        explain_job,
        explain_live,
        open_repository,
    )

    cfg = load_config(config_path) if config_path else DaemonConfig()
    if snapshot_path is None:
        from hai_slurm.slurm_plugins.adapter import make_client

        click.echo(explain_live(jobid, make_client(), open_repository(cfg), cfg))
        return
    snap = _read_snapshot(Path(snapshot_path))
    result = compute_priorities(snap.pending, snap.running, config=cfg.policy,
                                cluster=snap.cluster, events=snap.events, state=snap.state,
                                now=snap.now)
    text = explain_job(jobid, snap.pending, snap.running, result, cfg.policy,
                       borrowed_discount(cfg), now=snap.now)
    if text is None:
        raise ConfigError(f"job {jobid} is neither pending nor running in the snapshot",
                          source=snapshot_path)
    click.echo(text)


def _read_snapshot(file: Path) -> Snapshot:
    """Read and parse a snapshot file (the parsing itself is pure, in the policy package)."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError("the snapshot is not UTF-8 text", source=str(file)) from None
    except OSError as err:
        raise ConfigError(f"cannot read the snapshot: {err.strerror}", source=str(file)) from None
    return parse_snapshot(text, source=str(file))
