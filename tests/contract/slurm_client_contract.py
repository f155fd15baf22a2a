"""The SlurmClient contract: one suite every backend must pass.

A backend's test module subclasses :class:`SlurmClientContract` and provides a ``harness``
fixture (a :class:`Harness`): FakeSlurm in ``test_contract_fake.py`` (unit tier), the CLI backend
against the real testbed in ``tests/integration/test_adapter_contract.py`` (integration tier).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.adapter import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobState,
    SignalTarget,
    SkipReason,
    SlurmClient,
    SlurmVersion,
)
from hai_slurm.slurm_plugins.fake import NODE_RESERVATION_NAMED
from hai_slurm.slurm_plugins.hostlist import expand_hostlist

GONE_ID = 987_654
"""A job id no test cluster reaches."""


class _NoJob:
    nodes: tuple[str, ...] = ()


_NOJOB = _NoJob()


EXCLUSIVE_OPTION = {"node": "--exclusive", "user": "--exclusive=user"}
"""sbatch's option for each ``exclusive`` a harness's ``submit`` takes."""


class Harness(Protocol):
    """What the contract needs besides the client: a way to make jobs and to wait for Slurm."""

    client: SlurmClient

    def submit(self, *, name: str, gpus: int = 1, hold: bool = False,
               begin_in: int = 0, comment: str = "", nodelist: str = "",
               exclude: str = "", exclusive: str = "", time_limit: int = 0) -> int:
        """Queue a job that runs until cancelled and logs the signals it gets (``nodelist``,
        ``exclude``: sbatch's ``--nodelist``, ``--exclude``; ``exclusive``: ``node`` for
        ``--exclusive``, ``user`` for ``--exclusive=user``; ``time_limit``: ``--time`` in
        minutes, 0 for none)."""
        ...

    def forbid_requeue(self, job_id: int) -> None:
        """Make Slurm refuse to requeue the job from now on (an admin's ``scontrol update
        JobId=J Requeue=0``; job_submit.lua refuses it to other users)."""
        ...

    def admin_reservation(self, name: str, node: str, start_in: int, minutes: int) -> None:
        """An admin's maintenance reservation (root's, ``Flags=MAINT``) on ``node`` from
        ``start_in`` seconds on, for ``minutes``."""
        ...

    def wait_for(self, job_id: int, what: str, ok: Callable[[Job | None], bool],
                 timeout: float = 30.0) -> Job | None:
        """Let Slurm work until ``ok(job)`` holds for the job in a fresh snapshot, else fail."""
        ...

    def signals_seen(self, job_id: int) -> list[str]:
        """Signal names the job has received so far."""
        ...

    def make_exit(self, job_id: int, code: int) -> None:
        """Make a running job of :meth:`submit` end by itself with exit ``code``."""
        ...


def running(job: Job | None) -> bool:
    """The job is running."""
    return job is not None and job.state is JobState.RUNNING


class SlurmClientContract:
    """Behaviour every SlurmClient backend shares."""

    def test_exclusive_jobs_read_as_such(self, harness: Harness) -> None:
        """``--exclusive`` and ``--exclusive=user`` read as ``node`` and ``user`` (every
        release: 22.05's and 24.11's JSON ``shared``, pyslurm's ``resource_sharing``, 26.05's
        ``squeue -O Exclusive``, whose JSON tells nothing); a plain job shares."""
        asked = {harness.submit(name=f"contract-excl-{kind or 'plain'}", gpus=1, begin_in=3600,
                                exclusive=kind): kind for kind in ("node", "user", "")}
        snap = harness.client.snapshot()
        assert {jid: (j.exclusive if (j := snap.job(jid)) else None) for jid in asked} == asked

    def test_snapshot_shape(self, harness: Harness) -> None:
        """A snapshot is frozen and carries version, time, nodes with GPUs, partitions, jobs."""
        run_id = harness.submit(name="contract-shape-run", gpus=1, comment="shape")
        held_id = harness.submit(name="contract-shape-held", gpus=2, hold=True)
        harness.wait_for(run_id, "RUNNING", running)
        snap = harness.client.snapshot()
        assert isinstance(snap, ClusterSnapshot)
        assert isinstance(snap.version, SlurmVersion) and snap.version >= SlurmVersion(22, 5)
        assert snap.time > 1_600_000_000
        assert snap.nodes and sum(n.gpus for n in snap.nodes) >= 2
        assert snap.partitions and any(p.default for p in snap.partitions)
        assert {n.name for n in snap.nodes} >= set(snap.partitions[0].nodes)
        run, held = snap.job(run_id), snap.job(held_id)
        assert run is not None and held is not None
        assert run.name == "contract-shape-run" and run.comment == "shape"
        assert run.gpus_requested == 1 and run.gpus_allocated == 1
        assert len(run.nodes) == 1 and run.node_count == 1 and run.batch
        assert run.start_time is not None and run.submit_time is not None
        assert run.user and run.partition
        assert held.state is JobState.PENDING and held.held and held.priority == 0
        assert held.gpus_requested == 2 and held.nodes == () and held.gpus_allocated == 0
        assert sum(n.gpus_used for n in snap.nodes if n.name == run.nodes[0]) >= 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            snap.time = 0  # type: ignore[misc]

    def test_set_priority_on_pending_job(self, harness: Harness) -> None:
        """set_priority changes a pending job's priority; a batching backend makes one write per
        value, one that writes per job (pyslurm: one RPC each, ``writes_per_job``) one per id."""
        a = harness.submit(name="contract-prio-a", begin_in=3600)
        b = harness.submit(name="contract-prio-b", begin_in=3600)
        c = harness.submit(name="contract-prio-c", begin_in=3600)
        res = harness.client.set_priority(a, 123_456)
        assert res.done == (a,) and not res.skipped
        res = harness.client.set_priorities({b: 5000, c: 5000, GONE_ID: 5000, a: 7000})
        assert res.commands == (4 if getattr(harness.client, "writes_per_job", False) else 2)
        assert set(res.done) == {a, b, c}
        assert [(s.job_id, s.reason) for s in res.skipped] == [(GONE_ID, SkipReason.GONE)]
        snap = harness.client.snapshot()
        assert [snap.job(j).priority for j in (a, b, c)] == [7000, 5000, 5000]  # type: ignore[union-attr]

    def test_set_priority_on_held_job_is_skipped(self, harness: Harness) -> None:
        """A priority write never releases a held job: it is reported as skipped (HELD)."""
        held = harness.submit(name="contract-prio-held", hold=True)
        res = harness.client.set_priority(held, 900)
        assert res.done == () and [s.reason for s in res.skipped] == [SkipReason.HELD]
        job = harness.client.snapshot().job(held)
        assert job is not None and job.held and job.priority == 0

    def test_signal_running_job(self, harness: Harness) -> None:
        """signal(USR2, FULL) reaches a running job; a gone job is skipped, not an error."""
        jid = harness.submit(name="contract-signal")
        harness.wait_for(jid, "RUNNING", running)
        res = harness.client.signal([jid, GONE_ID], "USR2", target=SignalTarget.FULL)
        assert res.done == (jid,) and res.skipped_ids == {GONE_ID}
        harness.wait_for(jid, "to log USR2", lambda j: "USR2" in harness.signals_seen(jid))
        job = harness.client.snapshot().job(jid)
        assert job is not None and job.state is JobState.RUNNING  # the job survived the signal

    def test_requeue_running_job(self, harness: Harness) -> None:
        """requeue sends a running job back to the queue with restart count + 1."""
        jid = harness.submit(name="contract-requeue")
        first = harness.wait_for(jid, "RUNNING", running)
        assert first is not None and first.restart_count == 0
        res = harness.client.requeue(jid)
        assert res.done == (jid,) and not res.skipped
        again = harness.wait_for(
            jid, "requeued (PENDING or RUNNING again with restart_count 1)",
            lambda j: j is not None and j.restart_count == 1
            and j.state in (JobState.PENDING, JobState.RUNNING))
        assert again is not None and again.submit_time is not None
        assert first.submit_time is not None and again.submit_time >= first.submit_time

    def test_requeue_gone_or_pending_job_is_not_an_error(self, harness: Harness) -> None:
        """Requeue of an unknown id or a pending job is a harmless race: skipped, not raised."""
        pending = harness.submit(name="contract-requeue-pending", begin_in=3600)
        res = harness.client.requeue([GONE_ID, pending])
        assert res.done == ()
        assert {s.job_id: s.reason for s in res.skipped} == {
            GONE_ID: SkipReason.GONE, pending: SkipReason.PENDING}
        job = harness.client.snapshot().job(pending)
        assert job is not None and job.restart_count == 0

    def test_requeue_of_cancelled_job_does_not_rerun_it(self, harness: Harness) -> None:
        """A job that ended before the requeue arrived stays ended (Slurm would re-run it)."""
        jid = harness.submit(name="contract-requeue-ended")
        harness.wait_for(jid, "RUNNING", running)
        harness.client.cancel(jid)
        harness.wait_for(jid, "gone from the active jobs", lambda j: j is None)
        res = harness.client.requeue(jid)
        assert res.done == () and res.skipped_ids == {jid}
        assert harness.client.snapshot().job(jid) is None

    def test_requeue_hold_then_release(self, harness: Harness) -> None:
        """requeue_hold puts a running job back as held (restart + 1); release frees it."""
        jid = harness.submit(name="contract-requeuehold")
        harness.wait_for(jid, "RUNNING", running)
        assert harness.client.requeue_hold(jid).done == (jid,)
        held = harness.wait_for(jid, "held and PENDING", lambda j: j is not None and j.held
                                and j.state is JobState.PENDING)
        assert held is not None and held.restart_count == 1 and held.priority == 0
        assert harness.client.release(jid).done == (jid,)
        job = harness.client.snapshot().job(jid)
        assert job is not None and not job.held and job.restart_count == 1

    def test_hold_and_release(self, harness: Harness) -> None:
        """hold makes a pending job held with priority 0; release lets it be scheduled again."""
        jid = harness.submit(name="contract-hold", begin_in=3600)
        res = harness.client.hold([jid, GONE_ID])
        assert res.done == (jid,) and res.skipped_ids == {GONE_ID}
        job = harness.client.snapshot().job(jid)
        assert job is not None and job.held and job.priority == 0
        assert job.state is JobState.PENDING
        res = harness.client.release(jid)
        assert res.done == (jid,)
        job = harness.client.snapshot().job(jid)
        assert job is not None and not job.held and job.priority > 0

    def test_set_admin_comment(self, harness: Harness) -> None:
        """set_admin_comment stores the text as given, spaces and '=' included."""
        jid = harness.submit(name="contract-admin-comment", begin_in=3600, comment="user text")
        text = "hai:v1 class=HIGH team=vision grace=60"
        res: ActionResult = harness.client.set_admin_comment(jid, text)
        assert res.done == (jid,)
        job = harness.client.snapshot().job(jid)
        assert job is not None and job.admin_comment == text and job.comment == "user text"
        assert harness.client.set_admin_comment(GONE_ID, "x").skipped_ids == {GONE_ID}

    def test_cancel(self, harness: Harness) -> None:
        """cancel removes a job from the active set; cancelling it again is not an error."""
        jid = harness.submit(name="contract-cancel", begin_in=3600)
        assert harness.client.cancel(jid).done == (jid,)
        harness.wait_for(jid, "gone from the active jobs", lambda j: j is None)
        harness.client.cancel(jid)

    # -- the preemption executor's verbs ---------------------------------------------------
    @staticmethod
    def _ended(harness: Harness, job_id: int, code: int) -> JobFacts:
        """Let a running job exit with ``code``; its facts once job_facts reports it ended."""
        harness.wait_for(job_id, "RUNNING", running)
        harness.make_exit(job_id, code)
        seen: list[JobFacts] = []

        def ended(_: Job | None) -> bool:
            facts = harness.client.job_facts(job_id).get(job_id)
            seen[:] = [facts] if facts is not None else []
            return bool(seen) and seen[0].finished and seen[0].state != "COMPLETING"

        harness.wait_for(job_id, "ended (job_facts)", ended)
        return seen[0]

    def test_job_facts_of_running_held_finished_and_gone_jobs(self, harness: Harness) -> None:
        """job_facts reads running, held and ended jobs (exit code kept as FAILED); a gone id
        is absent, not an error."""
        run_id = harness.submit(name="contract-facts-run")
        held_id = harness.submit(name="contract-facts-held", hold=True)
        harness.wait_for(run_id, "RUNNING", running)
        facts = harness.client.job_facts([run_id, held_id, GONE_ID])
        assert set(facts) == {run_id, held_id}
        assert facts[run_id].running and not facts[run_id].held
        assert facts[run_id].restart_count == 0 and facts[run_id].state == "RUNNING"
        assert facts[held_id].pending and facts[held_id].held
        assert harness.client.job_facts([GONE_ID]) == {}
        ended = self._ended(harness, run_id, 3)  # not 75: daemon mode's RequeueExit takes that
        assert ended.state == "FAILED" and not ended.running and not ended.pending

    def test_requeue_any_brings_back_a_job_that_exited(self, harness: Harness) -> None:
        """A victim that ended (here exit 3: a failed save) is requeued held (restart + 1);
        pending jobs count as done and are held; gone ids are left out."""
        exited = harness.submit(name="contract-requeue-exited")
        pending = harness.submit(name="contract-requeue-any-pending", begin_in=3600)
        self._ended(harness, exited, 3)
        done = harness.client.requeue_any([exited, pending, GONE_ID], hold=True)
        assert done == (exited, pending)
        facts = harness.client.job_facts([exited, pending])
        assert facts[exited].pending and facts[exited].held
        assert facts[exited].restart_count == 1
        assert facts[pending].pending and facts[pending].held
        assert harness.client.release([exited, pending]).done == (exited, pending)

    def test_requeue_any_leaves_out_a_job_slurm_will_not_requeue(self, harness: Harness
                                                                  ) -> None:
        """A job with ``Requeue=0``, running and then ended, is left out of requeue_any
        without an error (slurmctld refuses it for good: "Requested operation is presently
        disabled"); a requeueable job in the same call is requeued."""
        stay = harness.submit(name="contract-no-requeue")
        other = harness.submit(name="contract-requeue-beside")
        harness.wait_for(stay, "RUNNING", running)
        harness.wait_for(other, "RUNNING", running)
        harness.forbid_requeue(stay)
        assert harness.client.requeue_any([stay, other], hold=True) == (other,)
        facts = harness.client.job_facts([stay])
        assert facts[stay].running and facts[stay].restart_count == 0
        harness.wait_for(other, "PENDING (requeued)",
                         lambda j: j is not None and j.state is JobState.PENDING)
        self._ended(harness, stay, 3)
        assert harness.client.requeue_any([stay], hold=False) == ()
        facts = harness.client.job_facts([stay])
        assert facts[stay].finished and facts[stay].restart_count == 0

    def test_set_req_nodes_pins_and_unpins_a_pending_job(self, harness: Harness) -> None:
        """ReqNodeList is set and cleared on a pending job; a running or gone job is skipped."""
        snap = harness.client.snapshot()
        node = snap.nodes[0].name
        pending = harness.submit(name="contract-pin", begin_in=3600)
        assert harness.client.set_req_nodes(pending, node).done == (pending,)
        assert harness.client.job_facts(pending)[pending].req_nodes == node
        assert harness.client.set_req_nodes(pending, "").done == (pending,)
        assert harness.client.job_facts(pending)[pending].req_nodes == ""
        run_id = harness.submit(name="contract-pin-running")
        harness.wait_for(run_id, "RUNNING", running)
        result = harness.client.set_req_nodes(run_id, node)
        assert result.done == ()
        assert [s.reason for s in result.skipped] == [SkipReason.NOT_PENDING]
        assert harness.client.set_req_nodes(GONE_ID, node).skipped_ids == {GONE_ID}

    def test_node_requests_of_a_pending_job(self, harness: Harness) -> None:
        """A pending job's --nodelist and --exclude read as host lists (also in a second
        snapshot: the CLI reads that one from its compact listing); a job without them has
        none, and no --constraint."""
        names = sorted(n.name for n in harness.client.snapshot().nodes)
        asked = harness.submit(name="contract-nodes", begin_in=3600, nodelist=names[0],
                               exclude=names[1])
        plain = harness.submit(name="contract-nodes-plain", begin_in=3600)
        for _ in range(2):
            snap = harness.client.snapshot()
            job, other = snap.job(asked), snap.job(plain)
            assert job is not None and other is not None
            assert expand_hostlist(job.required_nodes) == (names[0],), job
            assert expand_hostlist(job.excluded_nodes) == (names[1],), job
            assert (other.required_nodes, other.excluded_nodes) == ("", ""), other
            assert job.features == other.features == ""

    def test_switches_name_only_known_nodes(self, harness: Harness) -> None:
        """Every leaf switch lists nodes of the cluster; upper switches list switches."""
        switches = harness.client.switches()
        nodes = {n.name for n in harness.client.snapshot().nodes}
        names = {s.name for s in switches}
        assert switches, "the contract clusters have a tree topology"
        for s in switches:
            if s.level == 0:
                assert s.nodes and set(s.nodes) <= nodes and not s.switches
            else:
                assert set(s.switches) <= names and not s.nodes

    # -- the urgent path (issue 16) ---------------------------------------------------------
    def test_pending_briefs_list_the_pending_jobs_as_the_snapshot_does(self,
                                                                     harness: Harness) -> None:
        """pending_briefs lists pending jobs (held and begin-time ones too), never running
        ones, with the user, account, QOS, submit time, restart count, requeue flag and
        admin_comment the snapshot shows; a '|' in the admin_comment (job_submit.lua's
        segment separator) stays in it."""
        run_id = harness.submit(name="contract-brief-run", gpus=1)
        held_id = harness.submit(name="contract-brief-held", gpus=1, hold=True)
        later_id = harness.submit(name="contract-brief-later", begin_in=3600)
        harness.wait_for(run_id, "RUNNING", running)
        text = "an admin's note|hai:v1:priority=HIGH;team=vision"
        assert harness.client.set_admin_comment(held_id, text).done == (held_id,)
        briefs = {b.job_id: b for b in harness.client.pending_briefs()}
        snap = harness.client.snapshot()
        assert run_id not in briefs
        assert {held_id, later_id} <= set(briefs)
        for jid in (held_id, later_id):
            job, b = snap.job(jid), briefs[jid]
            assert job is not None
            assert (b.user, b.account, b.qos, b.submit_time, b.restart_count, b.requeue,
                    b.admin_comment) == (job.user, job.account, job.qos, job.submit_time,
                                         job.restart_count, job.requeue, job.admin_comment)
            assert b.user and b.submit_time is not None and b.submit_time > 1_600_000_000
        assert briefs[held_id].admin_comment == text

    # -- reservations ---------------------------------------------------------------------------
    def test_a_reservation_ahead_keeps_off_only_jobs_that_would_reach_it(
            self, harness: Harness) -> None:
        """A node reserved 30 min ahead (an admin's maintenance) runs a 10-min job; a job
        without a time limit, submitted first, waits (``ReqNodeNotAvail``). Until it starts
        the reservation lists as INACTIVE and the node is not flagged RESERVED."""
        snap = harness.client.snapshot()
        node = max(n.name for n in snap.nodes)
        name = f"maint-contract-{time.time_ns()}"
        harness.admin_reservation(name, node, 1800, 30)
        try:
            (resv,) = harness.client.reservations(name)
            assert resv.state == "INACTIVE" and resv.nodes == (node,), resv
            assert resv.start_time is not None and resv.start_time > snap.time + 1500, resv
            late = harness.submit(name="contract-resv-late", gpus=1, nodelist=node)
            short = harness.submit(name="contract-resv-short", gpus=1, nodelist=node,
                                   time_limit=10)
            harness.wait_for(short, "RUNNING", running)
            harness.wait_for(late, "kept off its node", lambda j: j is not None
                             and j.state is JobState.PENDING
                             and j.reason.startswith("ReqNodeNotAvail"), 60)
            (now,) = [n for n in harness.client.snapshot().nodes if n.name == node]
            assert "RESERVED" not in now.state_flags, now
        finally:
            harness.client.end_reservation(name)

    # -- reservations (the preemption guard) -------------------------------------------------
    def test_reservation_is_made_listed_linked_and_ended(self, harness: Harness) -> None:
        """A reservation made over a running job (IGNORE_JOBS) keeps a job not linked to it off
        the node, which a snapshot flags RESERVED; a linked job (its ``reservation`` named in a
        snapshot) starts there; ending it while the job runs in it (refused delete,
        so EndTime=now) leaves the job running (FLEX); a second one on the same node, an
        unknown node, are refused."""
        name = f"hai-plan-contract1-{time.time_ns()}"  # an ended one lingers ~20 s
        whole = min(n.gpus for n in harness.client.snapshot().nodes)  # one node's GPUs
        blocker = harness.submit(name="contract-resv-blocker", gpus=whole)
        harness.wait_for(blocker, "RUNNING", running)
        bjob = harness.client.snapshot().job(blocker)
        assert bjob is not None and len(bjob.nodes) == 1
        node, user = bjob.nodes[0], bjob.user
        harness.client.create_reservation(name, [node], [user], 10)
        try:
            with pytest.raises(SlurmError):
                harness.client.create_reservation("hai-plan-contract2", [node], [user], 10)
            with pytest.raises(SlurmError):
                harness.client.create_reservation("hai-plan-contract3", ["no-such-node"],
                                                  [user], 10)
            (resv,) = harness.client.reservations(name)
            assert resv.name == name and resv.nodes == (node,) and resv.users == (user,)
            assert {"IGNORE_JOBS", "FLEX"} <= set(resv.flags)
            assert resv.start_time is not None and resv.end_time is not None
            assert 9 * 60 <= resv.end_time - resv.start_time <= 11 * 60
            assert harness.client.reservations("no-such-prefix-") == ()
            inside = harness.submit(name="contract-resv-inside", gpus=whole, hold=True)
            assert harness.client.set_job_reservation(inside, name).done == (inside,)
            assert harness.client.job_facts(inside)[inside].reservation == name
            linked = harness.client.snapshot().job(inside)
            assert linked is not None and linked.reservation == name
            flagged = time.monotonic() + 60   # slurmctld flags the node on its next resv check
            while not any(n.name == node and "RESERVED" in n.state_flags
                          for n in harness.client.snapshot().nodes):
                assert time.monotonic() < flagged, f"{node} not flagged RESERVED within 60 s"
                time.sleep(0.5)
            snap = harness.client.snapshot()
            (flagged_node,) = [n for n in snap.nodes if n.name == node]
            # named from 24.11 on (the JSON's "reservation"); 22.05 has the flag only
            named = snap.version >= NODE_RESERVATION_NAMED
            assert flagged_node.reservation == (name if named else ""), (snap.version,
                                                                          flagged_node)
            assert harness.client.set_job_reservation(inside, "").done == (inside,)
            assert harness.client.job_facts(inside)[inside].reservation == ""
            harness.client.set_job_reservation(inside, name)
            assert harness.client.set_req_nodes(inside, node).done == (inside,)
            harness.client.cancel(blocker)
            harness.client.release(inside)
            harness.wait_for(inside, "RUNNING", running)
            job = harness.client.snapshot().job(inside)
            assert job is not None and job.nodes == (node,)
            assert harness.client.end_reservation(name) is True

            def purged(job: Job | None) -> bool:  # slurmctld's reservation check (~20 s)
                return harness.client.reservations(name) == () or not running(job)

            # Without FLEX, slurmctld kills a job whose time limit passes the reservation's end
            # here (TIMEOUT, "Reservation ended"); so does a reservation's natural end.
            assert running(harness.wait_for(inside, "its reservation gone", purged, 90))
            looks: list[Job | None] = []

            def stopped_or_looked_12_times(job: Job | None) -> bool:
                looks.append(job)
                return len(looks) >= 12 or not running(job)

            assert running(harness.wait_for(inside, "looked at", stopped_or_looked_12_times))
            assert harness.client.job_facts(inside)[inside].reservation == ""
        finally:
            harness.client.end_reservation(name)
        assert harness.client.end_reservation("hai-plan-contract-none") is False

    def test_reservation_takes_in_a_node_and_lets_it_go(self, harness: Harness) -> None:
        """A second plan joins a reservation: a node whose job runs and more minutes are added
        (IGNORE_JOBS), a job linked to it starts on that node once its job ends, and the node
        is taken out again while the linked job runs there, which goes on (FLEX); an unknown
        node raises (24.11 and 26.05 answer success and keep the known nodes: the backend reads
        the reservation back), and a correct update puts it right."""
        name = f"hai-plan-contract5-{time.time_ns()}"
        whole = min(n.gpus for n in harness.client.snapshot().nodes)
        first = harness.submit(name="contract-resv-first", gpus=whole)
        second = harness.submit(name="contract-resv-second", gpus=whole)
        harness.wait_for(first, "RUNNING", running)
        harness.wait_for(second, "RUNNING", running)
        snap = harness.client.snapshot()
        j1, j2 = snap.job(first), snap.job(second)
        assert j1 is not None and j2 is not None
        (n1,), (n2,), user = j1.nodes, j2.nodes, j1.user
        harness.client.create_reservation(name, [n1], [user], 10)
        try:
            harness.client.update_reservation(name, [n1, n2], [user], 20)
            (resv,) = harness.client.reservations(name)
            assert set(resv.nodes) == {n1, n2} and resv.users == (user,)
            assert resv.start_time is not None and resv.end_time is not None
            assert 19 * 60 <= resv.end_time - resv.start_time <= 21 * 60
            with pytest.raises(SlurmError):
                harness.client.update_reservation(name, [n1, "no-such-node"], [user], 20)
            harness.client.update_reservation(name, [n1, n2], [user], 20)
            (same,) = harness.client.reservations(name)
            assert set(same.nodes) == {n1, n2}
            inside = harness.submit(name="contract-resv-joined", gpus=whole, hold=True)
            harness.client.set_job_reservation(inside, name)
            harness.client.set_req_nodes(inside, n2)
            harness.client.cancel(second)
            harness.client.release(inside)
            job = harness.wait_for(inside, "RUNNING", running)
            assert job is not None and job.nodes == (n2,)
            harness.client.update_reservation(name, [n1], [user], 20)
            (left,) = harness.client.reservations(name)
            assert left.nodes == (n1,)
            looks: list[Job | None] = []

            def stopped_or_looked_12_times(job: Job | None) -> bool:
                looks.append(job)
                return len(looks) >= 12 or not running(job)

            assert running(harness.wait_for(inside, "looked at", stopped_or_looked_12_times))
        finally:
            harness.client.end_reservation(name)

    def test_reservation_keeps_other_jobs_off_a_free_node(self, harness: Harness) -> None:
        """No job that is not linked to a reservation starts on its nodes, whatever its
        priority; deleting the reservation (no job in it) lets it start."""
        name = f"hai-plan-contract4-{time.time_ns()}"
        snap = harness.client.snapshot()
        nodes = sorted(n.name for n in snap.nodes)
        whole = min(n.gpus for n in snap.nodes)
        blockers = [harness.submit(name=f"contract-resv-fill{i}", gpus=whole)
                    for i in range(len(nodes) - 1)]
        for b in blockers:
            harness.wait_for(b, "RUNNING", running)
        busy = {n for b in blockers for n in (harness.client.snapshot().job(b) or
                                              _NOJOB).nodes}
        (free,) = set(nodes) - busy
        me = harness.client.snapshot().job(blockers[0])
        assert me is not None
        harness.client.create_reservation(name, [free], [me.user], 10)
        try:
            outside = harness.submit(name="contract-resv-outside", gpus=whole)
            harness.client.set_priority(outside, 4_000_000_000)
            looks = []

            def started_or_looked_12_times(job: Job | None) -> bool:
                looks.append(job)
                return len(looks) >= 12 or job is None or job.state is not JobState.PENDING

            # 12 looks: 3 s of scheduling passes on a real cluster, 12 steps of the fake
            job = harness.wait_for(outside, "looked at", started_or_looked_12_times)
            assert job is not None and job.state is JobState.PENDING, job
            assert harness.client.end_reservation(name) is True
            assert harness.client.reservations(name) == ()
            harness.wait_for(outside, "RUNNING", running)
        finally:
            harness.client.end_reservation(name)
