"""FakeSlurm's own behaviour: allocator order, requeue, clock, failure injection, determinism."""

from __future__ import annotations

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.adapter import JobState, SlurmClient
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import ClusterSnapshot


def cluster(**kw: object) -> FakeSlurm:
    """Two nodes of 8 GPUs at t=1000."""
    return FakeSlurm([FakeNode("n1"), FakeNode("n2")], now=1000, **kw)  # type: ignore[arg-type]


def test_is_a_slurm_client() -> None:
    """FakeSlurm satisfies the SlurmClient protocol."""
    assert isinstance(cluster(), SlurmClient)


def test_pending_jobs_start_in_priority_order_and_block_without_backfill() -> None:
    """Highest priority first; a big job that does not fit blocks smaller ones behind it."""
    fake = cluster()
    small_low = fake.submit(name="small-low", gpus_per_node=2, priority=1)
    big_high = fake.submit(name="big-high", nodes=2, gpus_per_node=8, priority=100)
    mid = fake.submit(name="mid", gpus_per_node=8, priority=50)
    assert fake.schedule(1001) == (big_high,)
    snap = fake.snapshot()
    assert snap.job(mid).reason == "Resources"  # type: ignore[union-attr]
    assert snap.job(small_low).state is JobState.PENDING  # type: ignore[union-attr]
    fake.finish(big_high)
    assert fake.schedule(1002) == (mid, small_low)
    assert fake.snapshot().job(mid).nodes == ("n1",)  # type: ignore[union-attr]


def test_backfill_lets_small_jobs_pass_a_blocked_one() -> None:
    """With backfill, a job that fits starts even though a higher one waits."""
    fake = cluster(backfill=True)
    runner = fake.submit(gpus_per_node=8, priority=1)
    fake.schedule()
    blocked = fake.submit(nodes=2, gpus_per_node=8, priority=100)
    small = fake.submit(gpus_per_node=4, priority=1)
    assert fake.schedule() == (small,)
    assert fake.snapshot().job(blocked).state is JobState.PENDING  # type: ignore[union-attr]
    assert fake.snapshot().job(runner).state is JobState.RUNNING  # type: ignore[union-attr]


def test_set_priority_changes_the_start_order() -> None:
    """The daemon's priority writes decide who starts next."""
    fake = cluster()
    fake.submit(gpus_per_node=8, nodes=2, priority=1)
    fake.schedule()
    a = fake.submit(name="a", gpus_per_node=8, priority=10)
    b = fake.submit(name="b", gpus_per_node=8, priority=20)
    res = fake.set_priorities({a: 500, b: 400})
    assert res.commands == 2 and len(fake.writes) == 2
    fake.finish(1)
    assert fake.schedule() == (a, b)


def test_requeue_frees_nodes_resets_submit_time_and_waits() -> None:
    """A requeued job frees its GPUs at once, restarts count +1, waits requeue_delay seconds."""
    fake = cluster(requeue_delay=11)
    low = fake.submit(name="low", gpus_per_node=8, nodes=2, priority=1)
    fake.schedule()
    high = fake.submit(name="high", gpus_per_node=8, priority=100, now=1005)
    fake.advance(1010)
    assert fake.requeue(low).done == (low,)
    job = fake.snapshot().job(low)
    assert job is not None and job.state is JobState.PENDING and job.restart_count == 1
    assert job.submit_time == 1010 and job.eligible_time == 1021 and job.nodes == ()
    assert fake.schedule(1011) == (high,)
    assert fake.snapshot().job(low).reason == "BeginTime"  # type: ignore[union-attr]
    fake.finish(high)
    assert fake.schedule(1020) == ()
    assert fake.schedule(1021) == (low,)


def test_no_requeue_job_refuses() -> None:
    """A --no-requeue job cannot be requeued: Slurm's message, as a SlurmError."""
    fake = cluster()
    jid = fake.submit(requeue=False)
    fake.schedule()
    with pytest.raises(SlurmError, match="Requested operation is presently disabled"):
        fake.requeue(jid)


def test_signals_are_recorded_with_time_and_target() -> None:
    """Each delivered signal is kept for assertions."""
    fake = cluster()
    jid = fake.submit()
    fake.schedule(1003)
    fake.signal([jid], "USR2")
    (rec,) = fake.signals
    assert (rec.job_id, rec.signal, rec.target.value, rec.time) == (jid, "USR2", "full", 1003)


def test_failure_injection_then_recovery() -> None:
    """fail_snapshots makes the next snapshots raise like a controller outage, then recovers."""
    fake = cluster()
    fake.fail_snapshots = 2
    for _ in range(2):
        with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
            fake.snapshot()
    assert isinstance(fake.snapshot(), ClusterSnapshot)


def test_same_inputs_same_snapshots() -> None:
    """Two fakes driven alike produce equal snapshots (no hidden randomness or wall clock)."""
    def run() -> ClusterSnapshot:
        fake = cluster(requeue_delay=3)
        for i in range(6):
            fake.submit(name=f"j{i}", gpus_per_node=i % 3 + 2, priority=i * 7 % 5)
        fake.schedule(1001)
        fake.requeue([1, 2, 3])
        fake.schedule(1005)
        return fake.snapshot()
    assert run() == run()


def test_bad_driving_is_refused() -> None:
    """Clock going back, unknown partition and non-terminal finish states are refused."""
    fake = cluster()
    with pytest.raises(ValueError, match="time cannot go back"):
        fake.advance(10)
    with pytest.raises(SlurmError, match="invalid partition specified: gpu"):
        fake.submit(partition="gpu")
    jid = fake.submit()
    with pytest.raises(ValueError, match="terminal state"):
        fake.finish(jid, JobState.RUNNING)


def test_node_gpu_accounting() -> None:
    """Nodes report used GPUs and a state derived from their allocations."""
    fake = cluster()
    fake.submit(gpus_per_node=3)
    fake.schedule()
    n1, n2 = fake.snapshot().nodes
    assert (n1.gpus_used, n1.state, n2.gpus_used, n2.state) == (3, "MIXED", 0, "IDLE")

