"""FakeSlurm.snapshot looks again only at the jobs written since the last one (each job adds
its id to the fake's change set on any write) and keeps the free resources per node while the
jobs' values and the nodes are the same: every snapshot equals one made from scratch."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import ClusterSnapshot, JobState


def _from_scratch(fake: FakeSlurm) -> ClusterSnapshot:
    """The snapshot of a copy of ``fake`` that keeps nothing from earlier snapshots."""
    clone = copy.deepcopy(fake)
    clone._changed = set()
    for j in clone.jobs.values():
        j.changes = None
    clone._bound, clone._listed, clone._listing = 0, {}, None
    clone._values, clone._node_values, clone._kept_free = {}, {}, None
    return clone.snapshot()


def _check(fake: FakeSlurm) -> ClusterSnapshot:
    snap = fake.snapshot()
    fresh = _from_scratch(fake)
    assert snap == fresh
    assert [j.job_id for j in snap.jobs] == sorted(j.job_id for j in fake.jobs.values()
                                                   if j.state.active)
    return snap


def test_every_snapshot_equals_one_made_from_scratch() -> None:
    """400 random steps of every kind that writes a job or a node (submit, schedule, end,
    requeue, hold, release, priorities, comments, node lists, reservations, a field written
    by hand, a node replaced), each followed by one or two snapshots."""
    rng = random.Random(16)
    fake = FakeSlurm([FakeNode(f"n{i}") for i in range(1, 5)], now=1000, backfill=True,
                     requeue_delay=5)
    kept = 0
    last: ClusterSnapshot | None = None
    for step in range(400):
        fake.advance(fake.now + rng.choice((0, 1, 3, 7)))
        ids = list(fake.jobs)
        active = [j for j in ids if fake.jobs[j].state.active]
        running = [j for j in ids if fake.jobs[j].state is JobState.RUNNING]
        pending = [j for j in ids if fake.jobs[j].state is JobState.PENDING]
        kind = rng.randrange(13)
        if kind <= 2 or not ids:
            fake.submit(name=f"j{step}", gpus_per_node=rng.choice((1, 2, 4, 8)),
                        nodes=rng.choice((1, 1, 2)), priority=rng.randrange(1, 50),
                        user=rng.choice(("alice", "bob")))
        elif kind == 3:
            fake.schedule()
        elif kind == 4 and running:
            fake.finish(rng.choice(running))
        elif kind == 5 and running:
            fake.requeue(rng.choice(running))
        elif kind == 6 and active:
            fake.hold(rng.choice(active))
        elif kind == 7 and active:
            fake.release(rng.choice(active))
        elif kind == 8 and pending:
            fake.set_priorities({j: rng.randrange(1, 100) for j in rng.sample(
                pending, min(3, len(pending)))})
        elif kind == 9 and active:
            job = rng.choice(active)
            if rng.random() < 0.5:
                fake.set_admin_comment(job, f"c{step}")
            else:
                fake.set_req_nodes(job, rng.choice(("", "n1", "n2")))
        elif kind == 10:
            name = f"r{step % 3}"
            try:
                if name in fake.resvs:
                    fake.end_reservation(name)
                else:
                    fake.create_reservation(name, [rng.choice(("n3", "n4"))], ["alice"], 5)
                    if pending:
                        fake.set_job_reservation(rng.choice(pending), name)
            except SlurmError:
                pass
        elif kind == 11 and ids:
            fake.jobs[rng.choice(ids)].reservation = ""   # by hand, as tests do
        else:
            node = rng.choice(("n1", "n2", "n3", "n4"))
            fake.nodes[node] = replace(fake.nodes[node], state=rng.choice(
                ("IDLE", "IDLE", "DOWN", "DRAIN")))
        snap = _check(fake)
        if rng.random() < 0.3:   # nothing written since: the very same values
            again = _check(fake)
            assert again.jobs is snap.jobs
            kept += 1
        if last is not None and snap.jobs is last.jobs:
            kept += 1
        last = snap
    assert kept > 100


def test_a_job_put_in_by_hand_is_listed() -> None:
    """A job added to ``jobs`` without submit() (as a test might) is listed, and its writes
    seen."""
    fake = FakeSlurm(now=1000)
    first = fake.submit(gpus_per_node=1)
    _check(fake)
    other = copy.deepcopy(fake.jobs[first])
    other.changes = None
    other.job_id = 99
    fake.jobs[99] = other
    assert [j.job_id for j in _check(fake).jobs] == [first, 99]
    other.priority = 7
    assert _check(fake).job(99).priority == 7  # type: ignore[union-attr]
