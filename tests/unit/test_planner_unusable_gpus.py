"""Free GPUs a pending job cannot start on: beside a running job for a job that takes its
nodes whole (``sbatch --exclusive``: Slurm starts it only on a node no other job runs on and
gives it all the node's GPUs; 22.05: ``--exclusive --gpus=2`` holds ``gpu:8``), on a node
without free CPUs, or in a reservation the job is not linked to. Such GPUs made the job "fit",
so it got no plan and waited; now its plan frees GPUs where it can start."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_world import Behaviour, World, make_world, plan_for_high_job

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.live import not_planned
from hai_slurm.priority.daemon.planning import before_reservations, reserved_ahead, room_for
from hai_slurm.priority.hooks import Claims
from hai_slurm.priority.planner.inputs import whole_node_request
from hai_slurm.priority.planner.types import Outcome
from hai_slurm.priority.policy.state import PendingJob, Resources
from hai_slurm.slurm_formats import INFINITE
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.fake import NODE_RESERVATION_NAMED, FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import JobState, Reservation


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


def test_room_for_counts_only_jobs_with_gpus_and_known_requests() -> None:
    """n1 has 1 free CPU beside a GPU job (and 7 free GPUs), n2 1 beside a job without GPUs,
    n3 16, n4 4 of 16 beside an 8-GPU job. A waiting GPU job asking 2 CPUs may have plans on
    n3 and n4 only: n2's CPUs are held by a job no plan frees, and a plan on n1 would count
    its free GPUs though its victim may not free 2 CPUs. One asking 8 CPUs may have a plan on
    n3 or n4 (where every GPU it gets frees a job's CPUs too). A waiting job without GPUs, or
    a request of 0 CPUs (unknown), gets no entry; the same request gets the same set object."""
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8, cpus=16) for i in range(1, 5)], now=0)
    fake.submit(name="hog", gpus_per_node=1, cpus_per_node=15, nodelist="n1")
    fake.submit(name="cpu-hog", gpus_per_node=0, cpus_per_node=15, nodelist="n2")
    fake.submit(name="full", gpus_per_node=8, cpus_per_node=12, nodelist="n4")
    gpu = fake.submit(name="gpu", gpus_per_node=2, cpus_per_node=2, hold=True)
    twin = fake.submit(name="twin", gpus_per_node=1, cpus_per_node=2, hold=True)
    wide = fake.submit(name="wide", gpus_per_node=2, cpus_per_node=8, hold=True)
    cpu = fake.submit(name="cpu", gpus_per_node=0, cpus_per_node=1, hold=True)
    unknown = fake.submit(name="unknown", gpus_per_node=2, cpus_per_node=0, hold=True)
    fake.schedule()
    snap = fake.snapshot()
    cluster = frozenset({"n1", "n2", "n3", "n4"})

    def waiting(job_id: int, gpus: int) -> PendingJob:
        return PendingJob(job_id, "u", "t", PriorityClass.HIGH, 0.0, Resources(gpus, 1, 0))

    got = room_for(snap, [waiting(gpu, 2), waiting(twin, 1), waiting(wide, 2),
                          waiting(cpu, 0), waiting(unknown, 2)], {}, cluster)
    assert got == {gpu: {"n3", "n4"}, twin: {"n3", "n4"}, wide: {"n3", "n4"}}
    assert got[gpu] is got[twin]
    part = frozenset({"n3", "n4"})   # a partition of the nodes with room: no restriction
    assert room_for(snap, [waiting(gpu, 2)], {gpu: part}, cluster) == {}
    assert room_for(snap, [waiting(gpu, 2)], {gpu: frozenset({"n1", "n3"})},
                    cluster) == {gpu: {"n3"}}


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


def test_the_fake_keeps_a_job_off_a_reservation_its_run_would_reach() -> None:
    """As measured on 22.05: a reservation 30 min away keeps jobs limited to 60 min or without
    a limit off its node (``ReqNodeNotAvail``); a 10-min job starts there. A job linked to it
    waits for it to start. Until it starts the node is not flagged RESERVED and the
    reservation lists as INACTIVE; reservations may share a node at other times, not at the
    same time."""
    fake = FakeSlurm([FakeNode("n1", gpus=8)], now=0)
    fake.admin_reservation("maint", ["n1"], ["root"], start=1800, minutes=60)
    late = [fake.submit(name=f"t{limit}", gpus_per_node=1, time_limit=limit)
            for limit in (60, None, INFINITE)]
    short = fake.submit(name="short", gpus_per_node=1, time_limit=10)
    assert fake.schedule() == (short,)
    assert all(fake.jobs[j].state is JobState.PENDING for j in late)
    (node,) = fake.snapshot().nodes
    assert node.state_flags == () and fake.reservations()[0].state == "INACTIVE"
    fake.jobs[late[0]].reservation = "maint"
    assert fake.schedule() == ()
    fake.create_reservation("guard", ["n1"], ["root"], 10)   # ends before maint starts
    with pytest.raises(SlurmError, match="overlaps"):
        fake.create_reservation("guard2", ["n1"], ["root"], 40)
    fake.advance(1800)
    assert fake.reservations("maint")[0].state == "ACTIVE"
    assert fake.snapshot().nodes[0].state_flags == ("RESERVED",)
    assert fake.schedule() == (late[0],)


def test_reservations_ahead_keep_jobs_whose_limit_reaches_them_off_their_nodes() -> None:
    """A maintenance window on n2 in 30 min and a guard (never counted): a job without a time
    limit, or limited to 60 min, may have plans on n1 only; a 10-min job anywhere; a job
    linked to the window is not kept off it. Reservations already started or without nodes
    do not count here (an active one flags its nodes RESERVED)."""
    fake = FakeSlurm([FakeNode("n1", gpus=8), FakeNode("n2", gpus=8)], now=0)
    ahead = reserved_ahead([
        Reservation("maint", ("n2",), ("root",), 1800, 5400, ("MAINT",), "INACTIVE"),
        Reservation("hai-plan-7-100", ("n1",), ("root",), 1800, 2400, (), "INACTIVE"),
        Reservation("now", ("n1",), ("root",), 0, 600, (), "ACTIVE"),
        Reservation("licenses", (), ("root",), 1800, 5400, (), "INACTIVE")], 0.0)
    assert ahead == ((1800, "maint", frozenset({"n2"})),)
    jobs = {limit: fake.submit(name=f"t{limit}", gpus_per_node=1, time_limit=limit, hold=True)
            for limit in (None, 60, 10)}
    linked = fake.submit(name="linked", gpus_per_node=1, hold=True)
    fake.jobs[linked].reservation = "maint"
    snap = fake.snapshot()

    def waiting(job_id: int) -> PendingJob:
        return PendingJob(job_id, "u", "t", PriorityClass.HIGH, 0.0, Resources(1, 1, 0))

    cluster = frozenset({"n1", "n2"})
    got = before_reservations(snap, [waiting(j) for j in (*jobs.values(), linked)], {},
                              cluster, ahead)
    assert got == {jobs[None]: {"n1"}, jobs[60]: {"n1"}}
    assert got[jobs[None]] is got[jobs[60]]
    assert before_reservations(snap, [waiting(jobs[None])], {}, cluster, ()) == {}


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
