"""The Slurm adapter's public face: the interface, its values, and :func:`make_client`.

The daemon imports from here only::

    from hai_slurm.slurm_plugins.adapter import SlurmClient, make_client
    client = make_client()            # pyslurm if a matching one imports, else the CLI
    snap = client.snapshot()          # raises SlurmError rather than return a partial view

Backends: :class:`~.cli_backend.CliSlurmClient` (Slurm's own commands) and
:class:`~.pyslurm_backend.PyslurmClient` (Slurm's C API through pyslurm, an optional separately
installed package; see the README's "pyslurm backend"). ``make_client("auto")`` takes pyslurm
when a pyslurm built for the running Slurm series imports, else the CLI, and logs which and why
(:func:`~.pyslurm_backend.choose_backend`). The in-memory :class:`~.fake.FakeSlurm` implements
the same interface for tests and the simulator; it is imported from its own module, never from
here, so production code cannot reach it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import INFINITE, SlurmVersion
from hai_slurm.slurm_plugins.cli_backend import CliSlurmClient
from hai_slurm.slurm_plugins.pyslurm_backend import BackendChoice, PyslurmClient, choose_backend
from hai_slurm.slurm_plugins.runner import CommandRunner, DockerExecRunner, SubprocessRunner
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobState,
    Node,
    Partition,
    PendingBrief,
    Qos,
    SignalTarget,
    Skipped,
    SkipReason,
    SlurmClient,
    SwitchInfo,
)

__all__ = [
    "INFINITE", "ActionResult", "CliSlurmClient", "ClusterSnapshot", "CommandRunner",
    "DockerExecRunner", "Job", "JobFacts", "JobState", "Node", "Partition", "PendingBrief",
    "PyslurmClient",
    "Qos", "SignalTarget", "SkipReason", "Skipped", "SlurmClient", "SlurmVersion",
    "SubprocessRunner", "SwitchInfo", "make_client",
]

log = logging.getLogger(__name__)


def make_client(backend: str = "auto", *, slurm_conf: str | None = None,
                timeout: float = 30.0, runner: CommandRunner | None = None,
                choose: Callable[[Callable[[], SlurmVersion], str | None],
                                 BackendChoice] = choose_backend,
                ) -> SlurmClient:
    """A SlurmClient for the cluster that ``slurm_conf`` (or ``$SLURM_CONF``) points at.

    ``backend``: ``"cli"``, ``"pyslurm"`` or ``"auto"``: pyslurm when one built for the running
    Slurm series is installed and imports, else the CLI; the choice and its reason are logged
    (INFO). ``"pyslurm"`` raises SlurmError saying why when it cannot be used. pyslurm binds the
    process to one cluster (see :mod:`.pyslurm_backend`).
    ``runner`` replaces how commands run, e.g. ``DockerExecRunner(container)`` for a cluster
    inside Docker: pyslurm cannot reach through it, so a runner means the CLI backend.
    Without pyslurm installed nothing is run here; with it, ``scontrol version`` runs once.
    ``choose`` is the selection rule (tests pass one with fakes).
    """
    if backend not in ("auto", "cli", "pyslurm"):
        raise ValueError(f"backend must be auto, cli or pyslurm, got {backend!r}")
    cli = CliSlurmClient(runner, slurm_conf=slurm_conf, timeout=timeout)
    if backend == "cli":
        return cli
    if runner is not None:
        choice = BackendChoice("cli", "commands run through a custom runner "
                               f"({type(runner).__name__}), which pyslurm cannot use")
    else:
        choice = choose(cli.version, slurm_conf)
    if choice.backend == "pyslurm":
        client: SlurmClient = PyslurmClient(slurm_conf=slurm_conf, timeout=timeout,
                                            module=choice.module, cli=cli)
        log.info("Slurm backend: pyslurm (%s)", choice.reason)
        return client
    if backend == "pyslurm":
        raise SlurmError(f"pyslurm backend unavailable: {choice.reason}")
    log.info("Slurm backend: CLI (%s)", choice.reason)
    return cli
