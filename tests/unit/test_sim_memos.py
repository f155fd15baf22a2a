"""The simulator's own memos give what computing afresh gives: a run with them and one without
see the very same planner inputs at every pass and end with the same result."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.planner.inputs import HolderMemo
from hai_slurm.priority.planner.types import Holder, PlanningResult, PlanSnapshot
from hai_slurm.priority.policy.settings import FairnessConfig
from hai_slurm.priority.policy.state import (
    PolicyResult,
    PolicyState,
    RunningDecision,
    RunningJob,
)
from hai_slurm.priority.policy.testing import running_job
from hai_slurm.priority.sim import matrix, ours
from hai_slurm.priority.sim.costs import CostModel
from hai_slurm.priority.sim.engine import T0, Engine, SimJob
from hai_slurm.priority.sim.metrics import summarize
from hai_slurm.priority.sim.runner import Setup, with_quotas
from hai_slurm.priority.sim.trace import Trace, TraceJob

# An overloaded small cluster with many top-class jobs (plans and urgent looks); periodic
# checkpoints every 5 min so that running jobs' checkpoints move often between passes.
SCENARIO = replace(matrix.family()[3], jobs=160)   # over-small-leaves
COSTS = CostModel(checkpoint_interval=300)
PLAN = ours.plan_preemptions
HOLDERS = ours.HaiSlurm._holders_for


PROTECTING = FairnessConfig(protect_after=1, protect_for=600.0, protect_excess=0.0, demote_after=2,
                            demote_excess=0.0)
"""With decay after 5 min and a cycle every 10 min: teams protected and demoted often and
running jobs decaying (running decisions change while the jobs do not), and jobs that started
since the last cycle planned as victims at urgent looks (untracked: the same running job
after its signal)."""


def _run(monkeypatch: pytest.MonkeyPatch, reuse: bool, fair: FairnessConfig | None = None
         ) -> tuple[list[tuple[float, PlanSnapshot]], dict[str, Any], Counter[str]]:
    """One run; every planner pass's (now, snapshot), the result, and how often the kept
    holders were given (each checked equal to fresh ones, built in the same pass)."""
    seen: list[tuple[float, PlanSnapshot]] = []
    counts: Counter[str] = Counter()

    def recording(snap: PlanSnapshot, **kw: Any) -> PlanningResult:
        seen.append((kw["now"], snap))
        return PLAN(snap, **kw)

    def checked(self: ours.HaiSlurm, running: tuple[RunningJob, ...], result: PolicyResult,
                now: int) -> tuple[Holder, ...]:
        got = HOLDERS(self, running, result, now)
        kept_pass, kept_memo = self._pass, self._holders
        self.reuse_holders, self._holders = False, HolderMemo()
        fresh = HOLDERS(self, running, result, now)
        self.reuse_holders, self._pass, self._holders = True, kept_pass, kept_memo
        assert got == fresh
        counts["reused" if kept_pass is not None and got is kept_pass.holders
               and kept_pass.since < now else "built"] += 1
        return got

    monkeypatch.setattr(ours, "plan_preemptions", recording)
    if reuse:
        monkeypatch.setattr(ours.HaiSlurm, "_holders_for", checked)
    trace, topo = matrix.workload(SCENARIO), matrix.cluster(SCENARIO)
    config = with_quotas(matrix.quotas(Setup().config, SCENARIO), trace.teams, 48)
    if fair is not None:
        config = replace(config, policy=replace(
            config.policy, fairness=fair, decay=replace(config.policy.decay, after=300.0)),
            intervals=replace(config.intervals, cycle=600.0))
    policy = ours.HaiSlurm(config, config.preempt.planner)
    policy.reuse_holders = reuse
    policy.plan_every_pass = True   # holders in every pass where a job waits, as before the skip
    # periodic checkpoints every 5 min in the first run, every hour (the default) in the
    # second: there the kept holders outlive a plan's signals and decisions' changes
    engine = Engine(trace, topo, policy, costs=COSTS if fair is None else CostModel()).run()
    counts["plans"] = policy.counts["plans"]
    return seen, summarize(engine, bounds={}, quotas={}), counts


@pytest.mark.parametrize("fair", [None, PROTECTING], ids=["defaults", "protecting"])
def test_kept_holders_are_what_building_them_gives(monkeypatch: pytest.MonkeyPatch,
                                                  fair: FairnessConfig | None) -> None:
    """Every planner pass gets the holders that building them afresh gives (checked in the
    pass), the same planner inputs as a run that never keeps them, and the same result; and
    kept holders were given in many passes."""
    kept_seen, kept_result, counts = _run(monkeypatch, True, fair)
    fresh_seen, fresh_result, _ = _run(monkeypatch, False, fair)
    assert len(kept_seen) == len(fresh_seen) > 100
    for (t1, a), (t2, b) in zip(kept_seen, fresh_seen, strict=True):
        assert t1 == t2
        assert replace(a, topology=None) == replace(b, topology=None)  # type: ignore[arg-type]
    assert kept_result == fresh_result
    assert counts["reused"] > 40 and counts["plans"] > 10


def _job(remaining: int, start: int | None, overhead: int = 0,
         last: int | None = None) -> SimJob:
    return SimJob(TraceJob(1, 0, remaining, 1, "t", PriorityClass.NORMAL, 0, "u"),
                  1, 1, remaining=remaining, run_start=start, overhead=overhead,
                  last_checkpoint=last)


def test_checkpoint_until_is_the_next_change_of_the_periodic_checkpoint() -> None:
    """periodic_checkpoint keeps its value from ``now`` until checkpoint_until and changes
    there (unless an asked-for save is later); infinite when no periodic save comes before the
    run ends."""
    class Bare(Engine):
        def __init__(self, costs: CostModel) -> None:   # only the cost model is read
            self.costs = costs

    eng = Bare(CostModel(checkpoint_interval=100))
    for job in (_job(1000, 50, overhead=30), _job(250, 50), _job(300, 50, last=70),
                _job(1000, 50, overhead=30, last=600)):
        for now in range(0, 1200, 7):
            until = eng.checkpoint_until(job, now)
            value = eng.periodic_checkpoint(job, now)
            if math.isinf(until):
                assert all(eng.periodic_checkpoint(job, t) == value
                           for t in range(now, now + 1500))
                continue
            u = int(until)
            assert u > now
            assert all(eng.periodic_checkpoint(job, t) == value for t in range(now, u))
            if job.last_checkpoint is None:   # a later asked-for save may hide the change
                assert eng.periodic_checkpoint(job, u) != value
    assert math.isinf(Bare(CostModel(checkpoint_interval=0)).checkpoint_until(
        _job(1000, 50), 60))
    assert math.isinf(eng.checkpoint_until(_job(1000, None), 60))


def test_kept_holders_follow_each_of_their_inputs() -> None:
    """Holders are given again while nothing they are made from changed, and built again
    (each new value seen) when a decision, a running job, a signal or ``now`` past a periodic
    checkpoint changes."""
    trace = Trace((TraceJob(1, 0, 9000, 1, "a", PriorityClass.NORMAL, 0, "u"),
                   TraceJob(2, 0, 9000, 1, "b", PriorityClass.LOW, 0, "u")), "two")
    topo = matrix.cluster(replace(SCENARIO, nodes=1, nodes_per_leaf=1))
    config = Setup().config
    policy = ours.HaiSlurm(config, config.preempt.planner)
    eng = Engine(trace, topo, policy, costs=CostModel(checkpoint_interval=1000))
    policy.attach(eng)
    for t in trace.jobs:
        eng.by_slurm[t.job_id] = SimJob(t, 1, 1, slurm_id=t.job_id, remaining=t.duration,
                                        run_start=T0)
    running = (running_job(1, team="a", start=T0), running_job(2, PriorityClass.LOW, team="b",
                                                               start=T0))
    decisions = {r.job_id: RunningDecision(r.job_id, r.team, r.requested, False, False,  # type: ignore[arg-type]
                                           False, True) for r in running}
    result = PolicyResult(pending={}, running=decisions, priorities={}, teams={},
                          state=PolicyState(), promotions=(), demotions=(), decays=(),
                          protected_teams=frozenset())
    first = policy._holders_for(running, result, T0 + 10)
    assert policy._holders_for(running, result, T0 + 20) is first
    assert policy._holders_for(running, replace(result, running=dict(decisions)),
                               T0 + 30) is first   # equal decisions, the same objects
    # a changed decision
    protected = dict(decisions)
    protected[1] = decisions[1]._replace(protected=True)
    got = policy._holders_for(running, replace(result, running=protected), T0 + 40)
    assert got[0].protected and not first[0].protected
    assert policy._holders_for(running, result, T0 + 50) == first
    # another running job with the same id (another start)
    moved = (running_job(1, team="a", start=T0 + 5), running[1])
    got = policy._holders_for(moved, result, T0 + 60)
    assert got[0].start_time == T0 + 5
    assert policy._holders_for(running, result, T0 + 70) == first
    # a victim signalled: no victim again
    kept = policy._holders_for(running, result, T0 + 80)
    eng.preempt((2,), None, delay=100)
    got = policy._holders_for(running, result, T0 + 90)
    assert kept[1].preemptible and not got[1].preemptible
    # the first periodic checkpoint (at T0 + 1000) moves the jobs' last checkpoints
    before = policy._holders_for(running, result, T0 + 999)
    after = policy._holders_for(running, result, T0 + 1000)
    assert before[0].last_checkpoint is None and after[0].last_checkpoint == T0 + 1000


@pytest.mark.parametrize("setting", ["defaults", "protecting", "weighted"])
def test_passes_where_no_job_may_plan_are_not_planned(monkeypatch: pytest.MonkeyPatch,
                                                     setting: str) -> None:
    """The simulator does not ask the planner when no waiting job may plan (``may_plan``: every
    one is of a class weighing 0 and not past its bound): the run ends as one that asks in every
    pass where a job waits, and most passes are not asked for. Also with teams protected and
    demoted often, and with the middle classes weighted (their jobs then may plan, and
    preempt, before their bound)."""
    results: dict[bool, dict[str, Any]] = {}
    passes: Counter[bool] = Counter()
    for every in (False, True):
        def counting(snap: PlanSnapshot, every: bool = every, **kw: Any) -> PlanningResult:
            passes[every] += 1
            return PLAN(snap, **kw)

        monkeypatch.setattr(ours, "plan_preemptions", counting)
        trace, topo = matrix.workload(SCENARIO), matrix.cluster(SCENARIO)
        config = with_quotas(matrix.quotas(Setup().config, SCENARIO), trace.teams, 48)
        planner = config.preempt.planner
        if setting == "protecting":
            config = replace(config, policy=replace(config.policy, fairness=PROTECTING))
        elif setting == "weighted":
            planner = replace(planner, class_weights={
                **planner.class_weights, PriorityClass.ABOVE_NORMAL: 5.0,
                PriorityClass.NORMAL: 2.0, PriorityClass.UNDER_NORMAL: 1.5,
                PriorityClass.BELOW_NORMAL: 1.0})
        policy = ours.HaiSlurm(config, planner)
        policy.plan_every_pass = every
        engine = Engine(trace, topo, policy, costs=COSTS).run()
        results[every] = summarize(engine, bounds={}, quotas={})
        assert policy.counts["plans"] > 10
    assert results[False] == results[True]
    assert passes[True] > passes[False] > 100
