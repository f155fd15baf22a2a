"""Which ``sinfo`` node states make a testbed unusable (``health.node_problem``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hai_slurm.testbed.health import SINFO_NODES, node_problem, nodes_problem
from hai_slurm.testbed.waiting import Result, Runner

NODES = ("node1", "node2")


@pytest.mark.parametrize("state", ["idle", "mix", "alloc", "comp", "resv", "maint", "plnd",
                                   "mix-", "idle$", "alloc@"])
def test_busy_reserved_and_planned_nodes_are_usable(state: str) -> None:
    assert node_problem(f"node1 idle\nnode2 {state}\n", NODES) is None


@pytest.mark.parametrize("state", ["down", "drain", "drng", "fail", "unk", "idle*", "down*",
                                   "drain$", "inval"])
def test_down_drained_and_silent_nodes_are_named(state: str) -> None:
    assert node_problem(f"node1 idle\nnode2 {state}\n", NODES) == f"node node2 is {state}"


def test_slurms_reason_is_named() -> None:
    out = "node1 idle none\nnode2 drain Kill task failed\n"
    assert node_problem(out, NODES) == "node node2 is drain (Kill task failed)"


def test_a_node_sinfo_does_not_list_is_named() -> None:
    assert node_problem("node1 idle\n", NODES) == "sinfo does not list node2"
    assert node_problem("", NODES) == "sinfo does not list node1, node2"


def test_a_controller_that_does_not_answer_is_the_problem() -> None:
    """``nodes_problem`` runs one sinfo (local and Docker mode alike): a failed one names
    slurmctld and sinfo's last line; an answer is read as above."""
    def answering(out: str, rc: int = 0, err: str = "") -> Runner:
        def run(argv: Sequence[str], *, timeout: float = 30.0) -> Result:
            assert list(argv) == SINFO_NODES
            return Result(rc, out, err)
        return run

    down = answering("", 1, "sinfo: error: x\nUnable to contact slurm controller\n")
    assert nodes_problem(down, NODES) == ("slurmctld does not answer sinfo (Unable to contact "
                                          "slurm controller)")
    assert nodes_problem(answering("node1 idle none\nnode2 mix none\n"), NODES) is None
    assert nodes_problem(answering("node1 down* Not responding\n"), NODES) == (
        "node node1 is down* (Not responding); sinfo does not list node2")
