"""Where a pending job may run: ``--constraint`` read per node, the nodes the daemon's planner
lets a plan free for it (partition, ``--nodelist``, ``--exclude``, ``--constraint``), and the
fake scheduler honouring the same requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.planning import usable_nodes
from hai_slurm.slurm_plugins.constraints import node_filter
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import Job

A100, H100 = frozenset({"a100", "nvlink"}), frozenset({"h100", "nvlink", "ib"})


@pytest.mark.parametrize(("expression", "a100", "h100", "none"), [
    ("a100", True, False, False),
    ("a100|h100", True, True, False),
    ("nvlink&ib", False, True, False),
    ("nvlink,ib", False, True, False),             # a comma is read as AND
    ("[a100|h100]", True, True, False),            # matching OR: per node, an OR
    ("(a100|h100)&ib", False, True, False),
    ("a100|(h100&ib)", True, True, False),
    (" a100 | h100 ", True, True, False),
])
def test_constraints_read_per_node(expression: str, a100: bool, h100: bool, none: bool) -> None:
    test = node_filter(expression)
    assert test is not None
    assert (test(A100), test(H100), test(frozenset())) == (a100, h100, none)


@pytest.mark.parametrize("expression", [
    "", "  ",                                      # no constraint
    "a100*2", "[a100*2&h100*4]",                   # counts: not a per-node question
    "a100&", "(a100", "a100)", "[a100|h100)", "&",  # not understood
])
def test_constraints_without_a_per_node_answer(expression: str) -> None:
    assert node_filter(expression) is None


def _job(partition: str = "gpu", **requests: str) -> Job:
    fake = FakeSlurm([FakeNode(f"n{i}", partitions=("gpu",)) for i in range(1, 5)])
    jid = fake.submit(partition="gpu")
    job = fake.snapshot().job(jid)
    assert job is not None
    return replace(job, partition=partition, **requests)


CLUSTER = frozenset({"n1", "n2", "n3", "n4", "n5"})
PARTS = {"gpu": frozenset({"n1", "n2", "n3", "n4"}), "all": CLUSTER}
FEATURES = {"n1": A100, "n2": A100, "n3": H100, "n4": H100}


@pytest.mark.parametrize(("requests", "expected"), [
    ({}, {"n1", "n2", "n3", "n4"}),
    ({"partition": "all"}, None),                                   # every node
    ({"partition": "all", "excluded_nodes": "n5"}, {"n1", "n2", "n3", "n4"}),
    ({"required_nodes": "n[2-3]"}, {"n2", "n3"}),
    ({"required_nodes": "n5"}, set()),                               # listed, not in partition
    ({"excluded_nodes": "n[1,3]"}, {"n2", "n4"}),
    ({"features": "h100"}, {"n3", "n4"}),
    ({"features": "a100|ib", "excluded_nodes": "n1"}, {"n2", "n3", "n4"}),
    ({"features": "a100*2"}, {"n1", "n2", "n3", "n4"}),              # counts: no filter
    ({"partition": "all", "features": "nvlink"}, {"n1", "n2", "n3", "n4"}),  # n5: none
])
def test_usable_nodes_of_a_pending_job(requests: dict[str, str],
                                       expected: set[str] | None) -> None:
    job = _job(**requests)
    got = usable_nodes(job, PARTS, CLUSTER, FEATURES)
    assert got == (None if expected is None else frozenset(expected))


def test_fake_scheduler_honours_nodelist_exclude_and_constraint() -> None:
    """As slurmctld does: a listed node is always one of the job's (and counts toward
    ``--nodes``), excluded nodes and nodes without the features are never used; unknown nodes
    and features are refused at submission."""
    fake = FakeSlurm([FakeNode("n1", features=("a100",)), FakeNode("n2", features=("a100",)),
                      FakeNode("n3", features=("h100",)), FakeNode("n4", features=("h100",))])
    listed = fake.submit(nodelist="n[2,4]", gpus_per_node=1)
    excl = fake.submit(exclude="n[1-3]", gpus_per_node=1)
    feat = fake.submit(constraint="h100", gpus_per_node=8)
    blocked = fake.submit(constraint="a100", exclude="n[1-2]")
    fake.schedule()
    snap = fake.snapshot()
    got = {jid: snap.job(jid) for jid in (listed, excl, feat, blocked)}
    assert got[listed] is not None and got[listed].nodes == ("n2", "n4")
    assert got[listed].node_count == 2 and got[listed].required_nodes == "n[2,4]"
    assert got[excl] is not None and got[excl].nodes == ("n4",)
    assert got[feat] is not None and got[feat].nodes == ("n3",)
    assert got[blocked] is not None and got[blocked].nodes == ()
    assert got[blocked].features == "a100" and got[blocked].excluded_nodes == "n[1-2]"
    assert {n.name: n.features for n in snap.nodes}["n3"] == ("h100",)
    with pytest.raises(SlurmError, match="invalid node name"):
        fake.submit(nodelist="n9")
    with pytest.raises(SlurmError, match="Invalid feature"):
        fake.submit(constraint="v100")
