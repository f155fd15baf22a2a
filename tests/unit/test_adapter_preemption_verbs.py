"""The adapter's preemption verbs through the CLI: job facts, requeue of ended jobs, pins."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.cli_backend import CliSlurmClient
from hai_slurm.slurm_plugins.parse import job_state, parse_job_facts
from hai_slurm.slurm_plugins.runner import Completed
from hai_slurm.slurm_plugins.types import SkipReason


class Runner:
    """Answers each command from a table of (argv prefix -> (rc, stdout, stderr))."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        if tuple(argv) == VERSION:  # the release, asked once (not logged): 22.05.8 by default
            rc, out, err = self.answers.get(VERSION, (0, "slurm 22.05.8\n", ""))
            return Completed(tuple(argv), rc, out, err)
        self.calls.append(tuple(argv))
        for prefix, (rc, out, err) in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return Completed(tuple(argv), rc, out, err)
        return Completed(tuple(argv), 0, "", "")


SQUEUE = ("squeue",)
VERSION = ("scontrol", "version")


def test_facts_read_one_squeue_and_detect_holds() -> None:
    """States, restarts, holds (admin hold and requeue-hold) and ReqNodeList, in one command."""
    out = ("12|RUNNING|0|1040|None||(null)|\n"
           "13|FAILED|1|0|NonZeroExitCode||(null)|\n"
           "14|PENDING|2|0|job_requeued_in_held_state|n[1-2]|hai-plan-3|\n"
           "15|PENDING|0|0|JobHeldAdmin||\n")  # an older line without the last column
    run = Runner({SQUEUE: (0, out, "")})
    facts = CliSlurmClient(run).job_facts([12, 13, 14, 15, 16])
    assert run.calls == [("squeue", "--noheader", "--states=all", "--jobs=12,13,14,15,16",
                          "--Format=JobID:|,State:|,RestartCnt:|,PriorityLong:|,Reason:|,"
                          "ReqNodes:|,Reservation:|", "--array-unique")]
    assert facts[12].running and not facts[12].held
    assert facts[13].finished and facts[13].restart_count == 1
    assert facts[14].pending and facts[14].held and facts[14].req_nodes == "n[1-2]"
    assert facts[14].reservation == "hai-plan-3" and facts[12].reservation == ""
    assert facts[15].held and facts[15].reservation == ""
    assert 16 not in facts  # gone


def test_facts_on_a_release_without_array_unique() -> None:
    """Slurm 23.02 removed ``--array-unique`` (24.11's squeue refuses it): job facts on 24.11
    are read without it."""
    run = Runner({VERSION: (0, "slurm 24.11.5\n", ""),
                  SQUEUE: (0, "12|RUNNING|0|1040|None||(null)|\n", "")})
    facts = CliSlurmClient(run).job_facts([12])
    assert run.calls == [("squeue", "--noheader", "--states=all", "--jobs=12",
                          "--Format=JobID:|,State:|,RestartCnt:|,PriorityLong:|,Reason:|,"
                          "ReqNodes:|,Reservation:|")]
    assert facts[12].running


def test_a_job_cannot_spoof_its_state() -> None:
    """Only Slurm-owned columns are read: a line that does not parse is ignored, and a job
    named like another job's record never enters the result (names are not printed)."""
    assert parse_job_facts("12|RUNNING|0|1|None|") is None  # too few columns
    assert parse_job_facts("x 12|RUNNING|0|1|None||") is None
    run = Runner({SQUEUE: (0, "12|RUNNING|0|1|None||\n99|PENDING|0|0|JobHeldAdmin||\n", "")})
    assert set(CliSlurmClient(run).job_facts([12])) == {12}


def test_all_gone_is_empty_and_other_failures_raise() -> None:
    """squeue's 'Invalid job id' for the whole chunk means gone; anything else is an error."""
    gone = Runner({SQUEUE: (1, "", "slurm_load_jobs error: Invalid job id specified")})
    assert CliSlurmClient(gone).job_facts([5]) == {}
    down = Runner({SQUEUE: (1, "", "slurm_load_jobs error: Unable to contact slurm controller")})
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        CliSlurmClient(down).job_facts([5])


def test_requeue_any_requeues_running_and_finished_holds_pending() -> None:
    """Running and exited victims get one batched requeuehold; a pending one is just held."""
    out = "1|RUNNING|0|5|None||\n2|FAILED|0|5|NonZeroExitCode||\n3|PENDING|1|5|BeginTime||\n"
    run = Runner({SQUEUE: (0, out, "")})
    done = CliSlurmClient(run).requeue_any([1, 2, 3, 4], hold=True)
    assert done == (1, 2, 3)
    assert run.calls[1:] == [("scontrol", "requeuehold", "1,2"), ("scontrol", "hold", "3")]


def test_pin_only_pending_jobs_and_sort_races_from_errors() -> None:
    """ReqNodeList is written for a pending job only; a job that started between the check and
    the write is a harmless skip, while the same words for a still-pending job raise."""
    pending = (0, "7|PENDING|0|5|Priority||\n", "")
    run = Runner({SQUEUE: pending})
    assert CliSlurmClient(run).set_req_nodes(7, "n1,n2").done == (7,)
    assert run.calls[1:] == [("scontrol", "update", "JobId=7", "ReqNodeList=n1,n2")]

    running = Runner({SQUEUE: (0, "7|RUNNING|0|5|None||\n", "")})
    result = CliSlurmClient(running).set_req_nodes(7, "n1")
    assert result.done == () and result.skipped[0].reason is SkipReason.NOT_PENDING
    assert [c[0] for c in running.calls] == ["squeue"]  # nothing written

    class StartsInBetween(Runner):
        """Pending at the check, running when re-read after the refused write."""

        def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
            if argv[0] == "squeue" and any(c[0] == "scontrol" for c in self.calls):
                self.answers[SQUEUE] = (0, "7|RUNNING|0|5|None||\n", "")
            return super().__call__(argv, timeout=timeout)

    refused = (1, "", "Invalid node name specified for job 7")
    raced = StartsInBetween({SQUEUE: pending, ("scontrol",): refused})
    assert CliSlurmClient(raced).set_req_nodes(7, "n9").skipped[0].reason is \
        SkipReason.NOT_PENDING
    bad = CliSlurmClient(Runner({SQUEUE: pending, ("scontrol",): refused}))
    with pytest.raises(SlurmError, match="Invalid node name"):
        bad.set_req_nodes(7, "n9")
    with pytest.raises(ValueError, match="no spaces"):
        bad.set_req_nodes(7, "n1 n2")


@pytest.mark.parametrize(("word", "running", "pending", "finished"), [
    ("RUNNING", True, False, False), ("CONFIGURING", True, False, False),
    ("SUSPENDED", True, False, False), ("PENDING", False, True, False),
    ("REQUEUED", False, True, False), ("REQUEUE_HOLD", False, True, False),
    ("REQUEUE_FED", False, True, False), ("SPECIAL_EXIT", False, True, False),
    ("COMPLETING", False, False, True), ("FAILED", False, False, True),
    ("COMPLETED", False, False, True), ("PREEMPTED", False, False, True),
])
def test_state_words_are_read_like_the_adapter_reads_them(word: str, running: bool,
                                                          pending: bool, finished: bool) -> None:
    """squeue -O State goes through the adapter's job-state reader: a flag Slurm shows instead
    of the base state (REQUEUED, CONFIGURING) counts as the state it stands for."""
    facts = parse_job_facts(f"7|{word}|0|5|None||")
    assert facts is not None
    assert (facts.running, facts.pending, facts.finished) == (running, pending, finished)
    assert facts.state == job_state(word, "x")[0]


def test_a_state_slurm_does_not_have_is_an_error_not_finished() -> None:
    """An unknown state word raises SlurmError naming the job instead of counting as ended."""
    with pytest.raises(SlurmError, match=r"squeue State of job 7: unknown job_state 'WARPING'"):
        parse_job_facts("7|WARPING|0|5|None||")


RESV_LINE = ("ReservationName=hai-plan-3 StartTime=2026-12-02T13:14:35 "
             "EndTime=2026-12-02T13:19:35 Duration=00:05:00 Nodes=n[1-2] NodeCnt=2 CoreCnt=32 "
             "Features=(null) PartitionName=(null) Flags=FLEX,IGNORE_JOBS,SPEC_NODES "
             "TRES=cpu=32 Users=alice Groups=(null) Accounts=(null) Licenses=(null) "
             "State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n")
DELETE = ("scontrol", "delete")
END_NOW = ("scontrol", "update", "ReservationName=hai-plan-3", "EndTime=now")
END_ANY = ("scontrol", "update", "ReservationName=hai-plan-3")   # EndTime=now, then now+2
SHOW = ("scontrol", "show", "reservation")


def test_reservation_is_made_with_the_guard_flags_and_read_back() -> None:
    """One ``scontrol create reservation`` with IGNORE_JOBS,FLEX; the listing (22.05's
    one-line text) reads nodes, users, flags, times; "No reservations" is none."""
    run = Runner({SHOW: (0, RESV_LINE, "")})
    client = CliSlurmClient(run)
    client.create_reservation("hai-plan-3", ["n1", "n2"], ["alice"], 8)
    assert run.calls[0] == ("scontrol", "create", "reservation", "ReservationName=hai-plan-3",
                            "Nodes=n1,n2", "Users=alice", "StartTime=now", "Duration=8",
                            "Flags=IGNORE_JOBS,FLEX")
    (r,) = client.reservations("hai-plan-")
    assert (r.name, r.nodes, r.users, r.state) == ("hai-plan-3", ("n1", "n2"), ("alice",),
                                                   "ACTIVE")
    assert {"FLEX", "IGNORE_JOBS"} <= set(r.flags)
    assert r.start_time is not None and r.end_time is not None
    assert r.end_time - r.start_time == 300
    assert client.reservations("other-") == ()
    empty = CliSlurmClient(Runner({SHOW: (0, "No reservations in the system\n", "")}))
    assert empty.reservations() == ()
    with pytest.raises(ValueError):
        client.create_reservation("bad name", ["n1"], ["alice"], 8)
    with pytest.raises(ValueError):
        client.create_reservation("hai-plan-4", ["n1"], [], 8)


def test_reservation_is_updated_in_one_command_and_read_back() -> None:
    """Another plan joining (or leaving) a reservation: its nodes, users and length in one
    ``scontrol update``, then the listing must show exactly those nodes and users (24.11 says
    "Reservation updated." for an unknown node and keeps its old ones); bad lists are refused
    before Slurm is asked."""
    joined = RESV_LINE.replace("Users=alice", "Users=alice,bob")
    run = Runner({SHOW: (0, joined, "")})
    client = CliSlurmClient(run)
    client.update_reservation("hai-plan-3", ["n1", "n2"], ["alice", "bob"], 12)
    assert run.calls[0] == ("scontrol", "update", "ReservationName=hai-plan-3", "Nodes=n1,n2",
                            "Users=alice,bob", "Duration=12")
    with pytest.raises(SlurmError, match="covers nodes n1,n2 and users alice,bob, not "
                                         "n1,n2,n3 and alice,bob"):
        client.update_reservation("hai-plan-3", ["n1", "n2", "n3"], ["alice", "bob"], 12)
    gone = CliSlurmClient(Runner({SHOW: (0, "No reservations in the system\n", "")}))
    with pytest.raises(SlurmError, match="is gone"):
        gone.update_reservation("hai-plan-3", ["n1"], ["alice"], 12)
    calls = len(run.calls)
    for nodes, users, minutes in ((["n1"], [], 5), ([], ["alice"], 5), (["n1"], ["a b"], 5),
                                  (["n1"], ["alice"], 0)):
        with pytest.raises(ValueError):
            client.update_reservation("hai-plan-3", nodes, users, minutes)
    with pytest.raises(ValueError):
        client.update_reservation("bad name", ["n1"], ["alice"], 5)
    assert len(run.calls) == calls


def test_reservation_in_use_is_ended_now_instead_of_deleted() -> None:
    """Delete refused (a job runs in it): EndTime=now; an unknown name is False; a refusal of
    both for a name Slurm no longer lists is False, for a listed one an error."""
    in_use = (1, "", "delete_reservation ReservationName=hai-plan-3: Requested reservation "
                     "is in use\n")
    run = Runner({DELETE: in_use, END_NOW: (0, "", "")})
    assert CliSlurmClient(run).end_reservation("hai-plan-3") is True
    assert run.calls == [("scontrol", "delete", "ReservationName=hai-plan-3"),
                         ("squeue", "--noheader", "--states=PENDING",
                          "--reservation=hai-plan-3", "--Format=JobID:|", "--array-unique"),
                         END_NOW]
    # a pending job waits for it: unlinked first, then the delete goes through
    run = Runner({DELETE: in_use, SQUEUE: (0, "41|\n", ""), ("scontrol", "update"): (0, "", "")})
    run.answers = {("scontrol", "delete"): in_use, **run.answers}
    client = CliSlurmClient(run)
    deletes = iter([in_use, (0, "", "")])
    real = run.__call__

    def answer(argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        if tuple(argv[:2]) == DELETE:
            run.calls.append(tuple(argv))
            return Completed(tuple(argv), *next(deletes))
        return real(argv, timeout=timeout)

    client._run = answer
    assert client.end_reservation("hai-plan-3") is True
    assert ("scontrol", "update", "JobId=41", "Reservation=") in run.calls
    assert END_NOW not in run.calls
    run = Runner({DELETE: (0, "", "")})
    assert CliSlurmClient(run).end_reservation("hai-plan-3") is True and len(run.calls) == 1
    run = Runner({DELETE: (1, "", "delete_reservation ReservationName=hai-plan-3: Requested "
                                  "reservation is invalid\n")})
    assert CliSlurmClient(run).end_reservation("hai-plan-3") is False
    refused = (1, "", "Error updating the reservation: something else\n")
    run = Runner({DELETE: in_use, END_ANY: refused, SHOW: (0, "No reservations\n", "")})
    assert CliSlurmClient(run).end_reservation("hai-plan-3") is False
    run = Runner({DELETE: in_use, END_ANY: refused, SHOW: (0, RESV_LINE, "")})
    with pytest.raises(SlurmError):   # still listed, its end an hour ahead
        CliSlurmClient(run, clock=lambda: _epoch("2026-12-02T12:19:35")).end_reservation(
            "hai-plan-3")
    again = (1, "", "Error updating the reservation: Invalid time specified\n")
    run = Runner({DELETE: in_use, END_ANY: again, SHOW: (0, RESV_LINE, "")})
    later = CliSlurmClient(run, clock=lambda: _epoch("2026-12-02T13:19:40"))
    assert later.end_reservation("hai-plan-3") is True  # ended already, not purged yet


def _epoch(iso: str) -> float:
    return time.mktime(time.strptime(iso, "%Y-%m-%dT%H:%M:%S"))


def test_reservation_ended_within_its_first_second_ends_two_seconds_later() -> None:
    """22.05 refuses EndTime=now within the second the reservation started ("Invalid time
    specified": the end must come after the start), which a plan whose victim saves at once
    reaches (seen on the testbed: the plan's release failed). EndTime=now+2 is tried next."""
    in_use = (1, "", "delete_reservation ReservationName=hai-plan-3: Requested reservation "
                     "is in use\n")
    again = (1, "", "Error updating the reservation: Invalid time specified\n")
    run = Runner({DELETE: in_use, END_NOW: again, (*END_ANY, "EndTime=now+2"): (0, "", "")})
    assert CliSlurmClient(run).end_reservation("hai-plan-3") is True
    assert run.calls[-2:] == [END_NOW, (*END_ANY, "EndTime=now+2")]
