"""Whether a pending job may plan, from its policy decision: ``may_plan_pending`` is
``may_plan`` of the waiting job made of the decision (the simulator asks it before it builds a
pass's waiting jobs)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.classes import ClassOrigin
from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.planner.inputs import waiting_from_policy
from hai_slurm.priority.planner.search import may_plan, may_plan_pending
from hai_slurm.priority.planner.types import DEFAULT_WEIGHTS, PlannerConfig
from hai_slurm.priority.policy.ladder import RANK
from hai_slurm.priority.policy.state import PendingDecision, PendingReason, Rule
from hai_slurm.priority.policy.testing import pending_job

CONFIGS = (PlannerConfig(), PlannerConfig(aged_preempt=True),
           PlannerConfig(class_weights={**DEFAULT_WEIGHTS, P.ABOVE_NORMAL: 5.0, P.NORMAL: 2.0}))


@st.composite
def decisions(draw: st.DrawFn) -> list[PendingDecision]:
    """Decisions of every class, aged or not, with a wait below, at or past the bound."""
    out = []
    for job_id in range(1, draw(st.integers(0, 6)) + 1):
        base = draw(st.sampled_from(list(P)))
        steps = draw(st.integers(0, 2)) if RANK[base] + 2 < len(P) else 0
        effective = next(c for c in P if RANK[c] == RANK[base] + steps)
        bound = draw(st.sampled_from((0.0, 600.0, 7200.0)))
        wait = draw(st.sampled_from((0.0, 300.0, 599.0, 600.0, 5000.0, 9000.0)))
        out.append(PendingDecision(job_id, effective, 1000 + job_id, PendingReason(
            base, ClassOrigin.DIRECTIVE, base, None, False, False, wait, bound, steps, None, 1,
            Rule.FCFS, None, None, 0, 0.0)))
    return out


@settings(max_examples=300, deadline=None)
@given(decisions(), st.sampled_from(CONFIGS))
def test_may_plan_pending_is_may_plan_of_the_waiting_job(ds: list[PendingDecision],
                                                         config: PlannerConfig) -> None:
    """For every decision, ``may_plan_pending`` answers what ``may_plan`` answers for the
    :class:`Waiting` that ``waiting_from_policy`` makes of it (with ``aged_preempt``)."""
    jobs = [pending_job(d.job_id) for d in ds]
    waiting = waiting_from_policy(jobs, {d.job_id: d for d in ds},
                                  aged_preempt=config.aged_preempt)
    by_id = {d.job_id: d for d in ds}
    for w in waiting:
        assert may_plan(w, config) == may_plan_pending(by_id[w.job_id], config)
