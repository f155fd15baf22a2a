"""The Slurm adapter's public face: the interface, its values, and :func:`make_client`.

The daemon imports from here only::

    from hai_slurm.slurm_plugins.adapter import SlurmClient, make_client
    client = make_client()            # CLI backend, SLURM_CONF from the environment
    snap = client.snapshot()          # raises SlurmError rather than return a partial view

Backends: :class:`~.cli_backend.CliSlurmClient` (Slurm's own commands; the default). The
in-memory :class:`~.fake.FakeSlurm` implements the same interface for tests and the simulator;
it is imported from its own module, never from here, so production code cannot reach it.

pyslurm backend: NOT implemented. pyslurm's build refuses any Slurm major version but its own,
PyPI only has 25.11 (and 17/18), and no Debian suite reachable here ships Slurm 25.11, so a
pyslurm backend could never be run or tested against a real cluster on this project's machines
(see ../shared/SLURM-NOTES.md). Writing one untested would be dishonest. :func:`make_client`
therefore always returns the CLI backend; ``backend="pyslurm"`` raises SlurmError with the
reason (:func:`_pyslurm_usable`), the place where a real pyslurm backend would be chosen.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import INFINITE, SlurmVersion
from hai_slurm.slurm_plugins.cli_backend import CliSlurmClient
from hai_slurm.slurm_plugins.runner import CommandRunner, DockerExecRunner, SubprocessRunner
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobState,
    Node,
    Partition,
    Qos,
    SignalTarget,
    Skipped,
    SkipReason,
    SlurmClient,
    SwitchInfo,
)

__all__ = [
    "INFINITE", "ActionResult", "CliSlurmClient", "ClusterSnapshot", "CommandRunner",
    "DockerExecRunner", "Job", "JobFacts", "JobState", "Node", "Partition", "Qos",
    "SignalTarget", "SkipReason", "Skipped", "SlurmClient", "SlurmVersion",
    "SubprocessRunner", "SwitchInfo", "make_client",
]


def _pyslurm_usable(cluster_version: Callable[[], SlurmVersion]) -> str:
    """Why the pyslurm backend cannot be used (today there is always a reason).

    ``cluster_version`` is only called when pyslurm is importable, to compare major releases.
    """
    if importlib.util.find_spec("pyslurm") is None:
        return "pyslurm is not installed"
    try:
        mod = importlib.import_module("pyslurm")
    except ImportError as exc:   # built against another libslurm
        return f"import pyslurm failed: {exc}"
    version = str(getattr(mod, "__version__", ""))
    cluster = cluster_version()
    if not version.startswith(cluster.series):
        return f"pyslurm {version or '?'} does not match Slurm {cluster}"
    return "a pyslurm backend is not implemented yet (see the module docstring)"


def make_client(backend: str = "auto", *, slurm_conf: str | None = None,
                timeout: float = 30.0, runner: CommandRunner | None = None) -> SlurmClient:
    """A SlurmClient for the cluster that ``slurm_conf`` (or ``$SLURM_CONF``) points at.

    ``backend``: ``"cli"``, ``"pyslurm"`` or ``"auto"`` (pyslurm when usable, else the CLI).
    Today "auto" always ends with the CLI backend; "pyslurm" raises SlurmError saying why.
    ``runner`` replaces how commands run, e.g. ``DockerExecRunner(container)`` for a cluster
    inside Docker (``slurm_conf`` and ``timeout`` are then the runner's business).
    Nothing is run here: the CLI backend detects the Slurm release on first use.
    """
    if backend not in ("auto", "cli", "pyslurm"):
        raise ValueError(f"backend must be auto, cli or pyslurm, got {backend!r}")
    cli = CliSlurmClient(runner, slurm_conf=slurm_conf, timeout=timeout)
    if backend == "pyslurm":
        raise SlurmError(f"pyslurm backend unavailable: {_pyslurm_usable(cli.version)}")
    return cli
