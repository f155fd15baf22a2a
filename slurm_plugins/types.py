"""Values the Slurm adapter hands to the daemon, and the one interface every backend implements.

Everything here is immutable and uses Slurm's own vocabulary (job_state, state_reason, restart_cnt,
admin_comment, ...). Times are POSIX seconds (``int``), ``None`` where Slurm has no value
("Unknown", NO_VAL) and :data:`~hai_slurm.slurm_formats.INFINITE` where Slurm means "no limit".
Slurm's formats (versions, durations, sizes) are read in :mod:`hai_slurm.slurm_formats`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from hai_slurm.slurm_formats import SlurmVersion

JobIds = int | Iterable[int]
"""One job id or several: every action accepts both."""


class JobState(StrEnum):
    """Base job states as Slurm names them (flags such as REQUEUED are kept apart)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @property
    def active(self) -> bool:
        """True for the states the daemon looks at: pending, running, suspended, completing."""
        return self in _ACTIVE


_ACTIVE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})


class SignalTarget(StrEnum):
    """Which processes of a job get a signal (scancel's ``--full`` / ``--batch`` / default)."""

    FULL = "full"      # batch shell, every step and their children (scancel --full)
    BATCH = "batch"    # the batch shell only (scancel --batch)
    STEPS = "steps"    # srun steps only (scancel without flag)
    WORKLOAD = "workload"
    """Where the training runs: the srun steps when the job has any, else the batch shell. A
    script that trains in ``srun`` keeps its shell alive (bash dies of an untrapped USR2, and
    takes the job with it); one that trains in the shell itself needs ``exec`` or ``hai-run``."""


class SkipReason(StrEnum):
    """Why an action left a job alone without that being an error (a harmless race)."""

    GONE = "gone"                  # slurmctld no longer knows the job id
    FINISHED = "finished"          # already completing or completed
    PENDING = "pending"            # requeue/signal of a job that is not running (any more)
    HELD = "held"                  # priority change on a held job would release it
    NOT_RUNNING = "not_running"    # requeue skipped because the job was no longer running
    NOT_PENDING = "not_pending"    # a pending-only change (ReqNodeList) of a job that started
    REFUSED = "refused"            # a requeue Slurm never does to this job: --no-requeue or
    #                                Requeue=0 ("presently disabled"), or not a batch job


@dataclass(frozen=True, slots=True)
class Skipped:
    """One job an action did not touch, with Slurm's own words."""

    job_id: int
    reason: SkipReason
    message: str


@dataclass(frozen=True, slots=True)
class ActionResult:
    """Outcome of one (possibly batched) action: what was done, what was skipped and why."""

    done: tuple[int, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    commands: int = 0
    """How many Slurm commands (writes) the action issued."""

    @property
    def skipped_ids(self) -> frozenset[int]:
        """Ids of the jobs that were skipped."""
        return frozenset(s.job_id for s in self.skipped)

    def merged(self, other: ActionResult) -> ActionResult:
        """The union of two results (used when an action needs several commands)."""
        return ActionResult(self.done + other.done, self.skipped + other.skipped,
                            self.commands + other.commands)


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the daemon needs it. Only active jobs (pending, running, ...) are in a snapshot."""

    job_id: int
    name: str
    user: str
    uid: int
    account: str
    partition: str
    qos: str
    state: JobState
    state_flags: tuple[str, ...]
    reason: str
    priority: int
    submit_time: int | None
    eligible_time: int | None
    start_time: int | None
    time_limit: int | None
    """Minutes; :data:`INFINITE` for no limit, ``None`` when unset."""
    node_count: int
    nodes: tuple[str, ...]
    """Expanded node names (empty while pending)."""
    node_list: str
    """Slurm's compressed host list, e.g. ``n[1-3]``."""
    gpus_requested: int
    """Total GPUs the job asked for (across all nodes), from tres_per_* / tres_req_str."""
    gpus_per_node: Mapping[str, int] = field(hash=False)
    """GPUs allocated on each node while running, from gres_detail (empty when unknown)."""
    restart_count: int
    requeue: bool
    comment: str
    admin_comment: str
    batch: bool
    held: bool
    """True when the job is held (priority 0 with a JobHeld* reason)."""
    array_job_id: int | None = None
    """The array's master id for array tasks, else None."""
    array_task_id: int | None = None
    """This task's index; None for a record that stands for several pending tasks."""
    array_tasks: str = ""
    """Pending tasks this one record stands for (Slurm lists them as e.g. ``"4-5"``)."""
    cpus: int = 0
    """CPUs of the whole job: allocated while it runs (``tres_alloc_str``), else requested."""
    memory_mb: int = 0
    """Memory of the whole job in MiB (all nodes), allocated while it runs, else requested; 0 when
    Slurm allocates none (memory not a consumable resource, e.g. ``CR_Core``) or tells nothing."""
    switches: int | None = 0
    """``sbatch --switches=N``: the most leaf switches the job's nodes may span (0: any), or
    None when the release's JSON does not report it (22.05; the CLI backend then reads it)."""
    switch_wait: int = 0
    """Seconds the job waits for that switch count before Slurm ignores it (``@wait``; Slurm's
    default is ``max_switch_wait``, 300 s)."""
    required_nodes: str = ""
    """``sbatch --nodelist``: nodes the job must get, all of them (a host list; empty: none)."""
    excluded_nodes: str = ""
    """``sbatch --exclude``: nodes the job may not get (a host list; empty: none)."""
    features: str = ""
    """``sbatch --constraint``: the node features the job asks for (an expression; empty:
    none; see :mod:`~hai_slurm.slurm_plugins.constraints`)."""
    reservation: str = ""
    """The reservation the job is linked to (``sbatch --reservation``, or a preemption guard's
    link); empty: none."""
    exclusive: str = ""
    """``sbatch --exclusive[=user|mcs|topo]``: ``"node"`` (plain ``--exclusive``: its nodes run
    no other job, and it is given all their GPUs), ``"user"`` or ``"mcs"`` (no other user's or
    MCS label's job), ``"topo"`` (a topology segment of its own, Slurm 25.05+); ``""``: it
    shares nodes (Slurm's ``OverSubscribe`` OK or YES). On 25.05+ (whose JSON does not tell
    it) read for waiting jobs only: ``""`` for a running one."""

    @property
    def takes_whole_nodes(self) -> bool:
        """Whether the job starts only on nodes that run no other job (:attr:`exclusive`
        ``node``; ``user`` and ``mcs``: no job of another user or MCS label, planned alike):
        free GPUs on a busy node do not start it."""
        return self.exclusive in _WHOLE_NODE

    @property
    def reservation_deleted(self) -> bool:
        """Pending with priority 0 because Slurm deleted the reservation it was linked to
        (``RESV_DEL_HOLD``; reason "ReservationDeleted" in JSON, "Reservation NAME was
        deleted" as ``squeue -O Reason`` prints it; measured on 22.05): ``scontrol release``
        starts it again. Not :attr:`held` (no user or admin hold)."""
        return (self.state is JobState.PENDING and self.priority == 0 and not self.held
                and (self.reason == "ReservationDeleted"
                     or (self.reason.startswith("Reservation ")
                         and self.reason.endswith(" was deleted"))))

    @property
    def gpus_allocated(self) -> int:
        """GPUs the job holds now (sum over its nodes)."""
        return sum(self.gpus_per_node.values())

    def waits_for_gpus(self, now: float, soon: float) -> bool:
        """Pending, not held, and kept back by nothing free GPUs do not give (no
        :attr:`start_blocker`), or only by a begin time that comes within ``soon`` seconds of
        ``now`` (a requeued job's, Slurm's ``CredExpire`` after its requeue): freeing GPUs may
        start it, so a preemption may help it."""
        if self.state is not JobState.PENDING or self.held:
            return False
        if self.reason in _WAITING:
            return True
        blocker = self.start_blocker
        return blocker is None or (blocker == "BeginTime" and self.eligible_time is not None
                                   and self.eligible_time <= now + soon)

    @property
    def start_blocker(self) -> str | None:
        """For a pending job that Slurm holds back for something free GPUs do not give (its
        begin time, a dependency, its array's task limit, a QOS or association limit, its
        partition or account, licenses, a reservation not yet active): Slurm's reason, e.g.
        ``"BeginTime"``. None while it waits for resources or priority, or for a reason not
        known to block it (freeing GPUs may start it then)."""
        if self.state is not JobState.PENDING:
            return None
        head = self.reason.split(",", 1)[0].strip()   # "ReqNodeNotAvail, UnavailableNodes:n3"
        if head in _NOT_FOR_GPUS or head.startswith(_LIMIT_PREFIXES):
            return head
        return None


_WHOLE_NODE = frozenset({"node", "user", "mcs"})
"""The :attr:`Job.exclusive` values that keep other users' jobs off a job's nodes."""
_WAITING = frozenset({"Priority", "Resources", "None", ""})
"""The common pending reasons that name nothing but GPUs or the job's turn (a fast path)."""
_NOT_FOR_GPUS = frozenset({
    "BeginTime", "Dependency", "DependencyNeverSatisfied", "JobArrayTaskLimit", "Reservation",
    "Licenses", "PartitionDown", "PartitionInactive", "PartitionNodeLimit",
    "PartitionTimeLimit", "PartitionConfig", "InvalidAccount", "InvalidQOS",
    "AccountNotAllowed", "QOSNotAllowed", "BadConstraints", "JobHeldAdmin", "JobHeldUser",
    "JobHoldMaxRequeue", "BurstBufferStageIn", "FedJobLock", "AccountingPolicy",
    "QOSUsageThreshold", "QOSJobLimit", "QOSResourceLimit", "QOSTimeLimit",
    "AssociationJobLimit", "AssociationResourceLimit", "AssociationTimeLimit", "DeadLine"})
"""Slurm's pending reasons (``job_reason_string``) that free GPUs do not lift."""
_LIMIT_PREFIXES = ("QOSGrp", "QOSMax", "QOSMin", "AssocGrp", "AssocMax", "Max")
"""Reasons naming a QOS, association or account limit (``QOSMaxGRESPerUser``,
``AssocGrpGRES``, ``MaxGRESPerAccount``, ...): the job's own usage keeps it back."""


_NODE_LOST = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "INVALID",
    "INVALID_REG", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN", "UNKNOWN"})
"""Node states and flags of a node that cannot run jobs itself (see :attr:`Node.lost`)."""


@dataclass(frozen=True, slots=True)
class Node:
    """A compute node with its GPU counts."""

    name: str
    state: str
    """Base state, upper case (IDLE, MIXED, ALLOCATED, DOWN, ...)."""
    state_flags: tuple[str, ...]
    """Extra flags, upper case (DRAIN, COMPLETING, NOT_RESPONDING, ...)."""
    cpus: int
    cpus_allocated: int
    memory_mb: int
    memory_allocated_mb: int
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]
    reason: str = ""
    registered: bool = True
    """False while slurmctld has not heard from this node's slurmd since slurmctld started
    (``BootTime=None``): in the seconds after a slurmctld restart the jobs Slurm shows on the
    node come from its last state save, and may not be what runs there."""
    features: tuple[str, ...] = ()
    """The node's active features (``Features=`` in slurm.conf), what ``--constraint`` tests."""
    reservation: str = ""
    """The active reservation on the node, where Slurm names it (24.11 and 26.05's JSON, with
    the RESERVED flag; 22.05 has the flag only); empty otherwise."""

    @property
    def awaiting_registration(self) -> bool:
        """True when the node's state is stale (not :attr:`registered`) but it is not known to
        be unreachable either (not DOWN, not NOT_RESPONDING): its registration is due."""
        return not self.registered and not {"DOWN", "NOT_RESPONDING"}.intersection(
            {self.state, *self.state_flags})

    @property
    def available(self) -> bool:
        """True when Slurm may place new jobs here (not down, drained, failing or off)."""
        bad = {*_NODE_LOST, "MAINTENANCE", "RESERVED"}
        return self.state not in bad and not bad.intersection(self.state_flags)

    @property
    def lost(self) -> bool:
        """True when the node itself cannot run jobs (down, drained, failing, off, not
        responding), as opposed to being reserved: a node in a reservation is not
        :attr:`available` to others, but its reservation's jobs still start there."""
        return self.state in _NODE_LOST or bool(_NODE_LOST.intersection(self.state_flags))


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition: its nodes, limits and preemption settings."""

    name: str
    nodes: tuple[str, ...]
    node_list: str
    state: str
    default: bool
    priority_tier: int
    max_time: int | None
    """Minutes; :data:`INFINITE` for UNLIMITED."""
    preempt_mode: str
    grace_time: int
    """Seconds."""


@dataclass(frozen=True, slots=True)
class Qos:
    """A QOS from the accounting database (``sacctmgr show qos``)."""

    name: str
    priority: int
    preempt: tuple[str, ...]
    preempt_mode: str
    grace_time: int
    """Seconds."""
    max_wall: int | None
    """Minutes; ``None`` when not set."""
    usage_factor: float
    flags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PendingBrief:
    """A pending job in brief (:meth:`SlurmClient.pending_briefs`): what the daemon's urgent
    path needs to tell a new job of a class that may preempt, far cheaper than a snapshot."""

    job_id: int
    user: str
    account: str
    qos: str
    submit_time: int | None
    restart_count: int
    requeue: bool
    admin_comment: str
    """Where job_submit.lua put the ``#HAI`` record (class, team); only admins can write it."""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the daemon reads from Slurm in one cycle, taken at ``time``."""

    time: int
    version: SlurmVersion
    jobs: tuple[Job, ...]
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    qos: tuple[Qos, ...] = ()
    """Empty when the cluster runs without accounting."""
    _by_id: Mapping[int, Job] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {j.job_id: j for j in self.jobs})

    def job(self, job_id: int) -> Job | None:
        """The job with this id, or None when it is not active."""
        return self._by_id.get(job_id)

    @property
    def pending(self) -> tuple[Job, ...]:
        """Pending jobs, in the order Slurm listed them."""
        return tuple(j for j in self.jobs if j.state is JobState.PENDING)

    @property
    def running(self) -> tuple[Job, ...]:
        """Running jobs (suspended ones excluded)."""
        return tuple(j for j in self.jobs if j.state is JobState.RUNNING)


_HOLDS_ALLOCATION = frozenset({JobState.RUNNING, JobState.SUSPENDED})


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the daemon re-reads about one job, finished or not (:meth:`SlurmClient.job_facts`)."""

    job_id: int
    state: JobState
    """The base state, read like the adapter reads it (a one-word flag such as CONFIGURING or
    REQUEUED stands for RUNNING or PENDING; see :func:`hai_slurm.slurm_plugins.parse.job_state`).
    """
    restart_count: int = 0
    held: bool = False
    req_nodes: str = ""
    """The ReqNodeList the job asked for ("" when none)."""
    reservation: str = ""
    """The reservation the job runs in or waits for ("" when none)."""

    @property
    def running(self) -> bool:
        """Running (or about to): holds its allocation."""
        return self.state in _HOLDS_ALLOCATION

    @property
    def pending(self) -> bool:
        """Waiting in the queue (held or not)."""
        return self.state is JobState.PENDING

    @property
    def finished(self) -> bool:
        """Ended (any terminal state, or completing): its GPUs are (being) freed."""
        return not self.running and not self.pending


@dataclass(frozen=True, slots=True)
class SwitchInfo:
    """One switch of ``scontrol show topology``: a leaf lists nodes, an upper switch switches."""

    name: str
    level: int
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reservation:
    """One advance reservation (``scontrol show reservation``)."""

    name: str
    nodes: tuple[str, ...]
    users: tuple[str, ...]
    start_time: int | None
    end_time: int | None
    """POSIX seconds; None when Slurm prints no value."""
    flags: tuple[str, ...] = ()
    state: str = ""
    """ACTIVE or INACTIVE (not started yet)."""


@runtime_checkable
class SlurmClient(Protocol):
    """What the daemon may ask of Slurm. Implemented by the CLI backend and by FakeSlurm.

    Reads: :meth:`snapshot` returns a complete view or raises SlurmError, never a partial one.
    Writes: each accepts one id or many, batches where Slurm allows, raises SlurmError on real
    failures and reports harmless races (job gone, already finished) as ``skipped``.
    """

    def version(self) -> SlurmVersion:
        """The Slurm release of the cluster (detected once)."""
        ...

    def snapshot(self) -> ClusterSnapshot:
        """Jobs, nodes, partitions and QOS, all taken in one go."""
        ...

    def set_priority(self, job_id: int, value: int) -> ActionResult:
        """Give one job an absolute priority (``scontrol update JobId=.. Priority=..``)."""
        ...

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        """Set many priorities with as few commands as possible (one per distinct value)."""
        ...

    def signal(self, job_ids: JobIds, signal: str = "USR2", *,
               target: SignalTarget = SignalTarget.FULL) -> ActionResult:
        """Send a signal to running jobs (``scancel --signal=SIG --full``)."""
        ...

    def requeue(self, job_ids: JobIds) -> ActionResult:
        """Requeue running jobs: they go back to PENDING with restart count + 1."""
        ...

    def requeue_hold(self, job_ids: JobIds) -> ActionResult:
        """Requeue running jobs and hold them (``scontrol requeuehold``)."""
        ...

    def hold(self, job_ids: JobIds) -> ActionResult:
        """Hold pending jobs (an admin hold)."""
        ...

    def release(self, job_ids: JobIds) -> ActionResult:
        """Release held jobs."""
        ...

    def set_admin_comment(self, job_id: int, text: str) -> ActionResult:
        """Replace a job's admin_comment (only admins can write it; users cannot forge it)."""
        ...

    def cancel(self, job_ids: JobIds) -> ActionResult:
        """Cancel jobs (``scancel``)."""
        ...

    def job_facts(self, job_ids: JobIds) -> dict[int, JobFacts]:
        """State of each job slurmctld still knows, finished ones included (forgotten: absent)."""
        ...

    def requeue_any(self, job_ids: JobIds, *, hold: bool) -> tuple[int, ...]:
        """Requeue (``hold``: and hold) running *or finished* jobs; return the ids requeued.

        Unlike :meth:`requeue`, this also takes jobs that already exited (a victim that saved and
        exited 75 is FAILED until requeued; slurmctld keeps it for ``MinJobAge``). Pending jobs
        are counted as requeued (already requeued, e.g. by ``RequeueExit``); with ``hold`` they
        are held, so the result is the same either way. Jobs slurmctld forgot are left out, and
        so are those it refuses to requeue for good (``--no-requeue``, ``Requeue=0`` set since,
        an interactive job): no error, as a race with their owner is not the caller's fault.
        """
        ...

    def set_req_nodes(self, job_id: int, nodes: str) -> ActionResult:
        """Pin a pending job to ``nodes`` (``ReqNodeList``; "" clears it)."""
        ...

    def split_array_task(self, job_id: int) -> int:
        """For an array's own pending record naming several tasks (which Slurm pins only as
        a whole, or not at all once a task has started): make its first task a job of its own
        and return that job's id. Any other job's id is returned unchanged, nothing written."""
        ...

    def switches(self) -> tuple[SwitchInfo, ...]:
        """The network switches Slurm's topology plugin knows (``()`` without one)."""
        ...

    # -- the urgent path (issue 16) ---------------------------------------------------------
    def pending_briefs(self) -> tuple[PendingBrief, ...]:
        """Every pending job in brief, in one cheap query (the daemon polls it every
        ``[intervals] urgent_poll`` seconds between cycles); raises SlurmError on failure."""
        ...

    # -- reservations (the preemption guard: ``hai-plan-<id>-<time>`` on a plan's target nodes) --
    def create_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Create reservation ``name`` on ``nodes`` for ``users``, starting now, for
        ``minutes``, over the jobs that still run there (``Flags=IGNORE_JOBS``), its jobs free
        to run past its end (``FLEX``). Raises SlurmError when Slurm refuses it (an overlapping
        reservation, an unknown node or user, the name taken)."""
        ...

    def update_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Make reservation ``name`` cover exactly ``nodes`` and ``users`` and last ``minutes``
        from its start, over the jobs that run there (another plan joins it, or leaves it).
        Raises SlurmError when Slurm refuses (an overlap with another reservation, an unknown
        node or user, no such reservation), also when it answers success but does not then
        cover exactly those nodes and users (24.11 keeps its old nodes for an unknown one)."""
        ...

    def end_reservation(self, name: str) -> bool:
        """Remove reservation ``name``: delete it, or, when Slurm refuses because a job still
        runs in it, end it now (``EndTime=now``; its ``FLEX`` jobs go on running). False when
        it did not exist."""
        ...

    def reservations(self, prefix: str = "") -> tuple[Reservation, ...]:
        """The reservations whose name starts with ``prefix``."""
        ...

    def set_job_reservation(self, job_id: int, name: str) -> ActionResult:
        """Make a pending job use reservation ``name`` ("" unlinks it); a job that is not
        pending is skipped (``NOT_PENDING``)."""
        ...


def job_id_tuple(job_ids: JobIds) -> tuple[int, ...]:
    """Normalise one id or an iterable of ids to a tuple without duplicates, order kept."""
    if isinstance(job_ids, int):
        ids: Iterable[int] = (job_ids,)
    else:
        ids = job_ids
    out: dict[int, None] = {}
    for j in ids:
        if isinstance(j, bool) or not isinstance(j, int) or j <= 0:
            raise ValueError(f"job id must be a positive integer, got {j!r}")
        out[j] = None
    return tuple(out)
