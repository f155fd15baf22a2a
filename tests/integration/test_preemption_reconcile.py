"""The executor as a reconcile loop inside ``hai-slurm daemon`` (the real command) on the testbed.

Plans never block the daemon's cycle: two urgent jobs submitted 2 s apart, whose victims take
20 s to save, both start within max(save) + 3 s of their submission while the daemon keeps
cycling; a daemon SIGKILLed while a plan waits is replaced by a new one that finishes the plan.
Each test ends with: no job lost, none left held, every victim resumed from its newest
checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import DaemonProcess, band, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.demo.scenario import ToyJob, steps_lost, toy_runs
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository

pytestmark = pytest.mark.slow
SAVE = 20.0


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)



def _fill(bed: Bed) -> list[ToyJob]:
    """Four LOW 8-GPU toy jobs whose checkpoint takes SAVE seconds, running and past 20 steps."""
    lows = [bed.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"], grace=int(SAVE) + 30,
                    train=["--save-seconds", str(SAVE)]) for i in range(4)]
    for job in lows:
        bed.wait(job, "RUNNING", timeout=60)
    for job in lows:
        bed.wait_progress(job, 20, timeout=60)
    return lows


def _ends_well(bed: Bed, repo: Repository, lows: list[ToyJob]) -> None:
    """No victim lost or left held; each resumed from the checkpoint it saved (0 steps lost)."""
    victims = {v.job_id for p in repo.history() for v in p.victims}
    assert victims, "no victim"
    for p in repo.history():
        assert {v.state for v in p.victims} == {VictimState.REQUEUED}, p
    for low in lows:
        if low.job_id in victims:
            bed.wait(low, "RUNNING", timeout=bed.testbed.shape.cred_expire + 60)
            bed.wait_progress(low, 3, run=1, timeout=60)
            assert steps_lost(toy_runs(low)) == [0], toy_runs(low)
    assert bed.held_jobs() == []


def test_two_urgent_jobs_2s_apart_are_preempted_for_side_by_side(bed: Bed, tmp_path: Path
                                                                  ) -> None:
    """Two HIGH jobs submitted 2 s apart; their victims take 20 s to save. Both plans are open
    at once, so the second job waits one save, not two, and the daemon goes on cycling while
    they wait. (Before: the first plan blocked the daemon for its whole wait, so the second
    job waited about twice as long.) The speed target (both within the save + 3 s) is
    bench/preemption's scenario (d), not a timed test."""
    lows = _fill(bed)
    config = daemon_config(tmp_path, bed.testbed, lock_ttl="10s")
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    try:
        daemon.wait_log("preemption on", timeout=30)
        first = bed.toy("urgent1", steps=40, priority="HIGH", account="team-b",
                        sbatch=["-N1", "--gres=gpu:8"])
        time.sleep(2.0)
        second = bed.toy("urgent2", steps=40, priority="HIGH", account="team-b",
                         sbatch=["-N1", "--gres=gpu:8"])
        wait_until(lambda: len(repo.unfinished_plans()) == 2 or None, 10,
                   f"the two plans were not open together; log:\n{daemon.text()[-3000:]}")
        cycles_before = daemon.text().count("cycle: ")
        for job in (first, second):
            bed.wait(job, "RUNNING", "COMPLETED", timeout=SAVE + 30)
        cycles = daemon.text().count("cycle: ") - cycles_before
        snap = bed.slurm.snapshot()
        waits = {}
        for job in (first, second):
            j = snap.job(job.job_id)
            assert j is not None and j.start_time is not None and j.submit_time is not None
            waits[job.name] = j.start_time - j.submit_time
        print(f"urgent submit -> start: {waits} s (save {SAVE:g} s); {cycles} cycles meanwhile")
        assert all(w < 2 * SAVE for w in waits.values()), waits  # one save each, not two
        assert cycles >= 10, f"the daemon cycled only {cycles} times while the plans waited"
        wait_until(lambda: all(p.state is PlanState.DONE for p in repo.history()) or None, 30,
                   f"plans not done: {repo.history()}")
        assert len(repo.history()) == 2
        _ends_well(bed, repo, lows)
    finally:
        daemon.kill()


def test_daemon_sigkilled_while_a_plan_waits_a_new_daemon_finishes_it(bed: Bed, tmp_path: Path
                                                                      ) -> None:
    """SIGKILL the daemon 3 s into the victim's 20-s save; a new daemon takes the lease, steps
    the open plan it finds in the store: the victim is requeued, the urgent job runs, nothing
    stays held, the victim resumes losing nothing."""
    lows = _fill(bed)
    config = daemon_config(tmp_path, bed.testbed, lock_ttl="10s")
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    try:
        daemon.wait_log("preemption on", timeout=30)
        urgent = bed.toy("urgent", steps=40, priority="HIGH", account="team-b",
                         sbatch=["-N1", "--gres=gpu:8"])
        wait_until(lambda: [p for p in repo.unfinished_plans()
                            if p.state is PlanState.SIGNALLED] or None, 15,
                   f"no plan signalled; log:\n{daemon.text()[-3000:]}")
        time.sleep(3.0)
        daemon.kill()
        assert repo.unfinished_plans(), "the plan ended before the kill"
        second = DaemonProcess.start(config, tmp_path / "daemon2.log", bed.testbed)
        try:
            bed.wait(urgent, "RUNNING", "COMPLETED", timeout=SAVE + 60)
            wait_until(lambda: (not repo.unfinished_plans()) or None, 30,
                       f"plan not finished; log:\n{second.text()[-3000:]}")
            (plan,) = repo.history()
            assert plan.state is PlanState.DONE, plan
            _ends_well(bed, repo, lows)
        finally:
            second.kill()
    finally:
        daemon.kill()


def test_victim_that_never_acknowledges_does_not_stall_the_queue(bed: Bed, tmp_path: Path
                                                                 ) -> None:
    """Every LOW job ignores checkpoint requests (periodic saves every 20 steps) and has a 5-s
    grace. The daemon's default miss policy (force) requeues the victim at its deadline: the
    urgent job starts after one grace (not after repeated aborts), no plan is aborted or
    repeated, and
    the victim resumes from its newest periodic checkpoint (fewer than 20 steps lost).
    (Before: abort by default, the same victim chosen again after each abort, the queue
    stalled.)"""
    lows = [bed.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"], grace=5,
                    train=["--ignore-requests", "--save-every", "20"]) for i in range(4)]
    for job in lows:
        bed.wait(job, "RUNNING", timeout=60)
    for job in lows:
        bed.wait_progress(job, 30, timeout=60)
    config = daemon_config(tmp_path, bed.testbed, lock_ttl="10s")
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    try:
        daemon.wait_log("preemption on", timeout=30)
        urgent = bed.toy("urgent", steps=40, priority="HIGH", account="team-b",
                         sbatch=["-N1", "--gres=gpu:8"])
        bed.wait(urgent, "RUNNING", "COMPLETED", timeout=40)
        j = bed.slurm.snapshot().job(urgent.job_id)
        if j is not None and j.start_time is not None and j.submit_time is not None:
            print(f"urgent submit -> start with a victim that never acks: "
                  f"{j.start_time - j.submit_time} s (grace 5 s)")
            assert j.start_time - j.submit_time < 30  # one grace, not a stall
        wait_until(lambda: (repo.history() and not repo.unfinished_plans()) or None, 30,
                   f"plan not finished; log:\n{daemon.text()[-3000:]}")
        (plan,) = repo.history()
        assert plan.state is PlanState.DONE, plan
        assert [s.to_state.value for s in plan.steps] == \
            ["planned", "signalled", "forced", "requeued", "done"], plan.steps
        (victim,) = plan.victims
        assert victim.state is VictimState.REQUEUED and victim.acked_at is None
        low = next(x for x in lows if x.job_id == victim.job_id)
        bed.wait(low, "RUNNING", timeout=bed.testbed.shape.cred_expire + 60)
        bed.wait_progress(low, 3, run=1, timeout=60)
        runs = toy_runs(low)
        assert runs[1].start_step % 20 == 0 and runs[1].start_step > 0, runs
        assert 0 <= steps_lost(runs)[0] < 20 + 5, runs  # since its newest periodic save
        assert bed.held_jobs() == []
    finally:
        daemon.kill()


def test_a_job_submitted_during_the_ack_wait_gets_its_priority_and_not_the_freed_node(
        bed: Bed, tmp_path: Path) -> None:
    """A HIGH job needs two nodes; its LOW victims save in 4 s and 16 s, so for ~12 s one
    target node is free while the other victim still saves. A NORMAL 1-node job submitted
    during that wait is never held: the daemon writes its priority within one cycle, and it
    does not start on the target nodes (Slurm keeps the plan's reservation ``hai-plan-<id>``
    for the beneficiary), which gets them. (Before: the guard held it for the whole plan;
    before that, it backfilled onto the freed node.)"""
    # Two NORMAL jobs the newcomer cannot preempt (a lower class is needed), two LOW ones
    # (under one leaf: n3, n4) that the HIGH job preempts.
    saves, classes = (20, 20, 4, 16), ("NORMAL", "NORMAL", "LOW", "LOW")
    lows = [bed.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"], grace=40, priority=c,
                    train=["--save-seconds", str(s)])
            for i, (s, c) in enumerate(zip(saves, classes, strict=True))]
    for job in lows:
        bed.wait(job, "RUNNING", timeout=60)
    for job in lows:
        bed.wait_progress(job, 20, timeout=60)
    config = daemon_config(tmp_path, bed.testbed, lock_ttl="10s")
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed)
    repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
    try:
        daemon.wait_log("preemption on", timeout=30)
        urgent = bed.toy("urgent", steps=40, priority="HIGH", account="team-b",
                         sbatch=["-N2", "--gres=gpu:8"])
        (plan,) = wait_until(lambda: [p for p in repo.unfinished_plans()
                                      if p.state is PlanState.SIGNALLED] or None, 20,
                             f"no plan signalled; log:\n{daemon.text()[-3000:]}")
        targets = {n for v in plan.victims for low in lows if low.job_id == v.job_id
                   for n in bed.nodes_of(low)}
        assert len(targets) == 2, (targets, plan)
        name = f"hai-plan-{plan.plan_id}-"   # + the second it was made
        resv = [r for r in bed.slurm.reservations(name) if r.end_time and r.end_time > time.time()]
        assert [set(r.nodes) for r in resv] == [targets], resv
        name = resv[0].name
        time.sleep(1.0)
        cycles_at_submit = daemon.text().count("cycle: ")
        submitted = time.monotonic()
        newcomer = bed.toy("newcomer", steps=40, priority="NORMAL", account="team-b",
                           sbatch=["-N1", "--gres=gpu:8"])
        written_after: tuple[float, int] | None = None
        seen_on: set[str] = set()
        while repo.unfinished_plans():
            job = bed.slurm.snapshot().job(newcomer.job_id)
            assert job is not None and not job.held, job
            seen_on |= set(job.nodes)
            if written_after is None and band(bed.testbed, str(newcomer.job_id)) == "NORMAL":
                written_after = (time.monotonic() - submitted,
                                 daemon.text().count("cycle: ") - cycles_at_submit)
            assert time.monotonic() - submitted < 120, "the plan did not end"
            time.sleep(0.2)
        print(f"newcomer's priority written {written_after} (s, cycles) after its submission; "
              f"plan {plan.plan_id} on {sorted(targets)}")
        assert written_after is not None, "the newcomer's priority was not written while the " \
            "plan was open"
        assert written_after[1] <= 3, written_after  # the cycle under way, then the next
        assert not seen_on & targets, (seen_on, targets)
        (done,) = repo.history()
        assert done.state is PlanState.DONE, done
        assert bed.nodes_of(urgent) == targets
        assert bed.slurm.reservations(name) == () or \
            wait_until(lambda: bed.slurm.reservations(name) == () or None,
                       40, "the plan's reservation was not removed")
        _ends_well(bed, repo, lows)
    finally:
        daemon.kill()
