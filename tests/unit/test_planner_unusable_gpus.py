"""Free GPUs a pending job cannot start on: beside a running job for a job that takes its
nodes whole (``sbatch --exclusive``: Slurm starts it only on a node no other job runs on and
gives it all the node's GPUs; 22.05: ``--exclusive --gpus=2`` holds ``gpu:8``), on a node
without free CPUs, or in a reservation the job is not linked to. Such GPUs made the job "fit",
so it got no plan and waited; now its plan frees GPUs where it can start."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world, plan_for_high_job

from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.daemon.live import not_planned
from hai_slurm.priority.hooks import Claims
from hai_slurm.priority.planner.inputs import whole_node_request
from hai_slurm.priority.planner.types import Outcome
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.fake import NODE_RESERVATION_NAMED, FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import JobState


def started_on(world: World, job_id: int) -> tuple[str, ...]:
    """Let the world move 5 s at a time (at most 150 s) until ``job_id`` runs: its nodes."""
    for _ in range(30):
        if world.fake.jobs[job_id].state is JobState.RUNNING:
            return world.fake.jobs[job_id].nodes
        world.clock.now += 5
        world.tick()
    raise AssertionError(f"job {job_id} did not start: {world.fake.jobs[job_id]}")


def test_the_fake_starts_an_exclusive_job_only_on_an_empty_node_and_gives_it_all() -> None:
    """As Slurm 22.05 does (recorded in test_adapter_parse's ``_EXCLUSIVE``)."""
    fake = FakeSlurm([FakeNode("n1", gpus=8), FakeNode("n2", gpus=8)], now=0)
    small = fake.submit(name="small", gpus_per_node=2, nodelist="n1")
    excl = fake.submit(name="excl", gpus_per_node=2, exclusive="node")
    late = fake.submit(name="late", gpus_per_node=2, exclusive="node")
    assert set(fake.schedule()) == {small, excl}
    job = fake.snapshot().job(excl)
    assert job is not None and job.nodes == ("n2",) and job.gpus_per_node == {"n2": 8}
    assert job.gpus_requested == 2 and job.takes_whole_nodes
    assert fake.jobs[late].state is JobState.PENDING   # n1 has 6 free GPUs, not a free node
    fake.finish(small, JobState.COMPLETED)
    assert fake.schedule() == (late,)
    assert fake.submit(name="beside", gpus_per_node=1) not in fake.schedule()


@pytest.mark.parametrize("exclusive", ["", "node", "user"])
def test_an_exclusive_high_job_gets_a_plan_that_frees_a_whole_node(tmp_path: Path,
                                                                    exclusive: str) -> None:
    """n1 runs a 2-GPU LOW job (6 GPUs free), n2-n4 an 8-GPU LOW job each. A HIGH 2-GPU job
    that shares fits on n1's free GPUs (no plan). With ``--exclusive`` it did too, so it got
    no plan and waited; now its plan frees all of a node: n1's 2-GPU job, the cheapest, and
    the job starts there, holding all 8 GPUs."""
    world = make_world(tmp_path)
    small = world.victim("v0", Behaviour(ack_after=0.5), gpus=2)
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    last, bene = plan_for_high_job(world, tmp_path, gpus=2, exclusive=exclusive)
    decision = last.decisions[bene]
    if not exclusive:
        assert decision.outcome is Outcome.FITS and not last.plans
        return
    (plan,) = last.plans
    assert plan.beneficiary == bene and plan.victim_ids == (small,) and plan.nodes == ("n1",)
    assert started_on(world, bene) == ("n1",)
    job = world.fake.snapshot().job(bene)
    assert job is not None and job.gpus_per_node == {"n1": 8}


def test_whole_node_request_picks_one_size_that_holds_the_job() -> None:
    """The smallest size with enough idle nodes (it fits now), else the largest that holds the
    job's share per node on enough nodes; None when no size does (no plan)."""
    gpus = {"a": 8, "b": 4, "c": 8, "d": 0, "e": 4}
    every, none = frozenset(gpus), frozenset[str]()
    assert whole_node_request(every, gpus, none, 2, 1) == (8, 1, frozenset({"a", "c"}))
    assert whole_node_request(every, gpus, frozenset({"b"}), 2, 1) == (4, 1, frozenset({"b", "e"}))
    assert whole_node_request(every, gpus, frozenset({"b"}), 8, 1) == (8, 1, frozenset({"a", "c"}))
    assert whole_node_request(every, gpus, none, 16, 0) == (8, 2, frozenset({"a", "c"}))
    assert whole_node_request(every, gpus, none, 16, 2) == (8, 2, frozenset({"a", "c"}))
    assert whole_node_request(every, gpus, none, 2, 3) is None     # 3 nodes of one size: none
    assert whole_node_request(every, gpus, none, 6, 3) is None
    assert whole_node_request(frozenset({"b", "e", "d"}), gpus, none, 8, 0) == (
        4, 2, frozenset({"b", "e"}))
    assert whole_node_request(frozenset({"b", "d"}), gpus, none, 8, 1) is None  # 8 on a 4
    assert whole_node_request(frozenset({"d"}), gpus, none, 1, 1) is None


def test_no_plan_for_a_job_asking_for_a_topology_segment(tmp_path: Path) -> None:
    """``--exclusive=topo`` (Slurm 25.05+) wants a segment of the topology alone, which the
    planner does not free: no plan, and explain says why."""
    world = make_world(tmp_path)
    for i in range(4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    last, bene = plan_for_high_job(world, tmp_path, exclusive="topo")
    assert bene not in last.decisions and not last.plans
    job = world.fake.snapshot().job(bene)
    assert job is not None
    assert "--exclusive=topo" in not_planned(job, Claims(), float(world.fake.now), 60.0)


@pytest.mark.parametrize("hog_cpus", [1, 16])
def test_free_gpus_on_a_node_without_free_cpus_fit_nobody(tmp_path: Path, hog_cpus: int) -> None:
    """n1 runs a 1-GPU LOW job, n2-n4 an 8-GPU LOW job each. With 1 CPU the HIGH 2-GPU job
    fits on n1's 7 free GPUs (no plan). With all 16 of n1's CPUs taken it did too, though
    Slurm cannot start it there: now n1 is closed to "fits" and the plan frees another node,
    where the job starts."""
    world = make_world(tmp_path)
    world.victim("hog", Behaviour(ack_after=0.5), gpus=1, cpus=hog_cpus)
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    last, bene = plan_for_high_job(world, tmp_path, gpus=2)
    if hog_cpus == 1:
        assert last.decisions[bene].outcome is Outcome.FITS and not last.plans
        return
    (plan,) = last.plans
    assert plan.beneficiary == bene and plan.nodes != ("n1",)
    assert started_on(world, bene) == plan.nodes


def test_a_suspended_jobs_gpus_are_not_free_and_it_is_no_victim(tmp_path: Path) -> None:
    """n1-n4 run an 8-GPU LOW job each; the one on n1 is suspended (scontrol suspend), which
    keeps its GPUs. The HIGH job "fit" on n1's GPUs, got no plan and waited as long as the
    job stayed suspended; now those GPUs are busy, the suspended job is not a victim (the
    planner does not requeue what an admin suspended), and the plan frees another node."""
    world = make_world(tmp_path)
    lows = [world.victim(f"v{i}", Behaviour(ack_after=0.5)) for i in range(4)]
    world.fake.jobs[lows[0]].state = JobState.SUSPENDED
    assert {n.name: n.gpus_used for n in world.fake.snapshot().nodes}["n1"] == 8
    last, bene = plan_for_high_job(world, tmp_path)
    assert last.decisions[bene].outcome is Outcome.PREEMPT, last.decisions[bene]
    (plan,) = last.plans
    assert lows[0] not in plan.victim_ids and plan.nodes != ("n1",)
    assert started_on(world, bene) == plan.nodes


def test_an_interactive_job_is_no_victim(tmp_path: Path) -> None:
    """n1-n4 run an 8-GPU LOW job each; the one on n1 (the first in node order, so the one a
    tie picks) is an interactive ``srun``, which slurmctld refuses to requeue ("Only batch
    jobs are accepted"): a plan taking it waited on it for ever, its other victims held. It
    is no victim now, and the plan frees another node."""
    world = make_world(tmp_path)
    lows = [world.victim(f"v{i}", Behaviour(ack_after=0.5)) for i in range(4)]
    world.fake.jobs[lows[0]].batch = False
    last, bene = plan_for_high_job(world, tmp_path)
    (plan,) = last.plans
    assert lows[0] not in plan.victim_ids and plan.nodes != ("n1",)
    assert started_on(world, bene) == plan.nodes


def test_free_gpus_in_someone_elses_reservation_fit_nobody(tmp_path: Path) -> None:
    """n1-n3 run an 8-GPU LOW job each; n4 is idle but in an admin's reservation. A HIGH job
    "fit" on n4 and got no plan, though Slurm starts there only jobs linked to the reservation:
    now n4 is left out and the plan frees another node, where the job starts. A job linked to
    the reservation gets no plan (its nodes are the reservation's), and explain says why."""
    world = make_world(tmp_path)
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    world.fake.create_reservation("maint", ["n4"], ["root"], 600)
    linked = world.pending("linked", gpus=8, nodes=2)   # more than the reservation holds
    world.fake.jobs[linked].reservation = "maint"
    last, bene = plan_for_high_job(world, tmp_path)
    (plan,) = last.plans
    assert plan.beneficiary == bene and plan.nodes != ("n4",)
    assert linked not in last.decisions
    assert started_on(world, bene) == plan.nodes
    job = world.fake.snapshot().job(linked)
    assert job is not None and job.reservation == "maint"
    assert "reservation maint" in not_planned(job, Claims(), float(world.fake.now), 60.0)


def test_an_exclusive_job_is_not_planned_onto_a_node_a_cpu_only_job_holds(
        tmp_path: Path) -> None:
    """As above, but n1 also runs a job without GPUs: freeing n1's GPUs would not empty it,
    so the exclusive job's plan frees another node (all of it) and the job starts there."""
    world = make_world(tmp_path)
    world.victim("v0", Behaviour(ack_after=0.5), gpus=2)
    cpu_job = world.fake.submit(name="cpu", nodelist="n1", gpus_per_node=0)
    assert cpu_job in world.fake.schedule()
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    last, bene = plan_for_high_job(world, tmp_path, gpus=2, exclusive="node")
    (plan,) = last.plans
    assert plan.nodes != ("n1",) and len(plan.victim_ids) == 1
    assert started_on(world, bene) == plan.nodes


def test_an_exclusive_job_no_node_size_can_hold_gets_no_plan(tmp_path: Path) -> None:
    """Every node runs a job without GPUs beside its LOW job: no plan empties a node, so the
    exclusive job gets none (before, it was planned as a job that shares nodes), and explain
    says why."""
    world = make_world(tmp_path)
    for i in range(1, 5):
        world.victim(f"v{i}", Behaviour(ack_after=0.5), gpus=4)
        assert world.fake.submit(name=f"cpu{i}", nodelist=f"n{i}", gpus_per_node=0) in \
            world.fake.schedule()
    last, bene = plan_for_high_job(world, tmp_path, gpus=2, exclusive="node")
    assert bene not in last.decisions and not last.plans
    job = world.fake.snapshot().job(bene)
    assert job is not None
    assert "takes whole nodes" in not_planned(job, Claims(), float(world.fake.now), 60.0)


def test_a_job_asking_more_cpus_than_a_node_has_free_does_not_fit_there(tmp_path: Path) -> None:
    """n1 runs a 1-GPU LOW job holding 12 of its 16 CPUs (7 GPUs, 4 CPUs free), n2-n4 an
    8-GPU LOW job each. A HIGH 1-GPU job asking 2 CPUs waits for n2 (``--nodelist``). The
    HIGH 2-GPU job asking 8 CPUs "fit" on n1 (free CPUs were checked against the smallest
    request of the pass: 2), and Slurm kept it pending there. Now its plan frees another node,
    where it starts."""
    world = make_world(tmp_path)
    world.victim("hog", Behaviour(ack_after=0.5), gpus=1, cpus=12)
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    small = world.fake.submit(name="small", account="team-b", qos="high", gpus_per_node=1,
                              cpus_per_node=2, nodelist="n2",
                              admin_comment=format_admin_comment(info))
    last, bene = plan_for_high_job(world, tmp_path, gpus=2, cpus=8)
    assert world.fake.jobs[small].state is JobState.PENDING
    plan = last.plan_for(bene)
    assert plan is not None and plan.nodes != ("n1",), last.decisions[bene]
    assert started_on(world, bene) == plan.nodes


def test_a_node_of_a_guard_no_open_plan_stands_on_stays_in(tmp_path: Path) -> None:
    """Slurm may flag a guard's node RESERVED a while after the guard ended (no open plan
    stands on it any more); where Slurm names the reservation (24.11+) and it is a guard's, the
    node stays in the planner's cluster: the HIGH job fits on its free GPUs (an admin's
    reservation there leaves it out: the test above)."""
    world = make_world(tmp_path, version=NODE_RESERVATION_NAMED)   # a release that names it
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    world.fake.create_reservation("hai-plan-9-1796000000", ["n4"], ["root"], 600)
    node = next(n for n in world.fake.snapshot().nodes if n.name == "n4")
    assert "RESERVED" in node.state_flags and node.reservation == "hai-plan-9-1796000000"
    last, bene = plan_for_high_job(world, tmp_path)
    assert last.decisions[bene].outcome is Outcome.FITS and not last.plans


def test_free_gpus_before_a_maintenance_window_fit_only_short_jobs(tmp_path: Path) -> None:
    """n1-n3 run an 8-GPU LOW job each; n4 is idle, but an admin's maintenance starts there in
    30 min. A HIGH job without a time limit "fit" on n4 and got no plan, while Slurm kept it
    pending there (its run would reach into the window): now n4 is left out, and the plan
    frees another node, where the job starts."""
    world = make_world(tmp_path)
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    world.fake.admin_reservation("maint", ["n4"], ["root"], start=world.fake.now + 5400,
                                 minutes=60)
    last, bene = plan_for_high_job(world, tmp_path)   # an hour on: the window is 30 min away
    plan = last.plan_for(bene)
    assert plan is not None and plan.nodes != ("n4",), last.decisions[bene]
    assert started_on(world, bene) == plan.nodes


def test_a_job_holding_a_nodes_cpus_may_give_way_for_them(tmp_path: Path) -> None:
    """n1 runs a 1-GPU LOW job holding all 16 CPUs (7 GPUs free nobody can use), n2-n4 a HIGH
    8-GPU job each (never victims of a HIGH job). A HIGH 1-GPU job's plan takes the LOW job:
    its CPUs come free with its GPU, and the job starts on n1 (a review found the node left
    out of the job's plans, so it got none)."""
    world = make_world(tmp_path)
    hog = world.victim("hog", Behaviour(ack_after=0.5), gpus=1, cpus=16)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-a", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)
    for i in range(2, 5):
        world.fake.submit(name=f"high{i}", account="team-a", qos="high", gpus_per_node=8,
                          nodelist=f"n{i}", admin_comment=format_admin_comment(info))
    world.fake.schedule()
    last, bene = plan_for_high_job(world, tmp_path, gpus=1)
    plan = last.plan_for(bene)
    assert plan is not None and plan.victim_ids == (hog,), last.decisions[bene]
    assert started_on(world, bene) == ("n1",)


def test_an_exclusive_job_gets_no_node_a_reservation_ahead_keeps_it_off(tmp_path: Path) -> None:
    """n1-n3 run an 8-GPU LOW job each; n4 is idle, but a maintenance starts there in 30 min.
    An exclusive HIGH job without a time limit was given n4 as its idle node (so it "fit"
    there and waited, as Slurm keeps it off); now its node size is chosen without n4, and
    its plan frees another node, where it starts."""
    world = make_world(tmp_path)
    for i in range(1, 4):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    world.fake.admin_reservation("maint", ["n4"], ["root"], start=world.fake.now + 5400,
                                 minutes=60)
    last, bene = plan_for_high_job(world, tmp_path, gpus=2, exclusive="node")
    plan = last.plan_for(bene)
    assert plan is not None and plan.nodes != ("n4",), last.decisions[bene]
    assert started_on(world, bene) == plan.nodes


def test_victims_that_free_gpus_but_not_the_cpus_asked_are_not_taken(tmp_path: Path) -> None:
    """n1: LOW jobs "light" (4 GPUs, 1 CPU) and "heavy" (4 GPUs, 14 CPUs), 1 of 16 CPUs free;
    n2-n4: an 8-GPU LOW job each. A HIGH job of 4 GPUs and 8 CPUs: the planner, counting
    GPUs, took "light" (as cheap as "heavy", first by job id), which leaves 2 CPUs on n1, so
    Slurm would not start the job there and "light" gave way for nothing. Now the pass is
    made again with "light" giving way to nobody: the plan takes "heavy", whose CPUs come
    free with its GPUs, and the job starts on n1."""
    world = make_world(tmp_path)
    light = world.victim("light", Behaviour(ack_after=0.5), gpus=4, cpus=1)
    heavy = world.victim("heavy", Behaviour(ack_after=0.5), gpus=4, cpus=14)
    for i in range(2, 5):
        world.victim(f"v{i}", Behaviour(ack_after=0.5))
    last, bene = plan_for_high_job(world, tmp_path, gpus=4, cpus=8)
    (plan,) = last.plans
    assert plan.beneficiary == bene and plan.victim_ids == (heavy,) and plan.nodes == ("n1",)
    assert last.decisions[bene].outcome is Outcome.PREEMPT
    assert started_on(world, bene) == ("n1",)
    assert world.fake.jobs[light].state is JobState.RUNNING


def test_a_plan_still_short_of_cpus_after_the_last_pass_is_dropped(tmp_path: Path) -> None:
    """Each of 3 nodes: a "light" LOW job (4 GPUs, 1 CPU) beside one of 14 CPUs that cannot
    save on request (its hour of work makes it dear). Each pass takes the next light job,
    which frees too few CPUs; after three passes the last plan is dropped (a fourth would
    have been needed), no job gives way, and the verdict says why."""
    world = make_world(tmp_path, nodes=3)
    light = []
    for i in range(1, 4):   # node i gets light i, then heavy i
        light.append(world.victim(f"light{i}", Behaviour(ack_after=0.5), gpus=4, cpus=1))
        world.victim(f"heavy{i}", Behaviour(ack_after=0.5), gpus=4, cpus=14,
                     checkpoint=False)
    last, bene = plan_for_high_job(world, tmp_path, gpus=4, cpus=8)
    assert not last.plans and not world.fake.signals
    decision = last.decisions[bene]
    assert decision.outcome is Outcome.NO_VICTIMS
    assert "would not free the CPUs or memory it asks there" in decision.reason, decision
    assert all(world.fake.jobs[j].state is JobState.RUNNING for j in light)
