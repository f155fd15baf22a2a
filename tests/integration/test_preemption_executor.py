"""The executor on the real testbed: toy training jobs saved, requeued and resumed through it.

Run against a running testbed: ``HAI_TESTBED_STATE_DIR=DIR pytest tests/integration -k
preemption``, or let the session fixture start one (4 nodes x 8 GPUs, leaf1 = n1,n2).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import Testbed
from preempt_support import Bed, bed_for, bit_identical

from hai_slurm.priority.demo.scenario import steps_lost, toy_runs
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.slurm_plugins.types import Reservation

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


def test_toy_job_preempted_twice_through_the_executor_is_bit_identical(bed: Bed) -> None:
    """A LOW job on all 32 GPUs gives way twice to a HIGH job; 0 steps lost, same result."""
    steps = 320
    victim = bed.toy("victim", steps=steps, sbatch=["-N4", "--gres=gpu:8"])
    bed.wait(victim, "RUNNING")
    for round_ in range(2):
        bed.wait_progress(victim, 30, timeout=bed.testbed.shape.cred_expire + 30, run=round_)
        urgent = bed.toy(f"urgent{round_}", steps=10, priority="HIGH", account="team-b",
                         sbatch=["-N1", "--gres=gpu:8"])
        result = bed.executor().run(ExecutionRequest(urgent.job_id, (victim.job_id,),
                                                     nodes=("n1",)), bed.slurm.snapshot())
        assert result.state is PlanState.DONE, result.note
        assert result.beneficiary_started
        bed.wait(urgent, "COMPLETED", timeout=30)
    bed.wait(victim, "COMPLETED", timeout=bed.testbed.shape.cred_expire + 60)
    runs = toy_runs(victim)
    assert [r.number for r in runs] == [0, 1, 2]
    assert steps_lost(runs) == [0, 0]
    assert bit_identical(victim, steps)
    assert bed.held_jobs() == []


def test_sixteen_gpus_under_one_leaf_from_four_victims(bed: Bed) -> None:
    """Four 4-GPU LOW jobs on n1+n2 (leaf1) all save and are requeued; the 16-GPU HIGH job
    starts on exactly those nodes; a competing NORMAL job that fits is kept off; the four
    resume later having lost nothing."""
    victims = [bed.toy(f"v{i}", sbatch=["-N1", "--gres=gpu:4", f"--nodelist=n{1 + i // 2}"])
               for i in range(4)]
    fillers = [bed.toy(f"f{n}", sbatch=["-N1", "--gres=gpu:8", f"--nodelist=n{n}"])
               for n in (3, 4)]
    for job in [*victims, *fillers]:
        bed.wait(job, "RUNNING")
    for v in victims:
        bed.wait_progress(v, 20)
    competitor = bed.toy("competitor", steps=20, priority="NORMAL",
                         sbatch=["-N1", "--gres=gpu:4"])
    bene = bed.toy("bene", steps=40, priority="HIGH", account="team-b",
                   sbatch=["-N2", "--gres=gpu:8"])
    request = ExecutionRequest(bene.job_id, tuple(v.job_id for v in victims),
                               nodes=("n1", "n2"),
                               deadlines=dict.fromkeys((v.job_id for v in victims), 20.0))
    result = bed.executor().run(request, bed.slurm.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert set(result.requeued) == {v.job_id for v in victims}
    assert bed.nodes_of(bene) == {"n1", "n2"} or bed.facts(bene).state == "COMPLETED"
    bed.wait(bene, "COMPLETED", timeout=30)
    assert bed.facts(competitor).state in ("PENDING", "RUNNING", "COMPLETED")
    for v in victims:
        facts = bed.wait(v, "RUNNING", timeout=bed.testbed.shape.cred_expire + 30)
        assert facts.restart_count == 1
    for v in victims:
        bed.wait_progress(v, 5, run=1)
        assert steps_lost(toy_runs(v)) == [0], toy_runs(v)
    assert bed.held_jobs() == []
    plan = bed.repo.get_plan(result.plan_id)
    assert {v.state for v in plan.victims} == {VictimState.REQUEUED}
    assert [s.to_state for s in plan.steps] == [PlanState.PLANNED, PlanState.SIGNALLED,
                                                PlanState.ALL_ACKED, PlanState.REQUEUED,
                                                PlanState.DONE]


def test_two_plans_on_one_node_share_one_reservation(bed: Bed) -> None:
    """Two HIGH 4-GPU jobs each preempt one of the two 4-GPU LOW jobs on n1, the second plan
    started while the first still waits. Slurm refuses a second reservation on n1, so the
    second plan joins the first one's: one reservation, both beneficiaries linked to it,
    nobody held, a competing NORMAL job kept off n1; both start on n1, the reservation ends
    with the last plan, and both victims resume having lost nothing."""
    victims = [bed.toy(f"v{i}", sbatch=["-N1", "--gres=gpu:4", "--nodelist=n1"],
                       train=["--save-seconds", str(2 + 4 * i)]) for i in range(2)]
    fillers = [bed.toy(f"f{n}", sbatch=["-N1", "--gres=gpu:8", f"--nodelist=n{n}"])
               for n in (2, 3, 4)]
    for job in [*victims, *fillers]:
        bed.wait(job, "RUNNING")
    for v in victims:
        bed.wait_progress(v, 20)
    benes = [bed.toy(f"bene{i}", steps=40, priority="HIGH", account="team-b",
                     sbatch=["-N1", "--gres=gpu:4"]) for i in range(2)]
    competitor = bed.toy("competitor", steps=20, priority="NORMAL",
                         sbatch=["-N1", "--gres=gpu:4"])
    ex = bed.executor()
    plans = [ex.start(ExecutionRequest(b.job_id, (v.job_id,), nodes=("n1",),
                                       deadlines={v.job_id: 30.0}), bed.slurm.snapshot())
             for b, v in zip(benes, victims, strict=True)]
    (resv,) = _standing(bed)   # (an ended one lingers ~20 s: an earlier test's)
    assert resv.nodes == ("n1",)
    assert [bed.facts(b).reservation for b in benes] == [resv.name, resv.name]
    deadline = time.monotonic() + 90
    while ex.has_open_plans():
        assert time.monotonic() < deadline, [bed.repo.get_plan(p) for p in plans]
        assert not bed.facts(competitor).held
        assert "n1" not in bed.nodes_of(competitor)   # kept off while the plans stand
        time.sleep(0.2)
        ex.reconcile(bed.slurm.snapshot())
    for p in plans:
        assert bed.repo.get_plan(p).state is PlanState.DONE, bed.repo.get_plan(p)
    for b in benes:
        assert bed.nodes_of(b) == {"n1"} or bed.facts(b).state == "COMPLETED"
    assert _standing(bed) == []
    for v in victims:
        bed.wait(v, "RUNNING", timeout=bed.testbed.shape.cred_expire + 60)
        bed.wait_progress(v, 5, run=1)
        assert steps_lost(toy_runs(v)) == [0], toy_runs(v)
    assert bed.held_jobs() == []


def _standing(bed: Bed) -> list[Reservation]:
    """The guard's reservations that have not ended (one ended within its first second ends
    2 s later: ``end_reservation``)."""
    return [r for r in bed.slurm.reservations("hai-plan-")
            if r.end_time is None or r.end_time > time.time() + 5]


def test_one_victim_never_acknowledges_nothing_is_requeued(bed: Bed) -> None:
    """Three victims acknowledge and keep running, one never answers: plan aborted, all four
    still run (no restart), the beneficiary keeps waiting, the miss is recorded."""
    victims = [bed.toy(f"v{i}", sbatch=["-N1", "--gres=gpu:8"],
                       train=["--ignore-requests"] if i == 2 else ["--on-request", "continue"])
               for i in range(4)]
    for v in victims:
        bed.wait(v, "RUNNING")
    bene = bed.toy("bene", steps=20, priority="HIGH", account="team-b",
                   sbatch=["-N4", "--gres=gpu:8"])
    request = ExecutionRequest(bene.job_id, tuple(v.job_id for v in victims),
                               nodes=("n1", "n2", "n3", "n4"),
                               deadlines=dict.fromkeys((v.job_id for v in victims), 4.0),
                               on_miss=DeadlineAction.ABORT)  # the default is force
    result = bed.executor().run(request, bed.slurm.snapshot())
    assert result.state is PlanState.ABORTED
    assert result.missed == (victims[2].job_id,)
    assert result.requeued == ()
    for v in victims:
        facts = bed.facts(v)
        assert facts.state == "RUNNING" and facts.restart_count == 0, facts
    assert bed.facts(bene).state == "PENDING"
    assert bed.held_jobs() == []
    plan = bed.repo.get_plan(result.plan_id)
    assert {v.job_id: v.state for v in plan.victims}[victims[2].job_id] is VictimState.MISSED
    notes = [a.message for a in bed.repo.audit_entries(plan_id=result.plan_id)]
    assert any(f"victim {victims[2].job_id} missed its deadline" in n for n in notes), notes
    assert "continuing" in victims[0].output.read_text()


def test_a_save_in_progress_is_waited_for_not_interrupted(bed: Bed) -> None:
    """The victim's save takes 6 s, its deadline is 3 s: the executor sees phase 'saving',
    waits, and requeues it once the save is acknowledged; nothing is lost."""
    victim = bed.toy("slow", sbatch=["-N4", "--gres=gpu:8"], train=["--save-seconds", "6"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 20)
    bene = bed.toy("bene", steps=10, priority="HIGH", account="team-b",
                   sbatch=["-N1", "--gres=gpu:8"])
    request = ExecutionRequest(bene.job_id, (victim.job_id,), nodes=("n1",),
                               deadlines={victim.job_id: 3.0})
    result = bed.executor(saving_extension=30.0).run(request, bed.slurm.snapshot())
    assert result.state is PlanState.DONE, result.note
    assert result.ack_seconds[victim.job_id] > 5.5, result
    bed.wait(victim, "RUNNING", timeout=bed.testbed.shape.cred_expire + 40)
    bed.wait_progress(victim, 3, run=1)
    assert steps_lost(toy_runs(victim)) == [0]


def test_corrupted_newest_checkpoint_resumes_from_the_previous(bed: Bed) -> None:
    """After the executor's plan, the acknowledged checkpoint is damaged before the victim
    restarts: it says which file it skipped and why, resumes from the periodic one before, and
    still ends bit-identical (the lost steps are redone)."""
    steps = 200
    victim = bed.toy("victim", steps=steps, sbatch=["-N4", "--gres=gpu:8"],
                     train=["--save-every", "40"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 50)
    urgent = bed.toy("urgent", steps=10, priority="HIGH", account="team-b",
                     sbatch=["-N1", "--gres=gpu:8"])
    result = bed.executor().run(ExecutionRequest(urgent.job_id, (victim.job_id,),
                                                 nodes=("n1",)), bed.slurm.snapshot())
    assert result.state is PlanState.DONE, result.note
    acked = result.ack_steps[victim.job_id]
    assert acked is not None and acked > 40
    newest = sorted(victim.checkpoints.glob("ckpt-*.pkl"))[-1]
    assert newest.name.endswith(f"-step{acked}.pkl")
    newest.write_bytes(newest.read_bytes()[:-10] + b"0123456789")
    bed.wait(victim, "COMPLETED", timeout=bed.testbed.shape.cred_expire + 60)
    out = victim.output.read_text()
    assert f"skipping checkpoint {newest.name} (step {acked}): sha256 mismatch" in out, out
    runs = toy_runs(victim)
    assert runs[1].start_step == acked - acked % 40  # the periodic checkpoint before it
    assert bit_identical(victim, steps)


def test_redis_message_reaches_a_subscriber(bed: Bed) -> None:
    """With Redis configured, each victim's channel gets the request (besides the signal)."""
    import json
    import threading
    import time

    import redis

    from hai_slurm.priority.executor.notify import RedisNotifier, channel

    url = bed.testbed.redis_url
    victim = bed.toy("victim", sbatch=["-N4", "--gres=gpu:8"])
    bed.wait(victim, "RUNNING")
    bed.wait_progress(victim, 10)
    sub = redis.Redis.from_url(url).pubsub()
    sub.subscribe(channel(victim.job_id))
    got: list[dict[str, object]] = []

    def listen() -> None:
        for message in sub.listen():
            if message["type"] == "message":
                got.append(json.loads(message["data"]))
                return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    urgent = bed.toy("urgent", steps=10, priority="HIGH", account="team-b",
                     sbatch=["-N1", "--gres=gpu:8"])
    ex = bed.executor(default_deadline=45.0)
    ex.notifier = RedisNotifier(url)
    t0 = time.time()
    result = ex.run(ExecutionRequest(urgent.job_id, (victim.job_id,), nodes=("n1",)),
                    bed.slurm.snapshot())
    thread.join(10)
    sub.close()
    assert result.state is PlanState.DONE
    (message,) = got
    deadline = message.pop("deadline")
    assert isinstance(deadline, float) and t0 + 45.0 <= deadline <= t0 + 50.0
    assert message == {"version": 1, "kind": "checkpoint", "job_id": str(victim.job_id),
                       "plan_id": result.plan_id, "signal": "USR2"}
