"""Properties of every plan on random clusters: rules always hold; one-node plans are optimal."""

from __future__ import annotations

from itertools import combinations
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.priority.planner import search
from hai_slurm.priority.planner.search import lost_seconds, may_plan, plan_preemptions, shape
from hai_slurm.priority.planner.testing import NOW, gpu_cluster, snapshot
from hai_slurm.priority.planner.types import (
    DEFAULT_WEIGHTS,
    Holder,
    Outcome,
    PlannerConfig,
    Waiting,
)
from hai_slurm.priority.policy.ladder import RANK

TOPO = gpu_cluster(2, 2)  # n1, n2 under leaf1; n3, n4 under leaf2; 8 GPUs each
P = PriorityClass
# the middle classes weighted (their default is 0: they preempt only past their bound), so that
# their benefit test is drawn too
CFG = PlannerConfig(class_weights={**DEFAULT_WEIGHTS, P.ABOVE_NORMAL: 5.0, P.NORMAL: 2.0,
                                   P.UNDER_NORMAL: 1.5, P.BELOW_NORMAL: 1.0})
classes = st.sampled_from(list(PriorityClass))
# Running jobs lean low and beneficiaries high, so that most examples have something to plan.
low_classes = st.sampled_from((P.LOW, P.BELOW_NORMAL, P.UNDER_NORMAL, P.NORMAL, P.NORMAL,
                               P.ABOVE_NORMAL, P.HIGH, P.EXTREME_HIGH))
high_classes = st.sampled_from((P.EXTREME_HIGH, P.VERY_HIGH, P.HIGH, P.HIGH, P.ABOVE_NORMAL,
                                P.NORMAL, P.LOW))


@st.composite
def running(draw: st.DrawFn) -> list[Holder]:
    """Random jobs packed onto the nodes, some GPUs left free, maybe one 2-node job."""
    out: list[Holder] = []
    nodes = ["n1", "n2", "n3", "n4"]
    if draw(st.booleans()):
        nodes = ["n3", "n4"]
        out.append(_job(draw, 1, tuple(GpuRef(n, g) for n in ("n1", "n2") for g in range(8))))
    for node in nodes:
        g = 0
        while g < 8:
            size = min(draw(st.sampled_from((1, 2, 4, 8))), 8 - g)
            if draw(st.integers(0, 4)):  # mostly busy
                out.append(_job(draw, len(out) + 1, tuple(GpuRef(node, g + k)
                                                          for k in range(size))))
            g += size
    return out


def _job(draw: st.DrawFn, job_id: int, refs: tuple[GpuRef, ...]) -> Holder:
    start = NOW - draw(st.sampled_from((60.0, 7200.0, 7200.0, 90000.0)))
    return Holder(
        job_id=job_id, team=draw(st.sampled_from(("a", "b"))), effective=draw(low_classes),
        gpus=refs, start_time=start,
        last_checkpoint=draw(st.one_of(st.none(), st.floats(start, NOW))),
        restart_cost=draw(st.one_of(st.none(), st.sampled_from((0.0, 30.0, 900.0)))),
        borrowed=draw(st.booleans()), protected=draw(st.integers(0, 5)) == 0,
        preemptible=draw(st.integers(0, 5)) > 0)


waitings = st.lists(st.builds(
    Waiting, job_id=st.integers(1000, 1010), team=st.just("z"), effective=high_classes,
    gpus=st.sampled_from((1, 2, 3, 4, 8, 16)), nodes=st.sampled_from((None, None, 1, 2)),
    wait=st.sampled_from((0.0, 600.0, 1e7)), max_leaves=st.sampled_from((None, None, 1, 2))),
    min_size=1, max_size=4,
    unique_by=lambda w: w.job_id)
# also urgent or past their bound (overriding protection), and of every class
any_waitings = st.lists(st.builds(
    Waiting, job_id=st.integers(1000, 1010), team=st.just("z"), effective=classes,
    gpus=st.sampled_from((1, 2, 4, 8)), nodes=st.sampled_from((None, 1, 2)),
    wait=st.sampled_from((0.0, 600.0, 1e7)), overrides_protection=st.booleans()),
    min_size=1, max_size=5, unique_by=lambda w: w.job_id)


def _eligible(h: Holder, cls: PriorityClass) -> bool:
    return (RANK[h.effective] < RANK[cls] and h.preemptible and not h.protected
            and NOW - h.start_time >= CFG.min_run_time)


@settings(max_examples=300, deadline=None)
@given(running(), waitings, st.sampled_from((CFG, PlannerConfig())))
def test_every_plan_keeps_the_rules(jobs: list[Holder], pending: list[Waiting],
                                    config: PlannerConfig) -> None:
    """Victims are eligible and strictly lower, sets and placements are disjoint, the placement
    has the beneficiary's shape within its --switches limit on GPUs that are free or freed, and
    benefit exceeds loss (so, with the default weights, no middle-class job preempts: none of
    these is past its bound)."""
    result = plan_preemptions(snapshot(TOPO, jobs, pending), config=config, now=NOW)
    assert result.refused is None
    by_id = {h.job_id: h for h in jobs}
    held = {g: h.job_id for h in jobs for g in h.gpus}
    taken_victims: set[int] = set()
    taken_gpus: set[GpuRef] = set()
    for plan in result.plans:
        ben = next(w for w in pending if w.job_id == plan.beneficiary)
        assert result.decisions[ben.job_id].outcome is Outcome.PREEMPT
        assert plan.victims and all(_eligible(by_id[v], ben.effective) for v in plan.victim_ids)
        assert not taken_victims & set(plan.victim_ids)
        assert not taken_gpus & set(plan.placement)
        taken_victims |= set(plan.victim_ids)
        taken_gpus |= set(plan.placement)
        nodes, per = shape(ben, 8)
        assert len(plan.nodes) == nodes and plan.gpus_per_node == per
        assert len(plan.placement) == nodes * per >= ben.gpus
        for node in plan.nodes:
            assert sum(g.node == node for g in plan.placement) == per
        assert all(held.get(g) in (None, *plan.victim_ids) for g in plan.placement)
        # one node; a job's --switches=1 keeps it under one leaf; else it may span the spine
        widest = (Level.NODE if nodes == 1 else Level.LEAF_SWITCH if ben.max_leaves == 1
                  else Level.SPINE)
        assert TOPO.span(plan.placement) <= widest
        if ben.max_leaves is not None:
            assert len({TOPO.cell(g.node).parent for g in plan.placement}) <= ben.max_leaves
        loss = sum(lost_seconds(by_id[v], CFG, NOW) * len(by_id[v].gpus)
                   for v in plan.victim_ids)
        assert abs(plan.lost_work - loss) < 1e-6 * max(1.0, loss)
        assert plan.benefit > CFG.benefit_threshold * plan.lost_work
        assert config.class_weights.get(ben.effective, 0.0) > 0


def _brute_best(topo: Topology, jobs: list[Holder], ben: Waiting) -> tuple[float, float] | None:
    """The least (loss with borrowed victims' x ``borrowed_discount``, loss) of any victim set
    freeing ben.gpus GPUs on one node."""
    held = {g for h in jobs for g in h.gpus}
    best: tuple[float, float] | None = None
    for node in (c.id for c in topo.cells_at(Level.NODE)):
        free = sum(g.node == node and g not in held for g in topo.gpus)
        cands = [h for h in jobs if _eligible(h, ben.effective)
                 and any(g.node == node for g in h.gpus)]
        for size in range(1, len(cands) + 1):
            for subset in combinations(cands, size):
                freed = sum(g.node == node for h in subset for g in h.gpus)
                if free + freed < ben.gpus:
                    continue
                cost = [lost_seconds(h, CFG, NOW) * len(h.gpus) for h in subset]
                key = (sum(c * (CFG.borrowed_discount if h.borrowed else 1.0)
                           for c, h in zip(cost, subset, strict=True)), sum(cost))
                best = key if best is None or key < best else best
    return best


@settings(max_examples=200, deadline=None)
@given(running(), high_classes, st.sampled_from((1, 2, 3, 4, 6, 8)))
def test_one_node_plans_are_the_cheapest_set(jobs: list[Holder], cls: PriorityClass,
                                             count: int) -> None:
    """For one single-node beneficiary, the plan's (discounted loss, loss) is the least any
    victim set achieves (exhaustive search), and no plan is made when no set exists."""
    ben = Waiting(job_id=1000, team="z", effective=cls, gpus=count, wait=1e9)
    result = plan_preemptions(snapshot(TOPO, jobs, [ben]), config=CFG, now=NOW)
    if result.decisions[1000].outcome is Outcome.FITS:
        return
    best = _brute_best(TOPO, jobs, ben)
    plan = result.plan_for(1000)
    if best is None or cls is PriorityClass.LOW:
        assert plan is None
        return
    assert plan is not None, result.decisions[1000]
    nb = sum(v.lost_work * (CFG.borrowed_discount if v.borrowed else 1.0) for v in plan.victims)
    assert abs(nb - best[0]) < 1e-6 * max(1.0, nb) and abs(plan.lost_work - best[1]) < 1e-6 * max(
        1.0, plan.lost_work)


@settings(max_examples=300, deadline=None)
@given(running(), any_waitings, st.sampled_from((CFG, PlannerConfig())))
def test_a_job_that_may_not_plan_gets_no_plan_and_no_time(jobs: list[Holder],
                                                          pending: list[Waiting],
                                                          config: PlannerConfig) -> None:
    """``may_plan`` False (not overriding protection, class weight 0): no plan for the job,
    no ``worth_in`` or ``ripe_in`` time, and a verdict without a victim search; so a pass in
    which no job may plan makes no plan and notes no time (the simulator skips it). Each
    victim search is for a job that may plan."""
    searches = 0
    search_options = search._Pass.options

    def counted(self: search._Pass, *args: Any, **kwargs: Any) -> Any:
        nonlocal searches
        searches += 1
        return search_options(self, *args, **kwargs)

    with patch.object(search._Pass, "options", counted):
        result = plan_preemptions(snapshot(TOPO, jobs, pending), config=config, now=NOW)
    assert searches <= sum(may_plan(w, config) for w in pending)
    for w in pending:
        if may_plan(w, config):
            continue
        assert result.plan_for(w.job_id) is None
        assert w.job_id not in result.worth_in and w.job_id not in result.ripe_in
        assert result.decisions[w.job_id].outcome in (Outcome.FITS, Outcome.IMPOSSIBLE,
                                                      Outcome.NO_VICTIMS, Outcome.NOT_WORTH)
    if not any(may_plan(w, config) for w in pending):
        assert not result.plans and not result.worth_in and not result.ripe_in
