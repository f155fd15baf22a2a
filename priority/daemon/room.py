"""Nodes a waiting job cannot start on for reasons other than GPUs, left out of its plans.

The planner counts GPUs; Slurm also needs the CPUs and memory a job asks per node, and keeps a
job off nodes that a reservation it is not linked to will take before its time limit would end.
Without these rules a job "fit" on free GPUs that Slurm would not start it on (so it got no plan
and waited), or a plan freed GPUs there for nothing. :func:`narrow_allowed` gives, per waiting
job, its allowed nodes (:attr:`~hai_slurm.priority.planner.types.Waiting.allowed`) without such
nodes; :func:`left_out_texts` says which and why (``priority explain``).

* **Room** (CPUs and memory per node; a request of 0, unknown, does not count). A node without
  room for the smallest request of the pass is closed to every job (:func:`closed_for_room`,
  :attr:`~hai_slurm.priority.planner.types.PlanSnapshot.closed`): its free GPUs fit nobody, and
  a plan there frees every GPU the job gets from victims, whose CPUs and memory come free with
  them (a 1-GPU job holding all 16 CPUs of an 8-GPU node leaves 7 GPUs nobody can use,
  measured on 22.05; taking it is the way to use them). Per job, a node without the room it
  asks is left out of its plans when, not closed, it has GPUs enough for the job free (it
  could only make the job "fit", which Slurm refuses), or when the jobs that could give way to
  it there (holding GPUs, preemptible, of a lower class) hold too little to make the room with
  what is free. Otherwise it stays, and the planner, which counts GPUs, may pick victims there
  that free GPUs but not the room (a job of its class, a protected one or a cheaper-to-keep one
  holds the rest): :func:`plan_short` finds such plans after a pass, and the daemon plans again
  with those victims giving way to nobody, then also without those nodes for that job
  (``Narrowing.after_victims``), dropping a plan still short.
* **Reservations** (any not ended other than a plan's guard, ``hai-plan-*``): Slurm starts a
  job on a reservation's nodes only when its run, from now, ends before the reservation
  starts (no time limit: never), unless it is linked to it. (A planned job starts only once
  its victims saved: one whose limit ends within that save of a reservation may still get a
  plan there that Slurm then refuses; counting from after the save instead would leave out
  nodes where it fits now.) Measured on 22.05: a
  job with ``--time=60`` or none waits beside a node reserved 30 min ahead (``ReqNodeNotAvail``),
  one with ``--time=10`` starts there. An active reservation flags its nodes RESERVED a few
  seconds after it starts, and the planner's cluster leaves those out anyway.

Pure: no I/O; the caller lists the reservations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.executor.guard import reservation_plan
from hai_slurm.priority.planner.search import shape
from hai_slurm.priority.planner.types import Holder, PreemptionPlan, Waiting
from hai_slurm.priority.policy.ladder import LADDER, RANK
from hai_slurm.priority.policy.units import format_duration
from hai_slurm.slurm_formats import INFINITE
from hai_slurm.slurm_plugins.hostlist import compress_hostlist
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job, Node, Reservation

Ahead = tuple[tuple[int, str, frozenset[str]], ...]
"""(start, name, nodes) of the reservations that keep jobs off their nodes (:func:`reserved`)."""


def per_node_request(job: Job) -> tuple[int, int]:
    """(CPUs, MiB of memory) ``job`` asks (or, running, holds) per node (0: unknown)."""
    nodes = max(1, job.node_count)
    return -(-job.cpus // nodes), job.memory_mb // nodes


def reserved(reservations: Sequence[Reservation], now: float) -> Ahead:
    """The reservations with nodes, not ended at ``now``, other than a plan's guard (an admin's
    maintenance window, a team's booking), as (start, name, nodes); one already started is
    reached by every job (Slurm flags its nodes RESERVED, which leaves them out of the
    planner's cluster, only a few seconds after it starts)."""
    return tuple((r.start_time if r.start_time is not None else int(now),
                  r.name, frozenset(r.nodes)) for r in reservations
                 if r.nodes and (r.end_time is None or r.end_time > now)
                 and reservation_plan(r.name) is None)


def reaches(job: Job, ahead: Ahead, now: float) -> list[tuple[int, str, frozenset[str]]]:
    """The reservations of ``ahead`` that ``job``'s run would reach into if it started at
    ``now`` (its time limit; none: every one), other than its own."""
    limit = job.time_limit
    ends = now + 60 * limit if limit is not None and limit != INFINITE else math.inf
    return [r for r in ahead if r[0] < ends and r[1] != job.reservation]


class _Room(NamedTuple):
    """A node's room for a waiting job (None: not counted, Slurm tells nothing)."""

    name: str
    gpus_free: int
    cpus_free: int | None
    mb_free: int | None
    cpus_freeable: tuple[int, ...]
    """Per class rank r: the CPUs that preemptible jobs with GPUs of a class below r hold."""
    mb_freeable: tuple[int, ...]
    """Per class rank r: the MiB they hold."""


def _rooms(snap: ClusterSnapshot, holders: Sequence[Holder],
           cluster: frozenset[str]) -> dict[str, _Room]:
    """The room on each ``cluster`` node of ``snap``; ``holders``: the running jobs the planner
    may take (their classes)."""
    classes = len(LADDER)
    held_cpus: dict[str, list[int]] = {}
    held_mb: dict[str, list[int]] = {}
    for h in holders:
        job = snap.job(h.job_id)
        if job is None or not h.preemptible:
            continue
        cpus, mb = per_node_request(job)
        rank = RANK[h.effective]
        for name in job.nodes:
            held_cpus.setdefault(name, [0] * classes)[rank] += cpus
            held_mb.setdefault(name, [0] * classes)[rank] += mb
    zero = [0] * classes
    out = {}
    for n in snap.nodes:
        if n.name not in cluster:
            continue
        out[n.name] = _Room(
            n.name, n.gpus - n.gpus_used,
            n.cpus - n.cpus_allocated if n.cpus > 0 else None,
            n.memory_mb - n.memory_allocated_mb if n.memory_mb > 0 else None,
            _below(held_cpus.get(n.name, zero)), _below(held_mb.get(n.name, zero)))
    return out


def _below(per_rank: list[int]) -> tuple[int, ...]:
    """Per rank r, the sum of ``per_rank`` over the ranks below r."""
    out, total = [], 0
    for held in per_rank:
        out.append(total)
        total += held
    return tuple(out)


class _Request(NamedTuple):
    """What a waiting job needs of a node: its class rank, GPUs, CPUs and MiB per node."""

    rank: int
    gpus: int
    cpus: int
    mb: int


def _lacks(room: _Room, cpus: int, mb: int) -> list[str]:
    """What of ``cpus`` CPUs and ``mb`` MiB ``room``'s node has not free now."""
    return [what for what, need, free in (("CPUs", cpus, room.cpus_free),
                                          ("memory", mb, room.mb_free))
            if need > 0 and free is not None and free < need]


def asks(snap: ClusterSnapshot, waiting: Sequence[Waiting],
         whole: frozenset[int] = frozenset()) -> dict[int, tuple[int, int]]:
    """(CPUs, MiB) per node of each waiting job with GPUs that asks either (jobs taking
    ``whole`` nodes aside: their nodes are empty)."""
    out = {}
    for w in waiting:
        job = snap.job(w.job_id) if w.gpus > 0 and w.job_id not in whole else None
        if job is not None:
            cpus, mb = per_node_request(job)
            if cpus > 0 or mb > 0:
                out[w.job_id] = (cpus, mb)
    return out


def closed_for_room(snap: ClusterSnapshot, asked: Mapping[int, tuple[int, int]],
                    cluster: frozenset[str]) -> frozenset[str]:
    """The ``cluster`` nodes without room for the smallest CPUs and the smallest memory per
    node ``asked`` (:func:`asks`): their free GPUs fit nobody (see the module doc)."""
    least_cpus = min((c for c, _ in asked.values() if c > 0), default=0)
    least_mb = min((m for _, m in asked.values() if m > 0), default=0)
    if least_cpus <= 0 and least_mb <= 0:
        return frozenset()
    return frozenset(r.name for r in _rooms(snap, (), cluster).values()
                     if _lacks(r, least_cpus, least_mb))


def _short(room: _Room, req: _Request, closed: frozenset[str]) -> str | None:
    """Why ``req`` has no plan on ``room``'s node (see the module doc); None: it may."""
    lacks = _lacks(room, req.cpus, req.mb)
    if not lacks:
        return None
    what = " and ".join(lacks)
    if room.gpus_free >= req.gpus and room.name not in closed:
        return f"not the {what} it asks free, beside GPUs enough for it"
    for name, need, free, freeable in (("CPUs", req.cpus, room.cpus_free, room.cpus_freeable),
                                       ("memory", req.mb, room.mb_free, room.mb_freeable)):
        if name in lacks and free is not None and free + freeable[req.rank] < need:
            return (f"not the {name} it asks free, and the jobs that could give way to it "
                    "there hold too little to make the room")
    return None


class Narrowing(NamedTuple):
    """What :func:`narrow_allowed` weighs besides the snapshot and the waiting jobs."""

    holders: Sequence[Holder]
    """The running jobs the planner may take (their classes and preemptibility)."""
    cluster: frozenset[str]
    """The planner's nodes (a job without ``allowed`` nodes may use them all)."""
    max_node_gpus: int
    """The most GPUs of a node (a job's GPUs per node, as the planner works it out)."""
    ahead: Ahead
    """The reservations (:func:`reserved`)."""
    asked: Mapping[int, tuple[int, int]]
    """The CPUs and MiB per node of each job that asks either (:func:`asks`)."""
    closed: frozenset[str] = frozenset()
    """Nodes whose free GPUs fit nobody (:func:`closed_for_room`, guards)."""
    whole: frozenset[int] = frozenset()
    """Jobs that take whole nodes: no reservation is checked for them here (the caller leaves
    the reservations' nodes out before it chooses their node size)."""
    after_victims: Mapping[int, frozenset[str]] = MappingProxyType({})
    """Per job, nodes where the planner's victims would free its GPUs but not its room
    (:func:`plan_short`: a pass planned it there, and the plan was dropped)."""


def narrow_allowed(snap: ClusterSnapshot, waiting: Sequence[Waiting], how: Narrowing
                   ) -> dict[int, frozenset[str]]:
    """Each waiting job's allowed nodes (its own, else the cluster's) without those it cannot
    start on for want of room or for a reservation (see the module doc), for the jobs that lose
    some. One set object per distinct set: the planner keys its caches by them."""
    holders, cluster, max_node_gpus, ahead, asked, closed, whole, after_victims = how
    now = float(snap.time)
    rooms: dict[str, _Room] | None = None
    lacking: dict[tuple[int, int], list[_Room]] = {}   # per (CPUs, MiB): nodes without them free
    # per (class, GPUs, nodes, CPUs, MiB) asked: the nodes without room for it
    shorts: dict[tuple[PriorityClass, int, int | None, int, int], frozenset[str]] = {}
    lates: dict[tuple[str, ...], frozenset[str]] = {}
    made: dict[tuple[frozenset[str], frozenset[str], frozenset[str]], frozenset[str] | None] = {}
    interned: dict[frozenset[str], frozenset[str]] = {}
    out: dict[int, frozenset[str]] = {}
    none: frozenset[str] = frozenset()
    job_of = snap.job
    for w in waiting:
        if w.gpus <= 0:
            continue
        job = job_of(w.job_id)
        if job is None:
            continue
        short = none
        request = asked.get(w.job_id)
        if request is not None:
            cpus, mb = request
            key_asked = (w.effective, w.gpus, w.nodes, cpus, mb)
            got = shorts.get(key_asked)
            if got is None:
                few = lacking.get(request)
                if few is None:
                    if rooms is None:
                        rooms = _rooms(snap, holders, cluster)
                    few = lacking[request] = [r for r in rooms.values() if _lacks(r, cpus, mb)]
                req = _Request(RANK[w.effective], shape(w, max_node_gpus)[1], cpus, mb)
                got = frozenset(r.name for r in few if _short(r, req, closed) is not None)
                got = shorts[key_asked] = interned.setdefault(got, got)
            short = got
            extra = after_victims.get(w.job_id)
            if extra:
                short = short | extra
        late = none
        if ahead and w.job_id not in whole:
            names = tuple(r[1] for r in reaches(job, ahead, now))
            if names:
                got = lates.get(names)
                if got is None:
                    got = lates[names] = frozenset(n for r in ahead if r[1] in names
                                                   for n in r[2])
                late = got
        if not short and not late:
            continue
        where = cluster if w.allowed is None else w.allowed
        key = (where, short, late)
        if key not in made:
            gone = (short | late) & where
            kept = where - gone if gone else None
            made[key] = None if kept is None else interned.setdefault(kept, kept)
        narrowed = made[key]
        if narrowed is not None:
            out[w.job_id] = narrowed
    return out


def plan_short(snap: ClusterSnapshot, plan: PreemptionPlan, request: tuple[int, int],
               nodes: Mapping[str, Node]) -> frozenset[str]:
    """The nodes of ``plan`` where its beneficiary, asking ``request`` (CPUs, MiB per node:
    :func:`asks`), would still lack room once the plan's victims ended: the planner counts
    GPUs, so the set it picks may free GPUs beside a job that keeps the CPUs (Slurm would not
    start the beneficiary there, and the victims would give way for nothing). ``nodes``: the
    snapshot's nodes by name (made once for a pass's plans)."""
    cpus, mb = request
    victims = [j for v in plan.victims if (j := snap.job(v.job_id)) is not None]
    short = []
    for name in plan.nodes:
        node = nodes.get(name)
        if node is None:
            continue
        gained = [per_node_request(j) for j in victims if node.name in j.nodes]
        room = _Room(node.name, 0,
                     node.cpus - node.cpus_allocated + sum(c for c, _ in gained)
                     if node.cpus > 0 else None,
                     node.memory_mb - node.memory_allocated_mb + sum(m for _, m in gained)
                     if node.memory_mb > 0 else None, (), ())
        if _lacks(room, cpus, mb):
            short.append(node.name)
    return frozenset(short)


def left_out_texts(snap: ClusterSnapshot, w: Waiting, how: Narrowing) -> list[str]:
    """Which of waiting ``w``'s allowed nodes :func:`narrow_allowed` leaves out, and why, one
    line per reason (nodes as a Slurm host list)."""
    job = snap.job(w.job_id)
    if job is None or w.gpus <= 0:
        return []
    holders, cluster, max_node_gpus, ahead, asked, closed, wholes, after_victims = how
    where = cluster if w.allowed is None else w.allowed
    groups: dict[str, list[str]] = {}
    request = asked.get(w.job_id)
    if request is not None:
        req = _Request(RANK[w.effective], shape(w, max_node_gpus)[1], *request)
        what = ", ".join(part for part in (f"{req.cpus} CPUs" if req.cpus > 0 else "",
                                           f"{req.mb} MiB" if req.mb > 0 else "") if part)
        for room in _rooms(snap, holders, where).values():
            why = _short(room, req, closed)
            if why is not None:
                groups.setdefault(f"{why} ({what} per node)", []).append(room.name)
        for name in sorted(after_victims.get(w.job_id, frozenset()) & where):
            groups.setdefault(f"the victims that free its GPUs there would not free the room "
                              f"it asks ({what} per node)", []).append(name)
    if w.job_id not in wholes:
        limit = ("none" if job.time_limit is None or job.time_limit == INFINITE
                 else format_duration(60 * job.time_limit))
        for start, name, nodes in reaches(job, ahead, snap.time):
            when = (f"starts in {format_duration(start - snap.time)}" if start > snap.time
                    else "has started")
            groups.setdefault(f"reservation {name} {when}, before its time limit ({limit}) "
                              "would end", []).extend(nodes & where)
    return [f"{compress_hostlist(sorted(set(names)))}: {why}"
            for why, names in groups.items() if names]


def whole_node_late(job: Job, ahead: Ahead, now: float) -> frozenset[str]:
    """The nodes a job taking whole nodes may not get for a reservation (:func:`reaches`)."""
    return frozenset(n for r in reaches(job, ahead, now) for n in r[2])

