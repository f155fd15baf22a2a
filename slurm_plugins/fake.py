"""FakeSlurm: an in-memory, deterministic Slurm behind the same SlurmClient interface.

For unit tests and the simulator. Time only moves when the caller says so (``now`` arguments),
so runs are reproducible. It models what the daemon relies on, as measured on Slurm 22.05:

* pending jobs start in priority order (ties: earlier submit, then lower id) when
  :meth:`FakeSlurm.schedule` is called; without ``backfill`` the first job that does not fit
  blocks the ones behind it in its partition, as Slurm's main scheduler does;
* ``requeue`` frees the job's nodes, puts it back to PENDING with ``restart_count + 1``, resets
  its submit time to "now" and makes it eligible again after ``requeue_delay`` seconds
  (Slurm: ``cred_expire`` + 1);
* a priority change on a held job is refused (it would release it), hold sets priority 0;
* ids never submitted are "gone"; finished jobs stay known (like ``MinJobAge``);
* reservations are enforced by :meth:`FakeSlurm.schedule`: while one is active, only jobs
  linked to it start on its nodes, and a linked job starts only on its nodes (``FLEX``: or on
  nodes no reservation holds); before one starts (an admin's,
  :meth:`FakeSlurm.admin_reservation`) a job not linked to it starts on its nodes only if its
  time limit ends by then (none: never), as 22.05 does (measured: ``ReqNodeNotAvail``, which
  holds up no job behind it); ones that overlap in nodes and time are refused; ``delete`` is
  refused while a job runs in one or waits for it; one that ends unlinks its jobs, which go on
  running (``FLEX``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from operator import attrgetter

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import INFINITE, SlurmVersion
from hai_slurm.slurm_plugins.constraints import node_filter
from hai_slurm.slurm_plugins.hostlist import compress_hostlist, expand_hostlist
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobIds,
    JobState,
    Node,
    Partition,
    PendingBrief,
    Qos,
    Reservation,
    SignalTarget,
    Skipped,
    SkipReason,
    SwitchInfo,
    job_id_tuple,
)

DEFAULT_VERSION = SlurmVersion(22, 5, 8)
NODE_RESERVATION_NAMED = SlurmVersion(24, 11)
"""From this release on a node's JSON names its active reservation (:attr:`Node.reservation`;
recorded on 24.11 and 26.05); the fake names it from there too."""
"""The release FakeSlurm pretends to be unless told otherwise."""


@lru_cache(maxsize=4096)
def _hostlist(nodes: tuple[str, ...]) -> str:
    """compress_hostlist, remembered: a snapshot lists every running job's nodes, and a
    simulated cluster's snapshots repeat the same few thousand lists."""
    return compress_hostlist(nodes)

@dataclass(frozen=True, slots=True)
class FakeNode:
    """A node of the fake cluster."""

    name: str
    gpus: int = 8
    cpus: int = 16
    memory_mb: int = 16000
    partitions: tuple[str, ...] = ("main",)
    state: str = "IDLE"
    registered: bool = True
    """False: slurmctld (restarted) has not heard from this node yet (``BootTime=None``)."""
    features: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A signal the fake delivered."""

    job_id: int
    signal: str
    target: SignalTarget
    time: int


@dataclass(slots=True)
class _FakeJob:
    job_id: int
    changes: set[int] | None = field(compare=False, repr=False)
    """The owning fake's ids of jobs written since its last snapshot: any field written adds
    this job's (see :meth:`FakeSlurm.snapshot`). Second, so that ``__init__`` (and a copy)
    sets it before the fields after it look for it."""
    name: str
    user: str
    uid: int
    account: str
    partition: str
    qos: str
    node_count: int
    gpus_per_node: int
    cpus_per_node: int
    time_limit: int | None
    requeue: bool
    comment: str
    admin_comment: str
    submit_time: int
    eligible_time: int
    priority: int
    state: JobState = JobState.PENDING
    reason: str = "Priority"
    held: bool = False
    batch: bool = True
    """False: an interactive job (``srun``/``salloc``), which Slurm never requeues (a test sets
    it on the job: ``submit`` queues batch jobs)."""
    start_time: int | None = None
    nodes: tuple[str, ...] = ()
    restart_count: int = 0
    flags: tuple[str, ...] = field(default=())
    memory_per_node: int = 0
    req_nodes: str = ""
    switches: int = 0
    switch_wait: int = 0
    reservation: str = ""
    exc_nodes: str = ""
    features: str = ""
    exclusive: str = ""

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        changes = getattr(self, "changes", None)   # not set yet when job_id is
        if changes is not None:
            changes.add(self.job_id)


_fields_of = attrgetter(*(f.name for f in fields(_FakeJob) if f.name != "changes"))
_LISTED = frozenset(s for s in JobState if s.active)
"""The states a snapshot lists (:attr:`JobState.active`)."""
_HOLDING = frozenset((JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING))
"""The states of jobs that hold their nodes' resources."""


def _minus(free: tuple[int, int, int], job: _FakeJob) -> tuple[int, int, int]:
    """A node's free (GPUs, CPUs, MiB) after placing one node's share of ``job``."""
    g, c, m = free
    return g - job.gpus_per_node, c - job.cpus_per_node, m - job.memory_per_node


class FakeSlurm:
    """In-memory SlurmClient with a simple GPU allocator. Not thread-safe; deterministic."""

    def __init__(self, nodes: Sequence[FakeNode] | None = None, *,
                 partitions: Sequence[Partition] | None = None, qos: Sequence[Qos] = (),
                 now: int = 1_700_000_000, version: SlurmVersion = DEFAULT_VERSION,
                 requeue_delay: int = 0, backfill: bool = False,
                 switches: Sequence[SwitchInfo] = ()) -> None:
        self.nodes: dict[str, FakeNode] = {
            n.name: n for n in (nodes or [FakeNode(f"n{i}") for i in range(1, 5)])}
        if partitions is None:
            names = sorted({p for n in self.nodes.values() for p in n.partitions})
            partitions = [Partition(p, tuple(n.name for n in self.nodes.values()
                                             if p in n.partitions), "", "UP", i == 0, 1,
                                    INFINITE, "OFF", 0) for i, p in enumerate(names)]
        self.partitions = tuple(replace(p, node_list=compress_hostlist(p.nodes))
                                for p in partitions)
        self.qos = tuple(qos)
        self.now = now
        self._version = version
        self.requeue_delay = requeue_delay
        self.backfill = backfill
        self._switches = tuple(switches)
        self.jobs: dict[int, _FakeJob] = {}
        self.signals: list[SignalRecord] = []
        self.writes: list[tuple[str, ...]] = []
        """Every write command the fake received, as Slurm's CLI would have been called."""
        self.fail_snapshots = 0
        """Make the next N snapshots raise SlurmError (to test the daemon's skipped cycles)."""
        self.resvs: dict[str, Reservation] = {}
        """Reservations by name (see the module docstring)."""
        self.refuse_reservations: str | None = None
        """When set, ``create_reservation`` raises SlurmError with this message (e.g. a
        Slurm that refuses the reservation)."""
        self._next_id = 1
        self._values: dict[int, tuple[object, Job]] = {}
        """The last Job value of each listed job, with the fields it was made from."""
        self._changed: set[int] = set()
        """Ids of the jobs submitted or written since the last snapshot (each job adds its
        own: ``_FakeJob.changes``)."""
        self._listed: dict[int, Job] = {}
        """The Job value of each job the last snapshot listed (an active one)."""
        self._listing: tuple[Job, ...] | None = None
        """The last snapshot's jobs, in job id order (None: to be made again)."""
        self._kept_free: tuple[tuple[Job, ...], tuple[FakeNode, ...],
                               dict[str, tuple[int, int, int]]] | None = None
        """The last snapshot's jobs and nodes, and the free resources per node under them."""
        self._bound = 0
        """How many of :attr:`jobs` are bound to ``_changed`` (all of them, unless a job was
        put there by hand)."""
        self._node_values: dict[str, tuple[FakeNode, int, int, int, str, Node]] = {}
        """The last Node value of each node, with the node, its free GPUs, CPUs and MiB and
        its reserved flag it was made from (a snapshot lists every node; most did not change
        since the last one)."""

    # -- driving the fake -------------------------------------------------------------------
    def submit(self, *, name: str = "job", user: str = "alice", uid: int = 1000,
               account: str = "", partition: str = "", qos: str = "normal", nodes: int = 1,
               gpus_per_node: int = 0, cpus_per_node: int = 1, time_limit: int | None = None,
               requeue: bool = True, comment: str = "", admin_comment: str = "",
               priority: int = 1, hold: bool = False, begin_time: int | None = None,
               now: int | None = None, memory_per_node_mb: int = 0, switches: int = 0,
               switch_wait: int = 300, nodelist: str = "", exclude: str = "",
               constraint: str = "", exclusive: str = "") -> int:
        """Queue a batch job and return its id (``begin_time`` like ``sbatch --begin``).

        ``memory_per_node_mb`` is ``sbatch --mem`` (0: none, as on a cluster where memory is not
        a consumable resource); like GPUs and CPUs it must fit on each node the job gets.
        ``nodelist``, ``exclude`` and ``constraint`` are sbatch's ``-w``, ``-x`` and ``-C``;
        ``exclusive`` is :attr:`Job.exclusive` (``"node"`` for ``--exclusive``): such a job
        starts only on nodes no job runs on and holds all of their GPUs, CPUs and memory, as
        Slurm 22.05 gives it (``user``, ``mcs`` and ``topo`` are modelled as ``node``).
        """
        part = partition or next(p.name for p in self.partitions if p.default)
        if part not in {p.name for p in self.partitions}:
            raise SlurmError(f"sbatch: error: invalid partition specified: {part}")
        for listed in (nodelist, exclude):
            unknown = sorted(set(expand_hostlist(listed)) - set(self.nodes))
            if unknown:
                raise SlurmError(f"sbatch: error: invalid node name specified: {unknown[0]}")
        if constraint and node_filter(constraint) is not None and not any(
                _allows(constraint, n) for n in self.nodes.values()):
            raise SlurmError("sbatch: error: Batch job submission failed: Invalid feature "
                             "specification")
        nodes = max(nodes, len(expand_hostlist(nodelist)))   # every listed node, at least
        t = self.now if now is None else now
        jid = self._next_id
        self._next_id += 1
        self.jobs[jid] = _FakeJob(jid, None, name, user, uid, account, part, qos, nodes,
                                  gpus_per_node, cpus_per_node, time_limit, requeue, comment,
                                  admin_comment, t, max(t, begin_time or t),
                                  0 if hold else priority, held=hold,
                                  reason="JobHeldUser" if hold else
                                  "BeginTime" if (begin_time or t) > t else "Priority",
                                  memory_per_node=memory_per_node_mb, switches=switches,
                                  switch_wait=switch_wait, req_nodes=nodelist,
                                  exc_nodes=exclude, features=constraint, exclusive=exclusive)
        self.jobs[jid].changes = self._changed   # adds jid: listed by the next snapshot
        self._bound += 1
        return jid

    def advance(self, now: int) -> None:
        """Move the fake clock (never backwards)."""
        if now < self.now:
            raise ValueError(f"time cannot go back: now={self.now}, asked {now}")
        self.now = now

    def _free(self, jobs: Iterable[_FakeJob] | None = None) -> dict[str, tuple[int, int, int]]:
        """Each usable node's free (GPUs, CPUs, MiB) under the jobs that hold nodes; ``jobs``:
        a subset of :attr:`jobs` that holds every such job (None: all of them)."""
        free = {n.name: (n.gpus, n.cpus, n.memory_mb) for n in self.nodes.values()
                if n.state not in ("DOWN", "DRAIN")}
        for j in self.jobs.values() if jobs is None else jobs:
            if j.state in _HOLDING:
                # _minus inlined: every snapshot walks every running job's nodes
                per_g, per_c, per_m = j.gpus_per_node, j.cpus_per_node, j.memory_per_node
                for n in j.nodes:
                    have = free.get(n)
                    if have is not None:
                        free[n] = (0, 0, 0) if j.exclusive else (
                            have[0] - per_g, have[1] - per_c, have[2] - per_m)
        return free

    def schedule(self, now: int | None = None) -> tuple[int, ...]:
        """Start pending jobs in priority order where they fit; return the started ids."""
        if now is not None:
            self.advance(now)
        self._purge_reservations()
        free = self._free()
        reserved = self._reserved()
        # nodes of reservations not started yet: (start, its name) per node
        ahead = [(r.start_time, r.name, frozenset(r.nodes)) for r in self.resvs.values()
                 if r.start_time is not None and r.start_time > self.now]
        started: list[int] = []
        blocked: set[str] = set()
        queue = sorted((j for j in self.jobs.values() if j.state is JobState.PENDING),
                       key=lambda j: (-j.priority, j.submit_time, j.job_id))
        for j in queue:
            if j.held or j.priority == 0 or j.partition in blocked:
                continue
            if j.eligible_time > self.now:
                j.reason = "BeginTime"
                continue
            part = next(p for p in self.partitions if p.name == j.partition)
            resv = self.resvs.get(j.reservation) if j.reservation else None
            fits = [n for n in part.nodes if n in free and min(_minus(free[n], j)) >= 0
                    and (not j.exclusive or free[n] == self._whole(n))
                    and (reserved.get(n) == j.reservation if resv is not None and
                         "FLEX" not in resv.flags else reserved.get(n) in (None, j.reservation))
                    and self._may_use(j, n)]
            must = expand_hostlist(j.req_nodes)
            if must:   # every listed node, then others
                fits = [*must, *(n for n in fits if n not in must)] if set(must) <= set(fits) \
                    else []
            kept_off = False
            if ahead:   # a job ending after a reservation starts does not start on its nodes
                ends = (self.now + 60 * j.time_limit if j.time_limit is not None
                        and j.time_limit != INFINITE else None)
                late = {n for start, name, nodes in ahead if name != j.reservation
                        and (ends is None or ends > start) for n in nodes}
                kept = [n for n in fits if n not in late]
                if must and not set(must) <= set(kept):
                    kept = []
                kept_off = len(kept) < j.node_count <= len(fits)
                fits = kept
            if len(fits) < j.node_count and kept_off:   # does not hold up the jobs behind
                j.reason = "ReqNodeNotAvail, May be reserved for other job"   # as 22.05
                continue
            if len(fits) < j.node_count:
                j.reason = "Resources" if j.partition not in blocked else "Priority"
                if not self.backfill:
                    blocked.add(j.partition)
                continue
            j.nodes = tuple(fits[: j.node_count])
            for n in j.nodes:
                free[n] = (0, 0, 0) if j.exclusive else _minus(free[n], j)
            j.state, j.reason, j.start_time = JobState.RUNNING, "None", self.now
            started.append(j.job_id)
        return tuple(started)

    def _whole(self, node: str) -> tuple[int, int, int]:
        """A node's (GPUs, CPUs, MiB): what is free when no job runs there."""
        n = self.nodes[node]
        return (n.gpus, n.cpus, n.memory_mb)

    def _may_use(self, j: _FakeJob, node: str) -> bool:
        """Whether ``node`` is outside the job's ``--exclude`` and has its ``--constraint``."""
        return node not in expand_hostlist(j.exc_nodes) and _allows(j.features, self.nodes[node])

    def finish(self, job_id: int, state: JobState = JobState.COMPLETED) -> None:
        """End a running job (its program exited) with a terminal ``state``."""
        if state.active:
            raise ValueError(f"finish needs a terminal state, got {state.value}")
        self.jobs[job_id].state = state

    # -- SlurmClient --------------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        """The release the fake pretends to be."""
        return self._version

    def _job_value(self, j: _FakeJob) -> Job:
        """The job as Slurm shows it; the same Job object as last time while none of its
        fields changed, as the CLI and pyslurm backends give (an unchanged line or record
        gives the same Job), so the daemon's per-job work is done once per change here too."""
        key = _fields_of(j)
        last = self._values.get(j.job_id)
        if last is not None and last[0] == key:
            return last[1]
        value = self._new_job_value(j)
        self._values[j.job_id] = (key, value)
        return value

    def _new_job_value(self, j: _FakeJob) -> Job:
        running = j.state is not JobState.PENDING
        return Job(
            job_id=j.job_id, name=j.name, user=j.user, uid=j.uid, account=j.account,
            partition=j.partition, qos=j.qos, state=j.state, state_flags=j.flags,
            reason=j.reason, priority=j.priority, submit_time=j.submit_time,
            eligible_time=j.eligible_time, start_time=j.start_time if running else None,
            time_limit=j.time_limit, node_count=j.node_count,
            nodes=j.nodes if running else (),
            node_list=_hostlist(j.nodes) if running else "",
            gpus_requested=j.gpus_per_node * j.node_count,
            gpus_per_node=({n: self.nodes[n].gpus if j.exclusive and n in self.nodes
                            else j.gpus_per_node for n in j.nodes} if running else {}),
            restart_count=j.restart_count, requeue=j.requeue, comment=j.comment,
            admin_comment=j.admin_comment, batch=j.batch, held=j.held,
            cpus=(sum(self.nodes[n].cpus for n in j.nodes if n in self.nodes)
                  if j.exclusive and running else j.cpus_per_node * j.node_count),
            memory_mb=(sum(self.nodes[n].memory_mb for n in j.nodes if n in self.nodes)
                       if j.exclusive and running else j.memory_per_node * j.node_count),
            switches=j.switches, switch_wait=j.switch_wait if j.switches else 0,
            required_nodes=j.req_nodes, excluded_nodes=j.exc_nodes, features=j.features,
            exclusive=j.exclusive, reservation=j.reservation)

    def snapshot(self) -> ClusterSnapshot:
        """The current state, stamped with the fake clock."""
        if self.fail_snapshots > 0:
            self.fail_snapshots -= 1
            raise SlurmError("squeue --json failed (exit 1): slurm_load_jobs error: Unable to "
                             "contact slurm controller (connect failure)",
                             command=["squeue", "--json"], returncode=1)
        # The active jobs only (a long run keeps every finished job), in job id order; only
        # the jobs written since the last snapshot are looked at again.
        current = self._listed
        all_jobs = self.jobs
        if len(all_jobs) != self._bound:   # a job put in jobs by hand, not by submit()
            for unbound in all_jobs.values():
                if unbound.changes is not self._changed:
                    unbound.changes = self._changed   # adds its id
            self._bound = len(all_jobs)
        if self._changed:
            for jid in self._changed:
                j = all_jobs.get(jid)
                if j is None or j.state not in _LISTED:
                    if current.pop(jid, None) is not None:
                        self._listing = None
                    self._values.pop(jid, None)
                    continue
                value = self._job_value(j)
                if current.get(jid) is not value:
                    current[jid] = value
                    self._listing = None
            self._changed.clear()
        jobs = self._listing
        if jobs is None:
            jobs = self._listing = tuple(current[k] for k in sorted(current))
        fake_nodes = tuple(self.nodes.values())
        kept = self._kept_free
        if kept is not None and kept[0] is jobs and kept[1] == fake_nodes:
            free = kept[2]   # the same jobs' values and nodes: the same free resources
        else:
            free = self._free(map(self.jobs.__getitem__, current))
            self._kept_free = (jobs, fake_nodes, free)
        self._purge_reservations()
        reserved = self._reserved()
        nodes = []
        last_nodes = self._node_values
        for n in fake_nodes:
            g, c, m = free.get(n.name, (n.gpus, n.cpus, n.memory_mb))
            resv = reserved.get(n.name, "")
            last = last_nodes.get(n.name)
            if (last is not None and last[0] is n and last[1] == g and last[2] == c
                    and last[3] == m and last[4] == resv):
                nodes.append(last[5])  # the same node, usage and flag: the same value
                continue
            used_c = n.cpus - c
            state = n.state if n.state != "IDLE" else (
                "IDLE" if used_c == 0 and g == n.gpus else
                "ALLOCATED" if c == 0 else "MIXED")
            flags = ("RESERVED",) if resv else ()  # as sinfo shows it
            node = Node(n.name, state, flags, n.cpus, used_c, n.memory_mb,
                        n.memory_mb - m, n.gpus, n.gpus - g, n.partitions,
                        registered=n.registered, features=n.features,
                        reservation=resv if self._version >= NODE_RESERVATION_NAMED else "")
            last_nodes[n.name] = (n, g, c, m, resv, node)
            nodes.append(node)
        return ClusterSnapshot(time=self.now, version=self._version, jobs=jobs,
                               nodes=tuple(nodes), partitions=self.partitions, qos=self.qos)

    def _each(self, job_ids: JobIds, command: tuple[str, ...], *, need_running: bool = False,
              finished_reason: SkipReason = SkipReason.FINISHED
              ) -> tuple[list[_FakeJob], list[Skipped]]:
        ids = job_id_tuple(job_ids)
        self.writes.append((*command, ",".join(map(str, ids))))
        todo: list[_FakeJob] = []
        skipped: list[Skipped] = []
        for jid in ids:
            j = self.jobs.get(jid)
            if j is None:
                skipped.append(Skipped(jid, SkipReason.GONE, "Invalid job id specified"))
            elif not j.state.active or j.state is JobState.COMPLETING:
                skipped.append(Skipped(jid, finished_reason,
                                       "Job/step already completing or completed"))
            elif need_running and j.state is JobState.PENDING:
                skipped.append(Skipped(jid, SkipReason.PENDING, "Job is pending execution"))
            else:
                todo.append(j)
        return todo, skipped

    @staticmethod
    def _result(todo: list[_FakeJob], skipped: list[Skipped]) -> ActionResult:
        return ActionResult(tuple(j.job_id for j in todo), tuple(skipped), 1)

    def set_priority(self, job_id: int, value: int) -> ActionResult:
        """Set one job's priority."""
        return self.set_priorities({job_id: value})

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        """Set priorities, one write per distinct value (as the CLI backend does)."""
        by_value: dict[int, list[int]] = {}
        for jid, value in priorities.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 2:
                raise ValueError(f"priority for job {jid} must be an integer in "
                                 f"[0, 4294967293], got {value!r}")
            by_value.setdefault(value, []).append(jid)
        result = ActionResult()
        for value in sorted(by_value):
            todo, skipped = self._each(by_value[value], ("scontrol", "update", f"Priority={value}"))
            done = []
            for j in todo:
                if j.held:
                    skipped.append(Skipped(j.job_id, SkipReason.HELD,
                                           "Job is in held state, pending scheduler release"))
                else:
                    j.priority = value
                    done.append(j)
            result = result.merged(self._result(done, skipped))
        return result

    def signal(self, job_ids: JobIds, signal: str = "USR2", *,
               target: SignalTarget = SignalTarget.FULL) -> ActionResult:
        """Record the signal for each running job; the fake's jobs do not react to it (they
        have no steps: ``WORKLOAD`` is recorded as it was asked)."""
        todo, skipped = self._each(job_ids, ("scancel", f"--signal={signal}", target.value),
                                   need_running=True)
        for j in todo:
            self.signals.append(SignalRecord(j.job_id, signal, target, self.now))
        return self._result(todo, skipped)

    def _requeue(self, job_ids: JobIds, verb: str, hold: bool) -> ActionResult:
        todo, skipped = self._each(job_ids, ("scontrol", verb), need_running=True)
        done = []
        for j in todo:
            if not j.requeue:
                raise SlurmError(f"scontrol {verb} failed: job {j.job_id}: Requested operation "
                                 "is presently disabled", command=["scontrol", verb,
                                                                   str(j.job_id)])
            j.state, j.nodes, j.start_time = JobState.PENDING, (), None
            j.restart_count += 1
            j.submit_time = self.now
            j.eligible_time = self.now + self.requeue_delay
            j.reason = "BeginTime" if self.requeue_delay else "Priority"
            if hold:
                j.held, j.priority, j.reason = True, 0, "job requeued in held state"
            done.append(j)
        return self._result(done, skipped)

    def requeue(self, job_ids: JobIds) -> ActionResult:
        """Running jobs back to PENDING, restart count + 1, submit time reset."""
        return self._requeue(job_ids, "requeue", hold=False)

    def requeue_hold(self, job_ids: JobIds) -> ActionResult:
        """Requeue and hold."""
        return self._requeue(job_ids, "requeuehold", hold=True)

    def hold(self, job_ids: JobIds) -> ActionResult:
        """Admin hold: priority 0 (a running job keeps running)."""
        todo, skipped = self._each(job_ids, ("scontrol", "hold"))
        for j in todo:
            j.held, j.priority = True, 0
            if j.state is JobState.PENDING:
                j.reason = "JobHeldAdmin"
        return self._result(todo, skipped)

    def release(self, job_ids: JobIds) -> ActionResult:
        """Release held jobs, and pending jobs Slurm gave priority 0 itself (a deleted
        reservation's): priority back to 1, as a fresh multifactor value."""
        todo, skipped = self._each(job_ids, ("scontrol", "release"))
        for j in todo:
            if j.held or (j.state is JobState.PENDING and j.priority == 0):
                j.held, j.priority = False, 1
                if j.state is JobState.PENDING:
                    j.reason = "Priority"
        return self._result(todo, skipped)

    def set_admin_comment(self, job_id: int, text: str) -> ActionResult:
        """Replace the admin comment."""
        if "\n" in text or "\0" in text:
            raise ValueError("admin_comment must be a single line without NUL bytes")
        todo, skipped = self._each(job_id, ("scontrol", "update", "AdminComment"))
        for j in todo:
            j.admin_comment = text
        return self._result(todo, skipped)

    def cancel(self, job_ids: JobIds) -> ActionResult:
        """Cancel jobs: they leave the queue and free their nodes."""
        todo, skipped = self._each(job_ids, ("scancel",))
        for j in todo:
            j.state = JobState.CANCELLED
        return self._result(todo, skipped)

    def job_facts(self, job_ids: JobIds) -> dict[int, JobFacts]:
        """Every job the fake knows, finished ones included."""
        out: dict[int, JobFacts] = {}
        for jid in job_id_tuple(job_ids):
            j = self.jobs.get(jid)
            if j is not None:
                out[jid] = JobFacts(jid, j.state, j.restart_count, j.held, j.req_nodes,
                                    j.reservation)
        return out

    def requeue_any(self, job_ids: JobIds, *, hold: bool) -> tuple[int, ...]:
        """Like the CLI backend: running and finished jobs are requeued, pending ones (held);
        forgotten ones, and those Slurm refuses to requeue (``requeue`` off, not ``batch``),
        are left out."""
        ids = job_id_tuple(job_ids)
        self.writes.append(("scontrol", "requeuehold" if hold else "requeue",
                            ",".join(map(str, ids))))
        done = []
        for jid in ids:
            j = self.jobs.get(jid)
            if j is None:
                continue
            if j.state is not JobState.PENDING:
                if not (j.requeue and j.batch):
                    continue
                j.state, j.nodes, j.start_time = JobState.PENDING, (), None
                j.restart_count += 1
                j.submit_time = self.now
                j.eligible_time = self.now + self.requeue_delay
                j.reason = "BeginTime" if self.requeue_delay else "Priority"
            if hold and not j.held:
                j.held, j.priority, j.reason = True, 0, "JobHeldAdmin"
            done.append(jid)
        return tuple(done)

    def split_array_task(self, job_id: int) -> int:
        """``job_id``: the fake has no job arrays, so every pending job is a job of its own."""
        return job_id

    def set_req_nodes(self, job_id: int, nodes: str) -> ActionResult:
        """Pin a pending job (its scheduler starts it on every listed node, then others)."""
        todo, skipped = self._each(job_id, ("scontrol", "update", f"ReqNodeList={nodes}"))
        done = []
        for j in todo:
            if j.state is JobState.PENDING:
                j.req_nodes = nodes
                done.append(j)
            else:
                skipped.append(Skipped(j.job_id, SkipReason.NOT_PENDING,
                                       "Job is no longer pending execution"))
        return self._result(done, skipped)

    def switches(self) -> tuple[SwitchInfo, ...]:
        """The switches given at construction."""
        return self._switches

    # -- the urgent path (issue 16) ---------------------------------------------------------
    def pending_briefs(self) -> tuple[PendingBrief, ...]:
        """The pending jobs in brief, by id."""
        return tuple(PendingBrief(j.job_id, j.user, j.account, j.qos, j.submit_time,
                                  j.restart_count, j.requeue, j.admin_comment)
                     for j in sorted(self.jobs.values(), key=lambda j: j.job_id)
                     if j.state is JobState.PENDING)

    # -- reservations ---------------------------------------------------------------------
    def _purge_reservations(self) -> None:
        """Drop reservations that have ended; their jobs are unlinked (running ones go on)."""
        for r in [r for r in self.resvs.values() if r.end_time is not None
                  and r.end_time <= self.now]:
            del self.resvs[r.name]
            for j in self.jobs.values():
                if j.reservation == r.name:
                    j.reservation = ""

    def _reserved(self) -> dict[str, str]:
        """The name of the active reservation on each node that has one."""
        return {n: r.name for r in self.resvs.values()
                if r.start_time is None or r.start_time <= self.now for n in r.nodes}

    def _overlaps(self, nodes: Iterable[str], start: int, end: int, but: str = "") -> bool:
        """Whether a reservation other than ``but`` holds one of ``nodes`` in [start, end); one
        flagged MAINT or OVERLAP may be overlapped (Slurm's ``_resv_overlap`` skips them)."""
        wanted = set(nodes)
        return any(wanted & set(r.nodes)
                   and (r.start_time if r.start_time is not None else self.now) < end
                   and (r.end_time is None or start < r.end_time)
                   for r in self.resvs.values()
                   if r.name != but and not {"MAINT", "OVERLAP"} & set(r.flags))

    def admin_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str], *,
                          start: int, minutes: int, flags: tuple[str, ...] = ("MAINT",)) -> None:
        """An admin's reservation from ``start`` for ``minutes`` (``scontrol create reservation
        StartTime=... Flags=MAINT``), refused on an overlap as :meth:`create_reservation` is
        unless flagged MAINT or OVERLAP."""
        node_list, user_list = tuple(nodes), tuple(users)
        self._purge_reservations()
        if (name in self.resvs or any(n not in self.nodes for n in node_list)
                or (not {"MAINT", "OVERLAP"} & set(flags)
                    and self._overlaps(node_list, start, start + 60 * minutes))):
            raise SlurmError(f"scontrol create reservation failed: {name}",
                             command=["scontrol", "create", "reservation"])
        self.resvs[name] = Reservation(name, node_list, user_list, start, start + 60 * minutes,
                                       flags, "ACTIVE" if start <= self.now else "INACTIVE")

    def create_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """A reservation from now for ``minutes`` (Flags IGNORE_JOBS, FLEX); refused like
        Slurm refuses one (name taken, unknown node, overlap) or when
        :attr:`refuse_reservations` says so."""
        node_list, user_list = tuple(nodes), tuple(users)
        self.writes.append(("scontrol", "create", "reservation", name, ",".join(node_list),
                            ",".join(user_list), str(minutes)))
        self._purge_reservations()
        why = (self.refuse_reservations
               or ("Reservation name in use" if name in self.resvs else None)
               or ("Invalid node name specified"
                   if not node_list or any(n not in self.nodes for n in node_list) else None)
               or ("Invalid user id" if not user_list else None)
               or ("Requested reservation overlaps with another reservation"
                   if self._overlaps(node_list, self.now, self.now + 60 * minutes) else None))
        if why:
            raise SlurmError(f"scontrol create reservation failed: Error creating the "
                             f"reservation: {why}", command=["scontrol", "create", "reservation",
                                                             f"ReservationName={name}"])
        self.resvs[name] = Reservation(name, node_list, user_list, self.now,
                                       self.now + 60 * minutes, ("IGNORE_JOBS", "FLEX"),
                                       "ACTIVE")

    def update_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Its nodes, users and length from its start, refused as Slurm refuses (no such
        reservation, unknown node, no user, an overlap with another one)."""
        node_list, user_list = tuple(nodes), tuple(users)
        self.writes.append(("scontrol", "update", "reservation", name, ",".join(node_list),
                            ",".join(user_list), str(minutes)))
        self._purge_reservations()
        old = self.resvs.get(name)
        why = (self.refuse_reservations
               or ("Reservation request invalid" if old is None else None)
               or ("Invalid node name specified"
                   if not node_list or any(n not in self.nodes for n in node_list) else None)
               or ("Invalid user id" if not user_list else None)
               or ("Requested reservation overlaps with another reservation"
                   if old is not None and self._overlaps(
                       node_list, old.start_time if old.start_time is not None else self.now,
                       (old.start_time if old.start_time is not None else self.now)
                       + 60 * minutes, but=name) else None))
        if why or old is None:
            raise SlurmError(f"scontrol update reservation failed: Error updating the "
                             f"reservation: {why}", command=["scontrol", "update",
                                                             f"ReservationName={name}"])
        start = old.start_time if old.start_time is not None else self.now
        self.resvs[name] = replace(old, nodes=node_list, users=user_list,
                                   end_time=start + 60 * minutes)

    def end_reservation(self, name: str) -> bool:
        """Delete it, or end it now when a job runs in it or waits for it."""
        self.writes.append(("scontrol", "delete", "reservation", name))
        self._purge_reservations()
        if name not in self.resvs:
            return False
        if any(j.reservation == name and j.state.active for j in self.jobs.values()):
            self.resvs[name] = replace(self.resvs[name], end_time=self.now)
            self._purge_reservations()   # Slurm: at its next reservation check
        else:
            del self.resvs[name]
        return True

    def reservations(self, prefix: str = "") -> tuple[Reservation, ...]:
        """The reservations not ended yet whose name starts with ``prefix`` (``State``
        INACTIVE until it starts)."""
        self._purge_reservations()
        return tuple(replace(r, state="INACTIVE" if r.start_time is not None
                             and r.start_time > self.now else "ACTIVE")
                     for n, r in sorted(self.resvs.items()) if n.startswith(prefix))

    def set_job_reservation(self, job_id: int, name: str) -> ActionResult:
        """Link a job to a reservation ("" unlinks); an unknown reservation, or one that does
        not list the job's user, is refused (SlurmError), as Slurm does."""
        todo, skipped = self._each(job_id, ("scontrol", "update", f"Reservation={name}"))
        self._purge_reservations()
        for j in todo:
            r = self.resvs.get(name) if name else None
            if name and (r is None or j.user not in r.users):
                raise SlurmError(f"scontrol update Reservation failed: job {j.job_id}: "
                                 + ("Requested reservation is invalid" if r is None else
                                    "Access denied to requested reservation"),
                                 command=["scontrol", "update", f"JobId={j.job_id}"])
            j.reservation = name
        return self._result(todo, skipped)


def _allows(constraint: str, node: FakeNode) -> bool:
    """Whether ``node``'s features satisfy ``constraint`` (as far as it is read per node)."""
    test = node_filter(constraint)
    return test is None or test(frozenset(node.features))
