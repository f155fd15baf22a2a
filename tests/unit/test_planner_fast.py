"""The incremental victim index gives exactly the plans and verdicts of the plain search
(``planner_reference``: every candidate rebuilt and every node searched for each waiting job)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from planner_reference import reference_plan

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef
from hai_slurm.priority.planner.search import plan_preemptions
from hai_slurm.priority.planner.testing import NOW, gpu_cluster, snapshot, synthetic_snapshot
from hai_slurm.priority.planner.types import Holder, PlannerConfig, Waiting

P = PriorityClass
LEAVES, PER_LEAF = 3, 3
NODES = [f"n{i}" for i in range(1, LEAVES * PER_LEAF + 1)]
TOPO = gpu_cluster(LEAVES, PER_LEAF)
PART_A = frozenset(NODES[:4])             # a partition of leaf 1 and one node of leaf 2
PART_B = frozenset(NODES[1::2])           # every other node, across the leaves
ONE_NODE = frozenset(NODES[4:5])          # --nodelist of one node


@st.composite
def running(draw: st.DrawFn) -> list[Holder]:
    """Jobs packed onto the nodes (some GPUs free), a few spanning two or three nodes."""
    out: list[Holder] = []
    taken: set[str] = set()
    for _ in range(draw(st.integers(0, 2))):
        first = draw(st.integers(0, len(NODES) - 2))
        span = NODES[first:first + draw(st.integers(2, 3))]
        if taken & set(span):
            continue
        taken |= set(span)
        out.append(_job(draw, len(out) + 1, tuple(GpuRef(n, g) for n in span
                                                  for g in range(8))))
    for node in NODES:
        if node in taken:
            continue
        g = 0
        while g < 8:
            size = min(draw(st.sampled_from((1, 2, 4, 8))), 8 - g)
            if draw(st.integers(0, 5)):
                out.append(_job(draw, len(out) + 1, tuple(GpuRef(node, g + k)
                                                          for k in range(size))))
            g += size
    return out


def _job(draw: st.DrawFn, job_id: int, refs: tuple[GpuRef, ...]) -> Holder:
    start = NOW - draw(st.sampled_from((60.0, 3600.0, 7200.0, 90000.0)))
    return Holder(
        job_id=job_id, team="a", effective=draw(st.sampled_from(list(P))), gpus=refs,
        start_time=start, last_checkpoint=draw(st.one_of(st.none(), st.floats(start, NOW))),
        restart_cost=draw(st.sampled_from((None, 0.0, 900.0))),
        borrowed=draw(st.booleans()), protected=draw(st.integers(0, 6)) == 0,
        preemptible=draw(st.integers(0, 6)) > 0, can_ack=draw(st.booleans()))


waitings = st.lists(st.builds(
    Waiting, job_id=st.integers(1000, 1040), team=st.just("z"),
    effective=st.sampled_from(list(P)), gpus=st.sampled_from((0, 1, 2, 3, 4, 6, 8, 16, 24, 40)),
    nodes=st.sampled_from((None, None, 1, 2, 3)), wait=st.sampled_from((0.0, 600.0, 1e7)),
    max_leaves=st.sampled_from((None, None, 1, 2)),
    # shared set objects, as the daemon gives them (one per partition): None most often
    allowed=st.sampled_from((None, None, None, PART_A, PART_B, ONE_NODE)),
    overrides_protection=st.booleans()),
    min_size=1, max_size=14, unique_by=lambda w: w.job_id)

configs = st.builds(
    PlannerConfig, min_run_time=st.sampled_from((0.0, 600.0)),
    max_plans=st.sampled_from((0, 1, 4, 20)), max_searches=st.sampled_from((1, 3, 64)),
    plans_per_pending=st.sampled_from((0.0, 0.05, 1.0)),
    max_candidates_per_node=st.sampled_from((1, 2, 8)), allow_cross_leaf=st.booleans(),
    borrowed_discount=st.sampled_from((0.0, 0.3, 0.5, 1.0)))


@settings(max_examples=400, deadline=None)
@given(running(), waitings, configs)
def test_fast_pass_equals_the_plain_search(jobs: list[Holder], pending: list[Waiting],
                                           config: PlannerConfig) -> None:
    """Same plans (victims, placements, reasons, passed-over sets) and same verdicts."""
    snap = snapshot(TOPO, jobs, pending)
    assert plan_preemptions(snap, config=config, now=NOW) == \
        reference_plan(snap, config=config, now=NOW)


def test_fast_pass_equals_the_plain_search_on_larger_clusters() -> None:
    """Synthetic clusters of 30 nodes, hundreds of jobs, default and lifted limits."""
    config = PlannerConfig()
    for seed in (1, 2, 3):
        snap = synthetic_snapshot(seed, leaves=5, nodes_per_leaf=6, running=180, pending=400,
                                  teams=6)
        for cfg in (config, replace(config, max_plans=64, max_searches=10_000,
                                    min_run_time=0.0)):
            fast = plan_preemptions(snap, config=cfg, now=NOW)
            assert fast.plans, "a workload with something to plan"
            assert fast == reference_plan(snap, config=cfg, now=NOW)


def test_two_cross_leaf_plans_in_one_pass_see_each_other() -> None:
    """Leaves of two nodes, two HIGH jobs of 3 x 8 GPUs: both span leaves; the second search
    must not reuse what the first one's victims offered."""
    topo = gpu_cluster(3, 2)
    jobs = [Holder(job_id=i, team="a", effective=P.LOW,
                   gpus=tuple(GpuRef(f"n{i}", g) for g in range(8)), start_time=NOW - 7200,
                   last_checkpoint=NOW - 600 * i) for i in range(1, 7)]
    pending = [Waiting(job_id=100 + k, team="z", effective=P.HIGH, gpus=24, nodes=3,
                       wait=1e7) for k in range(2)]
    snap = snapshot(topo, jobs, pending)
    fast = plan_preemptions(snap, config=PlannerConfig(), now=NOW)
    assert [len(p.nodes) for p in fast.plans] == [3, 3]
    assert set(fast.plans[0].victim_ids).isdisjoint(fast.plans[1].victim_ids)
    assert fast == reference_plan(snap, config=PlannerConfig(), now=NOW)


WIDE = gpu_cluster(8, 2)   # eight leaf switches: multi-node searches may stop before the last
WIDE_NODES = [f"n{i:02d}" for i in range(1, 17)]


@st.composite
def wide_running(draw: st.DrawFn) -> list[Holder]:
    """Jobs packed onto the 16 nodes of WIDE, some spanning two nodes (also across leaves)."""
    out: list[Holder] = []
    taken: set[str] = set()
    for _ in range(draw(st.integers(0, 4))):
        first = draw(st.integers(0, len(WIDE_NODES) - 2))
        span = WIDE_NODES[first:first + 2]
        if taken & set(span):
            continue
        taken |= set(span)
        out.append(_job(draw, len(out) + 1, tuple(GpuRef(n, g) for n in span
                                                  for g in range(draw(st.sampled_from((4, 8)))))))
    for node in WIDE_NODES:
        if node in taken:
            continue
        g = 0
        while g < 8:
            size = min(draw(st.sampled_from((1, 2, 4, 8))), 8 - g)
            if draw(st.integers(0, 7)):
                out.append(_job(draw, len(out) + 1, tuple(GpuRef(node, g + k)
                                                          for k in range(size))))
            g += size
    return out


wide_waitings = st.lists(st.builds(
    Waiting, job_id=st.integers(1000, 1040), team=st.just("z"),
    effective=st.sampled_from(list(P)), gpus=st.sampled_from((1, 4, 8, 12, 16, 24, 32)),
    nodes=st.sampled_from((None, None, 2, 3, 4)), wait=st.sampled_from((600.0, 1e7)),
    max_leaves=st.sampled_from((None, None, 1, 2)),
    # shared set objects, as the daemon gives them (one per partition): None most often
    allowed=st.sampled_from((None, None, None, PART_A, PART_B, ONE_NODE))),
    min_size=1, max_size=12, unique_by=lambda w: w.job_id)


@settings(max_examples=150, deadline=None)
@given(wide_running(), wide_waitings, configs)
def test_fast_pass_equals_the_plain_search_on_many_leaves(
        jobs: list[Holder], pending: list[Waiting], config: PlannerConfig) -> None:
    """Eight leaf switches: the multi-node search that visits leaves by their lower bound and
    stops early still finds the plain search's sets and runners-up."""
    snap = snapshot(WIDE, jobs, pending)
    assert plan_preemptions(snap, config=config, now=NOW) == \
        reference_plan(snap, config=config, now=NOW)


def test_fast_pass_equals_the_plain_search_on_seeded_wide_clusters() -> None:
    """Seeded synthetic clusters of 12 leaf switches (multi-node jobs running and waiting),
    limits lifted so that dozens of multi-node searches run in one pass."""
    lifted = PlannerConfig(max_plans=200, max_searches=100_000, min_run_time=0.0)
    multi = 0
    for seed in (4, 5, 6, 7):
        snap = synthetic_snapshot(seed, leaves=12, nodes_per_leaf=3, running=220, pending=300,
                                  teams=5)
        fast = plan_preemptions(snap, config=lifted, now=NOW)
        multi += sum(len(p.nodes) > 1 for p in fast.plans)
        assert fast == reference_plan(snap, config=lifted, now=NOW)
    assert multi > 0, "some multi-node plans were compared"
