"""The executor's extra Slurm verbs through the CLI: argv, parsing, harmless races."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.priority.slurm_actions import CliPreemptionActions, parse_facts
from hai_slurm.slurm_plugins.parse import job_state
from hai_slurm.slurm_plugins.runner import Completed


class Runner:
    """Answers each command from a table of (argv prefix -> (rc, stdout, stderr))."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        self.calls.append(tuple(argv))
        for prefix, (rc, out, err) in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return Completed(tuple(argv), rc, out, err)
        return Completed(tuple(argv), 0, "", "")


SQUEUE = ("squeue",)


def test_facts_read_one_squeue_and_detect_holds() -> None:
    """States, restarts, holds (admin hold and requeue-hold) and ReqNodeList, in one command."""
    out = ("12|RUNNING|0|1040|None||\n"
           "13|FAILED|1|0|NonZeroExitCode||\n"
           "14|PENDING|2|0|job_requeued_in_held_state|n[1-2]|\n"
           "15|PENDING|0|0|JobHeldAdmin||\n")
    run = Runner({SQUEUE: (0, out, "")})
    facts = CliPreemptionActions(run).facts([12, 13, 14, 15, 16])
    assert run.calls == [("squeue", "--noheader", "--states=all", "--jobs=12,13,14,15,16",
                          "--Format=JobID:|,State:|,RestartCnt:|,PriorityLong:|,Reason:|,"
                          "ReqNodes:|")]
    assert facts[12].running and not facts[12].held
    assert facts[13].finished and facts[13].restart_count == 1
    assert facts[14].pending and facts[14].held and facts[14].req_nodes == "n[1-2]"
    assert facts[15].held
    assert 16 not in facts  # gone


def test_a_job_cannot_spoof_its_state() -> None:
    """Only Slurm-owned columns are read: a line that does not parse is ignored, and a job
    named like another job's record never enters the result (names are not printed)."""
    assert parse_facts("12|RUNNING|0|1|None|") is None  # too few columns
    assert parse_facts("x 12|RUNNING|0|1|None||") is None
    run = Runner({SQUEUE: (0, "12|RUNNING|0|1|None||\n99|PENDING|0|0|JobHeldAdmin||\n", "")})
    assert set(CliPreemptionActions(run).facts([12])) == {12}


def test_all_gone_is_empty_and_other_failures_raise() -> None:
    """squeue's 'Invalid job id' for the whole chunk means gone; anything else is an error."""
    gone = Runner({SQUEUE: (1, "", "slurm_load_jobs error: Invalid job id specified")})
    assert CliPreemptionActions(gone).facts([5]) == {}
    down = Runner({SQUEUE: (1, "", "slurm_load_jobs error: Unable to contact slurm controller")})
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        CliPreemptionActions(down).facts([5])


def test_requeue_any_requeues_running_and_finished_holds_pending() -> None:
    """Running and exited victims get requeuehold; an already-pending one is just held."""
    out = "1|RUNNING|0|5|None||\n2|FAILED|0|5|NonZeroExitCode||\n3|PENDING|1|5|BeginTime||\n"
    run = Runner({SQUEUE: (0, out, "")})
    done = CliPreemptionActions(run).requeue_any([1, 2, 3, 4], hold=True)
    assert done == (1, 2, 3)
    assert ("scontrol", "requeuehold", "1") in run.calls
    assert ("scontrol", "requeuehold", "2") in run.calls
    assert ("scontrol", "hold", "3") in run.calls


def test_pin_and_harmless_races() -> None:
    """ReqNodeList update argv; 'no longer pending' is a harmless False, other errors raise."""
    run = Runner({("scontrol", "update"): (1, "", "Job is no longer pending execution")})
    acts = CliPreemptionActions(run)
    assert acts.set_req_nodes(7, "n1,n2") is False
    assert run.calls == [("scontrol", "update", "JobId=7", "ReqNodeList=n1,n2")]
    bad = CliPreemptionActions(Runner({("scontrol",): (1, "", "Access/permission denied")}))
    with pytest.raises(SlurmError, match="permission denied"):
        bad.set_req_nodes(7, "n1")


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
    facts = parse_facts(f"7|{word}|0|5|None||")
    assert facts is not None
    assert (facts.running, facts.pending, facts.finished) == (running, pending, finished)
    assert facts.state == job_state(word, "x")[0]


def test_a_state_slurm_does_not_have_is_an_error_not_finished() -> None:
    """An unknown state word raises SlurmError naming the job instead of counting as ended."""
    with pytest.raises(SlurmError, match=r"squeue State of job 7: unknown job_state 'WARPING'"):
        parse_facts("7|WARPING|0|5|None||")
