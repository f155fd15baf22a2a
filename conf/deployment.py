"""Deployment details that are not the cluster's hardware or policy: paths, ports, daemons' hosts,
accounting, preemption mode and the target Slurm release (a
:class:`~hai_slurm.slurm_formats.SlurmVersion`, read by :func:`target_version`).

The local testbed builds one of these in code (all slurmd on 127.0.0.1, one port per node); a real
site writes a ``[deployment]`` table in its description or uses the defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from hai_slurm.errors import ConfigError
from hai_slurm.slurm_formats import OLDEST_SUPPORTED, SlurmVersion


class PreemptionMode(StrEnum):
    """Who preempts. ``daemon``: Slurm never preempts (``preempt/none``); the hai-slurm daemon asks
    the job to checkpoint, then requeues it. ``native``: Slurm preempts by QOS
    (``preempt/qos``, ``PreemptMode=REQUEUE``, GraceTime per class) — needs accounting."""

    DAEMON = "daemon"
    NATIVE = "native"


def target_version(text: str) -> SlurmVersion:
    """The release to generate for: ``"22.05"``, ``"24.11.5"`` or ``"slurm 24.11.5"``.

    Raises ConfigError for text without a version or a release older than 22.05.
    """
    try:
        version = SlurmVersion.parse(text)
    except ValueError:
        raise ConfigError("not a Slurm version (expected YY.MM such as 22.05 or 24.11)",
                          key="slurm_version", value=text) from None
    if version < OLDEST_SUPPORTED:
        raise ConfigError(
            f"Slurm {version.series} is older than the oldest release the generators know "
            f"({OLDEST_SUPPORTED.series}; tested: 22.05, 24.11, 26.05); generate for "
            f"{OLDEST_SUPPORTED.series} or newer", key="slurm_version", value=text)
    return version


DEFAULT_SLURM_VERSION = SlurmVersion(22, 5)


SCHEDULER_PARAMETERS: tuple[str, ...] = ("bf_interval=10",)
"""The generated ``SchedulerParameters`` items (besides the preemption ones): what a site runs;
the rest are Slurm's defaults (conf/README.md, "Size limits")."""


_WORD = re.compile(r"[^\s#=]+")
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_EXTRA_VALUE = re.compile(r"[^#\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class NodeEndpoint:
    """Where slurmctld reaches one node's slurmd (overrides of the defaults)."""

    addr: str | None = None
    port: int | None = None
    hostname: str | None = None


@dataclass(frozen=True)
class Deployment:
    """How and where the generated configuration runs. Every path is used verbatim; ``%n`` in the
    slurmd paths is Slurm's per-node substitution (needed for several slurmd on one host).

    ``munge_socket``: a non-default munged socket (AuthInfo socket= and AccountingStoragePass).
    ``scheduler_parameters``: SchedulerParameters items besides the preemption ones the generator
    adds. ``extra_settings``: further ``Key=Value`` lines appended verbatim (e.g.
    MessageTimeout) - an escape hatch for site settings the description does not model; a key the
    generator writes itself (MinJobAge in daemon mode, MaxJobCount, SelectTypeParameters...) is
    refused when slurm.conf is rendered (``gen_slurm``), naming the setting to use instead.
    """

    slurm_version: SlurmVersion = DEFAULT_SLURM_VERSION
    preemption: PreemptionMode = PreemptionMode.DAEMON
    accounting: bool = True
    controller_host: str = "slurmctld"
    controller_addr: str | None = None
    controller_port: int = 6817
    slurmd_port: int = 6818
    accounting_host: str = "localhost"
    accounting_port: int = 6819
    slurm_user: str = "slurm"
    state_dir: str = "/var/spool/slurmctld"
    spool_dir: str = "/var/spool/slurmd"
    log_dir: str = "/var/log/slurm"
    run_dir: str = "/run/slurm"
    cred_expire_s: int = 10
    min_job_age_s: int = 3900
    """Daemon mode's ``MinJobAge``: how long slurmctld keeps an ended job, and so how long the
    daemon can still requeue a victim that ended without exit code 75 (priority/PREEMPTION.md,
    "The safety net"): an hour of daemon downtime plus margin."""
    max_job_count: int = 100_000
    """``MaxJobCount``: jobs slurmctld holds at once, pending, running *and* ended ones it still
    keeps (for ``MinJobAge``). Slurm's default, 10,000, refuses every sbatch once reached; a
    cluster with 10,000 queued and 2,000 running jobs that also keeps an hour of ended jobs
    (daemon mode's MinJobAge) needs several times that. slurmctld's memory grows with the jobs
    it holds (a few KB each), not with the cap."""
    proctrack_type: str = "proctrack/cgroup"
    task_plugin: str = "task/affinity,task/cgroup"
    multiple_slurmd: bool = False
    config_overrides: bool = False
    job_submit_lua: bool = True
    munge_socket: str | None = None
    slurmctld_debug: str = "info"
    slurmd_debug: str = "info"
    scheduler_parameters: tuple[str, ...] = SCHEDULER_PARAMETERS
    extra_settings: tuple[tuple[str, str], ...] = ()
    endpoints: dict[str, NodeEndpoint] = field(default_factory=dict, hash=False)

    def endpoint(self, node: str) -> NodeEndpoint:
        """Overrides for ``node`` (an empty endpoint if none)."""
        return self.endpoints.get(node, NodeEndpoint())

    def check(self) -> None:
        """Refuse combinations Slurm cannot run."""
        if self.preemption is PreemptionMode.NATIVE and not self.accounting:
            raise ConfigError(
                "native preemption (preempt/qos) needs accounting (slurmdbd); set "
                "accounting = true or preemption = \"daemon\"",
                key="deployment.preemption", value=self.preemption.value)
        if self.min_job_age_s < 2:  # Slurm: 0 keeps jobs forever, 1 is refused
            raise ConfigError("must be at least 2 seconds (priority/PREEMPTION.md: an hour or "
                              "more keeps ended victims requeueable while the daemon is down)",
                              key="deployment.min_job_age", value=self.min_job_age_s)
        if self.max_job_count < 1:
            raise ConfigError("must be at least 1 (Slurm's default is 10000; hai-slurm writes "
                              "100000)", key="deployment.max_job_count", value=self.max_job_count)
        if self.cred_expire_s < 1:
            raise ConfigError("must be at least 1 second", key="deployment.cred_expire",
                              value=self.cred_expire_s)
        self._check_words()

    def _check_words(self) -> None:
        """Values written into slurm.conf as they are: one word each (a space, '#' or line
        break would end the value, start a comment or add a line of its own)."""
        for name in ("controller_host", "controller_addr", "accounting_host", "slurm_user",
                     "state_dir", "spool_dir", "log_dir", "run_dir", "proctrack_type",
                     "task_plugin", "munge_socket", "slurmctld_debug", "slurmd_debug"):
            value = getattr(self, name)
            if value is not None and not _WORD.fullmatch(value):
                raise ConfigError("must be one word without spaces, '#', '=' or line breaks "
                                  "(slurm.conf takes it as it is)", key=f"deployment.{name}",
                                  value=value)
        for item in self.scheduler_parameters:
            if not _WORD.fullmatch(item.replace("=", "")) or "," in item:
                raise ConfigError("each item is one word (NAME or NAME=VALUE) without spaces, "
                                  "',', '#' or line breaks", key="deployment.scheduler_parameters",
                                  value=item)
        for key, value in self.extra_settings:
            if not _KEY.fullmatch(key):
                raise ConfigError("a slurm.conf key is letters and digits (e.g. MessageTimeout)",
                                  key=f"deployment.extra.{key}", value=key)
            if not _EXTRA_VALUE.fullmatch(value):
                raise ConfigError("a value without '#', line breaks or other control characters "
                                  "(slurm.conf takes it as it is)", key=f"deployment.extra.{key}",
                                  value=value)
