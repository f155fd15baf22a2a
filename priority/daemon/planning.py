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
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from hai_slurm.checkpoint.protocol import control_dir_of
from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.room import (
    Ahead,
    Narrowing,
    asks,
    closed_for_room,
    left_out_texts,
    narrow_allowed,
    plan_short,
    reserved,
    whole_node_late,
)
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
from hai_slurm.priority.planner.types import (
    Decision,
    Holder,
    Outcome,
    PlannerConfig,
    PlanningResult,
    PlanSnapshot,
    PreemptionPlan,
    Waiting,
)
from hai_slurm.priority.policy.state import PendingJob
from hai_slurm.slurm_plugins.constraints import node_filter
from hai_slurm.slurm_plugins.hostlist import compress_hostlist, expand_hostlist
from hai_slurm.slurm_plugins.job_record import job_record
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job, JobState

TopologySource = Topology | Callable[[ClusterSnapshot], Topology]
VerdictCounts = Mapping[tuple[str, str], int]
"""Pending jobs per (effective class, verdict) of the latest pass."""

log = logging.getLogger("hai_slurm.priority.daemon.planning")


def foreign_reservation(job: Job) -> bool:
    """Whether ``job`` waits in a reservation other than a plan's guard (``sbatch
    --reservation``): it starts only on that reservation's nodes, which the planner leaves out
    (:meth:`SnapshotPlanner.snapshot`), so it gets no plan."""
    return bool(job.reservation) and reservation_plan(job.reservation) is None


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
        """The latest pass's :attr:`PlanningResult.worth_in` (a cycle's or a look's)."""
        self.ripe_in: Mapping[int, float] = {}
        """The latest pass's :attr:`PlanningResult.ripe_in`. With :attr:`worth_in`, when the
        daemon's urgent path looks again at the jobs that pass refused
        (:func:`~.urgent.due_in`)."""
        self.on_verdicts = on_verdicts
        self._verdicts: dict[int, Outcome] = {}
        self._usable: tuple[Topology, frozenset[str], Topology] | None = None
        self._gpus: tuple[Topology, dict[int, dict[str, int]],
                          Mapping[int, tuple[GpuRef, ...]]] | None = None
        self._holders = HolderMemo()
        """The last pass's holders, reused for running jobs whose values did not change."""
        self._narrowing: tuple[ClusterSnapshot, tuple[Waiting, ...], Narrowing] | None = None
        """The last pass's snapshot, its waiting jobs before :func:`narrow_allowed` and what
        else it weighed (for :meth:`left_out`)."""
        self._denied_logged: frozenset[int] = frozenset()
        """Jobs :meth:`_denied` logged already (while they stay denied)."""
        self.unplanned: str | None = None
        """Why the last pass planned no job at all, when it was not for want of one (reading
        Slurm's reservations failed)."""

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
        ahead: Ahead = ()
        self.unplanned = None
        if view.pending:
            try:
                ahead = reserved(view.slurm.reservations(), float(snap.time))
            except SlurmError as err:
                # a job might be planned onto nodes a reservation keeps it off
                self.unplanned = f"reading Slurm's reservations failed ({err})"
                log.warning("%s, so no job is planned in this pass", self.unplanned)
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
        # A suspended job keeps its GPUs (SUSPEND frees no GRES): they are busy, and it is no
        # victim (requeueing it is not the planner's to decide). Left out, its GPUs looked free
        # and a job "fit" there that Slurm would never start.
        suspended = [j for j in snap.jobs if j.state is JobState.SUSPENDED and j.gpus_per_node]
        counts.update((j.job_id, dict(j.gpus_per_node)) for j in suspended)
        gpus = self._gpus_of(topology, counts)
        records = {j.job_id: (r.checkpoint_dir, r.grace, j.uid) for j in snap.running
                   if j.job_id in running_ids for r in (job_record(j),)}
        measured = {} if self.save_times is None else self.save_times.update(
            (SaveSource(jid, ckpt, uid) for jid, (ckpt, _, uid) in records.items() if ckpt),
            view.now)
        denied = self._denied(records)
        saves = save_estimates({jid: (ckpt if jid not in denied else None, grace)
                                for jid, (ckpt, grace, _) in records.items()},
                               {j: m.save for j, m in measured.items() if m.save is not None})
        # a measured restart may lower the configured one, never raise it
        restarts = {j: min(m.restart, self.config.restart_for(len(counts.get(j) or {}) or 1))
                    for j, m in measured.items() if m.restart is not None}
        holders = holders_from_policy(running, view.result.running, gpus, saves=saves,
                                      restart_costs=restarts, victims=claims.victims,
                                      memo=self._holders)
        if suspended:
            holders += tuple(Holder(j.job_id, j.account, PriorityClass.LOW, gpus[j.job_id],
                                    float(j.start_time or snap.time), preemptible=False)
                             for j in suspended if gpus.get(j.job_id))
        nodes = {j.job_id: j.node_count for j in snap.pending if j.node_count > 0}
        switches = {j.job_id: (j.switches or 0, float(j.switch_wait)) for j in snap.pending
                    if j.switches}
        allowed, whole, unserved = self._allowed(topology, snap, pending, ahead)
        if unserved:   # --exclusive with no node size that can hold it: see not_planned
            pending = tuple(j for j in pending if j.job_id not in unserved)
        waiting = waiting_from_policy(pending, view.result.pending, nodes=nodes,
                                      switches=switches, allowed=allowed, whole_nodes=whole,
                                      aged_preempt=self.config.aged_preempt)
        # free GPUs a job cannot start on for want of CPUs or memory, or for a reservation:
        # left out of its plans (see hai_slurm.priority.daemon.room)
        cells = topology.cells_at(Level.NODE)
        cluster = frozenset(c.id for c in cells)
        asked = asks(snap, waiting, frozenset(whole))
        closed = claims.closed | closed_for_room(snap, asked, cluster)
        how = Narrowing(holders, cluster, max((len(c.gpus) for c in cells), default=0), ahead,
                        asked, closed, frozenset(whole))
        self._narrowing = (snap, waiting, how)
        return PlanSnapshot(topology, holders, _narrowed(snap, waiting, how), float(snap.time),
                            closed)

    def _denied(self, records: Mapping[int, tuple[str | None, int | None, int]]
                ) -> frozenset[int]:
        """The running jobs with a checkpoint directory whose control directory the daemon may
        not open (:attr:`SaveTimes.denied`): weighed as jobs that cannot save on request, since
        no acknowledgement of theirs would be seen; each is logged once, with the fix."""
        if self.save_times is None or not self.save_times.denied:
            return frozenset()
        denied = frozenset(j for j in self.save_times.denied if records.get(j, (None,))[0])
        for jid in sorted(denied - self._denied_logged):
            log.warning(
                "job %d: the daemon may not open its control directory %s (permission "
                "denied), so it would never see the job acknowledge a checkpoint request; it "
                "is weighed as a job that cannot save. Let the daemon's user traverse the "
                "checkpoint directory's parents (chmod o+x, or setfacl -m u:USER:x)", jid,
                control_dir_of(records[jid][0] or "", jid))
        self._denied_logged = denied
        return denied

    def left_out(self, job_id: int) -> list[str]:
        """Which nodes the last pass left out of waiting ``job_id``'s plans for want of room
        for its CPUs or memory, or for a reservation its run would reach, and why
        (:func:`~hai_slurm.priority.daemon.room.left_out_texts`); empty when none, or the job
        was not planned in that pass."""
        if self._narrowing is None:
            return []
        snap, waiting, how = self._narrowing
        w = next((w for w in waiting if w.job_id == job_id), None)
        return [] if w is None else left_out_texts(snap, w, how)

    def _allowed(self, topology: Topology, snap: ClusterSnapshot,
                 pending: Sequence[PendingJob], ahead: Ahead
                 ) -> tuple[dict[int, frozenset[str]], dict[int, tuple[int, int]], set[int]]:
        """The nodes each pending job may use, for those that may not use every node of
        ``topology`` (:func:`usable_nodes`); the (GPUs per node, nodes) of each job with GPUs
        that takes its nodes whole (``--exclusive``: :func:`whole_node_request`, which also
        narrows its nodes, to those of one size where no job without GPUs runs, the planner
        freeing only GPU holders, and that no reservation of ``ahead`` keeps it off); and such
        jobs no plan can serve (no size holds them). One set object per distinct request (the
        planner keys its caches by them)."""
        parts = {p.name: frozenset(p.nodes) for p in snap.partitions}
        cells = topology.cells_at(Level.NODE)
        cluster = frozenset(c.id for c in cells)
        features = {n.name: frozenset(n.features) for n in snap.nodes}
        sets: dict[tuple[str, str, str, str], frozenset[str] | None] = {}
        wholes: dict[tuple[str, str, str, str, int, int, frozenset[str]],
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
                late = (whole_node_late(record, ahead, float(snap.time)) if ahead
                        else frozenset())
                asked = (*key, job.resources.gpus, max(0, record.node_count), late)
                if asked not in wholes:
                    wholes[asked] = whole_node_request(
                        (cluster if got is None else got) - sizes[0] - late, sizes[1],
                        sizes[2], job.resources.gpus, max(0, record.node_count))
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
        self.worth_in = self.ripe_in = {}
        snapshot, result = self.planning_pass(view)
        self._report(snapshot, result, whole=view.focus is None)
        self.worth_in, self.ripe_in = result.worth_in, result.ripe_in
        if view.focus is None:
            self.last = result
        return result if result.plans else None

    def planning_pass(self, view: CycleView) -> tuple[PlanSnapshot, PlanningResult]:
        """One pass as a cycle makes it (:meth:`snapshot`, the planner, :meth:`_with_room`),
        nothing logged or kept: what :meth:`plan` and ``priority explain`` share."""
        snapshot = self.snapshot(view)
        result = plan_preemptions(snapshot, config=self.config, now=view.now)
        return self._with_room(snapshot, result, view.now)

    def _with_room(self, snapshot: PlanSnapshot, result: PlanningResult, now: float
                   ) -> tuple[PlanSnapshot, PlanningResult]:
        """The pass again while a plan's victims would free its beneficiary's GPUs but not the
        CPUs or memory it asks (:func:`~hai_slurm.priority.daemon.room.plan_short`), at most
        :data:`ROOM_PASSES` passes in all. Before each new pass, the victims such plans took on
        those nodes give way to nobody (another set there, or elsewhere, is found: the job
        holding the node's CPUs, say); before the last, those nodes are also left out of the
        job's plans (``narrowing.after_victims``; ``explain`` names them). A plan still short
        after the last pass is dropped: its victims would give way for nothing."""
        if self._narrowing is None:
            return snapshot, result
        snap, waiting, how = self._narrowing
        by_name = {n.name: n for n in snap.nodes}
        avoid: set[int] = set()
        for attempt in range(ROOM_PASSES):
            short = {p.beneficiary: (p, nodes) for p in result.plans
                     if (asked := how.asked.get(p.beneficiary)) is not None
                     and (nodes := plan_short(snap, p, asked, by_name))}
            if not short or attempt == ROOM_PASSES - 1:
                break
            avoid |= {jid for p, nodes in short.values()
                      for jid, on in _victim_nodes(snap, p) if on & nodes}
            if attempt == ROOM_PASSES - 2:   # the last pass: those nodes too
                after = dict(how.after_victims)
                for jid, (_, nodes) in short.items():
                    after[jid] = after.get(jid, frozenset()) | nodes
                how = how._replace(after_victims=MappingProxyType(after))
                self._narrowing = (snap, waiting, how)
            log.info("planner: the victims of job(s) %s would not free the CPUs or memory "
                     "asked on %s; planning again without victims %s there", sorted(short),
                     sorted(set().union(*(n for _, n in short.values()))), sorted(avoid))
            snapshot = replace(snapshot, pending=_narrowed(snap, waiting, how), running=tuple(
                replace(h, preemptible=False) if h.job_id in avoid else h
                for h in snapshot.running))
            result = plan_preemptions(snapshot, config=self.config, now=now)
        if not short:
            return snapshot, result
        decisions = dict(result.decisions)
        for jid, (_, nodes) in short.items():
            decisions[jid] = Decision(jid, Outcome.NO_VICTIMS, (
                f"the victims that free its GPUs on {compress_hostlist(sorted(nodes))} would "
                "not free the CPUs or memory it asks there; no plan this pass"))
        return snapshot, replace(result, plans=tuple(
            p for p in result.plans if p.beneficiary not in short), decisions=decisions)

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


ROOM_PASSES = 3
"""Planning passes a cycle makes at most while plans' victims would not free their
beneficiaries' CPUs or memory (:meth:`SnapshotPlanner._with_room`)."""


def _victim_nodes(snap: ClusterSnapshot, plan: PreemptionPlan
                  ) -> list[tuple[int, frozenset[str]]]:
    """(job id, its nodes) of each victim of ``plan`` Slurm still lists."""
    return [(v.job_id, frozenset(j.nodes)) for v in plan.victims
            if (j := snap.job(v.job_id)) is not None]


def _narrowed(snap: ClusterSnapshot, waiting: tuple[Waiting, ...], how: Narrowing
              ) -> tuple[Waiting, ...]:
    """``waiting`` with the allowed nodes :func:`narrow_allowed` leaves them."""
    narrowed = narrow_allowed(snap, waiting, how)
    if not narrowed:
        return waiting
    return tuple(w if (n := narrowed.get(w.job_id)) is None else replace(w, allowed=n)
                 for w in waiting)


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
