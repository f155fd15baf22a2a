"""Exact schedules of small hand-made traces on one 8-GPU node, for each policy.

Times are seconds from the trace start. Cost model: checkpoint 30 + 5/GPU s (70 s for 8 GPUs),
restart overhead 60 + 10/node s (70 s), requeue delay 11 s, periodic checkpoints every hour,
Slurm GraceTime 120 s. hai-slurm cycles every 30 s.
"""

from __future__ import annotations

from pathlib import Path

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.config.loader import parse_config
from hai_slurm.priority.planner.testing import gpu_cluster
from hai_slurm.priority.sim.engine import T0, Engine
from hai_slurm.priority.sim.runner import Setup, make_policy, with_quotas
from hai_slurm.priority.sim.trace import Trace, TraceJob, read_generic

DATA = Path(__file__).parent.parent / "data" / "traces"
NODE = gpu_cluster(1, 1)


def job(jid: int, submit: int, duration: int, gpus: int, team: str, cls: P) -> TraceJob:
    return TraceJob(jid, submit, duration, gpus, team, cls, 0, team)


def run(policy: str, jobs: list[TraceJob] | Trace, toml: str = "") -> Engine:
    trace = jobs if isinstance(jobs, Trace) else Trace(tuple(jobs), "test")
    setup = Setup(config=with_quotas(parse_config(toml), trace.teams, 8))
    return Engine(trace, NODE, make_policy(policy, setup), costs=setup.costs).run()


def runs(engine: Engine) -> dict[int, tuple[int | None, int | None, int]]:
    """trace id -> (first start, end, preemptions), times from the trace start."""
    return {tid: (None if j.first_start is None else j.first_start - T0,
                  None if j.end is None else j.end - T0, j.preemptions)
            for tid, j in engine.jobs.items()}


def test_fifo_runs_jobs_in_submit_order_without_preemption() -> None:
    """A 0-1000, then HIGH B 1000-1050 (submitted before C), then C 1050-1060; no preemption."""
    got = runs(run("fifo", read_generic(DATA / "one_node_contention.csv")))
    assert got == {1: (0, 1000, 0), 2: (1000, 1050, 0), 3: (1050, 1060, 0)}


def test_multifactor_kills_at_once_and_loses_work_since_the_periodic_checkpoint() -> None:
    """B (HIGH) preempts A (LOW) on arrival at 10; A is killed after GraceTime (130), B runs
    130-180, C (NORMAL, higher QOS factor than A) 180-190, A restarts from zero at 190 and
    needs 70 s restart + its whole 1000 s again: 1260. A lost (130 + 1070 - 1000) x 8 GPU-s."""
    engine = run("slurm-multifactor", read_generic(DATA / "one_node_contention.csv"))
    assert runs(engine) == {1: (0, 1260, 1), 2: (130, 180, 0), 3: (180, 190, 0)}
    a = engine.jobs[1]
    assert a.held_gpu_s - 8 * 1000 == 200 * 8
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [(10, 1, 2)]


def test_hai_platform_waits_10s_then_checkpoints_the_victim() -> None:
    """B waits 10 s, then A checkpoints (70 s) and is requeued at 90; B runs 90-140, C 140-150;
    A keeps its 20 s of progress: 150 + 70 restart + 980 = 1200."""
    engine = run("hai-platform", read_generic(DATA / "one_node_contention.csv"))
    assert runs(engine) == {1: (0, 1200, 1), 2: (90, 140, 0), 3: (140, 150, 0)}
    assert engine.jobs[1].held_gpu_s - 8 * 1000 == (90 + 1050 - 1000) * 8


PREEMPT = [job(1, 0, 5000, 8, "t1", P.LOW), job(2, 1000, 100, 8, "t2", P.HIGH)]


def test_hai_slurm_preempts_once_the_benefit_beats_the_lost_work() -> None:
    """B asks for 1 GPU. A saves on request, so the planner counts its checkpoint time (70 s)
    plus its restart as it measured it (the cost model's 60 + 10 x 1 node = 70 s, under the
    daemon's default estimate of 2 min) x 8 GPUs = 1120: B's benefit 30 x wait x 1 needs a
    wait over 37.3 s. But B is urgent work (HIGH) and A saves on request, so B preempts once
    it waited urgent_benefit_wait (7 s): the looks at 1001, 1003 and 1006 refuse and say so,
    and B gets one more look in the first whole second after 1007 + 0.2: 1008. A checkpoints
    (70 s), B runs 1078-1178, A restarts at 1178 with 5000 - 1008 s left after its simulated
    70 s of restart: ends 5240. (Without urgent_benefit_wait B was planned at 1038, when the
    benefit test passed; before look_again told when, at a later cycle.)"""
    engine = run("hai-slurm", [PREEMPT[0], job(2, 1000, 100, 1, "t2", P.HIGH)])
    assert runs(engine) == {1: (0, 5240, 1), 2: (1078, 1178, 0)}
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1008, 1, 2)]
    patient = run("hai-slurm", [PREEMPT[0], job(2, 1000, 100, 1, "t2", P.HIGH)],
                  "[planner]\nurgent_benefit_wait = \"1h\"\n")
    assert [(p.time - T0, p.victim, p.beneficiary) for p in patient.preemptions] == [
        (1038, 1, 2)]


def test_hai_slurm_counts_a_checkpointing_victims_save_not_its_age() -> None:
    """B asks for 8 GPUs at 1000; the daemon's 1-s poll sees it at 1001 and looks at 1001 and
    1003 (URGENT_LOOKS after it was seen). A's save + restart as the planner counts them is
    (70 + 70) x 8 = 1120, although A has not saved for 1003 s; at 1003 B's benefit
    30 x 3 x 8 = 720 does not beat it, and the refusal says a wait over 4.67 s does, so B gets
    one more look at 1005 (look_again): 30 x 5 x 8 = 1200 beats it. A checkpoints, B runs
    1075-1175, A restarts at 1175 and ends 1175 + 70 + (5000 - 1005) = 5240. (With the 2-min
    restart estimate: (70 + 120) x 8, planned at 1007; before look_again the fixed look at 1011
    preempted; before the daemon had the urgent path, the simulator's looks at 1002 and 1010
    preempted at 1010.)"""
    engine = run("hai-slurm", PREEMPT)
    assert runs(engine) == {1: (0, 5240, 1), 2: (1075, 1175, 0)}
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1005, 1, 2)]


def test_hai_slurm_minimum_run_time_and_urgent_work() -> None:
    """B arrives at 100 while A has run 100 s (< the default 2 min). A HIGH B is urgent work,
    which cuts the minimum run time short (urgent_min_run_time 1 min): the look after its benefit
    30 x wait x 8 beats A's (30 + 40 + 70) x 8 = 1,120 GPU-s (4.67 s), at 105, preempts A;
    B runs 175-275. An ABOVE_NORMAL B weighs 0 by default: it preempts only once past its
    class bound (30 min after 100), at the cycle of 1920, and runs 1990-2090, whatever the
    minimum run time. Weighted 5, it waits for A to be 2 min old and for 5 x wait x 8 to beat
    1,120 (28 s): the cycle of 150 preempts, B runs 220-320. With min_run_time 10 min the
    weighted ABOVE_NORMAL plan waits for 600 (B runs 670-770), the HIGH one only when
    urgent_min_run_time is 10 min too."""
    def pair(cls: P) -> list[TraceJob]:
        return [job(1, 0, 5000, 8, "t1", P.LOW), job(2, 100, 100, 8, "t2", cls)]

    ten = "[planner]\nmin_run_time = '10m'\n"
    weighted = "[planner.class_weights]\nABOVE_NORMAL = 5\n"
    for cls, extra, at, b in ((P.HIGH, "", 105, (175, 275, 0)),
                              (P.HIGH, ten, 105, (175, 275, 0)),
                              (P.HIGH, ten + "urgent_min_run_time = '10m'\n", 600,
                               (670, 770, 0)),
                              (P.ABOVE_NORMAL, "", 1920, (1990, 2090, 0)),
                              (P.ABOVE_NORMAL, ten, 1920, (1990, 2090, 0)),
                              (P.ABOVE_NORMAL, weighted, 150, (220, 320, 0)),
                              (P.ABOVE_NORMAL, ten + weighted, 600, (670, 770, 0))):
        engine = run("hai-slurm", pair(cls), extra)
        assert [(p.time - T0, p.victim) for p in engine.preemptions] == [(at, 1)], (cls, extra)
        assert runs(engine)[2] == b, (cls, extra)


AGING = [job(1, 0, 300, 8, "t1", P.NORMAL), job(2, 10, 10, 8, "t1", P.LOW),
         job(3, 100, 10, 8, "t1", P.UNDER_NORMAL)]


def test_hai_slurm_without_aging_the_higher_class_goes_first() -> None:
    """Default bounds (LOW 24 h): at 300 the UNDER_NORMAL job 3 starts before the LOW job 2."""
    got = runs(run("hai-slurm", AGING))
    assert got == {1: (0, 300, 0), 2: (310, 320, 0), 3: (300, 310, 0)}


def test_hai_slurm_aging_promotes_a_job_past_its_bound() -> None:
    """LOW and BELOW_NORMAL bounds of 60 s: job 2 (waiting since 10) is UNDER_NORMAL by 130
    and, submitted earlier than job 3 in the same class and team, starts first at 300."""
    toml = "[classes.LOW]\nmax_wait = 60\n[classes.BELOW_NORMAL]\nmax_wait = 60\n"
    engine = run("hai-slurm", AGING, toml)
    assert runs(engine) == {1: (0, 300, 0), 2: (300, 310, 0), 3: (310, 320, 0)}
    policy = engine.policy
    assert policy.counts["promotions"] >= 1


DECAY = [job(1, 0, 10000, 8, "t1", P.ABOVE_NORMAL), job(2, 100, 100, 8, "t2", P.ABOVE_NORMAL)]


def test_hai_slurm_decay_makes_a_long_running_job_a_victim() -> None:
    """Job 1 is ABOVE_NORMAL like job 2 (no victim) until it has run 30 min; from 1800 it counts
    as NORMAL, a lower class. Job 2 (ABOVE_NORMAL weighs 0) preempts it once past its own bound
    (30 min after 100), at the cycle of 1920: job 2 runs 1990-2090, job 1 ends 10240."""
    engine = run("hai-slurm", DECAY)
    assert runs(engine) == {1: (0, 10240, 1), 2: (1990, 2090, 0)}
    assert [(p.time - T0, p.victim) for p in engine.preemptions] == [(1920, 1)]
    assert engine.policy.counts["decays"] >= 1


def test_hai_slurm_without_decay_job_2_waits_for_its_bound() -> None:
    """decay.after = 0 turns decay off: job 1 stays ABOVE_NORMAL. Job 2 waits out its bound
    (30 min, at 1900) and is aged to HIGH, but aging buys queue order, not preemption: it is
    planned as the ABOVE_NORMAL it asked for and waits for job 1 to end (10000). With
    planner.aged_preempt it preempts as HIGH at the next cycle (1920)."""
    engine = run("hai-slurm", DECAY, "[decay]\nafter = 0\n")
    assert engine.preemptions == []
    assert runs(engine) == {1: (0, 10000, 0), 2: (10000, 10100, 0)}
    assert engine.policy.counts["decays"] == 0
    engine = run("hai-slurm", DECAY, "[decay]\nafter = 0\n[planner]\naged_preempt = true\n")
    assert [(p.time - T0, p.victim) for p in engine.preemptions] == [(1920, 1)]
    assert runs(engine) == {1: (0, 10240, 1), 2: (1990, 2090, 0)}


PROTECT = [*PREEMPT[:1], PREEMPT[1], job(3, 2000, 100, 8, "t2", P.HIGH)]


def test_hai_slurm_preempts_the_same_team_again_when_unprotected() -> None:
    """Default protection (after more than 3 preemptions): job 2 preempts job 1 at 1005 (the
    look after its wait passed 4.67 s, see above); job 3 preempts job 1 again the same way, at
    2005 (job 1 has run 830 s since its restart at 1175, but saves on request: 30 x 5 x 8 >
    (70 + 70) x 8)."""
    engine = run("hai-slurm", PROTECT)
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1005, 1, 2), (2005, 1, 3)]
    assert runs(engine)[3] == (2075, 2175, 0)


PROTECT_ORDINARY = [*PROTECT[:2], job(3, 2000, 100, 8, "t2", P.ABOVE_NORMAL)]
PROTECTED = "[fairness]\nprotect_after = 0\nprotect_for = '1h'\n"
WEIGHTED = "[planner.class_weights]\nABOVE_NORMAL = 5\n"


def test_hai_slurm_protection_shields_a_team_preempted_too_often() -> None:
    """protect_after = 0: team t1 is protected after losing job 1 at 1005 (job 2's urgent look
    after its wait passed 4.67 s). Job 3, ABOVE_NORMAL (not urgent), weighted 5 so that its
    benefit test would pass after 28 s, waits out a 20-min protection, until the first cycle
    after 2205, 2220, then preempts: job 3 runs 2290-2390; job 1 kept its progress and ends
    5480.

    A protection of 1 h outlasts job 3's bound (30 min after 2000): past it, job 3 preempts
    anyway (a bounded wait is a guarantee), at the cycle of 3810, weighted or not.

    Job 1 holds all 8 GPUs, so 4 of them are borrowed (quota 4 per team): protection covers it
    only with protect_borrowed; by default (last run) the borrowed job is reclaimed at the
    first cycle after job 3's benefit outweighs the loss, exactly as when unprotected: job 1
    loses (30 + 5 x 8 + 70) x 8 = 1,120 GPU-s, so 5 x wait x 8 GPUs passes it after 28 s, at
    the cycle of 2040."""
    short = "[fairness]\nprotect_after = 0\nprotect_for = '20m'\nprotect_borrowed = true\n"
    engine = run("hai-slurm", PROTECT_ORDINARY, short + WEIGHTED)
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1005, 1, 2), (2220, 1, 3)]
    assert runs(engine) == {1: (0, 5480, 2), 2: (1075, 1175, 0), 3: (2290, 2390, 0)}
    assert engine.policy.counts["protections"] >= 1
    for extra in ("", WEIGHTED):
        engine = run("hai-slurm", PROTECT_ORDINARY, PROTECTED + "protect_borrowed = true\n"
                     + extra)
        assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
            (1005, 1, 2), (3810, 1, 3)], extra
    default = run("hai-slurm", PROTECT_ORDINARY, PROTECTED + WEIGHTED)
    assert [(p.time - T0, p.victim, p.beneficiary) for p in default.preemptions] == [
        (1005, 1, 2), (2040, 1, 3)]
    assert default.policy.counts["protections"] >= 1


def test_hai_slurm_protection_does_not_hold_off_urgent_work() -> None:
    """The same protection, job 3 HIGH: urgent work is what preemption is for, so the
    protected team's job gives way to it as if unprotected, at the look of 2005 (job 3 runs
    2075-2175), not at 4620."""
    engine = run("hai-slurm", PROTECT, PROTECTED + "protect_borrowed = true\n")
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1005, 1, 2), (2005, 1, 3)]
    assert runs(engine)[3] == (2075, 2175, 0)
    assert engine.policy.counts["protections"] >= 1


BORROWED = [job(1, 0, 5000, 6, "t1", P.LOW), job(2, 0, 5000, 1, "t2", P.LOW),
            job(3, 1000, 100, 2, "t3", P.HIGH)]


def test_hai_slurm_takes_a_small_within_quota_victim_before_a_big_borrowed_one() -> None:
    """Three teams, quota 2 GPUs each: job 1 (6 GPUs) is borrowed, job 2 (1 GPU) within quota,
    one GPU free. HIGH job 3 needs 2 GPUs at 1000. Job 1 would lose (30 + 5 x 6 + 70) x 6 =
    780 GPU-s, job 2 (35 + 70) x 1 = 105 (saves from the cost model, restarts as the jobs
    measured them: 70 s on one node). With the default borrowed_discount (0.5: 390 against 105)
    job 2 gives way at the look of 1002 (after the refusal at 1001 said a wait over 1.75 s
    would do: 30 x 2 x 2 = 120 > 105), saves 35 s, and job 3 runs 1037-1137 (hai-platform also
    takes job 2, after its 10 s: 1045). With discount 0 (borrowed strictly first, the rule
    before) job 1 would give way once 30 x wait x 2 beats 780 (a wait over 13 s); as job 3 is
    urgent and job 1 saves on request, it gives way once job 3 waited urgent_benefit_wait
    (7 s), at the look of 1008, and saves 60 s: job 3 runs 1068-1168."""
    engine = run("hai-slurm", BORROWED)
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1002, 2, 3)]
    assert runs(engine)[3] == (1037, 1137, 0)
    strict = run("hai-slurm", BORROWED, "[planner]\nborrowed_discount = 0\n")
    assert [(p.time - T0, p.victim, p.beneficiary) for p in strict.preemptions] == [
        (1008, 1, 3)]
    assert runs(strict)[3] == (1068, 1168, 0)


def test_hai_slurm_plans_when_a_too_young_victim_is_old_enough() -> None:
    """A (LOW, 8 GPUs) starts at 1000; B (HIGH, 8 GPUs) arrives at 1010. Every look and the
    cycles until 1060 refuse B: A is younger than urgent_min_run_time (1 min), so no job may
    give way. The refusals say when A is old enough (1060), and B, whose fixed looks are all
    taken, gets one more look in the first whole second after 1060 + 0.2: 1061 (before, the
    next cycle after 1060 planned it). A checkpoints (70 s), B runs 1131-1231, A restarts at
    1231 and ends 1231 + 70 + (5000 - 61) = 6240."""
    engine = run("hai-slurm", [job(1, 1000, 5000, 8, "t1", P.LOW),
                               job(2, 1010, 100, 8, "t2", P.HIGH)])
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1061, 1, 2)]
    assert runs(engine) == {1: (1000, 6240, 1), 2: (1131, 1231, 0)}


NO_SAVE = [TraceJob(1, 0, 5000, 8, "t1", P.LOW, 0, "t1", saves=False),
           job(2, 1000, 100, 8, "t2", P.HIGH)]


def test_hai_platform_requeues_a_victim_that_cannot_save_without_a_save() -> None:
    """A (LOW) cannot save on request. B (HIGH) waits 10 s and asks A at 1010; the request
    ends A, which is requeued 2 s later (no_save_stop) without a checkpoint: B runs 1012-1112,
    A restarts at 1112 from zero and ends 1112 + 70 + 5000 = 6182, having held its GPUs
    1012 + 70 s more than its work (a victim that saves holds them 70 + 70 s more)."""
    engine = run("hai-platform", NO_SAVE)
    assert runs(engine) == {1: (0, 6182, 1), 2: (1012, 1112, 0)}
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1010, 1, 2)]
    assert engine.jobs[1].held_gpu_s - 8 * 5000 == (1012 + 70) * 8


def test_hai_slurm_weighs_all_the_work_of_a_victim_that_cannot_save() -> None:
    """The same A cannot save on request, so the planner counts all its work since its start
    (no periodic checkpoint within its first hour) plus its restart: at time t,
    (t + 70) x 8 GPU-s, against B's benefit 30 x (t - 1000) x 8, which beats it from
    1036.9 s. B is urgent work, so it preempts once it waited urgent_no_save_wait (7 s): the
    looks at 1001, 1003 and 1006 refuse, B gets one more look at 1008 and is planned. A is
    requeued 2 s later without a checkpoint; B runs 1010-1110, A restarts at 1110 and ends
    1110 + 70 + 5000 = 6180. With urgent_no_save_wait off the benefit test decides: planned at
    1037 (its refusal said when), B runs 1039-1139, A ends 1139 + 70 + 5000 = 6209. (A victim
    that saves gave way at 1005: the schedule above.)"""
    engine = run("hai-slurm", NO_SAVE)
    assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
        (1008, 1, 2)]
    assert runs(engine) == {1: (0, 6180, 1), 2: (1010, 1110, 0)}
    assert engine.jobs[1].held_gpu_s - 8 * 5000 == (1010 + 70) * 8
    off = run("hai-slurm", NO_SAVE, "[planner]\nurgent_no_save_wait = \"off\"\n")
    assert [(p.time - T0, p.victim, p.beneficiary) for p in off.preemptions] == [
        (1037, 1, 2)]
    assert runs(off) == {1: (0, 6209, 1), 2: (1039, 1139, 0)}


def test_a_job_past_its_bound_takes_a_victim_that_cannot_save_only_by_bound_no_save_wait(
        ) -> None:
    """A (LOW, 0-5000) cannot save on request; B (ABOVE_NORMAL, weight 0) comes at 100. A
    victim that saves gave way at B's bound (the cycle of 1920, above). This one is not taken
    by default: B waits for A's end and runs 5000-5100, and nothing is lost. With
    bound_no_save_wait 0 B takes A at 1920 (no periodic save yet: A loses all its work, held
    1920 + 2 + 70 s more x 8 GPUs, and restarts after B: 2022 + 70 + 5000). With 1 h, at the
    cycle of 3720, once B waited an hour: A saved periodically at 3600 and loses only the
    120 s since, + 2 + 70."""
    pair = [TraceJob(1, 0, 5000, 8, "t1", P.LOW, 0, "t1", saves=False),
            job(2, 100, 100, 8, "t2", P.ABOVE_NORMAL)]
    engine = run("hai-slurm", pair)
    assert engine.preemptions == []
    assert runs(engine) == {1: (0, 5000, 0), 2: (5000, 5100, 0)}
    for wait, at, a_end, lost in (("0s", 1920, 7092, 1992), ("1h", 3720, 5292, 192)):
        engine = run("hai-slurm", pair, f"[planner]\nbound_no_save_wait = '{wait}'\n")
        assert [(p.time - T0, p.victim, p.beneficiary) for p in engine.preemptions] == [
            (at, 1, 2)], wait
        assert runs(engine) == {1: (0, a_end, 1), 2: (at + 2, at + 102, 0)}, wait
        assert engine.jobs[1].held_gpu_s - 8 * 5000 == lost * 8, wait
