"""One daemon cycle, as pure functions: snapshot -> policy inputs -> decisions -> what to write.

:func:`snapshot_problem` says why a snapshot must not be acted on (or None); :func:`build_inputs`
turns it plus the stored jobs and fairness events into the policy's inputs; :func:`decide` runs
the policy with ``now`` and returns a :class:`Decision`: the priority writes (only jobs whose
priority in Slurm differs from ours, held jobs never), the tracked-job records that changed, the
jobs to forget, new protections, the policy state to keep, and what changed for the metrics.
Nothing here talks to Slurm, the database or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from operator import attrgetter, is_

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.priority.daemon import job_values
from hai_slurm.priority.policy.priorities import PolicyMemo, compute_priorities
from hai_slurm.priority.policy.scoring import budget_writes, diff_priorities
from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.priority.policy.state import (
    AUTO,
    FairnessEvent,
    PendingDecision,
    PendingJob,
    PolicyResult,
    PolicyState,
    Resources,
    RunningDecision,
    RunningJob,
)
from hai_slurm.priority.store import JsonValue, Protection, TrackedJob
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job, JobState, Node

_job_id = attrgetter("job_id")

#: Key of the policy state (epoch, round-robin tags) in the store's named values.
POLICY_STATE_KEY = "policy.state"


def snapshot_problem(snap: ClusterSnapshot, last_time: float | None) -> str | None:
    """Why ``snap`` looks partial or stale (then the cycle writes nothing), or None if usable."""
    if not snap.nodes:
        return "the snapshot lists no nodes"
    if not snap.partitions:
        return "the snapshot lists no partitions"
    if last_time is not None and snap.time < last_time:
        return (f"the snapshot is older ({snap.time}) than the previous one ({last_time:.0f}): "
                "stale data")
    names = {n.name for n in snap.nodes}
    parts = {p.name for p in snap.partitions}
    known: dict[str, bool] = {}  # a job's partition list -> whether one of them exists
    for job in snap.jobs:
        if job.nodes:
            missing = [n for n in job.nodes if n not in names]
            if missing:
                return (f"job {job.job_id} runs on node(s) {','.join(missing)} missing from "
                        "the nodes")
        listed = job.partition
        if listed:
            found = known.get(listed)
            if found is None:
                found = known[listed] = any(p in parts for p in listed.split(","))
            if not found:
                return (f"job {job.job_id} is in partition {listed!r} missing from the "
                        "partitions")
    return None


@dataclass(frozen=True)
class PolicyInputs:
    """The policy's inputs built from one snapshot."""

    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...]
    cluster: Resources
    events: tuple[FairnessEvent, ...]
    jobs: Mapping[int, Job]            # the Slurm job of every pending/running input
    held: frozenset[int]               # pending jobs that are held: never written


PendingMemo = dict[int, tuple[Job, TrackedJob | None, PriorityClass, PendingJob]]
"""The pending jobs' policy values of the previous cycle, by job id, with the Slurm job, the
tracked job and the default class each was made from (see :func:`build_inputs`)."""

KeptMemo = dict[int, tuple[PendingJob, TrackedJob, PriorityClass, ClassOrigin, int | None]]
"""The pending jobs whose record needed no write in the previous cycle, by job id, with what
that was decided from: the job's policy value, its tracked job, and the effective class, origin
and priority compared (see :func:`decide`)."""

RunningMemo = dict[int, tuple[Job, TrackedJob | None, PriorityClass, RunningJob, bool | None]]
"""The running jobs' policy values of the previous cycle, by job id: the Slurm job, tracked job
and default class each was made from, the value (its run time is kept as the time before its
current stretch and when that began, so ``now`` does not change it), and the ``decayed`` of the
decision its record was last found unchanged with (None: not found so)."""


@dataclass(frozen=True)
class InputsMemo:
    """What :func:`build_inputs` made its last inputs from (the snapshot's jobs, each one's
    tracked job, the default class, the nodes) and those inputs (their ``events`` are the
    call's own, never reused)."""

    jobs: tuple[Job, ...]
    tracked: tuple[TrackedJob | None, ...]
    default: PriorityClass
    nodes: tuple[Node, ...]
    inputs: PolicyInputs


@dataclass
class CycleMemo:
    """What :func:`decide` keeps from one cycle to the next so that a job nothing happened to
    costs little: at 10,000 pending jobs most of a steady cycle was rebuilding and comparing
    values that had not changed. Owned by the caller (the daemon keeps one); every entry is
    reused only for the very same (frozen) Slurm job and tracked job objects it was made from,
    so what it gives is what computing afresh gives."""

    pending: PendingMemo = dataclass_field(default_factory=dict)
    kept: KeptMemo = dataclass_field(default_factory=dict)
    running: RunningMemo = dataclass_field(default_factory=dict)
    policy: PolicyMemo = dataclass_field(default_factory=PolicyMemo)
    """The policy's own (:func:`compute_priorities`' running decisions)."""
    inputs: InputsMemo | None = None
    """The last :func:`build_inputs` call's inputs, when none of them depends on ``now``."""


def build_inputs(snap: ClusterSnapshot, tracked: Mapping[int, TrackedJob],
                 events: Iterable[FairnessEvent], config: PolicyConfig,
                 now: float, memo: CycleMemo | None = None) -> PolicyInputs:
    """Pending and running jobs (others are left out), cluster totals and fairness events.

    ``memo`` (kept by the caller from cycle to cycle, updated here): a pending job whose Slurm
    job and tracked job are the very objects its last value was made from (the backends give
    the same ``Job`` for an unchanged job, the store the same ``TrackedJob`` for an unchanged
    record; both are frozen) gets that value again, a running one too (its run time is kept as
    the time before its current stretch and the stretch's start: ``RunningJob.run_time_at``). A
    job without a submit time (pending) or start time (running) is made anew: its value depends
    on ``now`` otherwise. When the snapshot's jobs are the very tuple of the last call (a
    backend that found no job changed gives the same one, as FakeSlurm does), with the same
    tracked jobs, default class and nodes, and no value of the last call depended on ``now``,
    the last call's inputs are given again (:class:`InputsMemo`), with this call's events."""
    default = config.default_class
    slurm_jobs = snap.jobs
    same = memo.inputs if memo is not None else None
    if (same is not None and same.jobs is slurm_jobs and same.default is default
            and same.nodes == snap.nodes
            and all(map(is_, map(tracked.get, map(_job_id, slurm_jobs)), same.tracked))):
        # The very same Slurm jobs, tracked jobs and nodes as the last call, whose values did
        # not depend on now: the same values (and the per-job memos stay as they are).
        kept = same.inputs
        return PolicyInputs(kept.pending, kept.running, kept.cluster, tuple(events),
                            kept.jobs, kept.held)
    pending: list[PendingJob] = []
    running: list[RunningJob] = []
    jobs: dict[int, Job] = {}
    held: set[int] = set()
    timeless = True   # no value made from now (a job without its submit or start time)
    last: PendingMemo = {}
    last_run: RunningMemo = {}
    if memo is not None:
        last, memo.pending = memo.pending, {}
        last_run, memo.running = memo.running, {}
    for job in slurm_jobs:
        job_id = job.job_id
        t = tracked.get(job_id)
        if job.state is JobState.PENDING:
            m = last.get(job_id)
            if m is not None and m[0] is job and m[1] is t and m[2] is default:
                pjob = m[3]
                if memo is not None:
                    memo.pending[job_id] = m
            else:
                pjob = job_values.pending_job(job, t, default, now)
                if job.submit_time is None:
                    timeless = False
                elif memo is not None:
                    memo.pending[job_id] = (job, t, default, pjob)
            pending.append(pjob)
            if job.held or job.priority == 0:
                held.add(job_id)
        elif job.state is JobState.RUNNING:
            r = last_run.get(job_id)
            if r is not None and r[0] is job and r[1] is t and r[2] is default:
                rjob = r[3]
                kept_decay = r[4]
            else:
                rjob = job_values.running_job(job, t, default, now)
                kept_decay = None
            if job.start_time is None or job.submit_time is None:
                timeless = False
            elif memo is not None:
                memo.running[job_id] = (job, t, default, rjob, kept_decay)
            running.append(rjob)
        else:
            continue
        jobs[job_id] = job
    cluster = Resources(sum(n.gpus for n in snap.nodes), sum(n.cpus for n in snap.nodes),
                        sum(n.memory_mb for n in snap.nodes))
    inputs = PolicyInputs(tuple(pending), tuple(running), cluster, tuple(events), jobs,
                          frozenset(held))
    if memo is not None:
        memo.inputs = InputsMemo(slurm_jobs, tuple(map(tracked.get, map(_job_id, slurm_jobs))),
                                 default, snap.nodes, inputs) if timeless else None
    return inputs


def requeue_candidates(snap: ClusterSnapshot, tracked: Mapping[int, TrackedJob]
                       ) -> dict[int, float]:
    """Jobs Slurm says were requeued that the daemon tracks, with when it first saw each: the
    ones whose requeues by the daemon's own plans must be counted (``Repository.
    daemon_requeues``) before :func:`decide` compensates them."""
    return {j.job_id: tracked[j.job_id].first_seen_at for j in snap.jobs
            if j.restart_count > 0 and j.job_id in tracked}


def with_preemptions(tracked: Mapping[int, TrackedJob], candidates: Iterable[int],
                     counts: Mapping[int, int]) -> dict[int, TrackedJob]:
    """``tracked`` with ``preemptions`` of each candidate set to the requeues the daemon's plans
    caused (``counts``; absent: none). Only those are compensated: a job its owner requeued
    (``scontrol requeue``, or an exit code Slurm requeues) does not buy itself age."""
    out = dict(tracked)
    for job_id in candidates:
        t = out[job_id]
        if t.preemptions != counts.get(job_id, 0):
            out[job_id] = replace(t, preemptions=counts.get(job_id, 0))
    return out


def state_to_json(state: PolicyState) -> JsonValue:
    """The policy state as a JSON value for the store."""
    tags: dict[str, JsonValue] = {str(j): [c.value, t] for j, (c, t) in state.rr_tags.items()}
    return {"epoch": state.epoch, "rr_tags": tags}


def state_from_json(value: JsonValue) -> PolicyState:
    """Inverse of :func:`state_to_json`; anything unreadable gives a fresh state (costs writes)."""
    if not isinstance(value, dict):
        return PolicyState()
    epoch = value.get("epoch")
    raw = value.get("rr_tags")
    tags: dict[int, tuple[PriorityClass, int]] = {}
    if isinstance(raw, dict):
        for key, item in raw.items():
            if isinstance(item, list) and len(item) == 2 and isinstance(item[1], int):
                try:
                    tags[int(key)] = (PriorityClass(str(item[0])), item[1])
                except ValueError:
                    continue
    return PolicyState(epoch=epoch if isinstance(epoch, int) else None, rr_tags=tags)


@dataclass(frozen=True)
class Changes:
    """What this cycle changed, for metrics and logs (each counted once, when it happens)."""

    promotions: tuple[int, ...] = ()
    demotions: tuple[int, ...] = ()
    decays: tuple[int, ...] = ()
    protections: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """Everything one cycle decided (see the module docstring)."""

    inputs: PolicyInputs
    result: PolicyResult
    writes: Mapping[int, int]
    jobs: tuple[TrackedJob, ...]
    forget: tuple[int, ...]
    protections: tuple[Protection, ...]
    state: PolicyState
    state_changed: bool
    changes: Changes
    #: Writes left for later cycles by the write budget (``max_writes``).
    deferred: int = 0


def _origin(source: ClassOrigin) -> ClassOrigin:
    return ClassOrigin.DEFAULT if source is ClassOrigin.DEFAULT else ClassOrigin.DIRECTIVE


def _pending_origin(job: PendingJob, d: PendingDecision) -> ClassOrigin:
    r = d.reason
    if r.aging_steps:
        return ClassOrigin.AGING
    if r.demoted:
        return ClassOrigin.DEMOTION
    if r.decayed:
        return ClassOrigin.DECAY
    return _origin(job.source)


_NAMES: dict[object, str] = {c: c.value for c in PriorityClass}


def _requested_name(job: PendingJob | RunningJob) -> str:
    name = _NAMES.get(job.requested)  # a dict lookup: 12,000 jobs a cycle
    if name is not None:
        return name
    return AUTO if job.requested == AUTO else PriorityClass(job.requested).value


def _pending_kept(job: PendingJob, d: PendingDecision, t: TrackedJob,
                  priority: int | None) -> tuple[object, ...]:
    """What :func:`_pending_record` would give for a job tracked as ``t``, as the tuple of
    :data:`_KEPT` fields (in their order), without building the record: a pending job's record
    keeps ``t``'s ``run_seconds``, so it needs writing exactly when this differs from
    ``_kept(t)``."""
    return (job.job_id, job.team, job.user, _requested_name(job), d.effective.value,
            _pending_origin(job, d), t.original_submit_at, t.first_seen_at, t.wait_seconds,
            _PENDING, t.preemptions, t.checkpoint_at, t.checkpoint_step,
            priority if priority is not None else t.priority)


_PENDING = JobState.PENDING.value


def _pending_record(job: PendingJob, slurm: Job, d: PendingDecision, t: TrackedJob | None,
                    priority: int | None, now: float) -> TrackedJob:
    return TrackedJob(
        job_id=job.job_id, team=job.team, user=job.user, requested_class=_requested_name(job),
        effective_class=d.effective.value, class_origin=_pending_origin(job, d),
        original_submit_at=t.original_submit_at if t else job.submit_time,
        first_seen_at=t.first_seen_at if t else now, updated_at=now,
        run_seconds=t.run_seconds if t else 0.0, wait_seconds=t.wait_seconds if t else 0.0,
        last_state=JobState.PENDING.value, preemptions=t.preemptions if t else 0,
        checkpoint_at=t.checkpoint_at if t else None,
        checkpoint_step=t.checkpoint_step if t else None,
        priority=priority if priority is not None else (t.priority if t else None),
    )


def _running_record(job: RunningJob, slurm: Job, d: RunningDecision, t: TrackedJob | None,
                    default: PriorityClass, now: float) -> TrackedJob:
    start = job_values.start_class(t) or (
        job.requested if isinstance(job.requested, PriorityClass) else default)
    origin = ClassOrigin.DECAY if d.decayed else (t.class_origin if t else _origin(job.source))
    return TrackedJob(
        job_id=job.job_id, team=job.team, user=job.user, requested_class=_requested_name(job),
        effective_class=start.value, class_origin=origin,
        original_submit_at=job.submit_time, first_seen_at=t.first_seen_at if t else now,
        updated_at=now, run_seconds=job.run_time_at(now),
        wait_seconds=job_values.wait_seconds(slurm, t), last_state=JobState.RUNNING.value,
        preemptions=t.preemptions if t else 0, checkpoint_at=t.checkpoint_at if t else None,
        checkpoint_step=t.checkpoint_step if t else None, priority=t.priority if t else None,
    )


RUN_FLUSH = 300.0
"""Seconds a running job's stored ``run_seconds`` may lag behind: a record that changed only by
running on is rewritten once this old (the count itself never lags: ``run_seconds`` is the time
run up to ``updated_at``, and each cycle adds the time since; see :func:`catch_up`)."""


_KEPT = [f.name for f in fields(TrackedJob) if f.name not in ("updated_at", "run_seconds")]
_kept = attrgetter(*_KEPT)  # a C-level tuple of the fields: 12,000 records a cycle


def _ran_on(run_seconds: float, t: TrackedJob, now: float) -> bool:
    """Whether a running job's new record, equal to ``t`` in every :data:`_KEPT` field, needs
    no database write: it differs from ``t`` at most by ``updated_at`` and by the run time the
    job added since ``t`` was written, while ``t`` is younger than :data:`RUN_FLUSH`."""
    return run_seconds == t.run_seconds or (
        t.last_state == _RUNNING and now - t.updated_at < RUN_FLUSH)


_RUNNING = JobState.RUNNING.value


def catch_up(tracked: Mapping[int, TrackedJob], snap: ClusterSnapshot,
             previous: float | None) -> dict[int, TrackedJob]:
    """``tracked`` with the run time of each job that ran until the previous cycle (at
    ``previous``) and no longer runs added to its ``run_seconds``: the write that
    :func:`_ran_on` left out, so the job's total is what writing every cycle would have kept."""
    out = dict(tracked)
    if previous is None:
        return out
    running = {j.job_id for j in snap.jobs if j.state is JobState.RUNNING}
    ran = JobState.RUNNING.value  # once, not an enum property per tracked job
    for job_id, t in tracked.items():
        if (t.last_state == ran and job_id not in running
                and previous > t.updated_at):
            out[job_id] = replace(t, run_seconds=t.run_seconds + (previous - t.updated_at),
                                  updated_at=previous)
    return out


def policy_decisions(snap: ClusterSnapshot, *, tracked: Mapping[int, TrackedJob],
                     events: Iterable[FairnessEvent], state: PolicyState, config: PolicyConfig,
                     now: float, memo: CycleMemo | None = None
                     ) -> tuple[PolicyInputs, PolicyResult]:
    """The policy's inputs from ``snap`` and its decisions on them: the ``inputs`` and
    ``result`` of :func:`decide`'s :class:`Decision`, without the writes and records it works
    out from them (what an urgent look uses: it writes nothing). ``memo``: as :func:`decide`'s
    (what a call without the records leaves in it is still only ever reused for the very
    objects it was made from)."""
    inputs = build_inputs(snap, tracked, events, config, now, memo)
    result = compute_priorities(inputs.pending, inputs.running, config=config,
                                cluster=inputs.cluster, events=inputs.events, state=state,
                                now=now, memo=memo.policy if memo is not None else None)
    return inputs, result


def decide(snap: ClusterSnapshot, *, tracked: Mapping[int, TrackedJob],
           events: Iterable[FairnessEvent], state: PolicyState,
           protections: Mapping[str, Protection], config: PolicyConfig,
           now: float, memo: CycleMemo | None = None, max_writes: int = 0) -> Decision:
    """Run the policy on one snapshot and work out every write (see the module docstring;
    ``memo``: :class:`CycleMemo`). ``max_writes`` > 0 bounds the writes
    (:func:`~hai_slurm.priority.policy.scoring.budget_writes`: the top of the queue first); the
    records of the jobs left over keep Slurm's value, so the next cycle writes them."""
    inputs, result = policy_decisions(snap, tracked=tracked, events=events, state=state,
                                      config=config, now=now, memo=memo)
    current = {j.job_id: inputs.jobs[j.job_id].priority for j in inputs.pending}
    wanted = {j: p for j, p in result.priorities.items() if j not in inputs.held}
    needed = diff_priorities(current, wanted)
    writes = budget_writes(current, needed, max_writes)

    records: list[TrackedJob] = []
    last_kept: KeptMemo = {}
    kept: KeptMemo | None = None
    if memo is not None:
        last_kept, kept = memo.kept, {}
        memo.kept = kept
    for pjob in inputs.pending:
        job_id = pjob.job_id
        t = tracked.get(job_id)
        written = writes.get(job_id, current[job_id] if job_id in wanted else None)
        d = result.pending[job_id]
        if t is not None:
            # The record would equal t apart from updated_at: no write. _pending_kept is a pure
            # function of these five, so the same five as last cycle give the same answer.
            eff, origin = d.effective, _pending_origin(pjob, d)
            k = last_kept.get(job_id)
            if not (k is not None and k[0] is pjob and k[1] is t and k[2] is eff
                    and k[3] is origin and k[4] == written):
                k = (pjob, t, eff, origin, written)
                if _pending_kept(pjob, d, t, written) != _kept(t):
                    k = None
            if k is not None:
                if kept is not None:
                    kept[job_id] = k
                continue
        records.append(_pending_record(pjob, inputs.jobs[job_id], d, t, written, now))
    for rjob in inputs.running:
        job_id = rjob.job_id
        t = tracked.get(job_id)
        d_run = result.running[job_id]
        r = memo.running.get(job_id) if memo is not None else None
        if t is not None and r is not None and r[4] is d_run.decayed:
            same = True  # as a cycle with the same job, record, default and decay found
        else:
            rec = _running_record(rjob, inputs.jobs[job_id], d_run, t, config.default_class, now)
            same = t is not None and _kept(rec) == _kept(t)
            if same and memo is not None and r is not None:
                memo.running[job_id] = (*r[:4], d_run.decayed)
        if same and t is not None and _ran_on(rjob.run_time_at(now), t, now):
            continue  # the record would equal t apart from the run time: no write yet
        records.append(_running_record(rjob, inputs.jobs[job_id], d_run, t,
                                       config.default_class, now))
    active = {j.job_id for j in snap.jobs}
    forget = tuple(sorted(j for j in tracked if j not in active))

    granted: list[Protection] = []
    for team in sorted(result.protected_teams):
        until = result.teams[team].protected_until
        old = protections.get(team)
        if until is not None and (old is None or until > old.until):
            granted.append(Protection(team, until, now, reason=(
                f"preempted {result.teams[team].preempted} times in the fairness window")))

    def new_class(job_id: int, cls: str) -> bool:
        t = tracked.get(job_id)
        return t is None or t.effective_class != cls

    def new_origin(job_id: int, origin: ClassOrigin) -> bool:
        t = tracked.get(job_id)
        return t is None or t.class_origin != origin

    changes = Changes(
        promotions=tuple(j for j in result.promotions
                         if new_class(j, result.pending[j].effective.value)),
        demotions=tuple(j for j in result.demotions if new_origin(j, ClassOrigin.DEMOTION)),
        decays=tuple(j for j in result.decays if new_origin(j, ClassOrigin.DECAY)),
        protections=tuple(p.team for p in granted if p.team not in protections),
    )
    return Decision(inputs=inputs, result=result, writes=writes, jobs=tuple(records),
                    forget=forget, protections=tuple(granted), state=result.state,
                    state_changed=result.state != state, changes=changes,
                    deferred=len(needed) - len(writes))
