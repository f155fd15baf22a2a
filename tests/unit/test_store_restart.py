"""A daemon killed mid-plan (SIGKILL, even inside a transaction) loses nothing on restart.

The "daemon" is a child Python process that runs three cycles, starts a plan, gets one of two
acknowledgements, opens a transaction and is killed with SIGKILL before committing it. The
restarted daemon must find every counter, the tracked jobs, the unfinished plan at the step it
reached, and wait for the dead leader's lease before taking over. Runs on MariaDB too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sqlalchemy import Engine, insert
from test_store_repository import StoreCase

from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.priority.store import (
    CreditEntry,
    CycleWrite,
    PlanJob,
    PlanState,
    TrackedJob,
    VictimState,
)
from hai_slurm.priority.store.engine import make_engine, upgrade
from hai_slurm.priority.store.lock import LeaderLock
from hai_slurm.priority.store.models import FairnessEventRow
from hai_slurm.priority.store.repository import Repository

T0 = 1_790_000_000.5
TTL = 30.0
CYCLES = 3


def cycle_jobs(cycle: int) -> tuple[TrackedJob, ...]:
    """The jobs as the daemon records them in ``cycle`` (their running time grows)."""
    now = T0 + 10 * cycle
    return tuple(
        TrackedJob(
            job_id=i, team=f"team{i % 2}", user=f"user{i}", requested_class="ABOVE_NORMAL",
            effective_class="NORMAL" if cycle == CYCLES - 1 and i == 1 else "ABOVE_NORMAL",
            class_origin=ClassOrigin.DECAY if cycle == CYCLES - 1 and i == 1
            else ClassOrigin.DIRECTIVE,
            original_submit_at=T0 - 100 * i, first_seen_at=T0, updated_at=now,
            run_seconds=10.0 * cycle + i, last_state="RUNNING", preemptions=i % 3,
            checkpoint_at=now - 1.5, checkpoint_step=100 * cycle + i, priority=1000 + i,
        )
        for i in (1, 2, 3)
    )


def cycle_write(cycle: int) -> CycleWrite:
    """Everything cycle ``cycle`` writes: jobs, one event per team, a credit, a cursor value."""
    now = T0 + 10 * cycle
    return CycleWrite(
        at=now, jobs=cycle_jobs(cycle),
        events=(FairnessEvent(EventKind.PREEMPTED, "team0", "user2", now),
                FairnessEvent(EventKind.PREEMPTING, "team1", "user1", now)),
        credits=(CreditEntry("team0", 0.125 * (cycle + 1), at=now, job_id=2),),
        values=(("rr_cursor", {"LOW": f"team{cycle % 2}", "cycle": cycle}),),
    )


def run_daemon_and_die(url: str) -> None:
    """The child: lead, run the cycles, start a plan, then SIGKILL itself mid-transaction."""
    engine = upgrade(url)
    repo, lock = Repository(engine), LeaderLock(engine)
    for cycle in range(CYCLES):
        assert lock.acquire_or_renew("daemon-1", T0 + 10 * cycle, TTL)
        repo.record_cycle(cycle_write(cycle))
    at = T0 + 10 * CYCLES
    plan = repo.create_plan(
        at=at, beneficiaries=[PlanJob(9, "team1", "user9", 16)],
        victims=[PlanJob(2, "team0", "user2", 8), PlanJob(3, "team1", "user3", 8)],
        reason="job 9 needs 16 GPUs", on_miss=DeadlineAction.ABORT, deadline_at=at + 60,
    )
    repo.update_victims(plan.plan_id, [2, 3], VictimState.ASKED, at=at + 1)
    repo.transition_plan(plan.plan_id, PlanState.SIGNALLED, at=at + 1)
    repo.update_victims(plan.plan_id, [2], VictimState.ACKED, at=at + 4, ack_step=4242)
    with engine.begin() as conn:  # a write in flight when the daemon dies: must vanish
        conn.execute(insert(FairnessEventRow).values(
            team="team0", user="user2", kind=EventKind.PREEMPTED, at=at + 5))
        print(plan.plan_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def kill_daemon_mid_plan(url: str) -> int:
    """Run the child daemon to its SIGKILL; returns the id of the plan it left unfinished."""
    here = Path(__file__).resolve().parent
    code = (f"import sys; sys.path.insert(0, {str(here)!r}); import test_store_restart as t; "
            f"t.run_daemon_and_die({url!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return int(proc.stdout.strip())


class TestRestart(StoreCase):
    """Kill and restart."""

    def test_sigkill_mid_plan_keeps_everything(self, engine: Engine, store_url: str) -> None:
        """Counters, jobs, values and the unfinished plan survive; the in-flight write does not."""
        plan_id = kill_daemon_mid_plan(store_url)
        restarted = upgrade(store_url)  # what the daemon does at start
        repo, lock = Repository(restarted), LeaderLock(restarted)

        assert repo.load_jobs() == {j.job_id: j for j in cycle_jobs(CYCLES - 1)}
        assert repo.count_events("team0", EventKind.PREEMPTED, since=0) == CYCLES
        assert repo.count_events("team1", EventKind.PREEMPTING, since=T0 + 10) == CYCLES - 1
        assert repo.credit_balance("team0") == sum(0.125 * (c + 1) for c in range(CYCLES))
        assert repo.get_value("rr_cursor") == {"LOW": f"team{(CYCLES - 1) % 2}",
                                               "cycle": CYCLES - 1}

        [plan] = repo.unfinished_plans()
        assert plan.plan_id == plan_id and plan.state is PlanState.SIGNALLED
        assert {v.job_id: (v.state, v.ack_step) for v in plan.victims} == {
            2: (VictimState.ACKED, 4242), 3: (VictimState.ASKED, None)}
        assert [s.to_state for s in plan.steps] == [PlanState.PLANNED, PlanState.SIGNALLED]

        last_renewal = T0 + 10 * (CYCLES - 1)
        assert not lock.acquire_or_renew("daemon-2", last_renewal + TTL - 0.5, TTL)
        assert lock.acquire_or_renew("daemon-2", last_renewal + TTL, TTL)

        # Recovery: job 3 never acknowledged and the deadline passed -> abort, nobody requeued.
        deadline = plan.deadline_at
        assert deadline is not None
        repo.update_victims(plan_id, [3], VictimState.MISSED, at=deadline + 1)
        repo.transition_plan(plan_id, PlanState.ABORTED, at=deadline + 1,
                             note="restart: job 3 missed its deadline")
        assert repo.unfinished_plans() == []
        restarted.dispose()

    def test_dropping_the_engine_mid_cycle(self, engine: Engine, store_url: str) -> None:
        """In-process: an engine dropped inside a cycle's transaction leaves the last commit."""
        repo = Repository(engine)
        repo.record_cycle(cycle_write(0))
        with engine.connect() as conn:
            conn.begin()
            conn.execute(insert(FairnessEventRow).values(
                team="team0", user="user2", kind=EventKind.PREEMPTED, at=T0 + 1))
            conn.invalidate()  # the connection is gone without a commit, as in a crash
        engine.dispose()
        again = Repository(make_engine(store_url))
        assert again.count_events("team0", EventKind.PREEMPTED, since=0) == 1
        assert again.load_jobs() == {j.job_id: j for j in cycle_jobs(0)}
