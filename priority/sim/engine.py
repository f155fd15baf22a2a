"""The event loop: arrivals, ends, preemptions and policy cycles on a simulated clock.

Time is integer seconds (``t0`` + trace time), so a run is exact and the same inputs give the
same result. At each instant the events due are handled (ends first, then preemption steps, then
arrivals, then wake-ups), the simulated Slurm schedules (as Slurm does on job submit and end),
and the policy gets :meth:`Policy.on_step`. Policies with a cycle (the daemon's interval) get
:meth:`Policy.on_cycle` at multiples of it while jobs are pending; with nothing pending a cycle
could change nothing that matters, so none is simulated.

A preempted job (:meth:`Engine.preempt`) keeps its GPUs for ``delay`` seconds (the plan's slowest
victim: :meth:`Engine.victim_wait`), then is requeued through the Slurm interface and may start
again after the requeue delay. What it keeps of its progress is decided by the policy's mode:
``checkpoint`` keeps everything up to the signal for a job that saves on request
(``TraceJob.saves``), ``kill`` (or a job that cannot save) only what the last periodic
checkpoint saved. GPU time lost is, per job, GPU-seconds held minus GPU-seconds of useful work.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Protocol

from hai_slurm.conf.topology import Topology
from hai_slurm.priority.planner.placement import group_capacity
from hai_slurm.priority.sim.costs import CostModel
from hai_slurm.priority.sim.slurm import SimSlurm
from hai_slurm.priority.sim.trace import Trace, TraceJob
from hai_slurm.slurm_plugins.types import JobState

#: Simulated POSIX time of trace second 0 (any fixed value works; this one is 2023-11-14).
T0 = 1_700_000_000


class Mode(StrEnum):
    """How a policy preempts: ask for a checkpoint, or kill after a grace time."""

    CHECKPOINT = "checkpoint"
    KILL = "kill"


class Kind(IntEnum):
    """Event kinds, in the order they are handled at one instant."""

    FINISH = 0
    PREEMPT = 1
    ARRIVAL = 2
    WAKE = 3
    CYCLE = 4


@dataclass(slots=True)
class SimJob:
    """One trace job as it goes through the simulation (mutable, engine-owned)."""

    trace: TraceJob
    nodes: int
    per_node: int
    slurm_id: int = 0
    remaining: int = 0
    run_start: int | None = None
    overhead: int = 0
    token: int = 0
    first_start: int | None = None
    end: int | None = None
    held_gpu_s: int = 0
    preemptions: int = 0
    signalled: int | None = None
    last_checkpoint: int | None = None
    levels: list[int] = field(default_factory=list)
    kept: list[tuple[int, int, int]] = field(default_factory=list)
    """Per ended run: (start, restart overhead, seconds of its progress kept): a run makes
    progress from start + overhead on, and the first ``kept`` seconds of it count."""

    @property
    def gpus(self) -> int:
        """GPUs the job holds when running."""
        return self.nodes * self.per_node

    def progress(self, now: int) -> int:
        """Seconds of useful work done in the current run up to ``now``."""
        if self.run_start is None:
            return 0
        return max(0, min(self.remaining, now - self.run_start - self.overhead))


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preemption: who lost the GPUs, for whom, when."""

    time: int
    victim: int
    beneficiary: int | None
    victim_team: str
    beneficiary_team: str


class Policy(Protocol):
    """A scheduling policy: priorities, optional cycles, optional preemption."""

    name: str
    mode: Mode
    cycle: int | None

    def attach(self, engine: Engine) -> None:
        """Called once before the run."""
        ...

    def submit_args(self, job: SimJob) -> dict[str, str | int]:
        """Extra ``submit_gpus`` arguments for a job (priority, admin_comment, qos)."""
        ...

    def on_step(self, now: int) -> None:
        """After Slurm scheduled at an instant where something happened."""
        ...

    def on_cycle(self, now: int) -> None:
        """One policy cycle (only for policies with a ``cycle``)."""
        ...


class Engine:
    """Runs one trace through one policy (see the module docstring)."""

    def __init__(self, trace: Trace, topology: Topology, policy: Policy, *,
                 costs: CostModel | None = None, backfill: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.trace, self.policy = trace, policy
        self.costs = costs = costs or CostModel()
        self.slurm = SimSlurm(topology, now=T0, requeue_delay=costs.requeue_delay,
                              backfill=backfill)
        self.now = T0
        self.jobs: dict[int, SimJob] = {}          # by trace id
        self.by_slurm: dict[int, SimJob] = {}
        self.preemptions: list[Preemption] = []
        self.allocation: list[tuple[int, int]] = [(T0, 0)]
        self.events_handled = 0
        self.cycles = 0
        self.rejected: list[TraceJob] = []
        self._heap: list[tuple[int, int, int, int, int]] = []
        self._seq = 0
        self._cycle_at: int | None = None
        self._wakes: set[int] = set()
        self._done = 0
        self._progress = progress

    # -- events --------------------------------------------------------------------------------
    def push(self, time: int, kind: Kind, a: int = 0, b: int = 0) -> None:
        """Queue an event (``a``/``b``: job ids or tokens, by kind)."""
        self._seq += 1
        heapq.heappush(self._heap, (time, int(kind), self._seq, a, b))

    def wake(self, time: int) -> None:
        """Make sure the policy gets an :meth:`Policy.on_step` at ``time``."""
        at = max(time, self.now)
        if at not in self._wakes:
            self._wakes.add(at)
            self.push(at, Kind.WAKE)

    def run(self) -> Engine:
        """Run until every job ended (or can never start); returns self."""
        self.policy.attach(self)
        for job in self.trace.jobs:
            nodes, per = _shape(job.gpus, job.nodes, self.slurm.view.max_node_gpus)
            if nodes == 0 or group_capacity(self.slurm.view, per, cross_leaf=True) < nodes:
                self.rejected.append(job)
                continue
            self.jobs[job.job_id] = SimJob(job, nodes, per, remaining=job.duration)
            self.push(T0 + job.submit, Kind.ARRIVAL, job.job_id)
        total = len(self.jobs)
        while self._heap:
            now = self._heap[0][0]
            self.slurm.advance(now)
            self.now = now
            cycle = False
            while self._heap and self._heap[0][0] == now:
                _, kind, _, a, b = heapq.heappop(self._heap)
                self.events_handled += 1
                if kind == Kind.FINISH:
                    self._finish(a, b)
                elif kind == Kind.PREEMPT:
                    self._requeue(a, b)
                elif kind == Kind.ARRIVAL:
                    self._arrive(a)
                elif kind == Kind.CYCLE:
                    cycle = True
            self._wakes.discard(now)
            if cycle:
                self._cycle_at = None
                self.cycles += 1
                self.policy.on_cycle(now)
                self.slurm.writes.clear()
            self._schedule(now)
            self.policy.on_step(now)
            self._schedule(now)
            self._next_cycle(now)
            if self._progress is not None:
                self._progress(self._done, total)
        return self

    def _next_cycle(self, now: int) -> None:
        interval = self.policy.cycle
        if interval is None or self._cycle_at is not None or not self.slurm.pending_ids():
            return
        tick = now - (now - T0) % interval + interval
        self._cycle_at = tick
        self.push(tick, Kind.CYCLE)

    # -- handlers ------------------------------------------------------------------------------
    def _arrive(self, trace_id: int) -> None:
        job = self.jobs[trace_id]
        t = job.trace
        args = self.policy.submit_args(job)
        jid = self.slurm.submit_gpus(gpus=job.gpus, nodes=job.nodes, name=f"t{t.job_id}",
                                     user=t.user or t.team, account=t.team, **args)  # type: ignore[arg-type]
        job.slurm_id = jid
        self.by_slurm[jid] = job

    def _schedule(self, now: int) -> None:
        started = self.slurm.schedule(now)
        for jid in started:
            job = self.by_slurm[jid]
            job.run_start = now
            job.overhead = self.costs.restart_time(job.nodes) if job.preemptions else 0
            job.token += 1
            job.signalled = None
            if job.first_start is None:
                job.first_start = now
            job.levels.append(self._level(jid))
            self.push(now + job.overhead + job.remaining, Kind.FINISH, jid, job.token)
        if started or self.allocation[-1][1] != self.slurm.used_gpus:
            self._sample(now)

    def _sample(self, now: int) -> None:
        used = self.slurm.used_gpus
        if self.allocation[-1][0] == now:
            self.allocation[-1] = (now, used)
        elif self.allocation[-1][1] != used:
            self.allocation.append((now, used))

    def _level(self, jid: int) -> int:
        view = self.slurm.view
        masks = self.slurm.placed[jid]
        if len(masks) > 1:
            groups = {view.nodes[n].group for n, _ in masks}
            return 4 if len(groups) == 1 else 5
        node, mask = masks[0]
        return min(int(c.level) for c in view.nodes[node].cells if c.mask & mask == mask)

    def _stop_run(self, job: SimJob, now: int) -> None:
        assert job.run_start is not None
        job.held_gpu_s += (now - job.run_start) * job.gpus
        job.run_start = None

    def _finish(self, jid: int, token: int) -> None:
        job = self.by_slurm[jid]
        if job.token != token or job.run_start is None:
            return  # that run was preempted
        job.kept.append((job.run_start, job.overhead, job.remaining))
        self._stop_run(job, self.now)
        job.remaining, job.end = 0, self.now
        self.slurm.finish(jid, JobState.COMPLETED)
        self._done += 1

    def preempt(self, victims: tuple[int, ...], beneficiary: int | None, *,
                nodes: tuple[str, ...] = (), delay: int | None = None,
                guard_for: int | None = None) -> None:
        """Signal ``victims`` (Slurm ids) now; requeue them after their checkpoint/grace time.

        The beneficiary is pinned to ``nodes``; with ``guard_for`` the nodes are guarded for it
        (closed to lower classes) until ``guard_for`` s after the requeue
        (:meth:`~hai_slurm.priority.sim.slurm.SimSlurm.pin`)."""
        ben = self.by_slurm.get(beneficiary) if beneficiary is not None else None
        if ben is not None and nodes:
            until = None if guard_for is None else self.now + (delay or 0) + guard_for
            self.slurm.pin(ben.slurm_id, nodes, guard_until=until)
        for vid in victims:
            job = self.by_slurm[vid]
            if job.run_start is None or job.signalled is not None:
                continue
            job.signalled = self.now
            self.slurm.signal(vid, "USR2" if self.policy.mode is Mode.CHECKPOINT else "TERM")
            wait = delay if delay is not None else self.victim_wait(job)
            self.preemptions.append(Preemption(
                self.now, job.trace.job_id, ben.trace.job_id if ben else None, job.trace.team,
                ben.trace.team if ben else ""))
            self.push(self.now + wait, Kind.PREEMPT, vid, job.token)
        self.slurm.signals.clear()

    def _requeue(self, jid: int, token: int) -> None:
        job = self.by_slurm[jid]
        if job.token != token or job.run_start is None or job.signalled is None:
            return  # it ended before the checkpoint/grace time was over
        if self.policy.mode is Mode.CHECKPOINT and job.trace.saves:
            kept = job.progress(job.signalled)
            job.last_checkpoint = job.signalled
        else:
            kept = self.costs.saved_by_periodic(job.progress(self.now))
        job.kept.append((job.run_start, job.overhead, kept))
        self._stop_run(job, self.now)
        job.remaining -= kept
        job.preemptions += 1
        job.token += 1
        self.slurm.requeue(jid)
        self.push(self.now + self.costs.requeue_delay, Kind.WAKE)

    # -- for policies --------------------------------------------------------------------------
    def victim_wait(self, job: SimJob) -> int:
        """Seconds ``job`` keeps its GPUs once asked to give way: Slurm's GraceTime under a
        policy that kills, its checkpoint time when it saves on request, else
        ``CostModel.no_save_stop`` (the request ends it, and it is requeued)."""
        costs = self.costs
        if self.policy.mode is Mode.KILL:
            return costs.grace_time
        return costs.checkpoint_time(job.gpus) if job.trace.saves else costs.no_save_stop

    def periodic_checkpoint(self, job: SimJob, now: int) -> int | None:
        """When the running ``job`` last saved: a periodic checkpoint or an asked-for one."""
        if job.run_start is None:
            return job.last_checkpoint
        saved = self.costs.saved_by_periodic(job.progress(now))
        at = job.run_start + job.overhead + saved if saved else None
        last = job.last_checkpoint
        if last is not None and (at is None or last > at):
            return last
        return at

    def checkpoint_until(self, job: SimJob, now: int) -> float:
        """Until when :meth:`periodic_checkpoint` of ``job`` keeps its value at ``now``: the
        next periodic save of its current run (infinite: none comes before the run ends).
        Its value changes only there, or when the job starts or is requeued (then it runs
        anew or not at all)."""
        interval = self.costs.checkpoint_interval
        if job.run_start is None or interval <= 0:
            return math.inf
        following = self.costs.saved_by_periodic(job.progress(now)) + interval
        if following > job.remaining:
            return math.inf   # progress stops at remaining: no further save
        return job.run_start + job.overhead + following


def rounded_up(jobs: Iterable[TraceJob], max_node: int) -> int:
    """How many ``jobs`` run with more GPUs than they asked: spread over several nodes, a job
    gets the same count on each (``nodes x ceil(gpus / nodes)``, as the planner and SimSlurm
    place jobs), so 9 GPUs on 2 nodes run as 2 x 5."""
    return sum(1 for j in jobs if (s := _shape(j.gpus, j.nodes, max_node))[0]
               and s[0] * s[1] != j.gpus)


def _shape(gpus: int, nodes: int, max_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) of a job; 0 nodes means as few as hold it."""
    if max_node <= 0:
        return 0, 0
    if nodes <= 0:
        nodes = -(-gpus // max_node)
    return nodes, -(-gpus // nodes)
