"""From the policy's verdicts to planner inputs, and the whole chain policy -> planner."""

from __future__ import annotations

from collections.abc import Callable

from hai_slurm.classes import PriorityClass as P
from hai_slurm.conf.topology import GpuRef, Level
from hai_slurm.priority.planner.inputs import (
    HolderMemo,
    allowed_nodes,
    gpus_from_counts,
    holders_from_policy,
    waiting_from_policy,
)
from hai_slurm.priority.planner.search import plan_preemptions
from hai_slurm.priority.planner.testing import gpu_cluster, gpus
from hai_slurm.priority.planner.types import Holder, PlannerConfig, PlanSnapshot
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.settings import FairnessConfig, PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import EventKind, FairnessEvent, Resources
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

TOPO = gpu_cluster(1, 3)
_Build = Callable[[HolderMemo | None], tuple[Holder, ...]]
CLUSTER = Resources(24, 3 * 128, 3 * 1024 * 1024)


def test_gpus_from_counts_keeps_known_gpus_and_picks_low_cells_for_the_rest() -> None:
    """Known GPUs stay; counts become indices in the lowest free cell, never a GPU twice."""
    known = {5: gpus("n1", 0, 1)}
    out = gpus_from_counts(TOPO, {5: {"n1": 2}, 6: {"n1": 2}, 7: {"n1": 4, "n2": 8},
                                  8: {"n9": 1}}, known)
    assert out[5] == gpus("n1", 0, 1)
    assert out[6] == gpus("n1", 2, 3)   # completes socket 0, keeps socket 1 whole
    assert out[7] == gpus("n1", 4, 5, 6, 7) + gpus("n2", *range(8))
    assert out[8] == ()                 # unknown node: left out
    assert TOPO.span(out[6]) is Level.PCIE_SWITCH
    every = [g for refs in out.values() for g in refs]
    assert len(every) == len(set(every))


def test_gpus_from_counts_drops_known_gpus_held_twice() -> None:
    """Two jobs reporting the same GPU: the later one (by id) is left out, not double-booked."""
    out = gpus_from_counts(TOPO, {}, {1: (GpuRef("n1", 0),), 2: (GpuRef("n1", 0),)})
    assert out == {1: (GpuRef("n1", 0),)}


def test_policy_flags_reach_the_planner_and_borrowed_jobs_give_way() -> None:
    """Quota, protection and class from compute_priorities decide the victim: team a's borrowed
    job gives way; team p's job is protected (preempted too often); the HIGH job waits its turn
    behind nobody."""
    config = PolicyConfig(teams={"a": TeamQuota(gpus=8), "p": TeamQuota(gpus=8),
                                 "h": TeamQuota(gpus=8)},
                          fairness=FairnessConfig(protect_after=1))
    running = [running_job(1, P.NORMAL, team="a", gpus=8, start=NOW - 9000),
               running_job(2, P.NORMAL, team="a", gpus=8, start=NOW - 5000),  # borrowed
               running_job(3, P.LOW, team="p", gpus=8, start=NOW - 9000)]
    events = [FairnessEvent(EventKind.PREEMPTED, "p", "u1", NOW - 60 * k) for k in (1, 2)]
    pending = [pending_job(10, P.HIGH, team="h", gpus=8, submit=NOW - 3600),
               pending_job(11, P.NORMAL, team="h", gpus=8, submit=NOW - 5400)]
    policy = compute_priorities(pending, running, config=config, cluster=CLUSTER,
                                events=events, now=NOW)
    assert policy.running[2].borrowed and policy.running[3].protected
    held = gpus_from_counts(TOPO, {1: {"n1": 8}, 2: {"n2": 8}, 3: {"n3": 8}})
    snap = PlanSnapshot(TOPO, holders_from_policy(running, policy.running, held),
                        waiting_from_policy(pending, policy.pending), NOW)
    assert [w.job_id for w in snap.pending] == [10, 11]  # HIGH first, whatever the wait
    assert snap.pending[0].wait == policy.pending[10].reason.wait
    # HIGH is urgent: a protected team's jobs give way to it too; NORMAL within its bound not
    assert [w.overrides_protection for w in snap.pending] == [True, False]
    result = plan_preemptions(snap, config=PlannerConfig(), now=NOW)
    plan = result.plan_for(10)
    assert plan is not None and plan.victim_ids == (2,) and plan.nodes == ("n2",)
    assert result.plan_for(11) is None  # NORMAL cannot preempt NORMAL; LOW job 3 is protected


def test_waiting_from_policy_takes_node_counts() -> None:
    """--nodes given by the adapter reaches the planner's shape."""
    pending = [pending_job(10, P.HIGH, gpus=16)]
    policy = compute_priorities(pending, [], config=PolicyConfig(), cluster=CLUSTER, now=NOW)
    (w,) = waiting_from_policy(pending, policy.pending, nodes={10: 2})
    assert (w.gpus, w.nodes, w.effective) == (16, 2, P.HIGH)


def test_allowed_nodes_of_a_partition_list() -> None:
    """A job's partitions' nodes within the cluster; None when that is every node or when no
    partition name is known (no restriction rather than a wrong one)."""
    cluster = frozenset({"n1", "n2", "n3", "n4"})
    parts = {"a": frozenset({"n1", "n2"}), "b": frozenset({"n3", "x9"}),
             "all": frozenset(cluster)}
    assert allowed_nodes("a", parts, cluster) == {"n1", "n2"}
    assert allowed_nodes("b", parts, cluster) == {"n3"}          # x9: not in the topology
    assert allowed_nodes("a,b", parts, cluster) == {"n1", "n2", "n3"}
    assert allowed_nodes("a,gone", parts, cluster) == {"n1", "n2"}
    assert allowed_nodes("all", parts, cluster) is None
    assert allowed_nodes("a,b,all", parts, cluster) is None
    assert allowed_nodes("gone", parts, cluster) is None


def test_holder_memo_reuses_only_unchanged_holders() -> None:
    """With a HolderMemo, a running job whose values did not change gets the same Holder object
    again; one whose decision, checkpoint, GPUs or victim flag changed gets a new holder with
    the new values (never the stale one), each equal to what building without the memo gives."""
    running = [running_job(1, P.NORMAL, team="a", gpus=8, start=NOW - 9000),
               running_job(2, P.LOW, team="b", gpus=8, start=NOW - 5000)]
    policy = compute_priorities([], running, config=PolicyConfig(), cluster=CLUSTER, now=NOW)
    held = gpus_from_counts(TOPO, {1: {"n1": 8}, 2: {"n2": 8}})
    memo = HolderMemo()
    first = holders_from_policy(running, policy.running, held, memo=memo)
    again = holders_from_policy(running, policy.running, held, memo=memo)
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))

    decisions = {**policy.running, 2: policy.running[2]._replace(protected=True)}
    moved = {**held, 2: gpus("n3", *range(8))}
    cases: list[tuple[_Build, Callable[[Holder], bool]]] = [
        (lambda m: holders_from_policy(running, decisions, held, memo=m),
         lambda h: h.protected),
        (lambda m: holders_from_policy(running, policy.running, held, memo=m,
                                       checkpoints={2: NOW - 60}),
         lambda h: h.last_checkpoint == NOW - 60),
        (lambda m: holders_from_policy(running, policy.running, held, memo=m, victims={2}),
         lambda h: not h.preemptible),
        (lambda m: holders_from_policy(running, policy.running, moved, memo=m),
         lambda h: h.gpus[0].node == "n3"),
        (lambda m: holders_from_policy(running, policy.running, held, memo=m,
                                       restart_costs={2: 7.0}),
         lambda h: h.restart_cost == 7.0),
        (lambda m: holders_from_policy(running, policy.running, held, memo=m, saves={2: 3.0}),
         lambda h: h.can_ack and h.save_cost == 3.0),
    ]
    for build, holds in cases:
        holders_from_policy(running, policy.running, held, memo=memo)  # the unchanged pass
        got = build(memo)
        assert got == build(None) and holds(got[1])
        assert got[0] is first[0]   # job 1 did not change
        assert got[1] is not first[1] and got[1] != first[1]
    # the memo follows the last call: back to the first values gives them again
    assert holders_from_policy(running, policy.running, held, memo=memo) == first
