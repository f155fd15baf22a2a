"""``hai-slurm conf ...``: generate Slurm configuration, discover node types, validate."""

from __future__ import annotations

from pathlib import Path

import click

from hai_slurm.conf.description import load
from hai_slurm.conf.discover import UNKNOWN_MEMORY_MB
from hai_slurm.conf.discover_parse import parse_gpu_list
from hai_slurm.conf.discover_run import discover as run_discovery
from hai_slurm.conf.discover_run import file_sources, live_sources, memory_mb, minor_mismatches
from hai_slurm.conf.generate import render_all, write_all
from hai_slurm.conf.toml_out import render_discovery


@click.group()
def conf() -> None:
    """Cluster description -> slurm.conf, gres.conf, topology.conf, sacctmgr and entitlements."""


_SLURM_VERSION = click.option(
    "--slurm-version", default=None, metavar="YY.MM",
    help="Target Slurm release (default: the description's, else 22.05).")


@conf.command()
@click.argument("description", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "outdir", required=True, type=click.Path(file_okay=False),
              help="Folder to write the files into (created if missing).")
@_SLURM_VERSION
def generate(description: str, outdir: str, slurm_version: str | None) -> None:
    """Write every configuration file for DESCRIPTION into a folder."""
    desc, dep = load(description, slurm_version)
    for path in write_all(render_all(desc, dep), outdir):
        click.echo(str(path))


@conf.command()
@click.argument("description", type=click.Path(dir_okay=False))
@_SLURM_VERSION
def validate(description: str, slurm_version: str | None) -> None:
    """Check DESCRIPTION (and render every file, as generate would) and print a summary."""
    desc, dep = load(description, slurm_version)
    files = render_all(desc, dep)
    nodes = desc.nodes()
    click.echo(f"{description}: OK - cluster {desc.name}, {len(nodes)} nodes, "
               f"{desc.total_gpus} GPUs, {len(desc.switches)} switches, {len(desc.teams)} teams; "
               f"Slurm {dep.slurm_version.series}, preemption {dep.preemption.value}; "
               f"{len(files)} files render")


@conf.command()
@click.option("--topo", type=click.Path(dir_okay=False), help="Saved `nvidia-smi topo -m`.")
@click.option("--gpus", type=click.Path(dir_okay=False),
              help="Saved `nvidia-smi -L` or `--query-gpu=index,name,pci.bus_id,uuid "
                   "--format=csv`.")
@click.option("--lscpu", type=click.Path(dir_okay=False),
              help="Saved `lscpu -p=CPU,CORE,SOCKET,NODE` (exact) or `LC_ALL=C lscpu`; without "
                   "it, cores_per_socket/threads_per_core are written as 0 to fill in.")
@click.option("--name", default="discovered", show_default=True, help="Node type name.")
@click.option("--memory-mb", "memory", type=int, default=None,
              help="RealMemory in MiB (default: this machine's when run live; else unknown: "
                   "memory_mb = 0 is printed, to be filled in).")
def discover(topo: str | None, gpus: str | None, lscpu: str | None, name: str,
             memory: int | None) -> None:
    """Print the node type of this GPU node (or of saved command outputs) as TOML.

    Without --topo, runs nvidia-smi here and reads the CPU map from /sys; with --topo, reads
    saved outputs.
    """
    if topo:
        src = file_sources(topo, gpus, lscpu)
        note = ", ".join(Path(p).name for p in (topo, gpus, lscpu) if p)
        mem = memory if memory is not None else UNKNOWN_MEMORY_MB
        warnings: list[str] = []
    else:
        if gpus or lscpu:
            raise click.UsageError("--gpus/--lscpu need --topo (or give none to run live)")
        src = live_sources()
        note = "nvidia-smi and /sys/devices/system/cpu on this node"
        mem = memory if memory is not None else memory_mb()
        warnings = minor_mismatches(parse_gpu_list(*src.gpus)) if src.gpus else []
    result = run_discovery(name, src, mem)
    for warning in warnings:
        click.echo(f"# WARNING: {warning}")
    for warning in (*result.warnings, *warnings):
        click.echo(f"warning: {warning}", err=True)
    click.echo(render_discovery(result, note), nl=False)
