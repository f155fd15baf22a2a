"""``hai-slurm testbed up|status|env|down``: the Slurm test cluster, local processes or Docker.

Local mode (default) is :mod:`.local`; ``--docker`` hands over to :mod:`.docker_mode` with the same
:class:`~.shape.ClusterShape`. The state directory defaults to ``$HAI_TESTBED_STATE_DIR`` or
``/var/tmp/hai-slurm-testbed``.
"""

from __future__ import annotations

import dataclasses
import importlib
import shlex
import sys
import time
from pathlib import Path
from types import ModuleType

import click

from hai_slurm.errors import TestbedError

from . import local
from .layout import Ports
from .shape import ClusterShape, PreemptionMode, parse_grace_times, parse_preemption
from .status import local_status

_STATE_DIR = click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path),
    default=local.DEFAULT_STATE_DIR, envvar="HAI_TESTBED_STATE_DIR", show_default=True,
    help="Where the testbed keeps every file (env: HAI_TESTBED_STATE_DIR).")
_DOCKER = click.option("--docker", is_flag=True, help="Containers instead of local processes.")


def _docker_mode() -> ModuleType:
    try:
        return importlib.import_module("hai_slurm.testbed.docker_mode")
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith("hai_slurm"):
            raise TestbedError("Docker mode is not available in this installation "
                               "(hai_slurm.testbed.docker_mode is missing)") from None
        raise TestbedError(f"Docker mode needs the Python package {err.name!r}: "
                           "pip install 'hai-slurm[testbed]'") from None


@click.group()
def testbed() -> None:
    """Bring up, inspect and tear down the Slurm test cluster."""


@testbed.command()
@click.option("--nodes", default=4, show_default=True, help="Compute nodes (n1 ... nN).")
@click.option("--gpus-per-node", default=8, show_default=True, help="Fake GPUs per node.")
@click.option("--leaf-switches", default=2, show_default=True,
              help="Leaf switches under the spine (nodes split evenly; 1 is a single leaf).")
@click.option("--accounting/--no-accounting", default=True, show_default=True,
              help="MariaDB + slurmdbd, needed for QOS (one per priority class).")
@click.option("--preemption", type=click.Choice([m.value for m in PreemptionMode]),
              default=PreemptionMode.DAEMON.value, show_default=True,
              help="daemon: Slurm never preempts (our daemon does); native: preempt/qos REQUEUE.")
@click.option("--grace-time", "grace_times", multiple=True, metavar="[CLASS=]SECONDS",
              help="Native-mode GraceTime per class QOS (repeatable; bare SECONDS = all).")
@click.option("--cred-expire", default=10, show_default=True,
              help="Seconds a requeued job waits before it may start again.")
@click.option("--slurmctld-port", type=int, default=None,
              help=f"Default: a testbed recorded in STATE_DIR's, else {Ports.slurmctld} (so "
                   "for each port option).")
@click.option("--slurmdbd-port", type=int, default=None, help=f"Else {Ports.slurmdbd}.")
@click.option("--mariadb-port", type=int, default=None, help=f"Else {Ports.mariadb}.")
@click.option("--redis-port", type=int, default=None, help=f"Else {Ports.redis}.")
@click.option("--slurmd-port-base", type=int, default=None,
              help=f"slurmd of node i listens on BASE+i-1 (else {Ports.slurmd_base}).")
@_DOCKER
@click.option("--slurm", "suite", default="bookworm", show_default=True, metavar="SUITE",
              help="Docker mode: Debian suite of the image, which picks the Slurm version "
                   "(bookworm 22.05, trixie 24.11, sid).")
@_STATE_DIR
def up(nodes: int, gpus_per_node: int, leaf_switches: int, accounting: bool, preemption: str,
       grace_times: tuple[str, ...], cred_expire: int, slurmctld_port: int | None,
       slurmdbd_port: int | None, mariadb_port: int | None, redis_port: int | None,
       slurmd_port_base: int | None, docker: bool, suite: str, state_dir: Path) -> None:
    """Start the cluster; returns once every node is idle and a GPU job ran on all of them."""
    shape = ClusterShape(nodes=nodes, gpus_per_node=gpus_per_node,
                         leaf_switch_count=leaf_switches, accounting=accounting,
                         preemption=parse_preemption(preemption), cred_expire=cred_expire)
    shape = shape.with_grace_times(parse_grace_times(grace_times))
    t0 = time.monotonic()
    if docker:
        started = bool(_docker_mode().up(shape, state_dir=state_dir, suite=suite,
                                         echo=click.echo))
    else:
        if suite != "bookworm":
            raise click.UsageError("--slurm SUITE picks the Docker image; add --docker "
                                   "(the local mode uses the host's Slurm)")
        given = {key: value for key, value in (
            ("slurmctld", slurmctld_port), ("slurmdbd", slurmdbd_port),
            ("mariadb", mariadb_port), ("redis", redis_port),
            ("slurmd_base", slurmd_port_base)) if value is not None}
        recorded = local.load_state(state_dir.resolve())
        # a testbed restarted in its state dir keeps the ports its clients know
        ports = dataclasses.replace(recorded.ports if recorded is not None else Ports(),
                                    **given)
        started = local.up(shape, state_dir=state_dir, ports=ports, echo=click.echo)
    if started:
        click.echo(f"testbed up in {time.monotonic() - t0:.1f} s")
        try:
            lines = _env_lines(docker, state_dir)
        except TestbedError as err:
            lines = [f"# {err}"]
        click.echo("for Slurm clients run:")
        for line in lines:
            click.echo(line)


@testbed.command()
@_DOCKER
@_STATE_DIR
def status(docker: bool, state_dir: Path) -> None:
    """Each component running or not, the nodes, and the QOS. Exit 1 if anything is down or
    the testbed cannot take jobs (a node drained, slurmctld not answering)."""
    st = _docker_mode().status(state_dir) if docker else local_status(state_dir)
    for line in st.lines():
        click.echo(line)
    if not st.usable:
        sys.exit(1)


def _env_lines(docker: bool, state_dir: Path) -> list[str]:
    if docker:
        mode = _docker_mode()
        if not hasattr(mode, "env_lines"):
            raise TestbedError("in Docker mode Slurm clients run inside the controller "
                               "container; `hai-slurm testbed status --docker` names it")
        return [str(line) for line in mode.env_lines(state_dir)]
    return [f"export SLURM_CONF={shlex.quote(local.slurm_conf_path(state_dir.resolve()))}"]


@testbed.command()
@_DOCKER
@_STATE_DIR
def env(docker: bool, state_dir: Path) -> None:
    """Print the shell line(s) that point Slurm clients at the testbed (eval "$(... env)")."""
    for line in _env_lines(docker, state_dir):
        click.echo(line)


@testbed.command()
@_DOCKER
@_STATE_DIR
def down(docker: bool, state_dir: Path) -> None:
    """Stop everything the testbed started (by PID); quiet and exit 0 if nothing is up.

    Without --docker, a Docker testbed recorded in the same state dir is removed too.
    """
    if docker:
        _docker_mode().down(state_dir, echo=click.echo)
        return
    local.down(state_dir, echo=click.echo)
    if not (state_dir / local.DOCKER_STATE_FILE).exists():
        return
    retry = f"hai-slurm testbed down --docker --state-dir {shlex.quote(str(state_dir))}"
    try:
        mode = _docker_mode()
        click.echo(f"removing the Docker testbed recorded in {state_dir}")
        mode.down(state_dir, echo=click.echo)
    except TestbedError as err:
        raise TestbedError(f"a Docker testbed is recorded in {state_dir} but could not be "
                           f"removed: {err}. Once that is fixed, run: {retry}") from None
