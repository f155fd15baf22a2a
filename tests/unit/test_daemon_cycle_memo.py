"""The daemon's per-cycle caches give what computing afresh gives: the pending jobs' policy
values (``build_inputs``' memo), the pending records left unwritten (``_pending_kept``) and the
fake's unchanged Job values."""

from __future__ import annotations

import dataclasses
import random

from daemon_helpers import T0, record

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.priority.daemon import cycle, job_values
from hai_slurm.priority.daemon.cycle import CycleMemo, build_inputs
from hai_slurm.priority.daemon.planning import SnapshotPlanner
from hai_slurm.priority.hooks import CycleView
from hai_slurm.priority.planner.slurm_topology import DerivedTopology
from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.priority.policy.state import (
    PendingDecision,
    PendingJob,
    PendingReason,
    PolicyState,
    Rule,
    RunningJob,
)
from hai_slurm.priority.store import TrackedJob
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import JobState

CONFIG = PolicyConfig()


def tracked(job_id: int, **changes: object) -> TrackedJob:
    fields: dict[str, object] = dict(
        job_id=job_id, team="vision", user="alice", requested_class="NORMAL",
        effective_class="NORMAL", class_origin=ClassOrigin.DIRECTIVE,
        original_submit_at=T0 - 900.0, first_seen_at=T0 - 800.0, updated_at=T0 - 30.0,
        run_seconds=120.0, wait_seconds=60.0, last_state="PENDING", preemptions=1,
        checkpoint_at=None, checkpoint_step=None, priority=5)
    fields.update(changes)
    return TrackedJob(**fields)  # type: ignore[arg-type]


def test_memo_gives_fresh_values_when_the_job_or_its_record_changes() -> None:
    """The memo's value is reused only for the same Job and TrackedJob objects; a changed
    Slurm job (requeued: restart count, submit time), a changed record (the daemon's plans
    requeued it: preemptions) or another default class gives the value computed afresh."""
    fake = FakeSlurm(now=T0)
    jid = fake.submit(admin_comment=record(PriorityClass.NORMAL), account="vision", now=T0 - 900)
    memo = CycleMemo()
    t = {jid: tracked(jid)}

    def check(tr: dict[int, TrackedJob], config: PolicyConfig = CONFIG) -> PendingJob:
        snap = fake.snapshot()
        got = build_inputs(snap, tr, (), config, float(fake.now), memo).pending
        fresh = build_inputs(snap, tr, (), config, float(fake.now)).pending
        assert got == fresh
        return got[0]

    first = check(t)
    assert check(t) is first  # same objects in: the same value out
    fake.jobs[jid].restart_count = 1  # Slurm requeued it: a new Job value
    fake.jobs[jid].submit_time = T0 - 10
    second = check(t)
    assert (second.restarts, second.submit_time) == (1, T0 - 10)
    assert second.first_submit_time == T0 - 900.0  # compensated: the record says plan-requeued
    third = check({jid: tracked(jid, preemptions=0)})  # a new record: not the plan's requeue
    assert third.first_submit_time is None and third.preemptions == 0
    low = check({jid: tracked(jid, preemptions=0)},
                dataclasses.replace(CONFIG, default_class=PriorityClass.LOW))
    assert low == third  # its record names its class; the default does not apply
    fake.advance(T0 + 30)
    assert check(t).preemptions == 1
    assert set(memo.pending) == {jid}


def test_memo_drops_ended_jobs() -> None:
    fake = FakeSlurm(now=T0)
    a = fake.submit(admin_comment=record(PriorityClass.HIGH), account="vision")
    b = fake.submit(admin_comment=record(PriorityClass.LOW), account="vision")
    memo = CycleMemo()
    build_inputs(fake.snapshot(), {}, (), CONFIG, float(T0), memo)
    assert set(memo.pending) == {a, b}
    fake.cancel([a])
    build_inputs(fake.snapshot(), {}, (), CONFIG, float(T0), memo)
    assert set(memo.pending) == {b}


def test_fake_gives_the_same_job_until_a_field_changes() -> None:
    fake = FakeSlurm(now=T0)
    jid = fake.submit(admin_comment=record(PriorityClass.HIGH), account="vision", gpus_per_node=1)
    one = fake.snapshot().jobs[0]
    assert fake.snapshot().jobs[0] is one
    fake.set_priorities({jid: 77})
    two = fake.snapshot().jobs[0]
    assert two is not one and two.priority == 77 and one.priority != 77
    fake.schedule()
    three = fake.snapshot().jobs[0]
    assert three.nodes and three.state.value != one.state.value


def test_pending_kept_is_the_records_kept_fields() -> None:
    """_pending_kept gives _kept of the record _pending_record builds, for every field that can
    differ (so a record is left unwritten exactly when it would equal the stored one)."""
    fake = FakeSlurm(now=T0)
    fake.submit(admin_comment=record(PriorityClass.HIGH), account="vision")
    snap = fake.snapshot()
    pjob = build_inputs(snap, {}, (), CONFIG, float(T0)).pending[0]
    base = tracked(pjob.job_id)
    decisions = [PendingDecision(pjob.job_id, c, 9, reason)
                 for c in (PriorityClass.HIGH, PriorityClass.LOW)
                 for reason in _reasons()]
    records = [base, tracked(pjob.job_id, checkpoint_at=5.0, checkpoint_step=3, priority=None),
               tracked(pjob.job_id, class_origin=ClassOrigin.AGING, wait_seconds=0.0)]
    for d in decisions:
        for t in records:
            for priority in (None, 5, 6):
                rec = cycle._pending_record(pjob, snap.jobs[0], d, t, priority, float(T0))
                assert cycle._pending_kept(pjob, d, t, priority) == cycle._kept(rec)
                assert rec.run_seconds == t.run_seconds


def _reasons() -> list[PendingReason]:
    """A reason of each origin: aged, demoted, decayed, as requested."""
    plain = PendingReason(
        requested=PriorityClass.HIGH, source=ClassOrigin.DIRECTIVE, base=PriorityClass.HIGH,
        auto_class=None, demoted=False, decayed=False, wait=60.0, bound=600.0, aging_steps=0,
        next_promotion_in=None, depth=1, rule=Rule.FCFS, share=None, rr_tag=None, boost=0,
        age_restored=0.0)
    return [plain._replace(aging_steps=1), plain._replace(demoted=True),
            plain._replace(decayed=True), plain]


def test_planner_gpus_follow_the_running_jobs() -> None:
    """SnapshotPlanner keeps the running jobs' GPUs while the topology and the counts stay the
    same; a job that started, ended or holds other GPU counts gives what computing afresh
    gives."""
    fake = FakeSlurm(now=T0)
    a = fake.submit(admin_comment=record(PriorityClass.NORMAL), account="vision", gpus_per_node=2)
    b = fake.submit(admin_comment=record(PriorityClass.NORMAL), account="vision", gpus_per_node=8)
    fake.schedule()
    planner = SnapshotPlanner(DerivedTopology())

    def holders() -> dict[int, tuple[object, ...]]:
        snap = fake.snapshot()
        d = cycle.decide(snap, tracked={}, events=(), state=PolicyState(), protections={},
                         config=CONFIG, now=float(fake.now))
        view = CycleView(now=float(fake.now), snapshot=snap, pending=d.inputs.pending,
                         running=d.inputs.running, result=d.result, tracked={}, config=CONFIG,
                         slurm=fake, repository=None)  # type: ignore[arg-type]
        got = {h.job_id: h.gpus for h in planner.snapshot(view).running}
        fresh = SnapshotPlanner(DerivedTopology()).snapshot(view)
        assert got == {h.job_id: h.gpus for h in fresh.running}
        return got

    first = holders()
    assert [len(first[a]), len(first[b])] == [2, 8]
    assert holders() == first
    fake.finish(a)
    c = fake.submit(admin_comment=record(PriorityClass.NORMAL), account="vision",
                    gpus_per_node=4)
    fake.schedule()
    after = holders()
    assert set(after) == {b, c} and len(after[c]) == 4
    fake.jobs[c].gpus_per_node = 3  # other counts on the same node
    assert len(holders()[c]) == 3


def test_decisions_with_the_memo_equal_decisions_without_it() -> None:
    """Cycle after cycle of a changing queue (jobs submitted, started, ended and requeued, the
    records the cycles write stored, running ABOVE_NORMAL jobs decaying, records older than
    RUN_FLUSH), decide with a CycleMemo gives what decide without one gives: the same inputs,
    priorities, writes, records and forgotten jobs."""
    rnd = random.Random(7)
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8, cpus=64, memory_mb=256_000) for i in range(3)],
                     now=T0)
    classes = [PriorityClass.HIGH, PriorityClass.ABOVE_NORMAL, PriorityClass.NORMAL,
               PriorityClass.LOW, "AUTO"]
    memo = cycle.CycleMemo()
    store: dict[int, TrackedJob] = {}
    state = PolicyState()
    hits = decays = 0
    for step in range(120):
        for _ in range(rnd.randrange(3)):
            fake.submit(admin_comment=record(rnd.choice(classes), rnd.choice(("a", "b"))),
                        account="a", gpus_per_node=rnd.choice((1, 2, 4, 8)))
        if step % 3 == 0:
            fake.schedule()
        running = [j for j in fake.jobs.values() if j.state is JobState.RUNNING]
        if running and rnd.random() < 0.3:
            fake.finish(rnd.choice(running).job_id)
        if running and rnd.random() < 0.1:
            fake.requeue([rnd.choice(running).job_id])
        fake.advance(fake.now + rnd.choice((10, 30, 30, 30, 60, 400)))
        snap = fake.snapshot()
        args = dict(tracked=dict(store), events=(), state=state, protections={}, config=CONFIG,
                    now=float(fake.now), max_writes=5)
        before = (dict(memo.pending), dict(memo.running))
        got = cycle.decide(snap, memo=memo, **args)  # type: ignore[arg-type]
        fresh = cycle.decide(snap, **args)  # type: ignore[arg-type]
        hits += sum(1 for j, m in before[1].items() if j in memo.running
                    and memo.running[j][0] is m[0])
        assert got.inputs == fresh.inputs
        assert got.result.priorities == fresh.result.priorities
        assert (got.writes, got.forget, got.deferred) == (fresh.writes, fresh.forget,
                                                         fresh.deferred)
        assert got.jobs == fresh.jobs
        decays += sum(1 for r in got.jobs if r.class_origin is ClassOrigin.DECAY)
        fake.set_priorities(got.writes)
        for rec in got.jobs:
            store[rec.job_id] = rec
        for job_id in got.forget:
            del store[job_id]
        state = got.state
    assert hits > 50  # the memo was used for running jobs, not only filled
    assert decays  # running jobs decayed: the memo's decay check was exercised


def test_running_value_is_kept_and_its_decay_follows_now() -> None:
    """A running job nothing happened to keeps the very same policy value from cycle to cycle
    (its run time is kept as the time before its stretch and the stretch's start), and what
    depends on its run time is worked out from ``now``: the total equals run_seconds at every
    cycle, and the policy's decay turns on in the first cycle past ``decay.after``, never
    before and never later (a value reused with a stale run time would miss it)."""
    fake = FakeSlurm(now=T0)
    jid = fake.submit(admin_comment=record(PriorityClass.ABOVE_NORMAL), account="vision",
                      gpus_per_node=1, now=T0)
    fake.schedule()
    start_rec = tracked(jid, requested_class="ABOVE_NORMAL", effective_class="ABOVE_NORMAL",
                        last_state="RUNNING", updated_at=float(T0), run_seconds=100.0)
    store = {jid: start_rec}
    memo = CycleMemo()
    after = CONFIG.decay.after
    first: RunningJob | None = None
    for now in (T0 + 60.0, T0 + after - 101.0, T0 + after - 100.0, T0 + after + 500.0):
        snap = fake.snapshot()
        got = cycle.policy_decisions(snap, tracked=store, events=(), state=PolicyState(),
                                     config=CONFIG, now=now, memo=memo)
        fresh = cycle.policy_decisions(snap, tracked=store, events=(), state=PolicyState(),
                                       config=CONFIG, now=now)
        assert got == fresh
        run = got[0].running[0]
        first = first or run
        assert run is first   # the same value every cycle
        total = job_values.run_seconds(got[0].jobs[jid], start_rec, now)
        assert run.run_time_at(now) == total == 100.0 + (now - T0)
        assert got[1].running[jid].decayed is (total >= after)
    assert first is not None and first.running_since == float(T0)
    assert first.run_time_at(T0 - 10.0) == first.run_time == 100.0   # no time before the start
    fixed = dataclasses.replace(first, running_since=None)
    assert fixed.run_time_at(T0 + 1e6) == 100.0   # no stretch: run_time is the whole count


def test_kept_inputs_only_for_the_same_jobs_records_default_and_nodes() -> None:
    """build_inputs gives its last inputs again only for the very same tuple of Slurm jobs
    with the same tracked jobs, default class and nodes, and never when a value was made from
    ``now`` (a job without its submit or start time); every call equals one without a memo."""
    fake = FakeSlurm(now=T0)
    a = fake.submit(admin_comment=record(PriorityClass.NORMAL), account="vision", now=T0 - 900)
    b = fake.submit(admin_comment=record(PriorityClass.HIGH), account="vision", now=T0 - 60,
                    gpus_per_node=2)
    fake.schedule()
    fake.submit(admin_comment=record(PriorityClass.LOW), account="vision", now=T0 - 30,
                gpus_per_node=8, nodes=4)   # waits
    memo = CycleMemo()
    t = {a: tracked(a, last_state="RUNNING")}

    def check(snap: object, tr: dict[int, TrackedJob], config: PolicyConfig = CONFIG,
              now: float = float(T0)) -> cycle.PolicyInputs:
        got = build_inputs(snap, tr, (), config, now, memo)  # type: ignore[arg-type]
        fresh = build_inputs(snap, tr, (), config, now)  # type: ignore[arg-type]
        assert (got.pending, got.running, got.cluster, got.jobs, got.held) == (
            fresh.pending, fresh.running, fresh.cluster, fresh.jobs, fresh.held)
        return got

    snap = fake.snapshot()
    first = check(snap, t)
    again = check(fake.snapshot(), t, now=T0 + 10.0)   # nothing changed: the same tuple
    assert again.pending is first.pending and again.running is first.running
    t = {a: tracked(a, last_state="RUNNING", preemptions=0)}
    other = check(fake.snapshot(), t)
    assert other.running is not first.running                      # another record
    low = check(fake.snapshot(), t, dataclasses.replace(CONFIG, default_class=PriorityClass.LOW))
    assert low.pending is not other.pending                         # another default class
    back = check(fake.snapshot(), t)
    fake.nodes["n1"] = dataclasses.replace(fake.nodes["n1"], gpus=16)
    bigger = check(fake.snapshot(), t)
    assert bigger.cluster.gpus == back.cluster.gpus + 8              # other nodes
    fake.set_priority(b + 1, 9)
    assert check(fake.snapshot(), t).pending is not bigger.pending  # a job changed
    # values made from now: never given again
    snap = fake.snapshot()
    timeless = dataclasses.replace(snap, jobs=tuple(
        dataclasses.replace(j, submit_time=None) if j.state is JobState.PENDING else j
        for j in snap.jobs))
    early = check(timeless, t, now=T0 + 20.0)
    late = check(timeless, t, now=T0 + 40.0)
    assert late.pending[0].submit_time == T0 + 40.0 != early.pending[0].submit_time
    started = dataclasses.replace(snap, jobs=tuple(
        dataclasses.replace(j, start_time=None) if j.state is JobState.RUNNING else j
        for j in snap.jobs))
    early = check(started, t, now=T0 + 50.0)
    late = check(started, t, now=T0 + 60.0)
    assert late.running[0].start_time == T0 + 60.0 != early.running[0].start_time
