"""Repository contract: jobs, fairness counters, protections, credits, audit, plans, history.

Every test class derives from StoreCase, whose fixtures give a freshly migrated SQLite file. The
integration module tests/integration/test_store_mariadb.py subclasses the same classes with a
``store_url`` fixture pointing at MariaDB, so this whole suite runs on both backends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import StateError
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.priority.store import (
    AuditEntry,
    CreditEntry,
    CycleWrite,
    PlanJob,
    PlanState,
    Protection,
    TrackedJob,
    VictimState,
)
from hai_slurm.priority.store.convert import job_values
from hai_slurm.priority.store.engine import default_sqlite_url, make_engine, upgrade
from hai_slurm.priority.store.models import TrackedJobRow
from hai_slurm.priority.store.repository import Repository

T0 = 1_790_000_000.25  # an epoch time with a fraction, to prove exact round trips


class StoreCase:
    """Fixtures shared by every store test class: URL -> migrated engine -> repository."""

    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        """A fresh SQLite file under the test's own directory (overridden for MariaDB)."""
        return default_sqlite_url(tmp_path)

    @pytest.fixture
    def engine(self, store_url: str) -> Iterator[Engine]:
        """An engine on a database migrated to head."""
        engine = upgrade(store_url)
        yield engine
        engine.dispose()

    @pytest.fixture
    def repo(self, engine: Engine) -> Repository:
        """The repository under test."""
        return Repository(engine)


def job(job_id: int, **changes: object) -> TrackedJob:
    """A tracked job with every field set; ``changes`` override fields."""
    fields: dict[str, object] = {
        "job_id": job_id, "team": "vision", "user": "ada", "requested_class": "HIGH",
        "effective_class": "HIGH", "class_origin": ClassOrigin.DIRECTIVE,
        "original_submit_at": T0 - 3600.5, "first_seen_at": T0 - 3500.125, "updated_at": T0,
        "run_seconds": 1234.75, "wait_seconds": 310.5, "last_state": "RUNNING", "preemptions": 2,
        "checkpoint_at": T0 - 60.5, "checkpoint_step": 9_000_000_001, "priority": 4_000_000_123,
    }
    fields.update(changes)
    return TrackedJob(**fields)  # type: ignore[arg-type]


def pjob(job_id: int, team: str, user: str = "u", gpus: int = 8) -> PlanJob:
    """A plan participant."""
    return PlanJob(job_id=job_id, team=team, user=user, gpus=gpus)


class TestJobs(StoreCase):
    """Tracked jobs are saved in batches and come back field for field."""

    def test_round_trip_keeps_every_field(self, repo: Repository) -> None:
        """All fields, including None, big ints and fractional times, survive a save and load."""
        jobs = [job(1), job(2, checkpoint_at=None, checkpoint_step=None, priority=None,
                            class_origin=ClassOrigin.AGING, last_state="PENDING")]
        repo.save_jobs(jobs)
        assert repo.load_jobs() == {1: jobs[0], 2: jobs[1]}
        assert repo.get_job(2) == jobs[1]
        assert repo.get_job(3) is None

    def test_update_changes_only_the_given_jobs(self, repo: Repository) -> None:
        """A second batch updates existing rows, inserts new ones and leaves the rest alone."""
        repo.save_jobs([job(1), job(2)])
        changed = job(2, effective_class="NORMAL", class_origin=ClassOrigin.DECAY,
                      run_seconds=1800.0, updated_at=T0 + 30)
        repo.save_jobs([changed, job(3)])
        assert repo.load_jobs() == {1: job(1), 2: changed, 3: job(3)}

    def test_cycle_forgets_finished_jobs(self, repo: Repository) -> None:
        """record_cycle removes jobs listed in forget_jobs in the same write."""
        repo.save_jobs([job(1), job(2), job(3)])
        repo.record_cycle(CycleWrite(at=T0, jobs=(job(3, run_seconds=5.0),), forget_jobs=(1, 2)))
        assert repo.load_jobs() == {3: job(3, run_seconds=5.0)}

    def test_cycle_is_all_or_nothing(self, repo: Repository) -> None:
        """A cycle whose last part violates a constraint writes none of its parts."""
        repo.save_jobs([job(1)])
        bad = CycleWrite(
            at=T0, jobs=(job(1, run_seconds=99.0), job(2)), forget_jobs=(),
            events=(FairnessEvent(EventKind.PREEMPTED, "vision", "ada", T0, plan_id=424242),),
        )
        with pytest.raises(StateError, match="recording the cycle failed"):
            repo.record_cycle(bad)  # plan 424242 does not exist: foreign key violation
        assert repo.load_jobs() == {1: job(1)}
        assert repo.count_events("vision", EventKind.PREEMPTED, since=0) == 0

    def test_readers_do_not_wait_for_a_writer(self, repo: Repository, store_url: str) -> None:
        """While another process holds a write transaction, reads answer at once (old snapshot)."""
        repo.save_jobs([job(1)])
        other = make_engine(store_url)
        try:
            with other.begin() as conn:  # an uncommitted cycle of "another daemon"
                conn.execute(insert(TrackedJobRow), [job_values(job(2))])
                started = time.monotonic()
                assert repo.load_jobs() == {1: job(1)}
                assert repo.history() == []
                assert time.monotonic() - started < 2.0
        finally:
            other.dispose()
        assert set(repo.load_jobs()) == {1, 2}

    def test_kept_jobs_follow_own_writes(self, repo: Repository) -> None:
        """tracked_jobs (the copy kept between cycles) equals a fresh load after each of this
        repository's writes: saves, a cycle's records and forgets, a cycle that failed."""
        assert repo.tracked_jobs() == {}
        repo.save_jobs([job(1), job(2), job(3)])
        assert repo.tracked_jobs() == repo.load_jobs() == {i: job(i) for i in (1, 2, 3)}
        repo.record_cycle(CycleWrite(at=T0 + 30, jobs=(job(3, run_seconds=5.0,
                                                           updated_at=T0 + 30),),
                                     forget_jobs=(1,)))
        assert repo.tracked_jobs() == repo.load_jobs() == {
            2: job(2), 3: job(3, run_seconds=5.0, updated_at=T0 + 30)}
        bad = CycleWrite(at=T0 + 60, jobs=(job(2, priority=1),),
                         events=(FairnessEvent(EventKind.PREEMPTED, "vision", "ada", T0,
                                               plan_id=424242),))
        with pytest.raises(StateError):
            repo.record_cycle(bad)
        assert repo.tracked_jobs() == repo.load_jobs()
        assert repo.tracked_jobs()[2] == job(2)
        tracked = repo.tracked_jobs()
        tracked.pop(2)  # the caller's dict is its own
        assert 2 in repo.tracked_jobs()

    def test_kept_jobs_see_another_writer(self, repo: Repository, engine: Engine) -> None:
        """A change by another writer (another daemon that led meanwhile, on the same
        database) is never hidden by the kept copy: a row rewritten, one rewritten with only
        its priority changed (same updated_at), one inserted, one deleted."""
        repo.save_jobs([job(1), job(2), job(3)])
        assert repo.tracked_jobs() == {i: job(i) for i in (1, 2, 3)}
        other = Repository(engine)
        other.record_cycle(CycleWrite(at=T0 + 30, jobs=(
            job(1, effective_class="LOW", updated_at=T0 + 30), job(4)), forget_jobs=(3,)))
        assert repo.tracked_jobs() == {1: job(1, effective_class="LOW", updated_at=T0 + 30),
                                       2: job(2), 4: job(4)}
        other.save_jobs([job(2, priority=777)])
        assert repo.tracked_jobs()[2].priority == 777
        other.save_jobs([job(2, priority=777, preemptions=3, wait_seconds=9.0)])
        assert repo.tracked_jobs()[2] == job(2, priority=777, preemptions=3, wait_seconds=9.0)
        repo.forget_kept_jobs()
        assert repo.tracked_jobs() == repo.load_jobs()

    def test_large_batch_in_one_cycle(self, repo: Repository) -> None:
        """Thousands of jobs are inserted, then updated, by one cycle each."""
        first = tuple(job(i) for i in range(1, 3001))
        repo.record_cycle(CycleWrite(at=T0, jobs=first))
        second = tuple(job(i, run_seconds=float(i)) for i in range(1, 3001, 2))
        repo.record_cycle(CycleWrite(at=T0 + 30, jobs=second))
        loaded = repo.load_jobs()
        assert len(loaded) == 3000
        assert loaded[1].run_seconds == 1.0
        assert loaded[2].run_seconds == job(2).run_seconds
        assert loaded[2999].run_seconds == 2999.0


class TestFairness(StoreCase):
    """Fairness events are counted over a rolling window, per team and per user."""

    @pytest.fixture
    def events(self, repo: Repository) -> None:
        """Vision lost jobs at T0+100, +200, +300 (two by ada); nlp preempted at +250."""
        repo.add_events([
            FairnessEvent(EventKind.PREEMPTED, "vision", "ada", T0 + 100),
            FairnessEvent(EventKind.PREEMPTED, "vision", "bob", T0 + 200),
            FairnessEvent(EventKind.PREEMPTED, "vision", "ada", T0 + 300),
            FairnessEvent(EventKind.PREEMPTING, "nlp", "cy", T0 + 250),
        ])

    @pytest.mark.usefixtures("events")
    def test_window_start_is_inclusive(self, repo: Repository) -> None:
        """An event exactly at ``since`` counts; earlier ones do not."""
        assert repo.count_events("vision", EventKind.PREEMPTED, since=T0 + 200) == 2
        assert repo.count_events("vision", EventKind.PREEMPTED, since=T0 + 200.001) == 1
        assert repo.count_events("vision", EventKind.PREEMPTED, since=T0) == 3
        assert repo.count_events("vision", EventKind.PREEMPTED, since=T0 + 301) == 0

    @pytest.mark.usefixtures("events")
    def test_counts_by_kind_team_and_user(self, repo: Repository) -> None:
        """Kinds, teams and users are counted separately."""
        assert repo.count_events("vision", EventKind.PREEMPTING, since=T0) == 0
        assert repo.count_events("nlp", EventKind.PREEMPTING, since=T0) == 1
        assert repo.count_events("vision", EventKind.PREEMPTED, since=T0, user="ada") == 2
        assert repo.event_counts(since=T0 + 150) == {
            ("vision", EventKind.PREEMPTED): 2, ("nlp", EventKind.PREEMPTING): 1,
        }
        assert repo.user_event_counts(since=T0) == {
            ("ada", EventKind.PREEMPTED): 2, ("bob", EventKind.PREEMPTED): 1,
            ("cy", EventKind.PREEMPTING): 1,
        }

    @pytest.mark.usefixtures("events")
    def test_events_in_the_window_oldest_first(self, repo: Repository) -> None:
        """events_since returns the window's events, oldest first, fields intact."""
        assert repo.events_since(T0 + 200) == [
            FairnessEvent(EventKind.PREEMPTED, "vision", "bob", T0 + 200),
            FairnessEvent(EventKind.PREEMPTING, "nlp", "cy", T0 + 250),
            FairnessEvent(EventKind.PREEMPTED, "vision", "ada", T0 + 300),
        ]

    @pytest.mark.usefixtures("events")
    def test_prune_drops_only_old_events(self, repo: Repository) -> None:
        """Pruning before T0+250 removes the two older events and keeps the rest."""
        assert repo.prune_events(before=T0 + 250) == 2
        assert repo.count_events("vision", EventKind.PREEMPTED, since=0) == 1
        assert repo.count_events("nlp", EventKind.PREEMPTING, since=0) == 1


class TestProtectionsAndCredits(StoreCase):
    """Protections expire by time; credits are a ledger summed per team."""

    def test_protection_is_active_until_it_expires(self, repo: Repository) -> None:
        """A protection counts strictly before its end time."""
        repo.protect(Protection("vision", until=T0 + 600, granted_at=T0, reason="preempted 4x"))
        assert set(repo.active_protections(T0 + 599.9)) == {"vision"}
        assert repo.active_protections(T0 + 600) == {}

    def test_protection_is_never_shortened(self, repo: Repository) -> None:
        """A later, shorter protection keeps the longer one; a longer one extends it."""
        repo.protect(Protection("vision", until=T0 + 600, granted_at=T0))
        repo.protect(Protection("vision", until=T0 + 300, granted_at=T0 + 10))
        assert repo.active_protections(T0)["vision"].until == T0 + 600
        repo.protect(Protection("vision", until=T0 + 900, granted_at=T0 + 20, reason="again"))
        assert repo.active_protections(T0)["vision"] == Protection(
            "vision", until=T0 + 900, granted_at=T0 + 20, reason="again")

    def test_credit_ledger_sums_per_team(self, repo: Repository) -> None:
        """Credits add up per team; a payback is a negative line; unknown teams owe nothing."""
        repo.add_credit(CreditEntry("vision", 1.5, at=T0, job_id=7, reason="lost 11 min x 8 GPU"))
        repo.add_credit(CreditEntry("vision", 0.25, at=T0 + 1))
        repo.add_credit(CreditEntry("nlp", 2.0, at=T0 + 2))
        repo.add_credit(CreditEntry("vision", -0.75, at=T0 + 3, reason="boost used"))
        assert repo.credit_balance("vision") == pytest.approx(1.0)
        assert repo.credit_balance("audio") == 0.0
        assert repo.credit_balances() == pytest.approx({"vision": 1.0, "nlp": 2.0})


class TestAuditAndValues(StoreCase):
    """The audit log and named values keep JSON data intact."""

    def test_audit_newest_first_with_data(self, repo: Repository) -> None:
        """Entries come back newest first with their data and can be filtered by plan."""
        repo.audit(AuditEntry(T0, "promotion", "job 5 LOW -> BELOW_NORMAL", team="nlp", job_id=5,
                              data={"waited_s": 7200.5, "bound_s": 7200}))
        repo.audit(AuditEntry(T0 + 1, "plan", "plan 3 aborted", plan_id=3, data={"missed": [9]}))
        entries = repo.audit_entries(limit=10)
        assert [e.kind for e in entries] == ["plan", "promotion"]
        assert entries[1].data == {"waited_s": 7200.5, "bound_s": 7200}
        assert [e.message for e in repo.audit_entries(plan_id=3)] == ["plan 3 aborted"]
        assert len(repo.audit_entries(limit=1)) == 1

    def test_values_are_stored_and_replaced(self, repo: Repository) -> None:
        """A value written by a cycle is read back, and a later cycle replaces it."""
        assert repo.get_value("rr_cursor") is None
        repo.record_cycle(CycleWrite(at=T0, values=(("rr_cursor", {"LOW": "nlp"}),)))
        assert repo.get_value("rr_cursor") == {"LOW": "nlp"}
        repo.put_value("rr_cursor", {"LOW": "vision", "BELOW_NORMAL": None}, at=T0 + 30)
        assert repo.get_value("rr_cursor") == {"LOW": "vision", "BELOW_NORMAL": None}


class TestPlans(StoreCase):
    """Plans follow their state machine; every step is recorded; illegal moves are refused."""

    def new_plan(self, repo: Repository, on_miss: DeadlineAction = DeadlineAction.ABORT) -> int:
        """A plan: urgent job 100 (team ops) needs the GPUs of jobs 1 and 2 (teams a and b)."""
        plan = repo.create_plan(
            at=T0, beneficiaries=[pjob(100, "ops", gpus=16)],
            victims=[pjob(1, "a"), pjob(2, "b")], reason="job 100 (VERY_HIGH) waits for 16 GPUs",
            on_miss=on_miss, deadline_at=T0 + 60,
        )
        assert plan.state is PlanState.PLANNED
        assert {v.state for v in plan.victims} == {VictimState.CHOSEN}
        return plan.plan_id

    def test_happy_path_records_every_step(self, repo: Repository) -> None:
        """planned -> signalled -> all_acked -> requeued -> done, with victim times and steps."""
        pid = self.new_plan(repo)
        repo.update_victims(pid, [1, 2], VictimState.ASKED, at=T0 + 1)
        repo.transition_plan(pid, PlanState.SIGNALLED, at=T0 + 1)
        repo.update_victims(pid, [1], VictimState.ACKED, at=T0 + 5, ack_step=1200)
        repo.update_victims(pid, [2], VictimState.ACKED, at=T0 + 7, ack_step=77)
        repo.transition_plan(pid, PlanState.ALL_ACKED, at=T0 + 7)
        repo.update_victims(pid, [1, 2], VictimState.REQUEUED, at=T0 + 8)
        repo.transition_plan(pid, PlanState.REQUEUED, at=T0 + 8)
        done = repo.transition_plan(pid, PlanState.DONE, at=T0 + 9, note="job 100 started")
        assert done.state is PlanState.DONE and done.updated_at == T0 + 9
        assert [(s.from_state, s.to_state) for s in done.steps] == [
            (None, PlanState.PLANNED), (PlanState.PLANNED, PlanState.SIGNALLED),
            (PlanState.SIGNALLED, PlanState.ALL_ACKED), (PlanState.ALL_ACKED, PlanState.REQUEUED),
            (PlanState.REQUEUED, PlanState.DONE),
        ]
        v1, v2 = done.victims
        assert (v1.asked_at, v1.acked_at, v1.ack_step, v1.requeued_at) == (
            T0 + 1, T0 + 5, 1200, T0 + 8)
        assert v2.ack_step == 77 and v2.state is VictimState.REQUEUED
        assert repo.unfinished_plans() == []
        assert len(repo.audit_entries(plan_id=pid)) == 5  # creation + four transitions

    def test_illegal_transition_names_both_states(self, repo: Repository) -> None:
        """Skipping phases is refused with from/to and what is allowed; nothing changes."""
        pid = self.new_plan(repo)
        with pytest.raises(StateError, match=r"plan \d+: illegal transition planned -> done") as e:
            repo.transition_plan(pid, PlanState.DONE, at=T0 + 1)
        assert "aborted, rolled_back, signalled" in str(e.value)
        assert repo.get_plan(pid).state is PlanState.PLANNED
        assert len(repo.get_plan(pid).steps) == 1

    def test_final_state_is_final(self, repo: Repository) -> None:
        """An aborted plan can neither move nor change its victims."""
        pid = self.new_plan(repo)
        repo.transition_plan(pid, PlanState.ABORTED, at=T0 + 1, note="snapshot went stale")
        with pytest.raises(StateError, match=r"aborted -> signalled.*nothing \(final state\)"):
            repo.transition_plan(pid, PlanState.SIGNALLED, at=T0 + 2)
        with pytest.raises(StateError, match=r"aborted \(final\)"):
            repo.update_victims(pid, [1], VictimState.ASKED, at=T0 + 2)

    def test_phase_needs_every_victim(self, repo: Repository) -> None:
        """signalled needs all victims asked, all_acked needs all acked; the laggard is named."""
        pid = self.new_plan(repo)
        repo.update_victims(pid, [1], VictimState.ASKED, at=T0 + 1)
        with pytest.raises(StateError, match=r"while victims 2 \(chosen\) are not"):
            repo.transition_plan(pid, PlanState.SIGNALLED, at=T0 + 1)
        repo.update_victims(pid, [2], VictimState.ASKED, at=T0 + 1)
        repo.transition_plan(pid, PlanState.SIGNALLED, at=T0 + 1)
        repo.update_victims(pid, [2], VictimState.ACKED, at=T0 + 3, ack_step=5)
        with pytest.raises(StateError, match=r"signalled -> all_acked while victims 1 \(asked\)"):
            repo.transition_plan(pid, PlanState.ALL_ACKED, at=T0 + 4)

    def test_illegal_victim_move_changes_nobody(self, repo: Repository) -> None:
        """One illegal victim move in a batch refuses the whole batch."""
        pid = self.new_plan(repo)
        repo.update_victims(pid, [1], VictimState.ASKED, at=T0 + 1)
        with pytest.raises(StateError, match="victim job 2: illegal transition chosen -> acked"):
            repo.update_victims(pid, [1, 2], VictimState.ACKED, at=T0 + 2)
        assert {v.job_id: v.state for v in repo.get_plan(pid).victims} == {
            1: VictimState.ASKED, 2: VictimState.CHOSEN}
        with pytest.raises(StateError, match=r"jobs \[3\] are not victims of plan"):
            repo.update_victims(pid, [3], VictimState.ASKED, at=T0 + 2)

    def test_a_victim_that_ended_on_its_own(self, repo: Repository) -> None:
        """A victim gone during phase 1 counts as freed: the plan completes without it."""
        pid = self.new_plan(repo)
        repo.update_victims(pid, [1, 2], VictimState.ASKED, at=T0 + 1)
        repo.transition_plan(pid, PlanState.SIGNALLED, at=T0 + 1)
        repo.update_victims(pid, [2], VictimState.GONE, at=T0 + 2)
        repo.update_victims(pid, [1], VictimState.ACKED, at=T0 + 3, ack_step=10)
        repo.transition_plan(pid, PlanState.ALL_ACKED, at=T0 + 3)
        with pytest.raises(StateError, match="victim job 2: illegal transition gone -> requeued"):
            repo.update_victims(pid, [1, 2], VictimState.REQUEUED, at=T0 + 4)
        repo.update_victims(pid, [1], VictimState.REQUEUED, at=T0 + 4)
        repo.transition_plan(pid, PlanState.REQUEUED, at=T0 + 4)
        assert {v.job_id: v.state for v in repo.get_plan(pid).victims} == {
            1: VictimState.REQUEUED, 2: VictimState.GONE}

    def test_missed_deadline_abort_and_force(self, repo: Repository) -> None:
        """A miss leads to aborted (abort policy) or forced then requeued (force policy)."""
        for policy, path in ((DeadlineAction.ABORT, [PlanState.ABORTED]),
                             (DeadlineAction.FORCE, [PlanState.FORCED, PlanState.REQUEUED])):
            pid = self.new_plan(repo, on_miss=policy)
            repo.update_victims(pid, [1, 2], VictimState.ASKED, at=T0 + 1)
            repo.transition_plan(pid, PlanState.SIGNALLED, at=T0 + 1)
            repo.update_victims(pid, [1], VictimState.ACKED, at=T0 + 5)
            repo.update_victims(pid, [2], VictimState.MISSED, at=T0 + 61)
            for i, state in enumerate(path):
                if state is PlanState.REQUEUED:
                    repo.update_victims(pid, [1, 2], VictimState.REQUEUED, at=T0 + 62)
                repo.transition_plan(pid, state, at=T0 + 61 + i, note=f"job 2 missed ({policy})")
            if policy is DeadlineAction.FORCE:
                repo.transition_plan(pid, PlanState.DONE, at=T0 + 70)
            assert repo.get_plan(pid).on_miss is policy
        assert repo.unfinished_plans() == []

    def test_a_job_is_in_one_unfinished_plan_at_most(self, repo: Repository) -> None:
        """A victim of an unfinished plan cannot be planned again until that plan ends."""
        pid = self.new_plan(repo)
        with pytest.raises(StateError, match=f"job 2 in plan {pid} already"):
            repo.create_plan(at=T0 + 1, beneficiaries=[pjob(101, "ops")],
                             victims=[pjob(2, "b")], reason="second")
        repo.transition_plan(pid, PlanState.ROLLED_BACK, at=T0 + 2)
        again = repo.create_plan(at=T0 + 3, beneficiaries=[pjob(101, "ops")],
                                 victims=[pjob(2, "b")], reason="second")
        assert [p.plan_id for p in repo.unfinished_plans()] == [again.plan_id]

    def test_bad_plans_are_refused(self, repo: Repository) -> None:
        """No victims, a job on both sides, or an unknown plan id: clear errors."""
        with pytest.raises(StateError, match="at least one beneficiary and one victim"):
            repo.create_plan(at=T0, beneficiaries=[pjob(100, "ops")], victims=[], reason="x")
        with pytest.raises(StateError, match=r"jobs \[5\] appear twice"):
            repo.create_plan(at=T0, beneficiaries=[pjob(5, "ops")], victims=[pjob(5, "a")],
                             reason="x")
        with pytest.raises(StateError, match="plan 987654 does not exist"):
            repo.transition_plan(987654, PlanState.SIGNALLED, at=T0)

    def test_counters_commit_with_the_step(self, repo: Repository) -> None:
        """Events and credits passed with a step are written with it, and not if it is refused."""
        pid = self.new_plan(repo)
        also = CycleWrite(
            at=T0 + 9,
            events=(FairnessEvent(EventKind.PREEMPTED, "a", "u", T0 + 9, plan_id=pid),
                    FairnessEvent(EventKind.PREEMPTING, "ops", "u", T0 + 9, plan_id=pid)),
            credits=(CreditEntry("a", 0.5, at=T0 + 9, job_id=1, plan_id=pid),),
        )
        with pytest.raises(StateError, match="planned -> done"):
            repo.transition_plan(pid, PlanState.DONE, at=T0 + 9, also=also)
        assert repo.event_counts(since=0) == {}
        assert repo.credit_balances() == {}
        repo.transition_plan(pid, PlanState.ROLLED_BACK, at=T0 + 9, also=also)
        assert repo.event_counts(since=0) == {
            ("a", EventKind.PREEMPTED): 1, ("ops", EventKind.PREEMPTING): 1}
        assert repo.credit_balance("a") == 0.5


class TestHistory(StoreCase):
    """History lists the newest plans first, optionally for one team."""

    def test_filter_by_team_and_limit(self, repo: Repository) -> None:
        """A team sees plans where it gained or lost jobs; limit caps the list."""
        p1 = repo.create_plan(at=T0, beneficiaries=[pjob(100, "ops")], victims=[pjob(1, "a")],
                              reason="one").plan_id
        repo.transition_plan(p1, PlanState.ABORTED, at=T0 + 1)
        p2 = repo.create_plan(at=T0 + 10, beneficiaries=[pjob(101, "a")], victims=[pjob(2, "b")],
                              reason="two").plan_id
        p3 = repo.create_plan(at=T0 + 20, beneficiaries=[pjob(102, "ops")],
                              victims=[pjob(3, "b"), pjob(4, "c")], reason="three").plan_id
        assert [p.plan_id for p in repo.history()] == [p3, p2, p1]
        assert [p.plan_id for p in repo.history(team="a")] == [p2, p1]
        assert [p.plan_id for p in repo.history(team="c")] == [p3]
        assert repo.history(team="nobody") == []
        assert [p.plan_id for p in repo.history(limit=2)] == [p3, p2]
        assert repo.history(team="b")[0].teams == frozenset({"ops", "b", "c"})
        with pytest.raises(StateError, match="limit must be at least 1, got 0"):
            repo.history(limit=0)
