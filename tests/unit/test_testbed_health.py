"""Which ``sinfo`` node states make a testbed unusable (``health.node_problem``)."""

from __future__ import annotations

import pytest

from hai_slurm.testbed.health import node_problem

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
