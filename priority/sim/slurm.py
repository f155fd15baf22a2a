"""SimSlurm: FakeSlurm with a cons_tres + topology/tree allocator over the cluster's tree.

Everything but placement is :class:`~hai_slurm.slurm_plugins.fake.FakeSlurm` (submit, priorities,
requeue with its delay, signals, snapshots). :meth:`SimSlurm.schedule` starts pending jobs in
priority order (ties: submit time, job id) on exact GPUs chosen by the planner's placement code
(:mod:`hai_slurm.priority.planner.placement`): inside a node the lowest cell with room, best fit; a
multi-node job under one leaf switch when one can hold it, else across leaves (topology/tree
without ``--switches``). With ``backfill`` (the default here) a job that does not fit does not
block lower ones; without it the first job that does not fit stops the pass, as Slurm's main
scheduler does. A job may be *pinned* to nodes (``ReqNodeList``), as the preemption executor does
for a beneficiary.

A pending job may hold a *reservation* (:meth:`SimSlurm.reserve`), as Slurm's backfill keeps one
for its top jobs: when it does not fit, the nodes it would start on first (the ones with the most
free GPUs of its size, node order breaking ties; not nodes a preemption plan pinned another job
to) are closed to jobs of a lower class (QOS) for the rest of the pass, so smaller jobs of lower
classes cannot backfill onto them while their running jobs end; jobs of the same class or above
still may (they are what the reservation's class is for, and the planner counts them as fitting).

A pin may come with a *guard* (``pin(..., guard_until=T)``), the preemption executor's guard
(:mod:`hai_slurm.priority.executor.guard`): until ``T`` (the victims' requeue plus the executor's
``start_timeout``) the free GPUs of the pinned nodes are closed to every pending job but the
pinned one (and the other jobs pinned there with a guard), so GPUs that were free when the plan
was made, or that a victim frees first, are not taken before the beneficiary can start. That is
the daemon's guard: a Slurm reservation on the plan's nodes for the beneficiary alone
(``IGNORE_JOBS,FLEX``), which no other job enters whatever its class. (Its fallback when Slurm
refuses the reservation, holding the pending jobs of lower classes, is not modelled; until
issue 16's third pass the model closed the nodes to lower classes only, and a same-class job
submitted during the victims' save could take a plan's GPUs: ``priority/sim/README.md``.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.priority.planner.placement import ClusterView, Placement, place_free
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import ActionResult, JobIds, JobState

if TYPE_CHECKING:
    from hai_slurm.slurm_plugins.fake import _FakeJob

PARTITION = "gpu"
#: Class weight of each class's QOS (reservations close nodes to lower classes only).
QOS_WEIGHT = {c.qos: c.weight for c in PriorityClass}


class SimSlurm(FakeSlurm):
    """FakeSlurm that places jobs on exact GPUs of a topology tree (see the module docstring)."""

    def __init__(self, topology: Topology, *, now: int, requeue_delay: int = 0,
                 backfill: bool = True) -> None:
        view = ClusterView(topology)
        nodes = [FakeNode(name, gpus=layout.full.bit_count(), cpus=1_000_000,
                          memory_mb=1_000_000, partitions=(PARTITION,))
                 for name, layout in view.nodes.items()]
        super().__init__(nodes, now=now, requeue_delay=requeue_delay, backfill=backfill)
        self.topology = topology
        self.view = view
        self.total_gpus = sum(n.gpus for n in nodes)
        self.used_gpus = 0
        self.placed: dict[int, tuple[tuple[str, int], ...]] = {}
        """Exact GPUs (node, bit mask) of every running job."""
        self._gpus: dict[int, tuple[tuple[tuple[str, int], ...], tuple[GpuRef, ...]]] = {}
        """:meth:`gpus_of`'s answers, with the placement each was read from."""
        self.pins: dict[int, tuple[str, ...]] = {}
        self.guards: dict[int, int] = {}
        """Pinned jobs whose nodes are guarded, and until when (see the module docstring)."""
        self.reserved: frozenset[int] = frozenset()
        """Pending jobs the backfill keeps a reservation for (see the module docstring)."""
        self._pending: set[int] = set()
        # Nodes by free GPU count, node layouts by shape, and picks already worked out: a
        # single-node placement then looks at few nodes instead of all (same choice, see
        # _place_one).
        top = view.max_node_gpus
        self._buckets: list[set[str]] = [set() for _ in range(top + 1)]
        shapes: dict[tuple[tuple[int, int, tuple[int, ...]], ...], int] = {}
        self._shape_of: dict[str, int] = {}
        for name, layout in view.nodes.items():
            key = tuple((int(c.level), c.mask, c.children) for c in layout.cells)
            self._shape_of[name] = shapes.setdefault(key, len(shapes))
            self._buckets[layout.full.bit_count()].add(name)
        self.min_level = [min((int(c.level) for layout in view.nodes.values()
                                for c in layout.cells if c.mask.bit_count() >= k),
                               default=int(Level.NODE)) for k in range(top + 1)]
        self._picks: dict[tuple[int, int, int], tuple[Level, int] | None] = {}

    # -- jobs in and out ----------------------------------------------------------------------
    def submit_gpus(self, *, gpus: int, nodes: int, name: str, user: str, account: str,
                    admin_comment: str = "", qos: str = "normal", priority: int = 1) -> int:
        """Queue a job for ``nodes`` x (``gpus`` / ``nodes``) GPUs; its id."""
        jid = self.submit(name=name, user=user, account=account, qos=qos, nodes=nodes,
                          gpus_per_node=gpus // nodes, cpus_per_node=0,
                          admin_comment=admin_comment, priority=priority)
        self._pending.add(jid)
        return jid

    def _move(self, node: str, before: int) -> None:
        self._buckets[before].discard(node)
        self._buckets[self.view.free(node).bit_count()].add(node)

    def _release(self, job_ids: Iterable[int]) -> None:
        view = self.view
        for jid in job_ids:
            masks = self.placed.pop(jid, ())
            self._gpus.pop(jid, None)
            for node, mask in masks:
                before = view.free(node).bit_count()
                view.release(node, mask)
                self.used_gpus -= mask.bit_count()
                self._move(node, before)

    def finish(self, job_id: int, state: JobState = JobState.COMPLETED) -> None:
        """The job's program ended: free its GPUs."""
        super().finish(job_id, state)
        self._release((job_id,))
        self._pending.discard(job_id)

    def _requeued(self, result: ActionResult) -> ActionResult:
        self._release(result.done)
        self._pending.update(result.done)
        return result

    def requeue(self, job_ids: JobIds) -> ActionResult:
        """Slurm's requeue; the GPUs are free at once."""
        return self._requeued(super().requeue(job_ids))

    def requeue_hold(self, job_ids: JobIds) -> ActionResult:
        """Slurm's requeuehold; the GPUs are free at once."""
        return self._requeued(super().requeue_hold(job_ids))

    def cancel(self, job_ids: JobIds) -> ActionResult:
        """Cancel: a running job frees its GPUs, a pending one leaves the queue."""
        result = super().cancel(job_ids)
        self._release(result.done)
        self._pending.difference_update(result.done)
        return result

    def pin(self, job_id: int, nodes: tuple[str, ...], *, guard_until: int | None = None
            ) -> None:
        """Restrict a pending job to ``nodes`` (``scontrol update JobId=.. ReqNodeList=..``);
        with ``guard_until``, close the nodes to lower classes until then (module docstring)."""
        self.pins[job_id] = nodes
        if guard_until is None:
            self.guards.pop(job_id, None)
        else:
            self.guards[job_id] = guard_until

    def guarded_nodes(self) -> frozenset[str]:
        """Nodes closed by plans' guards now (what the daemon's claims call ``closed``)."""
        return frozenset(self._guarded())

    def _guarded(self) -> set[str]:
        """Nodes guarded now (by plans whose beneficiary still waits, guard not over)."""
        out: set[str] = set()
        for jid, until in sorted(self.guards.items()):
            if until < self.now or jid not in self._pending or jid not in self.jobs:
                del self.guards[jid]
                continue
            out.update(n for n in self.pins.get(jid, ()) if n in self.view.nodes)
        return out

    def _open(self, nodes: Iterable[str], held: dict[str, int]) -> int:
        """Reopen ``nodes`` of ``held`` (and forget them there); the GPUs reopened."""
        opened = 0
        for name in nodes:
            mask = held.pop(name, 0)
            if mask:
                before = self.view.free(name).bit_count()
                self.view.release(name, mask)
                self._move(name, before)
                opened += mask.bit_count()
        return opened

    def reserve(self, job_ids: Iterable[int]) -> None:
        """Keep reservations for ``job_ids`` (replaces the previous set)."""
        self.reserved = frozenset(job_ids)

    def _hold_for(self, node_count: int, per_node: int, held: dict[str, int]) -> int:
        """Close the nodes a reserved job would start on first; the GPUs closed."""
        view = self.view
        planned = {n for nodes in self.pins.values() for n in nodes}
        options = sorted((-view.free(n).bit_count(), layout.order, n)
                         for n, layout in view.nodes.items()
                         if n not in held and n not in planned
                         and layout.full.bit_count() >= per_node)
        closed = 0
        for _, _, name in options[:node_count]:
            mask = view.free(name)
            held[name] = mask
            if mask:
                before = mask.bit_count()
                view.occupy(name, mask)
                self._move(name, before)
                closed += before
        return closed

    def _reopen(self, held: dict[str, int]) -> None:
        view = self.view
        for name, mask in held.items():
            if not mask:
                continue
            before = view.free(name).bit_count()
            view.release(name, mask)
            self._move(name, before)

    # -- placement -----------------------------------------------------------------------------
    def gpus_of(self, job_id: int) -> tuple[GpuRef, ...]:
        """The exact GPUs a running job holds (what gres_detail shows).

        Remembered with the placement it was read from: a placement is a new tuple each time a
        job starts, and node layouts never change, so the same tuple gives the same GPUs (every
        cycle asks for every running job's)."""
        masks = self.placed.get(job_id, ())
        known = self._gpus.get(job_id)
        if known is not None and known[0] is masks:
            return known[1]
        gpus = tuple(sorted(g for node, mask in masks for g in self.view.nodes[node].gpus(mask)))
        self._gpus[job_id] = (masks, gpus)
        return gpus

    def _place_one(self, count: int) -> Placement | None:
        """The single-node placement :func:`~hai_slurm.priority.planner.placement.place_free`
        chooses:
        the least (in-node level, free GPUs, free GPUs of the leaf, node order). Nodes are
        visited by free count, lowest first, and the walk stops once no fuller node can have a
        lower level."""
        view = self.view
        best: tuple[tuple[int, int, int, int], str, int] | None = None
        for have in range(count, len(self._buckets)):
            for name in self._buckets[have]:
                layout = view.nodes[name]
                free = layout.full & ~view.busy[name]
                key = (self._shape_of[name], free, count)
                if key in self._picks:
                    got = self._picks[key]
                else:
                    got = self._picks[key] = layout.pick(free, count)
                if got is None:
                    continue
                rank = (int(got[0]), have, view.group_free[layout.group], layout.order)
                if best is None or rank < best[0]:
                    best = (rank, name, got[1])
            if best is not None and best[0][0] <= self.min_level[count]:
                break
        if best is None:
            return None
        return Placement(((best[1], best[2]),), Level(best[0][0]))

    def _place_pinned(self, nodes: int, per_node: int, allowed: tuple[str, ...]
                      ) -> Placement | None:
        options = []
        for name in allowed:
            layout = self.view.nodes.get(name)
            if layout is None:
                continue
            got = layout.pick(self.view.free(name), per_node)
            if got is not None:
                options.append((int(got[0]), layout.order, name, got[1]))
        if len(options) < nodes:
            return None
        options.sort()
        chosen = options[:nodes]
        return Placement(tuple(sorted((n, m) for _, _, n, m in chosen)),
                         Level(max(o[0] for o in chosen)))

    def schedule(self, now: int | None = None) -> tuple[int, ...]:
        """Start pending jobs in priority order on exact GPUs; return the started ids."""
        if now is not None:
            self.advance(now)
        if not self._pending:
            return ()
        jobs = self.jobs
        queue = sorted((jobs[j] for j in self._pending),
                       key=lambda j: (-j.priority, j.submit_time, j.job_id))
        started: list[int] = []
        failed: dict[int, int] = {}   # nodes -> smallest GPUs per node that did not fit
        free_total = self.total_gpus - self.used_gpus
        held: dict[str, int] = {}     # nodes closed by reservations in this pass -> GPUs closed
        self._closed_below = -1       # jobs of a class weight below this see the closed nodes
        guarded = self._guarded()     # nodes closed by plans' guards
        guard_held: dict[str, int] = {}
        try:
            if guarded:
                free_total -= self._close(sorted(guarded), guard_held)
            self._pass(queue, started, failed, free_total, held, guard_held)
        finally:
            self._reopen(held)
            self._reopen(guard_held)
        return tuple(started)

    def _pass(self, queue: list[_FakeJob], started: list[int], failed: dict[int, int],
              free_total: int, held: dict[str, int], guard_held: dict[str, int]) -> None:
        pins, reserved = self.pins, self.reserved
        for j in queue:
            if j.held or j.priority == 0:
                continue
            if j.eligible_time > self.now:
                if j.reason != "BeginTime":   # a write marks the job changed (a snapshot
                    j.reason = "BeginTime"     # looks at it again): only when it changes
                continue
            if not held and j.job_id not in pins and j.job_id not in reserved and (
                    j.gpus_per_node * j.node_count > free_total
                    or j.gpus_per_node >= failed.get(j.node_count, j.gpus_per_node + 1)):
                # what _step gives such a job, without its bookkeeping: no reservation to
                # bypass, no guarded node of its own to open, none to close; it cannot fit
                if j.reason != "Resources":
                    j.reason = "Resources"
                if not self.backfill:
                    break
                continue
            opened: list[str] = []
            if guard_held:   # guarded nodes are open to their own jobs only
                mine = self.pins.get(j.job_id, ()) if j.job_id in self.guards else ()
                opened = [n for n in guard_held if n in mine]
                free_total += self._open(opened, guard_held)
            # a job that sees guarded nodes must not be skipped by what failed without them
            placed, free_total = self._step(j, free_total, {} if opened else failed, held)
            if opened:
                free_total -= self._close(opened, guard_held)
            if placed is None and not self.backfill:
                break
            if placed is not None:
                started.append(j.job_id)
                if free_total <= 0:
                    break

    def _step(self, j: _FakeJob, free_total: int, failed: dict[int, int],
              held: dict[str, int]) -> tuple[int | None, int]:
        """Try ``j`` (reservations included): (GPUs it took or None, free GPUs left)."""
        bypass = list(held) if held and QOS_WEIGHT.get(j.qos, 0) >= self._closed_below else []
        if bypass:   # the reservation's class or above: the closed nodes are open to it
            self._reopen(held)
            free_total += sum(m.bit_count() for m in held.values())
            held.clear()
        was_held = bool(held)
        placed = self._try(j, free_total, failed, held)
        if placed is not None:
            free_total -= placed
        elif held and not was_held:   # j now holds a reservation
            free_total -= sum(m.bit_count() for m in held.values())
        if bypass:
            free_total -= self._close(bypass, held)
        return placed, free_total

    def _close(self, nodes: list[str], held: dict[str, int]) -> int:
        """Close the free GPUs of ``nodes`` again (after a job that may use them); GPUs closed."""
        closed = 0
        for name in nodes:
            mask = self.view.free(name)
            held[name] = held.get(name, 0) | mask   # the job may have closed some itself
            if mask:
                before = mask.bit_count()
                self.view.occupy(name, mask)
                self._move(name, before)
                closed += before
        return closed

    def _try(self, j: _FakeJob, free_total: int, failed: dict[int, int],
             held: dict[str, int]) -> int | None:
        """Start ``j`` if it fits and return the GPUs it took; None when it did not start (then
        a job with a reservation closes the nodes it waits for, if none are closed yet)."""
        need = j.gpus_per_node * j.node_count
        pinned = self.pins.get(j.job_id)
        if need > free_total or (pinned is None and j.gpus_per_node >= failed.get(
                j.node_count, j.gpus_per_node + 1)):
            got = None
        elif pinned is not None:
            got = self._place_pinned(j.node_count, j.gpus_per_node, pinned)
        else:
            got = self._place_one(j.gpus_per_node) if j.node_count == 1 else place_free(
                self.view, j.node_count, j.gpus_per_node, cross_leaf=True)
            if got is None:
                failed[j.node_count] = j.gpus_per_node
        if got is None:
            if j.reason != "Resources":
                j.reason = "Resources"
            if self.backfill and j.job_id in self.reserved and pinned is None and not held:
                self._hold_for(j.node_count, j.gpus_per_node, held)
                self._closed_below = QOS_WEIGHT.get(j.qos, 0)
            return None
        for node, mask in got.masks:
            before = self.view.free(node).bit_count()
            self.view.occupy(node, mask)
            self._move(node, before)
        self.placed[j.job_id] = got.masks
        self.used_gpus += need
        j.nodes = got.nodes
        j.state, j.reason, j.start_time = JobState.RUNNING, "None", self.now
        self._pending.discard(j.job_id)
        self.pins.pop(j.job_id, None)
        return need

    def pending_ids(self) -> frozenset[int]:
        """Ids of the jobs waiting in the queue."""
        return frozenset(self._pending)
