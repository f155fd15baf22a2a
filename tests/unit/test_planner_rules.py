"""The planner's rules: who may give way, to whom, at what cost, and never from stale data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.conf.topology import GpuRef
from hai_slurm.errors import ConfigError
from hai_slurm.priority.planner.inputs import overrides_protection
from hai_slurm.priority.planner.search import lost_seconds, plan_preemptions
from hai_slurm.priority.planner.testing import NOW, gpu_cluster, gpus, holder, snapshot, waiting
from hai_slurm.priority.planner.types import Outcome, PlannerConfig, PlanningResult, PlanSnapshot
from hai_slurm.priority.policy.ladder import step
from hai_slurm.priority.policy.state import PendingDecision, PendingReason, Rule

HIGH, NORMAL, LOW = PriorityClass.HIGH, PriorityClass.NORMAL, PriorityClass.LOW
ALL8 = tuple(range(8))
CFG = PlannerConfig()


def _plan(snap: PlanSnapshot, config: PlannerConfig = CFG, now: float = NOW) -> PlanningResult:
    return plan_preemptions(snap, config=config, now=now)


def test_never_within_the_same_class() -> None:
    """A HIGH job never preempts a HIGH job, even a cheap one; it takes the NORMAL one."""
    topo = gpu_cluster(1, 2)
    cheap_high = holder(1, HIGH, gpus("n1", *ALL8), checkpoint=NOW - 10)
    dear_normal = holder(2, NORMAL, gpus("n2", *ALL8), checkpoint=NOW - 5000)
    result = _plan(snapshot(topo, [cheap_high, dear_normal], [waiting(9, HIGH, 8, wait=86400)]))
    plan = result.plan_for(9)
    assert plan is not None and plan.victim_ids == (2,)
    alone = _plan(snapshot(topo, [cheap_high, replace(dear_normal, effective=HIGH)],
                           [waiting(9, HIGH, 8, wait=86400)]))
    assert alone.plans == () and alone.decisions[9].outcome is Outcome.NO_VICTIMS
    assert "lower-class" in alone.decisions[9].reason


def test_protected_non_preemptible_and_young_jobs_are_never_chosen() -> None:
    """Only the one eligible job gives way, though it loses the most; without it, nobody does."""
    topo = gpu_cluster(1, 4)
    jobs = [
        holder(1, NORMAL, gpus("n1", *ALL8), protected=True, checkpoint=NOW - 5),
        holder(2, NORMAL, gpus("n2", *ALL8), preemptible=False, checkpoint=NOW - 5),
        holder(3, NORMAL, gpus("n3", *ALL8), start=NOW - 60, checkpoint=NOW - 5),
        holder(4, NORMAL, gpus("n4", *ALL8), checkpoint=NOW - 7000),
    ]
    ben = waiting(9, HIGH, 8, wait=86400)
    plan = _plan(snapshot(topo, jobs, [ben])).plan_for(9)
    assert plan is not None and plan.victim_ids == (4,) and plan.nodes == ("n4",)
    result = _plan(snapshot(topo, [*jobs[:3], holder(5, HIGH, gpus("n4", *ALL8))], [ben]))
    assert result.plans == ()
    assert result.decisions[9].outcome is Outcome.NO_VICTIMS
    assert "preemptible, unprotected jobs older than 2m00s" in result.decisions[9].reason


def test_urgent_or_overdue_jobs_may_take_a_protected_teams_jobs() -> None:
    """A job that overrides protection (urgent, or past its bound) may take a protected team's
    job, and its verdict says so; one that does not may not. Two jobs of the same shape in one
    pass, one of each: the verdict cached for one is not reused for the other."""
    topo = gpu_cluster(1, 2)
    jobs = [holder(1, NORMAL, gpus("n1", *ALL8), protected=True, checkpoint=NOW - 5),
            holder(2, HIGH, gpus("n2", *ALL8))]
    plain = waiting(9, HIGH, 8, wait=86400)
    urgent = replace(plain, job_id=10, overrides_protection=True)
    result = _plan(snapshot(topo, jobs, [plain, urgent]))
    assert result.decisions[9].outcome is Outcome.NO_VICTIMS
    assert "preemptible, unprotected jobs" in result.decisions[9].reason
    plan = result.plan_for(10)
    assert plan is not None and plan.victim_ids == (1,)
    alone = _plan(snapshot(topo, jobs[1:], [replace(urgent, gpus=16, nodes=2)]))
    assert alone.decisions[10].outcome is Outcome.NO_VICTIMS
    assert "protected teams' too: it is urgent or past its bound" in alone.decisions[10].reason


def test_urgent_work_cuts_the_minimum_run_time_short() -> None:
    """A job that ran 90 s (under min_run_time, 2 min, over urgent_min_run_time, 1 min) gives
    way to a job that overrides protection, not to another; one that ran 30 s to neither, and
    the verdicts say which age counted. A protected young job is counted as protected for the
    others and taken by the urgent job. A class minimum below urgent_min_run_time stays."""
    topo = gpu_cluster(1, 2)
    young = holder(1, NORMAL, gpus("n1", *ALL8), start=NOW - 90)
    baby = holder(2, NORMAL, gpus("n2", *ALL8), start=NOW - 30)
    plain = waiting(9, HIGH, 8, wait=86400)
    urgent = replace(plain, job_id=10, overrides_protection=True)
    result = _plan(snapshot(topo, [young, baby], [plain, urgent]))
    assert result.decisions[9].outcome is Outcome.NO_VICTIMS
    assert "older than 2m00s" in result.decisions[9].reason
    assert "running jobs left out: 2 too young" in result.decisions[9].reason
    plan = result.plan_for(10)
    assert plan is not None and plan.victim_ids == (1,)
    both = replace(urgent, gpus=16, nodes=2)   # needs the baby's node too
    reason = _plan(snapshot(topo, [young, baby], [both])).decisions[10].reason
    assert "older than 1m00s" in reason and "running jobs left out: 1 too young" in reason
    result = _plan(snapshot(topo, [replace(young, protected=True), baby], [plain, urgent]))
    assert "running jobs left out: 1 protected, 1 too young" in result.decisions[9].reason
    plan = result.plan_for(10)
    assert plan is not None and plan.victim_ids == (1,)
    shared = [replace(young, gpus=gpus("n1", *ALL8[1:])), baby,
              holder(3, NORMAL, gpus("n1", 0), start=NOW - 90)]
    plan = _plan(snapshot(topo, shared, [replace(urgent, gpus=1)])).plan_for(10)
    assert plan is not None and plan.victim_ids == (3,)
    assert "job 1 on n1 kept: not needed" in plan.not_chosen   # not "too young": it may
    short = PlannerConfig(class_min_run_time={NORMAL: 20.0})
    plan = _plan(snapshot(topo, [young, baby], [both]), short).plan_for(10)
    assert plan is not None and plan.victim_ids == (1, 2)


def test_overrides_protection_for_urgent_classes_and_past_the_bound() -> None:
    """HIGH and above asked for (not reached by aging), or any class past its bound, aged or
    not (a bounded wait is a guarantee)."""
    def decision(cls: PriorityClass, wait: float, bound: float, aged: int = 0) -> PendingDecision:
        reason = PendingReason(cls, ClassOrigin.DIRECTIVE, cls, None, False, False, wait, bound,
                               aged, None, 1, Rule.FCFS, None, None, 0, 0.0)
        return PendingDecision(1, step(cls, aged), 10, reason)

    assert overrides_protection(decision(HIGH, 0.0, 600.0))
    assert overrides_protection(decision(PriorityClass.EXTREME_HIGH, 0.0, 120.0))
    assert not overrides_protection(decision(NORMAL, 10.0, 7200.0))
    assert overrides_protection(decision(NORMAL, 7200.0, 7200.0))
    assert overrides_protection(decision(PriorityClass.ABOVE_NORMAL, 1900.0, 1800.0, 1))
    assert not overrides_protection(decision(PriorityClass.ABOVE_NORMAL, 1700.0, 1800.0))


def test_a_middle_class_job_preempts_only_past_its_bound_by_default() -> None:
    """By default the middle classes weigh 0: a NORMAL job that waited a day (not marked past
    its bound) gets NOT_WORTH, saying why; marked past its bound it takes the LOW job as urgent
    work does; weighted 2, the benefit test lets it preempt."""
    topo = gpu_cluster(1, 1)
    low = holder(1, LOW, gpus("n1", *ALL8), can_ack=True)
    result = _plan(snapshot(topo, [low], [waiting(9, NORMAL, 8, wait=86400)]))
    decision = result.decisions[9]
    assert result.plans == () and decision.outcome is Outcome.NOT_WORTH
    assert "NORMAL weighs 0 ([planner.class_weights]): it preempts only once it has waited " \
        "past its class bound" in decision.reason, decision.reason
    past = _plan(snapshot(topo, [low], [waiting(9, NORMAL, 8, wait=86400,
                                                overrides_protection=True)]))
    plan = past.plan_for(9)
    assert plan is not None and plan.victim_ids == (1,)
    assert "urgent work" in plan.reason and "weighs 0" not in plan.reason
    weighted = PlannerConfig(class_weights={**CFG.class_weights, NORMAL: 2.0})
    plan = _plan(snapshot(topo, [low], [waiting(9, NORMAL, 8, wait=86400)]),
                 weighted).plan_for(9)
    assert plan is not None and plan.victim_ids == (1,)


def test_a_class_weighing_0_does_not_spend_the_search_limit() -> None:
    """A job of a class weighing 0, not past its bound, gets its NOT_WORTH verdict without a
    victim search, so with a limit of one search a pass the NORMAL job past its bound walked
    after it is still searched for, and takes the LOW job (before, the ABOVE_NORMAL job's
    search spent the limit and the NORMAL job was SKIPPED)."""
    topo = gpu_cluster(1, 1)
    low = holder(1, LOW, gpus("n1", *ALL8), can_ack=True)
    pend = [waiting(10, PriorityClass.ABOVE_NORMAL, 8, wait=600),
            waiting(11, NORMAL, 8, wait=86400, overrides_protection=True)]
    result = _plan(snapshot(topo, [low], pend),
                   replace(CFG, max_searches=1, plans_per_pending=0.0))
    assert result.decisions[10].outcome is Outcome.NOT_WORTH
    assert "ABOVE_NORMAL weighs 0" in result.decisions[10].reason
    plan = result.plan_for(11)
    assert plan is not None and plan.victim_ids == (1,)


def test_borrowed_jobs_give_way_first_within_the_discount() -> None:
    """A borrowed job gives way before a within-quota one that would lose less, as long as its
    loss x ``borrowed_discount`` (default 0.5) is the smaller: 2x the within-quota loss minus a
    little is taken, 2x plus a little is not; discount 0 is the old strict order (borrowed
    whatever it loses), 1 no preference."""
    topo = gpu_cluster(1, 2)
    restart = CFG.restart_cost
    within = holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 600)   # loses 600 + restart

    def victim(borrowed_loss: float, config: PlannerConfig = CFG) -> PlanningResult:
        borrowed = holder(2, NORMAL, gpus("n2", *ALL8), borrowed=True,
                          checkpoint=NOW - (borrowed_loss - restart))
        return _plan(snapshot(topo, [within, borrowed], [waiting(9, HIGH, 8, wait=86400)]),
                     config)

    twice = 2 * (600 + restart)
    below = victim(twice - 60)
    plan = below.plan_for(9)
    assert CFG.borrowed_discount == 0.5
    assert plan is not None and plan.victim_ids == (2,)
    assert plan.victims[0].borrowed and "borrowed (over quota)" in plan.victims[0].reason
    assert any("loses more work (borrowed jobs' at a discount)" in line
               for line in plan.not_chosen)
    assert victim(twice + 60).plan_for(9).victim_ids == (1,)  # type: ignore[union-attr]
    strict = replace(CFG, borrowed_discount=0.0)
    assert victim(50 * twice, strict).plan_for(9).victim_ids == (2,)  # type: ignore[union-attr]
    none = replace(CFG, borrowed_discount=1.0)
    assert victim(600 + restart + 60, none).plan_for(9).victim_ids == (1,)  # type: ignore[union-attr]


def test_least_lost_work_wins() -> None:
    """Lost work = time since checkpoint + restart cost, per GPU: the cheapest set is chosen."""
    topo = gpu_cluster(1, 3)
    recent = holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 100, restart_cost=5000)
    old = holder(2, NORMAL, gpus("n2", *ALL8), checkpoint=NOW - 2000)
    mid = holder(3, NORMAL, gpus("n3", *ALL8), checkpoint=NOW - 900)
    plan = _plan(snapshot(topo, [recent, old, mid], [waiting(9, HIGH, 8, wait=86400)])
                 ).plan_for(9)
    assert plan is not None and plan.victim_ids == (3,)
    assert plan.lost_work == (900 + CFG.restart_cost) * 8
    assert plan.victims[0].lost_seconds == lost_seconds(mid, CFG, NOW) == 900 + CFG.restart_cost


def test_two_small_victims_beat_one_expensive_big_one() -> None:
    """Sets are compared by total lost work, not by the number of victims."""
    topo = gpu_cluster(1, 2)
    jobs = [holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 4000),
            holder(2, NORMAL, gpus("n2", 0, 1, 2, 3), checkpoint=NOW - 100),
            holder(3, NORMAL, gpus("n2", 4, 5, 6, 7), checkpoint=NOW - 100)]
    plan = _plan(snapshot(topo, jobs, [waiting(9, HIGH, 8, wait=86400)])).plan_for(9)
    assert plan is not None and plan.victim_ids == (2, 3)


def test_canonical_sixteen_gpus_on_two_nodes_under_one_leaf() -> None:
    """Issue 4's scenario: 16 GPUs on 2 nodes under one leaf, held by 4 lower-class 4-GPU jobs.

    leaf2 would be cheaper across leaves (n3 holds one cheap job) but n4 is held by a HIGH job,
    so the only leaf that can hold the beneficiary is leaf1: all four jobs give way and the
    placement is every GPU of n1 and n2."""
    topo = gpu_cluster(2, 2)
    four = [holder(11, NORMAL, gpus("n1", 0, 1, 2, 3), team="a"),
            holder(12, NORMAL, gpus("n1", 4, 5, 6, 7), team="b", borrowed=True),
            holder(13, LOW, gpus("n2", 0, 1, 2, 3), team="a"),
            holder(14, NORMAL, gpus("n2", 4, 5, 6, 7), team="c")]
    others = [holder(21, NORMAL, gpus("n3", *ALL8), checkpoint=NOW - 60),
              holder(22, HIGH, gpus("n4", *ALL8))]
    ben = waiting(9, HIGH, 16, nodes=2, wait=1800)
    result = _plan(snapshot(topo, four + others, [ben]))
    plan = result.plan_for(9)
    assert plan is not None and result.decisions[9].outcome is Outcome.PREEMPT
    assert plan.victim_ids == (11, 12, 13, 14)
    assert plan.nodes == ("n1", "n2") and plan.gpus_per_node == 8
    assert plan.placement == gpus("n1", *ALL8) + gpus("n2", *ALL8)
    assert plan.lost_work == sum(lost_seconds(h, CFG, NOW) * 4 for h in four)
    assert "n1,n2" in plan.reason and "4 job(s) (1 borrowed)" in plan.reason
    # leaf2 cannot hold it (n4 is HIGH): no other set to compare with, one job left out
    assert plan.not_chosen == ("running jobs that may not give way to it: 1 not of a lower class",)
    across = _plan(snapshot(topo, four + others, [ben]),
                   replace(CFG, allow_cross_leaf=True)).plan_for(9)
    assert across is not None and across.victim_ids == (11, 12, 13, 14)  # a leaf still can


def test_spans_leaves_like_topology_tree_unless_the_job_asked_for_switches() -> None:
    """3 nodes where each leaf has 2: planned across the spine by default (Slurm's topology/tree
    places such a job there); impossible with ``--switches=1`` while the job waits for it, or
    with ``allow_cross_leaf`` off; planned again once the switch wait is over."""
    topo = gpu_cluster(2, 2)
    jobs = [holder(i, NORMAL, gpus(f"n{i}", *ALL8)) for i in range(1, 5)]
    ben = waiting(9, HIGH, 24, nodes=3, wait=86400)
    plan = _plan(snapshot(topo, jobs, [ben])).plan_for(9)
    assert plan is not None and len(plan.victims) == 3 and len(plan.nodes) == 3
    for config, job in ((replace(CFG, allow_cross_leaf=False), ben),
                        (CFG, replace(ben, max_leaves=1))):
        result = _plan(snapshot(topo, jobs, [job]), config)
        assert result.decisions[9].outcome is Outcome.IMPOSSIBLE
        assert "one leaf switch of this cluster has not that many" in result.decisions[9].reason
    two = _plan(snapshot(topo, jobs, [replace(ben, max_leaves=2)])).plan_for(9)
    assert two is not None and len(plan.nodes) == 3


def test_switches_limit_refuses_the_spine_while_the_job_waits_for_it() -> None:
    """Each leaf has one node held by a HIGH job: only a set across the spine frees 2 nodes.
    Without --switches that set is planned (n1 + n3); with --switches=1 nothing under one leaf
    can be freed, and the verdict says why."""
    topo = gpu_cluster(2, 2)
    jobs = [holder(1, NORMAL, gpus("n1", *ALL8)), holder(2, HIGH, gpus("n2", *ALL8)),
            holder(3, NORMAL, gpus("n3", *ALL8)), holder(4, HIGH, gpus("n4", *ALL8))]
    ben = waiting(9, HIGH, 16, nodes=2, wait=86400)
    plan = _plan(snapshot(topo, jobs, [ben])).plan_for(9)
    assert plan is not None and plan.nodes == ("n1", "n3") and plan.victim_ids == (1, 3)
    result = _plan(snapshot(topo, jobs, [replace(ben, max_leaves=1)]))
    assert result.decisions[9].outcome is Outcome.NO_VICTIMS
    assert "at most 1 leaf switch (--switches)" in result.decisions[9].reason


def test_victims_only_on_nodes_the_job_may_use() -> None:
    """The cheapest victim (n1) is outside the job's partition: the plan takes the dearer one on
    a node the job may use (n3), free GPUs outside do not count as a fit, and a job whose
    allowed nodes cannot hold it is IMPOSSIBLE and says so."""
    topo = gpu_cluster(2, 2)
    jobs = [holder(1, LOW, gpus("n1", *ALL8), checkpoint=NOW - 60),
            holder(3, LOW, gpus("n3", *ALL8), checkpoint=NOW - 3000),
            holder(4, HIGH, gpus("n4", *ALL8))]   # n2 free
    ben = waiting(9, HIGH, 8, wait=86400)
    assert _plan(snapshot(topo, jobs, [ben])).decisions[9].outcome is Outcome.FITS
    part = frozenset({"n3", "n4"})
    result = _plan(snapshot(topo, jobs, [replace(ben, allowed=part)]))
    plan = result.plan_for(9)
    assert plan is not None and plan.nodes == ("n3",) and plan.victim_ids == (3,)
    assert "of the 2 nodes it may use" in result.decisions[9].reason
    # without the free node n2, the partition-less job takes the cheaper n1
    busy = [*jobs, holder(2, HIGH, gpus("n2", *ALL8))]
    assert _plan(snapshot(topo, busy, [ben])).plan_for(9).victim_ids == (1,)  # type: ignore[union-attr]
    two = _plan(snapshot(topo, busy, [replace(ben, gpus=16, nodes=2, allowed=part)]))
    assert two.decisions[9].outcome is Outcome.NO_VICTIMS   # n4's HIGH job cannot give way
    lone = _plan(snapshot(topo, busy, [replace(ben, gpus=16, nodes=2,
                                               allowed=frozenset({"n3"}))]))
    assert lone.decisions[9].outcome is Outcome.IMPOSSIBLE
    assert "that it may use" in lone.decisions[9].reason


def test_nodes_closed_by_a_guard_fit_nobody_yet_their_jobs_may_give_way() -> None:
    """n2 is free, but another plan's guard stands on it (``PlanSnapshot.closed``): the HIGH
    job does not "fit" there. The jobs on guarded nodes may still give way (the beneficiary
    starts there once that guard ends): n1's LOW job, the cheapest, is taken even with n1
    guarded too."""
    topo = gpu_cluster(2, 2)
    jobs = [holder(1, LOW, gpus("n1", *ALL8), checkpoint=NOW - 60),
            holder(3, LOW, gpus("n3", *ALL8), checkpoint=NOW - 3000),
            holder(4, HIGH, gpus("n4", *ALL8))]
    ben = waiting(9, HIGH, 8, wait=86400)
    snap = snapshot(topo, jobs, [ben])
    assert _plan(snap).decisions[9].outcome is Outcome.FITS
    for closed in ({"n2"}, {"n1", "n2"}, {"n1", "n2", "n3"}):
        result = _plan(replace(snap, closed=frozenset(closed)))
        plan = result.plan_for(9)
        assert plan is not None and plan.nodes == ("n1",) and plan.victim_ids == (1,), closed


def test_a_two_node_victim_is_paid_for_once() -> None:
    """One 16-GPU victim over n1+n2 beats two 8-GPU victims that lose more together.

    Each of the pair alone loses less than the big job; only counting the big job once per plan
    (not once per node) makes leaf1 the cheaper leaf."""
    topo = gpu_cluster(2, 2)
    big = holder(1, NORMAL, gpus("n1", *ALL8) + gpus("n2", *ALL8), checkpoint=NOW - 1000)
    pair = [holder(2, NORMAL, gpus("n3", *ALL8), checkpoint=NOW - 1500),
            holder(3, NORMAL, gpus("n4", *ALL8), checkpoint=NOW - 1500)]
    plan = _plan(snapshot(topo, [big, *pair], [waiting(9, HIGH, 16, wait=86400)])).plan_for(9)
    assert plan is not None and plan.victim_ids == (1,) and plan.nodes == ("n1", "n2")
    assert plan.lost_work == lost_seconds(big, CFG, NOW) * 16


def test_no_preemption_when_loss_outweighs_benefit() -> None:
    """A short wait does not justify the loss; a long one does; the threshold scales the loss."""
    topo = gpu_cluster(1, 1)
    victim = holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 3600)
    loss = lost_seconds(victim, CFG, NOW) * 8
    weight = HIGH.weight
    short = waiting(9, HIGH, 8, wait=loss / (weight * 8) - 1)  # benefit just below the loss
    result = _plan(snapshot(topo, [victim], [short]))
    assert result.plans == () and result.decisions[9].outcome is Outcome.NOT_WORTH
    assert f"{loss:,.0f} GPU-s" in result.decisions[9].reason
    long = replace(short, wait=loss / (weight * 8) + 1)
    assert _plan(snapshot(topo, [victim], [long])).plan_for(9) is not None
    strict = _plan(snapshot(topo, [victim], [long]), replace(CFG, benefit_threshold=2.0))
    assert strict.plans == () and strict.decisions[9].outcome is Outcome.NOT_WORTH


def test_victim_age_counts_as_expected_wait() -> None:
    """With ``victim_age_wait``, a job that has just arrived is weighed by the wait it would face:
    a fraction of the youngest victim's run time. The cached "not worth" verdict of one job uses
    the same floor for the next job of its shape."""
    topo = gpu_cluster(1, 1)
    victim = holder(1, NORMAL, gpus("n1", *ALL8), start=NOW - 1000, can_ack=True)
    loss = lost_seconds(victim, CFG, NOW) * 8
    fresh = waiting(9, HIGH, 8, wait=0.0)
    assert _plan(snapshot(topo, [victim], [fresh])).decisions[9].outcome is Outcome.NOT_WORTH
    floor = loss / (HIGH.weight * 8) + 1            # the expected wait that just outweighs it
    eager = replace(CFG, victim_age_wait=floor / 1000)
    result = _plan(snapshot(topo, [victim], [fresh]), eager)
    plan = result.plan_for(9)
    assert plan is not None and plan.victim_ids == (1,)
    assert plan.benefit == pytest.approx(HIGH.weight * floor * 8)
    assert "expected wait" in plan.reason and "youngest victim's run time" in plan.reason
    # a floor just short of the loss: not worth, for the first job and (cached) the second
    short = replace(CFG, victim_age_wait=(floor - 2) / 1000)
    two = _plan(snapshot(topo, [victim], [fresh, waiting(10, HIGH, 8, wait=0.0)]), short)
    assert two.plans == ()
    assert [two.decisions[j].outcome for j in (9, 10)] == [Outcome.NOT_WORTH] * 2
    # the elapsed wait still counts when it is the longer one
    waited = replace(fresh, wait=floor)
    assert _plan(snapshot(topo, [victim], [waited]), short).plan_for(9) is not None


def test_stale_or_future_snapshot_gives_no_plan_and_says_why() -> None:
    """A snapshot older than max_staleness (or from the future) is refused with a reason."""
    topo = gpu_cluster(1, 1)
    jobs = [holder(1, NORMAL, gpus("n1", *ALL8))]
    ben = [waiting(9, HIGH, 8, wait=86400)]
    fresh = _plan(snapshot(topo, jobs, ben, taken_at=NOW - 59))
    assert fresh.refused is None and len(fresh.plans) == 1
    stale = _plan(snapshot(topo, jobs, ben, taken_at=NOW - 120))
    assert stale.plans == () and stale.refused is not None
    assert "2m00s old (limit 1m00s)" in stale.refused
    assert stale.decisions[9].outcome is Outcome.SKIPPED
    future = _plan(snapshot(topo, jobs, ben, taken_at=NOW + 600))
    assert future.plans == () and future.refused is not None and "future" in future.refused


def test_inconsistent_snapshot_is_refused() -> None:
    """A GPU held by two jobs, or one the topology lacks, stops planning with a clear reason."""
    topo = gpu_cluster(1, 1)
    ben = [waiting(9, HIGH, 8, wait=86400)]
    twice = _plan(snapshot(topo, [holder(1, NORMAL, gpus("n1", 0, 1)),
                                  holder(2, NORMAL, gpus("n1", 1, 2))], ben))
    assert twice.refused == "jobs 1 and 2 both hold a GPU on n1; the snapshot is inconsistent"
    unknown = _plan(snapshot(topo, [holder(1, NORMAL, (GpuRef("n7", 0),))], ben))
    assert unknown.refused is not None and "n7:0" in unknown.refused
    assert "regenerate the description" in unknown.refused


def test_two_beneficiaries_never_share_victims_or_gpus() -> None:
    """The first beneficiary's victims are reserved; the second finds its own or none."""
    topo = gpu_cluster(1, 3)
    jobs = [holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 100),
            holder(2, NORMAL, gpus("n2", *ALL8), checkpoint=NOW - 200)]
    pend = [waiting(8, HIGH, 8, wait=86400), waiting(9, HIGH, 8, wait=86400),
            waiting(10, HIGH, 8, wait=86400)]
    result = _plan(snapshot(topo, [*jobs, holder(3, HIGH, gpus("n3", *ALL8))], pend))
    first, second = result.plan_for(8), result.plan_for(9)
    assert first is not None and second is not None
    assert first.victim_ids == (1,) and second.victim_ids == (2,)
    assert not set(first.placement) & set(second.placement)
    assert result.decisions[10].outcome is Outcome.NO_VICTIMS


def test_free_gpus_taken_by_a_higher_job_are_not_counted_again() -> None:
    """A higher job that fits on free GPUs takes them; the next job must preempt."""
    topo = gpu_cluster(1, 2)
    jobs = [holder(1, NORMAL, gpus("n1", *ALL8))]
    pend = [waiting(8, PriorityClass.VERY_HIGH, 8), waiting(9, HIGH, 8, wait=86400)]
    result = _plan(snapshot(topo, jobs, pend))
    assert result.decisions[8].outcome is Outcome.FITS and "n2" in result.decisions[8].reason
    plan = result.plan_for(9)
    assert plan is not None and plan.nodes == ("n1",)


def test_lower_classes_are_walked_after_higher_ones_whatever_the_input_order() -> None:
    """A NORMAL job listed first does not take the free node from a HIGH job."""
    topo = gpu_cluster(1, 1)
    result = _plan(snapshot(topo, [], [waiting(1, NORMAL, 8), waiting(2, HIGH, 8)]))
    assert result.decisions[2].outcome is Outcome.FITS
    assert result.decisions[1].outcome is Outcome.NOT_WORTH   # NORMAL weighs 0: no search


def test_shapes_impossible_and_gpu_less_jobs() -> None:
    """9 GPUs on one 8-GPU node cannot exist; 16 GPUs without --nodes means 2 x 8; 0 GPUs: none."""
    topo = gpu_cluster(1, 2)
    result = _plan(snapshot(topo, [], [waiting(1, HIGH, 9, nodes=1), waiting(2, HIGH, 16),
                                       waiting(3, HIGH, 0)]))
    assert result.decisions[1].outcome is Outcome.IMPOSSIBLE
    assert "9 GPUs on one node" in result.decisions[1].reason
    assert result.decisions[2].outcome is Outcome.FITS
    assert "2 x 8 GPUs" in result.decisions[2].reason
    assert result.decisions[3].outcome is Outcome.NO_GPUS


def test_low_jobs_never_preempt() -> None:
    """Nothing is below LOW."""
    topo = gpu_cluster(1, 1)
    result = _plan(snapshot(topo, [holder(1, LOW, gpus("n1", *ALL8))],
                            [waiting(9, LOW, 8, wait=10 ** 7)]))
    assert result.decisions[9].outcome is Outcome.NO_VICTIMS
    assert "no class is lower than LOW" in result.decisions[9].reason


def test_limits_per_cycle_are_reported() -> None:
    """Past max_plans, the remaining beneficiaries are skipped with a reason."""
    topo = gpu_cluster(1, 3)
    jobs = [holder(i, NORMAL, gpus(f"n{i}", *ALL8)) for i in (1, 2, 3)]
    pend = [waiting(10 + i, HIGH, 8, wait=86400) for i in range(3)]
    result = _plan(snapshot(topo, jobs, pend), replace(CFG, max_plans=2))
    assert [p.beneficiary for p in result.plans] == [10, 11]
    assert result.decisions[12].outcome is Outcome.SKIPPED
    assert "limit of plans" in result.decisions[12].reason


def test_deterministic_whatever_the_running_order() -> None:
    """Equal losses are broken by node order and job id; input order of running jobs is moot."""
    topo = gpu_cluster(2, 2)
    jobs = [holder(i, NORMAL, gpus(f"n{i}", *ALL8)) for i in (4, 3, 2, 1)]
    pend = [waiting(9, HIGH, 8, wait=86400), waiting(10, HIGH, 16, wait=86400)]
    one = _plan(snapshot(topo, jobs, pend))
    two = _plan(snapshot(topo, list(reversed(jobs)), pend))
    assert one == two
    assert [p.victim_ids for p in one.plans] == [(1,), (3, 4)]


def test_bad_planner_settings_name_the_key_and_value() -> None:
    """An invalid setting raises ConfigError naming planner.<key>, the value and what is allowed."""
    with pytest.raises(ConfigError, match=r"planner: max_plans: must be an integer >= 0, not -1"):
        PlannerConfig(max_plans=-1)
    with pytest.raises(ConfigError, match=r"max_candidates_per_node: .* 1 to 16"):
        PlannerConfig(max_candidates_per_node=40)
    with pytest.raises(ConfigError, match=r"class_weights.HIGH: must be a number >= 0, not nan"):
        PlannerConfig(class_weights={HIGH: float("nan")})
    with pytest.raises(ConfigError, match=r"max_staleness: must be a number >= 0, not '60'"):
        PlannerConfig(max_staleness="60")  # type: ignore[arg-type]


def test_lost_seconds_model() -> None:
    """Since the last checkpoint of this run (else since start) plus the restart cost, which is
    the job's own estimate or base + per-node from the configuration."""
    cfg = replace(CFG, restart_cost=100, restart_cost_per_node=50)
    two_nodes = gpus("n1", 0) + gpus("n2", 0)
    assert lost_seconds(holder(1, NORMAL, two_nodes, checkpoint=NOW - 300), cfg, NOW) == 500
    never = replace(holder(1, NORMAL, gpus("n1", 0)), last_checkpoint=None)
    assert lost_seconds(never, cfg, NOW) == 7200 + 150
    earlier_run = holder(1, NORMAL, gpus("n1", 0), start=NOW - 900, checkpoint=NOW - 5000)
    assert lost_seconds(earlier_run, cfg, NOW) == 900 + 150
    own = holder(1, NORMAL, gpus("n1", 0), checkpoint=NOW - 10, restart_cost=5)
    assert lost_seconds(own, cfg, NOW) == 15


def test_a_short_wait_does_not_stop_a_longer_waiting_job_of_the_same_shape() -> None:
    """The not-worth shortcut only skips jobs with no more benefit than the one that failed."""
    topo = gpu_cluster(1, 1)
    victim = holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 600)
    result = _plan(snapshot(topo, [victim], [waiting(8, HIGH, 8, wait=1),
                                             waiting(9, HIGH, 8, wait=0.5),
                                             waiting(10, HIGH, 8, wait=86400)]))
    assert result.decisions[8].outcome is Outcome.NOT_WORTH
    assert result.decisions[9].outcome is Outcome.NOT_WORTH
    assert "the best victim set loses 5,760 GPU-s" in result.decisions[9].reason
    plan = result.plan_for(10)
    assert plan is not None and plan.victim_ids == (1,)


def test_plan_limits_grow_with_the_queue() -> None:
    """plans_per_pending: with 40 jobs waiting and 0.1 per job, 4 plans instead of max_plans 2;
    0 keeps the fixed limit; max_plans 0 still means none."""
    topo = gpu_cluster(1, 6)
    jobs = [holder(i, NORMAL, gpus(f"n{i}", *ALL8)) for i in range(1, 7)]
    pend = [waiting(10 + i, HIGH, 8, wait=86400) for i in range(40)]
    grown = _plan(snapshot(topo, jobs, pend), replace(CFG, max_plans=2, plans_per_pending=0.1))
    assert [p.beneficiary for p in grown.plans] == [10, 11, 12, 13]
    assert "limit of plans" in grown.decisions[14].reason
    fixed = _plan(snapshot(topo, jobs, pend), replace(CFG, max_plans=2, plans_per_pending=0.0))
    assert [p.beneficiary for p in fixed.plans] == [10, 11]
    assert not _plan(snapshot(topo, jobs, pend), replace(CFG, max_plans=0)).plans
    assert PlannerConfig(max_plans=4, max_searches=64, plans_per_pending=0.05).limits(400) == (
        20, 320)
    with pytest.raises(ConfigError, match=r"plans_per_pending: must be a number >= 0"):
        PlannerConfig(plans_per_pending=-0.5)


def test_an_urgent_job_refused_for_want_of_victims_learns_when_young_ones_are_old_enough(
        ) -> None:
    """``ripe_in``: a HIGH job that overrides protection (as the daemon marks urgent work) and
    whose only possible victim, a LOW job 30 s old, is too young for it (urgent_min_run_time,
    1 min) learns that it may give way in 30 s; also when that job's team is protected. Jobs
    that do not override protection (the urgent path never looks at them), a job of the young
    job's own class, and a job whose victims would not make room even once old get nothing."""
    topo = gpu_cluster(1, 1)
    young = holder(1, LOW, gpus("n1", *ALL8), start=NOW - 30)
    high = waiting(9, HIGH, 8, overrides_protection=True)
    normal, low = waiting(8, NORMAL, 8), waiting(7, LOW, 8, overrides_protection=True)
    result = _plan(snapshot(topo, [young], [normal, high, low]))
    assert {j: d.outcome for j, d in result.decisions.items()} == {
        7: Outcome.NO_VICTIMS, 8: Outcome.NOT_WORTH, 9: Outcome.NO_VICTIMS}
    assert result.ripe_in == {9: pytest.approx(30.0)}
    guarded = _plan(snapshot(topo, [replace(young, protected=True)], [high]))
    assert guarded.ripe_in == {9: pytest.approx(30.0)}
    # a young 1-GPU LOW job beside 7 GPUs of HIGH work: 8 GPUs never free there, 1 does
    mixed = [holder(1, LOW, gpus("n1", 0), start=NOW - 45), holder(2, HIGH, gpus("n1", *ALL8[1:]))]
    one = waiting(10, HIGH, 1, overrides_protection=True)
    result = _plan(snapshot(topo, mixed, [high, one]))
    assert result.decisions[9].outcome is Outcome.NO_VICTIMS
    assert result.ripe_in == {10: pytest.approx(15.0)}


def test_urgent_work_whose_victims_save_preempts_after_urgent_benefit_wait() -> None:
    """A 1-GPU HIGH job (overriding protection, as urgent work is marked) facing an 8-GPU LOW
    job that saves on request: its save + restart (60 + 120 s) x 8 GPUs = 1,440 GPU-s beats
    the benefit 30 x wait x 1 until a wait of 48 s. After urgent_benefit_wait (7 s) the job
    preempts anyway, and the plan says why; before, it is told when (worth_in). A job that
    does not override protection still waits for the benefit test. A victim that cannot save
    on request (it would lose all since its last save) falls under urgent_no_save_wait
    instead (below)."""
    topo = gpu_cluster(1, 1)
    saves = holder(1, LOW, gpus("n1", *ALL8), can_ack=True)
    early = _plan(snapshot(topo, [saves], [waiting(9, HIGH, 1, wait=5,
                                                   overrides_protection=True)]))
    assert early.decisions[9].outcome is Outcome.NOT_WORTH
    assert early.worth_in == {9: pytest.approx(2.0)}
    ben = waiting(9, HIGH, 1, wait=8, overrides_protection=True)
    plan = _plan(snapshot(topo, [saves], [ben])).plan_for(9)
    assert plan is not None and plan.victim_ids == (1,)
    assert "urgent work that waited 8s >= urgent_benefit_wait 7s" in plan.reason
    unsaved = _plan(snapshot(topo, [replace(saves, can_ack=False)], [ben]),
                    config=replace(CFG, urgent_no_save_wait=None))
    assert unsaved.decisions[9].outcome is Outcome.NOT_WORTH
    plain = _plan(snapshot(topo, [saves], [replace(ben, overrides_protection=False)]))
    assert plain.decisions[9].outcome is Outcome.NOT_WORTH
    never = _plan(snapshot(topo, [saves], [ben]),
                  config=replace(CFG, urgent_benefit_wait=3600.0))
    assert never.decisions[9].outcome is Outcome.NOT_WORTH
    assert "preempts once it waited urgent_benefit_wait 7s" in early.decisions[9].reason
    assert "urgent_benefit_wait" not in unsaved.decisions[9].reason
    assert "urgent_no_save_wait" not in unsaved.decisions[9].reason


def test_urgent_work_preempts_a_victim_that_cannot_save_after_urgent_no_save_wait() -> None:
    """The same HIGH job facing an 8-GPU LOW job that cannot save on request, started and last
    saved an hour ago: the loss is that hour + the 2-min restart, x 8 GPUs, which
    the benefit 30 x wait x 1 beats only after 16 min. With urgent_no_save_wait (7 s by
    default) the job preempts once it waited that long, and the refusal before says when and
    why; set to 20 s it waits 20 s; off (None), the benefit test decides."""
    topo = gpu_cluster(1, 1)
    lone = holder(1, LOW, gpus("n1", *ALL8), start=NOW - 3600, checkpoint=NOW - 3600,
                  can_ack=False)
    early = _plan(snapshot(topo, [lone], [waiting(9, HIGH, 1, wait=5,
                                                  overrides_protection=True)]))
    assert early.decisions[9].outcome is Outcome.NOT_WORTH
    assert early.worth_in == {9: pytest.approx(2.0)}
    assert ("preempts once it waited urgent_no_save_wait 7s (a victim cannot save on request)"
            in early.decisions[9].reason)
    ben = waiting(9, HIGH, 1, wait=8, overrides_protection=True)
    plan = _plan(snapshot(topo, [lone], [ben])).plan_for(9)
    assert plan is not None and plan.victim_ids == (1,)
    assert "urgent work that waited 8s >= urgent_no_save_wait 7s" in plan.reason
    assert plan.lost_work == pytest.approx((3600 + 120) * 8)
    later = _plan(snapshot(topo, [lone], [ben]), config=replace(CFG, urgent_no_save_wait=20.0))
    assert later.decisions[9].outcome is Outcome.NOT_WORTH
    assert later.worth_in == {9: pytest.approx(12.0)}
    off = _plan(snapshot(topo, [lone], [ben]), config=replace(CFG, urgent_no_save_wait=None))
    assert off.decisions[9].outcome is Outcome.NOT_WORTH
    assert off.worth_in == {9: pytest.approx((3600 + 120) * 8 / 30 - 8)}


def test_a_job_past_its_bound_takes_victims_that_save_unless_bound_no_save_wait() -> None:
    """A NORMAL job past its bound (it overrides protection only for that) takes an 8-GPU LOW
    job that saves on request, as urgent work does. Facing one that cannot save (an hour's
    work since its last save), it is refused by default (bound_no_save_wait off), and the
    verdict says why; a HIGH job takes the same victim after urgent_no_save_wait. With
    bound_no_save_wait 0 the NORMAL job takes it too, and the plan names that setting; with
    3 h it waits until it has waited 3 h in all (worth_in says when)."""
    topo = gpu_cluster(1, 1)
    saves = holder(1, LOW, gpus("n1", *ALL8), can_ack=True)
    lone = holder(1, LOW, gpus("n1", *ALL8), start=NOW - 3600, checkpoint=NOW - 3600,
                  can_ack=False)
    past = waiting(9, NORMAL, 8, wait=7300, overrides_protection=True)
    plan = _plan(snapshot(topo, [saves], [past])).plan_for(9)
    assert plan is not None and plan.victim_ids == (1,)
    refused = _plan(snapshot(topo, [lone], [past]))
    assert refused.plans == () and refused.decisions[9].outcome is Outcome.NOT_WORTH
    assert ("past its bound it takes only victims that save on request (bound_no_save_wait "
            "off), and one here cannot") in refused.decisions[9].reason
    assert 9 not in refused.worth_in
    high = _plan(snapshot(topo, [lone], [waiting(9, HIGH, 8, wait=8,
                                                 overrides_protection=True)])).plan_for(9)
    assert high is not None and high.victim_ids == (1,)
    at_bound = _plan(snapshot(topo, [lone], [past]),
                     config=replace(CFG, bound_no_save_wait=0.0)).plan_for(9)
    assert at_bound is not None and at_bound.victim_ids == (1,)
    assert "urgent work that waited 2h01m >= bound_no_save_wait 0s" in at_bound.reason
    later = _plan(snapshot(topo, [lone], [past]),
                  config=replace(CFG, bound_no_save_wait=3 * 3600.0))
    assert later.decisions[9].outcome is Outcome.NOT_WORTH
    assert later.worth_in == {9: pytest.approx(3 * 3600.0 - 7300)}
    assert "preempts once it waited bound_no_save_wait 3h" in later.decisions[9].reason
