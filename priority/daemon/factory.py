"""Build the daemon the way ``hai-slurm daemon`` runs it: policy, planner and executor wired.

:func:`build_daemon` is the one place that turns a
:class:`~hai_slurm.priority.config.loader.DaemonConfig` into a running
:class:`~hai_slurm.priority.daemon.loop.Daemon`; the CLI, the demo and the preemption benchmark all
use it.

* ``[planner] enabled`` (default true; ``--no-preempt`` overrides it) adds the
  :class:`~hai_slurm.priority.daemon.planning.SnapshotPlanner` and the two-phase
  :class:`~hai_slurm.priority.executor.preemption.PreemptionExecutor`; without it the daemon only
  writes priorities, and a plan a killed daemon left open waits for the next daemon that runs with
  preemption.
* Topology: the cluster description's when the config has ``cluster = ...``; otherwise
  derived from each snapshot's nodes and GPU counts, with leaf switches from
  ``scontrol show topology`` read once here (:mod:`~hai_slurm.priority.planner.slurm_topology`; one
  flat switch when Slurm has no topology plugin).
* Checkpoint requests also go through Redis when ``redis_url`` is set and ``[executor] redis``
  is not false.
* The executor renews the daemon's leader lease while a plan waits (``heartbeat``).
* ``shadow``: the daemon reads Slurm through a
  :class:`~hai_slurm.slurm_plugins.shadow.ShadowSlurm` (writes logged, never done) and plans
  through the :class:`~hai_slurm.priority.executor.shadow.ShadowExecutor` (would-be plans stored
  in ``shadow_plans``, nobody signalled). Two locks, not one: either alone writes nothing.
* The executor is wrapped by :class:`~hai_slurm.priority.daemon.plan_metrics.ObservedExecutor`,
  which turns the store's plans into the preemption metrics.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence

from hai_slurm.conf.topology import Topology
from hai_slurm.errors import SlurmError
from hai_slurm.priority.clock import Clock, SystemClock
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.loop import Daemon, open_store
from hai_slurm.priority.daemon.metrics import DaemonMetrics
from hai_slurm.priority.daemon.plan_metrics import ObservedExecutor, PlanObserver
from hai_slurm.priority.daemon.planning import SnapshotPlanner, TopologySource
from hai_slurm.priority.daemon.save_times import SaveTimes
from hai_slurm.priority.executor.notify import CheckpointNotifier, make_notifier
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.executor.shadow import ShadowExecutor
from hai_slurm.priority.planner.slurm_topology import DerivedTopology
from hai_slurm.priority.store.lock import LeaderLock, default_owner
from hai_slurm.priority.store.repository import Repository
from hai_slurm.priority.store.shadow import ShadowPlans
from hai_slurm.slurm_plugins.runner import CommandRunner
from hai_slurm.slurm_plugins.shadow import ShadowSlurm
from hai_slurm.slurm_plugins.types import SlurmClient, SwitchInfo

log = logging.getLogger("hai_slurm.priority.daemon.loop")


GC_THRESHOLD = 10_000
"""Allocations between two young-generation collections in the daemon process (Python's
default: 700). A cycle at 12,000 jobs allocates hundreds of thousands of objects while tens of
thousands live from one cycle to the next (the snapshot's jobs, their policy values, the stored
jobs): at 700, the collector's passes cost a quarter of a steady cycle outside the snapshot
(``bench/daemon_cycle.py``: 0.10 s of 0.41 s CPU); at 10,000 they cost next to nothing.
Reference counting frees almost everything anyway; only reference cycles wait for the collector."""


def tune_gc(threshold: int = GC_THRESHOLD) -> None:
    """Collect the young generation every ``threshold`` allocations (see :data:`GC_THRESHOLD`);
    the older generations keep Python's ratios. Process-wide: for the daemon's process only."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold, older, oldest)


def read_switches(slurm: SlurmClient) -> tuple[SwitchInfo, ...]:
    """Slurm's switches; () when it has none or the query fails (planning then uses one flat
    switch, which the start-up log says)."""
    try:
        return slurm.switches()
    except SlurmError as err:
        log.warning("scontrol show topology failed (%s); planning with one flat switch", err)
        return ()


def topology_source(cfg: DaemonConfig, switches: Sequence[SwitchInfo]) -> TopologySource:
    """The description's topology, else one derived from each snapshot under ``switches``."""
    if cfg.description is not None:
        return Topology.from_description(cfg.description)
    return DerivedTopology(switches)


def build_daemon(cfg: DaemonConfig, *, slurm: SlurmClient | None = None,
                 runner: CommandRunner | None = None,
                 preempt: bool | None = None, switches: Sequence[SwitchInfo] | None = None,
                 store: tuple[Repository, LeaderLock] | None = None,
                 notifier: CheckpointNotifier | None = None, clock: Clock | None = None,
                 owner: str | None = None, interval: float | None = None,
                 shadow: bool = False) -> Daemon:
    """The daemon for ``cfg`` (see the module docstring).

    ``slurm`` defaults to ``make_client("auto")`` with ``$SLURM_CONF`` (pyslurm when a matching
    one imports, else the CLI; the choice is logged), or to the CLI backend over ``runner``;
    ``preempt`` None follows ``[planner] enabled``; ``switches`` None reads
    ``scontrol show topology`` (only without a description); ``store`` None opens (and
    migrates) the configured database; ``shadow`` writes nothing to Slurm.
    """
    client = slurm or _default_client(runner)
    metrics = DaemonMetrics()
    if shadow:
        client = ShadowSlurm(client, on_write=lambda w: metrics.shadow_writes.labels(
            w.kind).inc(len(w.job_ids) if w.kind == "set_priorities" else 1))
        metrics.shadow.set(1)
    repo, lock = store or open_store(cfg)
    clock = clock or SystemClock()
    owner = owner or default_owner()
    enabled = cfg.preempt.enabled if preempt is None else preempt
    if not enabled:
        return Daemon(client, repo, lock, config=cfg, clock=clock, owner=owner,
                      interval=interval, metrics=metrics)
    if switches is None and cfg.description is None:
        switches = read_switches(client)
    source = topology_source(cfg, switches or ())
    planner = SnapshotPlanner(source, cfg.preempt.planner, on_verdicts=metrics.observe_verdicts,
                              save_times=SaveTimes())
    executor: ShadowExecutor | PreemptionExecutor
    if shadow:
        executor = ShadowExecutor(
            client, ShadowPlans(repo.engine), settings=cfg.preempt.executor,
            on_plan=lambda p: metrics.shadow_plans.labels(p.beneficiary_class,
                                                          p.beneficiary.team).inc())
    else:
        if notifier is None:
            notifier = make_notifier(cfg.redis_url if cfg.preempt.redis else None)
        ttl = cfg.intervals.lock_ttl
        executor = PreemptionExecutor(
            client, repo, notifier=notifier,
            settings=cfg.preempt.executor, clock=clock,
            heartbeat=lambda: lock.acquire_or_renew(owner, clock.time(), ttl))
    observed = ObservedExecutor(executor, PlanObserver(metrics, clock.time()))
    return Daemon(client, repo, lock, config=cfg, clock=clock, planner=planner,
                  executor=observed, owner=owner, interval=interval, metrics=metrics)


def describe_preemption(daemon: Daemon) -> str:
    """One line for the start-up log: whether and how the daemon preempts."""
    planner = daemon.planner
    shadow = ("SHADOW MODE: nothing is written to Slurm (would-be writes are logged, would-be "
              "plans stored: hai-slurm preempt history --shadow); "
              if isinstance(daemon.slurm, ShadowSlurm) else "")
    if not isinstance(planner, SnapshotPlanner):
        return shadow + "preemption off (priorities only)"
    if isinstance(planner.source, Topology):
        where = f"topology of the cluster description ({len(planner.source.gpus)} GPUs)"
    elif isinstance(planner.source, DerivedTopology):
        leaves = sum(1 for s in planner.source.switches if s.level == 0)
        where = (f"topology from Slurm's nodes under {leaves} leaf switch(es) of "
                 "scontrol show topology" if leaves else
                 "topology from Slurm's nodes under one flat switch (no scontrol topology)")
    else:
        where = "custom topology"
    if shadow:
        return shadow + f"preemption planned, not carried out, {where}"
    return f"preemption on (planner + two-phase executor), {where}"


def _default_client(run: CommandRunner | None) -> SlurmClient:
    from hai_slurm.slurm_plugins.adapter import make_client

    return make_client() if run is None else make_client(runner=run)
