"""``hai-slurm simulate``: replay a trace through one or more policies; JSON, table, plots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from hai_slurm.conf.description import load_description
from hai_slurm.conf.gen_entitlements import entitlements_of
from hai_slurm.conf.topology import Topology
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import DaemonConfig, load_config
from hai_slurm.priority.sim.cluster import load_topology
from hai_slurm.priority.sim.progress import ProgressBar
from hai_slurm.priority.sim.report import table, write_json
from hai_slurm.priority.sim.runner import POLICIES, Setup, apply_param, run_notes, run_policy
from hai_slurm.priority.sim.sacct import read_sacct
from hai_slurm.priority.sim.sweep import front_table, grid, objectives, pareto, parse_axes
from hai_slurm.priority.sim.synthetic import generate, parse_spec
from hai_slurm.priority.sim.trace import Trace, compress, limit, load_trace, with_saves
from hai_slurm.slurm_plugins.entitlements import Entitlements


def _trace(path: str | None, synthetic: str | None, sacct: str | None, fmt: str, teams: int,
           skip_bad: bool, seed: int, factor: float, jobs: int, cluster_path: str,
           config: DaemonConfig) -> Trace:
    if sum(x is not None for x in (path, synthetic, sacct)) != 1:
        raise click.UsageError("give one of --trace FILE, --sacct FILE or --synthetic SPEC")
    if synthetic is not None:
        trace = generate(parse_spec(synthetic), seed)
    elif sacct is not None:
        trace = read_sacct(sacct, table=_site_table(config, cluster_path),
                           default_class=config.policy.default_class, skip_bad=skip_bad)
    else:
        trace = load_trace(path or "", fmt=fmt, teams=teams, skip_bad=skip_bad)
    return limit(compress(trace, factor), jobs)


def _site_table(config: DaemonConfig, cluster_path: str) -> Entitlements | None:
    """The site's QOS of each class: from the daemon file's cluster description, else from
    ``--cluster`` when that is a description (None for an Alibaba node list: default QOS)."""
    desc = config.description
    if desc is None and Path(cluster_path).suffix.lower() != ".csv":
        desc = load_description(cluster_path)
    return entitlements_of(desc) if desc is not None else None


@click.command("simulate")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Trace CSV (generic or Alibaba v2023 pod list).")
@click.option("--sacct", "sacct_path", type=click.Path(dir_okay=False),
              help="A site's own history: a sacct --json or sacct --parsable2 export "
                   "(teams = accounts, classes from QOS; see priority/sim/README.md).")
@click.option("--synthetic", metavar="SPEC",
              help="Generate a trace instead, e.g. 'jobs=2000,rate=0.05,sizes=1:60/8:40,"
                   "classes=HIGH:10/NORMAL:60/LOW:30,teams=4'.")
@click.option("--format", "fmt", type=click.Choice(["auto", "generic", "alibaba"]),
              default="auto", show_default=True, help="Trace format.")
@click.option("--cluster", "cluster_path", type=click.Path(dir_okay=False), required=True,
              help="Cluster description TOML, or an Alibaba node list (.csv).")
@click.option("--policy", "policies", multiple=True, default=("hai-slurm",),
              show_default=True, type=click.Choice([*POLICIES, "all"]),
              help="Policy to run (repeat, or 'all').")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Daemon configuration TOML for hai-slurm (classes' bounds for all).")
@click.option("-o", "--outdir", type=click.Path(file_okay=False), required=True,
              help="Directory for the JSON results and PNG plots.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed (synthetic traces; recorded in the results).")
@click.option("--compress", "factor", type=float, default=1.0, show_default=True,
              help="Bring arrivals N times closer together (durations kept).")
@click.option("--keep-one-node-in", "every", type=int, default=1, show_default=True,
              help="Alibaba node list: keep one node in N (same node mix, smaller cluster).")
@click.option("--nodes-per-leaf", type=int, default=32, show_default=True,
              help="Alibaba node list: nodes per assumed leaf switch.")
@click.option("--limit", "jobs", type=click.IntRange(min=0), default=0,
              help="Only the first N jobs (0: all).")
@click.option("--teams", type=int, default=8, show_default=True,
              help="Alibaba trace: number of teams jobs are hashed into.")
@click.option("--skip-bad", is_flag=True, help="Skip malformed trace rows (counted) "
              "instead of stopping at the first one.")
@click.option("--saves", type=click.Choice(["as-traced", "all", "none"]), default="as-traced",
              show_default=True,
              help="Which jobs save on request when asked to give way: as the trace says "
                   "(sacct: jobs whose #HAI record names a checkpoint directory), or all or "
                   "none of them (a what-if).")
@click.option("--no-backfill", is_flag=True, help="The first job that does not fit blocks the "
              "queue (Slurm's main scheduler without backfill).")
@click.option("--set", "settings", multiple=True, metavar="PARAM=VALUE",
              help="Change one setting, e.g. costs.checkpoint_interval=1800 (repeatable).")
@click.option("--sweep", "sweeps", multiple=True, metavar="PARAM=a,b,c",
              help="Run a grid over settings (repeatable) and print its Pareto front.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG figures.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def simulate(trace_path: str | None, sacct_path: str | None, synthetic: str | None, fmt: str,
             cluster_path: str,
             policies: tuple[str, ...], config_path: str | None, outdir: str, seed: int,
             factor: float, every: int, nodes_per_leaf: int, jobs: int, teams: int,
             skip_bad: bool, saves: str, no_backfill: bool, settings: tuple[str, ...],
             sweeps: tuple[str, ...], no_plots: bool, quiet: bool) -> None:
    """Replay a trace through the daemon's policy and planner and the baselines."""
    setup = Setup(backfill=not no_backfill)
    if config_path is not None:
        setup = Setup(config=load_config(config_path), backfill=not no_backfill)
    trace = _trace(trace_path, synthetic, sacct_path, fmt, teams, skip_bad, seed, factor, jobs,
                   cluster_path, setup.config)
    if saves != "as-traced":
        trace = with_saves(trace, saves == "all")
    topology = load_topology(cluster_path, nodes_per_leaf=nodes_per_leaf, every=every)
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--set expects PARAM=VALUE, got {item!r}")
        setup = apply_param(setup, key.strip(), value.strip())
    names = POLICIES if "all" in policies else tuple(dict.fromkeys(policies))
    out = _writable(Path(outdir))
    for note in (*trace.notes, *run_notes(trace, topology)):
        click.echo(f"trace: {note}", err=True)
    for reason, count in sorted(trace.skipped.items()):
        click.echo(f"trace: {count} rows left out: {reason}", err=True)
    if sweeps:
        _sweep(trace, topology, setup, names, sweeps, seed, out, quiet)
        return
    results: list[dict[str, Any]] = []
    for name in names:
        bar = ProgressBar(name, enabled=False if quiet else None)
        started = time.monotonic()
        result, engine = run_policy(name, trace, topology, setup, seed=seed, progress=bar)
        bar.close()
        wall = time.monotonic() - started
        write_json(result, out / f"result-{name}.json")
        click.echo(f"{name}: {wall:.1f} s wall, {engine.events_handled} events "
                   f"({engine.events_handled / max(wall, 1e-9):,.0f}/s), {engine.cycles} cycles",
                   err=True)
        results.append(result)
    click.echo(table(results))
    if not no_plots:
        from hai_slurm.priority.sim.plots import write_plots
        for path in write_plots(results, out):
            click.echo(f"wrote {path}", err=True)


def _writable(out: Path) -> Path:
    """The output directory, made and checked before any run (a run takes minutes; failing
    to write its result afterwards lost it)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".hai-sim-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"cannot write results there ({err.strerror or err}); give a "
                          "writable directory", key="-o/--outdir", value=str(out)) from None
    return out


def objectives_of(row: dict[str, Any]) -> tuple[float, float, float]:
    """The objectives stored in a sweep row."""
    a, b, c = row["objectives"]
    return float(a), float(b), float(c)


def _sweep(trace: Trace, topology: Topology, setup: Setup, names: tuple[str, ...],
           sweeps: tuple[str, ...], seed: int, out: Path, quiet: bool) -> None:
    axes = parse_axes(sweeps)
    combos = grid(axes)
    for combo in combos:   # check every value before the long runs start
        for key, value in combo:
            apply_param(setup, key, value)
    rows: list[dict[str, Any]] = []
    for name in names:
        for i, combo in enumerate(combos):
            s = setup
            for key, value in combo:
                s = apply_param(s, key, value)
            bar = ProgressBar(f"{name} {i + 1}/{len(combos)}", enabled=False if quiet else None)
            result, _ = run_policy(name, trace, topology, s, seed=seed, progress=bar)
            bar.close()
            rows.append({"policy": name, "params": dict(combo),
                         "objectives": list(objectives(result))})
    for name in names:   # each policy's own front: the baselines ignore planner.* settings
        mine = [r for r in rows if r["policy"] == name]
        for row, on in zip(mine, pareto([objectives_of(r) for r in mine]), strict=True):
            row["pareto"] = on
    write_json({"axes": [[k, list(v)] for k, v in axes], "objectives": [
        "top-class p95 queue delay (s)", "GPU-hours lost", "1 - Jain's index"], "rows": rows,
        "seed": seed}, out / "sweep.json")
    click.echo(front_table(rows))
