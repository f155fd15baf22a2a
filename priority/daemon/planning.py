"""Glue between a daemon cycle and the pure planner: a :class:`~.hooks.Planner` for the daemon.

:class:`SnapshotPlanner` builds the planner's
:class:`~hai_slurm.priority.planner.types.PlanSnapshot` from the cycle's view (GPUs per node from
Slurm's snapshot, classes and flags from the policy's decisions, via
:mod:`~hai_slurm.priority.planner.inputs`) and returns the planner's result when it has plans. The
topology is either given once (from the cluster description) or a function of each cycle's snapshot
(:class:`~hai_slurm.priority.planner.slurm_topology.DerivedTopology`, when there is no description).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import NamedTuple

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.save_times import SaveSource, SaveTimes
from hai_slurm.priority.executor.guard import reservation_plan
from hai_slurm.priority.hooks import CycleView
from hai_slurm.priority.planner.inputs import (
    HolderMemo,
    allowed_nodes,
    gpus_from_counts,
    holders_from_policy,
    save_estimates,
    waiting_from_policy,
    whole_node_request,
)
from hai_slurm.priority.planner.search import plan_preemptions
from hai_slurm.priority.planner.types import Outcome, PlannerConfig, PlanningResult, PlanSnapshot
from hai_slurm.priority.policy.state import PendingJob
from hai_slurm.slurm_formats import INFINITE
from hai_slurm.slurm_plugins.constraints import node_filter
from hai_slurm.slurm_plugins.hostlist import compress_hostlist, expand_hostlist
from hai_slurm.slurm_plugins.job_record import job_record
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job, JobState, Reservation

TopologySource = Topology | Callable[[ClusterSnapshot], Topology]
VerdictCounts = Mapping[tuple[str, str], int]
"""Pending jobs per (effective class, verdict) of the latest pass."""

log = logging.getLogger("hai_slurm.priority.daemon.planning")


def foreign_reservation(job: Job) -> bool:
    """Whether ``job`` waits in a reservation other than a plan's guard (``sbatch
    --reservation``): it starts only on that reservation's nodes, which the planner leaves out
    (:meth:`SnapshotPlanner.snapshot`), so it gets no plan."""
    return bool(job.reservation) and reservation_plan(job.reservation) is None


def per_node_request(job: Job) -> tuple[int, int]:
    """(CPUs, MiB of memory) ``job`` asks per node (0: unknown, or not asked)."""
    nodes = max(1, job.node_count)
    return -(-job.cpus // nodes), job.memory_mb // nodes


class _Room(NamedTuple):
    """A node's room for a job's CPUs and memory (None: not counted; Slurm tells nothing)."""

    name: str
    cpus_now: int | None
    """CPUs free now, where the node has free GPUs (None where it has none)."""
    mb_now: int | None
    """MiB free now, likewise."""
    cpus_plan: int | None
    """CPUs less those jobs without GPUs hold (no plan frees them)."""
    mb_plan: int | None
    """MiB less those jobs without GPUs hold."""


def _rooms(snap: ClusterSnapshot, cluster: frozenset[str]) -> list[_Room]:
    """The room on each ``cluster`` node of ``snap``."""
    fixed_cpus: dict[str, int] = {}
    fixed_mb: dict[str, int] = {}
    for j in snap.running:   # what no plan frees: jobs without GPUs
        if j.gpus_allocated:
            continue
        cpus, mb = per_node_request(j)
        for name in j.nodes:
            fixed_cpus[name] = fixed_cpus.get(name, 0) + cpus
            fixed_mb[name] = fixed_mb.get(name, 0) + mb
    out = []
    for n in snap.nodes:
        if n.name not in cluster:
            continue
        has_free, cpus_known, mb_known = n.gpus_used < n.gpus, n.cpus > 0, n.memory_mb > 0
        out.append(_Room(n.name,
                         n.cpus - n.cpus_allocated if has_free and cpus_known else None,
                         n.memory_mb - n.memory_allocated_mb if has_free and mb_known else None,
                         n.cpus - fixed_cpus.get(n.name, 0) if cpus_known else None,
                         n.memory_mb - fixed_mb.get(n.name, 0) if mb_known else None))
    return out


def _short(room: _Room, cpus: int, mb: int) -> str | None:
    """Why a job asking ``cpus`` CPUs and ``mb`` MiB per node has no plan on ``room``'s node
    (see :func:`room_for`); None: it may."""
    if cpus > 0 and room.cpus_plan is not None and room.cpus_plan < cpus:
        return "jobs without GPUs, which no plan frees, leave fewer CPUs than it asks"
    if mb > 0 and room.mb_plan is not None and room.mb_plan < mb:
        return "jobs without GPUs, which no plan frees, leave less memory than it asks"
    if cpus > 0 and room.cpus_now is not None and room.cpus_now < cpus:
        return "fewer CPUs free than it asks, beside free GPUs"
    if mb > 0 and room.mb_now is not None and room.mb_now < mb:
        return "less memory free than it asks, beside free GPUs"
    return None


def room_for(snap: ClusterSnapshot, pending: Sequence[PendingJob],
             allowed: Mapping[int, frozenset[str]], cluster: frozenset[str]
             ) -> dict[int, frozenset[str]]:
    """The nodes each pending job with GPUs may have a plan on, for those with fewer than their
    ``allowed`` ones (else ``cluster``): nodes without room for the CPUs or memory it asks per
    node are left out.

    Slurm starts a job only where what it asks per node is free: a job holding 1 GPU and all 16
    CPUs of an 8-GPU node leaves 7 GPUs nobody can use, and one holding 12 leaves them to jobs
    asking 4 CPUs or fewer. A job "fit" on such free GPUs and got no plan while Slurm kept it
    pending. Left out, per job: a node with free GPUs but not the room now (the planner counts
    GPUs only: a plan there would count the free ones, though its victims may not free enough
    CPUs or memory), and a node where jobs without GPUs, which no plan frees, hold so much
    that the rest falls short. A node without free GPUs stays (a plan there frees every GPU
    the job gets from jobs that hold CPUs and memory beside them). A request of 0 (unknown)
    does not count. One set object per distinct (nodes, request): the planner keys its caches
    by them."""
    rooms: list[_Room] | None = None
    shorts: dict[tuple[int, int], frozenset[str]] = {}
    made: dict[tuple[frozenset[str], int, int], frozenset[str] | None] = {}
    out: dict[int, frozenset[str]] = {}
    for p in pending:
        job = snap.job(p.job_id)
        if job is None or p.resources.gpus <= 0:
            continue
        cpus, mb = per_node_request(job)
        if cpus <= 0 and mb <= 0:
            continue
        short = shorts.get((cpus, mb))
        if short is None:
            if rooms is None:
                rooms = _rooms(snap, cluster)
            short = shorts[cpus, mb] = frozenset(r.name for r in rooms
                                                 if _short(r, cpus, mb) is not None)
        where = allowed.get(p.job_id, cluster)
        key = (where, cpus, mb)
        if key not in made:
            made[key] = where - short if short & where else None
        got = made[key]
        if got is not None:
            out[p.job_id] = got
    return out


def reserved_ahead(reservations: Sequence[Reservation], now: float
                   ) -> tuple[tuple[int, str, frozenset[str]], ...]:
    """(start, name, nodes) of each reservation with nodes that has not started yet, other
    than a plan's guard (an admin's maintenance window, a team's booking)."""
    return tuple((r.start_time, r.name, frozenset(r.nodes)) for r in reservations
                 if r.start_time is not None and r.start_time > now and r.nodes
                 and reservation_plan(r.name) is None)


def before_reservations(snap: ClusterSnapshot, pending: Sequence[PendingJob],
                        allowed: Mapping[int, frozenset[str]], cluster: frozenset[str],
                        ahead: Sequence[tuple[int, str, frozenset[str]]]
                        ) -> dict[int, frozenset[str]]:
    """The nodes each pending job with GPUs may have a plan on, for those with fewer than their
    ``allowed`` ones (else ``cluster``): the nodes of a reservation in ``ahead``
    (:func:`reserved_ahead`) that starts before the job's time limit would end, if it started
    now, are left out (no time limit: every such reservation's).

    Slurm does not start a job on a reserved node when its run could reach into the
    reservation (measured on 22.05: ``ReqNodeNotAvail``; a job with ``--time=10`` starts
    beside a reservation 30 min away, one with ``--time=60`` or none waits). Before, free GPUs
    there made the job "fit" (no plan while it waited), or a plan freed GPUs there that the
    job then could not start on. A job linked to the reservation is not kept off it. One set
    object per distinct (nodes, nodes left out)."""
    if not ahead:
        return {}
    now = float(snap.time)
    made: dict[tuple[frozenset[str], frozenset[str]], frozenset[str] | None] = {}
    out: dict[int, frozenset[str]] = {}
    for p in pending:
        job = snap.job(p.job_id)
        if job is None or p.resources.gpus <= 0:
            continue
        late = frozenset(n for _, _, nodes in _reaches(job, ahead, now) for n in nodes)
        if not late:
            continue
        where = allowed.get(p.job_id, cluster)
        key = (where, late)
        if key not in made:
            made[key] = where - late if late & where else None
        got = made[key]
        if got is not None:
            out[p.job_id] = got
    return out


def _reaches(job: Job, ahead: Sequence[tuple[int, str, frozenset[str]]], now: float
             ) -> list[tuple[int, str, frozenset[str]]]:
    """The reservations of ``ahead`` that ``job``'s run would reach into if it started at
    ``now`` (its time limit; none: all), other than its own."""
    limit = job.time_limit
    ends = now + 60 * limit if limit is not None and limit != INFINITE else math.inf
    return [r for r in ahead if r[0] < ends and r[1] != job.reservation]


def left_out_texts(snap: ClusterSnapshot, job: Job, where: frozenset[str],
                   ahead: Sequence[tuple[int, str, frozenset[str]]], *,
                   whole: bool = False) -> list[str]:
    """Which of ``where`` (the nodes ``job`` may use) :func:`room_for` and
    :func:`before_reservations` leave out of its plans, and why, one line per reason
    (``whole``: it takes whole nodes, so its room is not checked)."""
    groups: dict[str, list[str]] = {}
    cpus, mb = per_node_request(job)
    if not whole and (cpus > 0 or mb > 0):
        asks = ", ".join(part for part in (f"{cpus} CPUs" if cpus > 0 else "",
                                           f"{mb} MiB" if mb > 0 else "") if part)
        for room in _rooms(snap, where):
            why = _short(room, cpus, mb)
            if why is not None:
                groups.setdefault(f"{why} ({asks} per node)", []).append(room.name)
    now = float(snap.time)
    limit = ("none" if job.time_limit is None or job.time_limit == INFINITE
             else _minutes(job.time_limit))
    for start, name, nodes in _reaches(job, ahead, now):
        groups.setdefault(f"reservation {name} starts in {_minutes((start - now) / 60)}, "
                          f"before its time limit ({limit}) would end",
                          []).extend(sorted(nodes & where))
    return [f"{compress_hostlist(sorted(set(names)))}: {why}"
            for why, names in groups.items() if names]


def _minutes(minutes: float) -> str:
    """``minutes`` as text: "45 min", "3 h 20 min"."""
    whole = max(0, round(minutes))
    hours, mins = divmod(whole, 60)
    return f"{hours} h {mins} min" if hours else f"{mins} min"


class SnapshotPlanner:
    """Plans preemptions from each cycle's view (see the module docstring)."""

    def __init__(self, topology: TopologySource, config: PlannerConfig | None = None, *,
                 on_verdicts: Callable[[VerdictCounts], None] | None = None,
                 save_times: SaveTimes | None = None) -> None:
        self.source = topology
        self.save_times = save_times
        """Reads the save and restart times running jobs measured (None: their graces and the
        configured ``restart_cost`` stand for them)."""
        self.topology = topology if isinstance(topology, Topology) else None
        self.config = config or PlannerConfig()
        self.last: PlanningResult | None = None
        self.worth_in: Mapping[int, float] = {}
        """The latest pass's :attr:`PlanningResult.worth_in` (a cycle's or a look's): the
        daemon's urgent path looks again at those jobs then."""
        self.on_verdicts = on_verdicts
        self._verdicts: dict[int, Outcome] = {}
        self._usable: tuple[Topology, frozenset[str], Topology] | None = None
        self._gpus: tuple[Topology, dict[int, dict[str, int]],
                          Mapping[int, tuple[GpuRef, ...]]] | None = None
        self._holders = HolderMemo()
        """The last pass's holders, reused for running jobs whose values did not change."""
        self._narrowed: tuple[ClusterSnapshot, dict[int, frozenset[str]], frozenset[str],
                              tuple[tuple[int, str, frozenset[str]], ...],
                              dict[int, tuple[int, int]]] | None = None
        """The last pass's snapshot, each job's nodes before :func:`room_for` and
        :func:`before_reservations` narrowed them, the cluster, the reservations ahead and the
        jobs taking whole nodes (for :meth:`left_out`)."""

    def snapshot(self, view: CycleView) -> PlanSnapshot:
        """The planner's inputs for this cycle."""
        snap = view.snapshot
        topology = self.source if isinstance(self.source, Topology) else self.source(snap)
        # Nodes Slurm cannot place jobs on now (down, drained, failing, not responding), whose
        # state is stale (not registered since slurmctld started) or that an active
        # reservation other than a plan's guard holds (an admin's maintenance, a team's
        # reserved nodes: only jobs linked to it start there, and those get no plan) are left
        # out: their free GPUs fit nobody, and freeing GPUs there would help nobody. A guard's
        # node stays (Slurm may flag it a while after the guard ended; 24.11+ name it).
        claims = view.claims
        topology = self._without_lost(topology, frozenset(
            n.name for n in snap.nodes if n.lost or not n.registered
            or ("RESERVED" in n.state_flags and n.name not in claims.closed
                and (not n.reservation or reservation_plan(n.reservation) is None))))
        self.topology = topology
        ahead: tuple[tuple[int, str, frozenset[str]], ...] = ()
        if view.pending:
            try:
                ahead = reserved_ahead(view.slurm.reservations(), float(snap.time))
            except SlurmError as err:
                # a job might be planned onto nodes a reservation keeps it off
                log.warning("reading Slurm's reservations failed, so no job is planned in this "
                            "pass: %s", err)
                view = replace(view, pending=())
        # Open plans' victims (and victims that missed an aborted plan and still run) keep
        # their GPUs in the planner's eyes but are not chosen twice; open plans' beneficiaries
        # are not planned again, nor are held jobs (the guard's, a user's or an admin's) or
        # jobs Slurm keeps back for something free GPUs do not give (a dependency, a limit, a
        # begin time further off than a victim's assumed save, ``save_cost``:
        # ``Job.waits_for_gpus``): none of them would start on the GPUs a plan frees, and its
        # victims would lose their work for nothing.
        soon = self.config.save_cost
        cannot_start = {j.job_id for j in snap.pending
                        if not j.waits_for_gpus(float(snap.time), soon) or j.exclusive == "topo"
                        or foreign_reservation(j)}
        running = view.running
        focus = view.focus
        pending = tuple(j for j in view.pending
                        if j.job_id not in claims.beneficiaries and j.job_id not in cannot_start
                        and j.job_id not in claims.held
                        and (focus is None or j.job_id in focus))
        running_ids = {j.job_id for j in running}
        counts = {j.job_id: dict(j.gpus_per_node) for j in snap.running
                  if j.job_id in running_ids and j.gpus_per_node}
        gpus = self._gpus_of(topology, counts)
        records = {j.job_id: (r.checkpoint_dir, r.grace, j.uid) for j in snap.running
                   if j.job_id in running_ids for r in (job_record(j),)}
        measured = {} if self.save_times is None else self.save_times.update(
            (SaveSource(jid, ckpt, uid) for jid, (ckpt, _, uid) in records.items() if ckpt),
            view.now)
        saves = save_estimates({jid: (ckpt, grace) for jid, (ckpt, grace, _) in records.items()},
                               {j: m.save for j, m in measured.items() if m.save is not None})
        # a measured restart may lower the configured one, never raise it
        restarts = {j: min(m.restart, self.config.restart_for(len(counts.get(j) or {}) or 1))
                    for j, m in measured.items() if m.restart is not None}
        holders = holders_from_policy(running, view.result.running, gpus, saves=saves,
                                      restart_costs=restarts, victims=claims.victims,
                                      memo=self._holders)
        nodes = {j.job_id: j.node_count for j in snap.pending if j.node_count > 0}
        switches = {j.job_id: (j.switches or 0, float(j.switch_wait)) for j in snap.pending
                    if j.switches}
        allowed, whole, unserved = self._allowed(topology, snap, pending)
        if unserved:   # --exclusive with no node size that can hold it: see not_planned
            pending = tuple(j for j in pending if j.job_id not in unserved)
        cluster = frozenset(c.id for c in topology.cells_at(Level.NODE))
        self._narrowed = (snap, dict(allowed), cluster, ahead, whole)
        # (a job taking whole nodes gets an empty node: room for whatever it asks)
        allowed.update(room_for(snap, [j for j in pending if j.job_id not in whole], allowed,
                                cluster))
        allowed.update(before_reservations(snap, pending, allowed, cluster, ahead))
        waiting = waiting_from_policy(pending, view.result.pending, nodes=nodes,
                                      switches=switches, allowed=allowed, whole_nodes=whole,
                                      aged_preempt=self.config.aged_preempt)
        return PlanSnapshot(topology, holders, waiting, float(snap.time), claims.closed)

    def left_out(self, job_id: int) -> list[str]:
        """Which nodes the last pass left out of pending ``job_id``'s plans for want of room
        for its CPUs and memory, or for a reservation its run would reach, and why
        (:func:`left_out_texts`); empty when none, or the job was not in the pass."""
        if self._narrowed is None:
            return []
        snap, allowed, cluster, ahead, whole = self._narrowed
        job = snap.job(job_id)
        if job is None or job.state is not JobState.PENDING:
            return []
        return left_out_texts(snap, job, allowed.get(job_id, cluster), ahead,
                              whole=job_id in whole)

    def _allowed(self, topology: Topology, snap: ClusterSnapshot,
                 pending: Sequence[PendingJob]
                 ) -> tuple[dict[int, frozenset[str]], dict[int, tuple[int, int]], set[int]]:
        """The nodes each pending job may use, for those that may not use every node of
        ``topology`` (:func:`usable_nodes`); the (GPUs per node, nodes) of each job with GPUs
        that takes its nodes whole (``--exclusive``: :func:`whole_node_request`, which also
        narrows its nodes, to those of one size where no job without GPUs runs: the planner
        frees only GPU holders); and such jobs no plan can serve (no size holds them). One
        set object per distinct request (the planner keys its caches by them)."""
        parts = {p.name: frozenset(p.nodes) for p in snap.partitions}
        cells = topology.cells_at(Level.NODE)
        cluster = frozenset(c.id for c in cells)
        features = {n.name: frozenset(n.features) for n in snap.nodes}
        sets: dict[tuple[str, str, str, str], frozenset[str] | None] = {}
        wholes: dict[tuple[str, str, str, str, int, int],
                     tuple[int, int, frozenset[str]] | None] = {}
        out: dict[int, frozenset[str]] = {}
        whole: dict[int, tuple[int, int]] = {}
        unserved: set[int] = set()
        sizes: tuple[frozenset[str], dict[str, int], frozenset[str]] | None = None
        for job in pending:
            record = snap.job(job.job_id)
            if record is None:
                continue
            key = (record.partition, record.required_nodes, record.excluded_nodes,
                   record.features)
            if key not in sets:
                sets[key] = usable_nodes(record, parts, cluster, features)
            got = sets[key]
            if record.takes_whole_nodes and job.resources.gpus > 0:
                if sizes is None:   # a job without GPUs on a node: no plan empties it
                    cpu_only = frozenset(n for j in snap.running if not j.gpus_allocated
                                         for n in j.nodes)
                    gpus_of = {c.id: len(c.gpus) for c in cells}
                    idle = frozenset(n.name for n in snap.nodes if n.gpus_used == 0
                                     and n.cpus_allocated == 0) - cpu_only
                    sizes = (cpu_only, gpus_of, idle)
                asked = (*key, job.resources.gpus, max(0, record.node_count))
                if asked not in wholes:
                    wholes[asked] = whole_node_request(
                        (cluster if got is None else got) - sizes[0], sizes[1], sizes[2],
                        job.resources.gpus, max(0, record.node_count))
                request = wholes[asked]
                if request is None:
                    unserved.add(job.job_id)
                    continue
                per, count, got = request
                whole[job.job_id] = (per, count)
            if got is not None:
                out[job.job_id] = got
        return out, whole, unserved

    def _gpus_of(self, topology: Topology, counts: dict[int, dict[str, int]]
                 ) -> Mapping[int, tuple[GpuRef, ...]]:
        """:func:`gpus_from_counts`, kept while the topology and the counts stay the same (a
        pure function of both: 2,000 running jobs' GPUs are picked again only after a change)."""
        if self._gpus is None or self._gpus[0] is not topology or self._gpus[1] != counts:
            self._gpus = (topology, counts, MappingProxyType(gpus_from_counts(topology, counts)))
        return self._gpus[2]

    def _without_lost(self, topology: Topology, lost: frozenset[str]) -> Topology:
        """``topology`` without the ``lost`` nodes (kept while both stay the same)."""
        if not lost:
            return topology
        if self._usable is None or self._usable[0] is not topology or self._usable[1] != lost:
            self._usable = (topology, lost, topology.without(lost))
        return self._usable[2]

    def plan(self, view: CycleView) -> PlanningResult | None:
        """The planner's result when it proposes at least one plan, else None. A pass with a
        ``focus`` (an urgent look) plans for those jobs only; it is not kept as :attr:`last`
        nor counted in the verdicts by class, which describe a cycle's whole queue."""
        self.worth_in = {}
        snapshot = self.snapshot(view)
        result = plan_preemptions(snapshot, config=self.config, now=view.now)
        self._report(snapshot, result, whole=view.focus is None)
        self.worth_in = result.worth_in
        if view.focus is None:
            self.last = result
        return result if result.plans else None

    def _report(self, snapshot: PlanSnapshot, result: PlanningResult, *,
                whole: bool = True) -> None:
        """Log each pending job's verdict when it changes; count verdicts by class (``whole``:
        a cycle's pass over every pending job)."""
        # Keyed by the enum members while counting (``.value`` and ``.name`` are property
        # calls: 10,000 pending jobs a cycle), by their names in the counts passed on.
        classes = {w.job_id: w.effective for w in snapshot.pending}
        tally: Counter[tuple[object, Outcome]] = Counter()
        verdicts: dict[int, Outcome] = {}
        last = self._verdicts
        for jid, decision in sorted(result.decisions.items()):
            outcome = decision.outcome
            verdicts[jid] = outcome
            tally[classes.get(jid, "?"), outcome] += 1
            if last.get(jid) is not outcome:
                log.info("planner verdict for job %d: %s: %s", jid, outcome.name,
                         decision.reason)
        if not whole:
            self._verdicts.update(verdicts)
            return
        self._verdicts = verdicts
        if self.on_verdicts is not None:
            counts: Counter[tuple[str, str]] = Counter()
            for (cls, outcome), n in tally.items():
                counts[cls.value if isinstance(cls, PriorityClass) else str(cls),
                       outcome.name] += n
            self.on_verdicts(counts)


def usable_nodes(job: Job, partitions: Mapping[str, frozenset[str]], cluster: frozenset[str],
                 features: Mapping[str, frozenset[str]]) -> frozenset[str] | None:
    """The ``cluster`` nodes Slurm may give ``job``: in its partitions (:func:`allowed_nodes`),
    outside its ``--exclude``, with its ``--constraint`` (as far as that is read per node, see
    :mod:`~hai_slurm.slurm_plugins.constraints`), and among its ``--nodelist`` nodes when it
    has one. None: every node.

    A job that lists fewer nodes than it needs must get the listed ones plus others; a plan
    cannot promise that (the executor pins the job to the plan's nodes), so such a job may use
    the listed nodes only: it gets no plan rather than a plan without its nodes."""
    out = allowed_nodes(job.partition, partitions, cluster) or cluster
    if job.required_nodes:
        out = out.intersection(expand_hostlist(job.required_nodes))
    if job.excluded_nodes:
        out = out.difference(expand_hostlist(job.excluded_nodes))
    test = node_filter(job.features)
    if test is not None:
        out = frozenset(n for n in out if test(features.get(n, frozenset())))
    return None if out == cluster else out
