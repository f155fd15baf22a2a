"""Nodes a waiting job cannot start on for want of CPUs or memory, or for a reservation its run
would reach (``hai_slurm.priority.daemon.room``), and the fake's reservations ahead."""

from __future__ import annotations

import pytest

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef
from hai_slurm.errors import SlurmError
from hai_slurm.priority.daemon.room import (
    Narrowing,
    asks,
    closed_for_room,
    left_out_texts,
    narrow_allowed,
    plan_short,
    reserved,
)
from hai_slurm.priority.planner.types import Holder, PreemptionPlan, Victim, Waiting
from hai_slurm.slurm_formats import INFINITE
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import JobState, Reservation

HIGH, NORMAL, LOW = PriorityClass.HIGH, PriorityClass.NORMAL, PriorityClass.LOW
CLUSTER = frozenset({"n1", "n2", "n3", "n4"})


def _holder(fake: FakeSlurm, job_id: int, cls: PriorityClass, *,
            preemptible: bool = True) -> Holder:
    job = fake.snapshot().job(job_id)
    assert job is not None and job.nodes
    return Holder(job_id, "t", cls, (GpuRef(job.nodes[0], 0),), 0.0, preemptible=preemptible)


def test_rooms_keep_jobs_off_nodes_they_cannot_start_on() -> None:
    """n1: a LOW 1-GPU job holds 15 of 16 CPUs (7 GPUs free); n2: a job without GPUs holds 15;
    n3: idle; n4: a LOW 8-GPU job holds 12 (4 CPUs free, no GPU free). The smallest request
    (1 CPU) closes no node. A 2-GPU job asking 2 CPUs: n1 could only make it "fit" (left out),
    n2's CPUs no plan frees (left out). One asking 8: n4's victim frees 12 (stays). A NORMAL
    job asking 8 beside a HIGH 8-GPU job on n4: nothing there could give way (left out). A
    job asking 1 CPU (there is one free everywhere), a job without GPUs or with a request of
    0 keep every node; the same sets are one object."""
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8, cpus=16) for i in range(1, 5)], now=0)
    hog = fake.submit(name="hog", gpus_per_node=1, cpus_per_node=15, nodelist="n1")
    fake.submit(name="cpu-hog", gpus_per_node=0, cpus_per_node=15, nodelist="n2")
    full = fake.submit(name="full", gpus_per_node=8, cpus_per_node=12, nodelist="n4")
    ids = {name: fake.submit(name=name, gpus_per_node=gpus, cpus_per_node=cpus, hold=True)
            for name, gpus, cpus in (("two", 2, 2), ("twin", 2, 2), ("wide", 2, 8),
                                     ("normal", 2, 8), ("cpu", 0, 1), ("unknown", 2, 0),
                                     ("tiny", 1, 1))}
    fake.schedule()
    snap = fake.snapshot()
    waiting = [Waiting(ids[n], "t", NORMAL if n == "normal" else HIGH, gpus)
               for n, gpus in (("two", 2), ("twin", 2), ("wide", 2), ("normal", 2), ("cpu", 0),
                               ("unknown", 2), ("tiny", 1))]
    holders = [_holder(fake, hog, LOW), _holder(fake, full, LOW)]
    asked = asks(snap, waiting)
    assert set(asked) == {ids[n] for n in ("two", "twin", "wide", "normal", "tiny")}
    assert ids["two"] not in asks(snap, waiting, frozenset({ids["two"]}))   # whole nodes
    assert closed_for_room(snap, asked, CLUSTER) == frozenset()
    how = Narrowing(holders, CLUSTER, 8, (), asked)
    got = narrow_allowed(snap, waiting, how)
    assert got == {ids["two"]: {"n3", "n4"}, ids["twin"]: {"n3", "n4"},
                   ids["wide"]: {"n3", "n4"}, ids["normal"]: {"n3", "n4"}}
    assert got[ids["two"]] is got[ids["twin"]] is got[ids["wide"]]
    guarded = [_holder(fake, hog, LOW), _holder(fake, full, HIGH)]
    got = narrow_allowed(snap, waiting, Narrowing(guarded, CLUSTER, 8, (), asked))
    assert got[ids["normal"]] == {"n3"} and got[ids["two"]] == {"n3", "n4"}
    lines = left_out_texts(snap, waiting[2], how)
    assert lines == ["n[1-2]: not the CPUs it asks free, beside GPUs enough for it (8 CPUs "
                     "per node)"], lines
    lines = left_out_texts(snap, waiting[3], Narrowing(guarded, CLUSTER, 8, (), asked))
    assert lines[1:] == ["n4: not the CPUs it asks free, and the jobs that could give way to "
                         "it there hold too little to make the room (8 CPUs per node)"], lines


def test_a_node_no_waiting_job_has_room_on_is_closed_and_its_job_may_give_way() -> None:
    """n1's LOW job holds 1 GPU and all 16 CPUs; the only waiting job asks 1 GPU and 1 CPU:
    n1 is closed (its 7 free GPUs fit nobody), and it stays among the job's nodes, where
    taking the LOW job frees its CPUs."""
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8, cpus=16) for i in range(1, 5)], now=0)
    hog = fake.submit(name="hog", gpus_per_node=1, cpus_per_node=16, nodelist="n1")
    one = fake.submit(name="one", gpus_per_node=1, cpus_per_node=1, hold=True)
    fake.schedule()
    snap = fake.snapshot()
    waiting = [Waiting(one, "t", HIGH, 1)]
    asked = asks(snap, waiting)
    closed = closed_for_room(snap, asked, CLUSTER)
    assert closed == {"n1"}
    how = Narrowing([_holder(fake, hog, LOW)], CLUSTER, 8, (), asked, closed)
    assert narrow_allowed(snap, waiting, how) == {}
    assert narrow_allowed(snap, waiting, how._replace(closed=frozenset())) == {
        one: CLUSTER - {"n1"}}


def test_reservations_keep_jobs_whose_run_reaches_them_off_their_nodes() -> None:
    """A maintenance window on n2 from 1,800 s, a started one on n3 (not flagged yet), an
    ended one, one without nodes and a guard (never counted). A job without a time limit, or
    of 60 min, may not use n2 and n3; one of 10 min, or linked to the window, only n3. The
    explanation names them."""
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8) for i in range(1, 5)], now=100)
    ahead = reserved([
        Reservation("maint", ("n2",), ("root",), 1800, 5400, ("MAINT",), "INACTIVE"),
        Reservation("now", ("n3",), ("root",), 50, 600, (), "ACTIVE"),
        Reservation("ended", ("n4",), ("root",), 0, 100, (), "ACTIVE"),
        Reservation("licenses", (), ("root",), 1800, 5400, (), "INACTIVE"),
        Reservation("hai-plan-7-100", ("n1",), ("root",), 1800, 2400, (), "INACTIVE")], 100.0)
    assert ahead == ((1800, "maint", frozenset({"n2"})), (50, "now", frozenset({"n3"})))
    jobs = {limit: fake.submit(name=f"t{limit}", gpus_per_node=1, time_limit=limit, hold=True)
            for limit in (None, INFINITE, 60, 10)}
    linked = fake.submit(name="linked", gpus_per_node=1, hold=True)
    fake.jobs[linked].reservation = "maint"
    snap = fake.snapshot()
    waiting = [Waiting(j, "t", HIGH, 1) for j in (*jobs.values(), linked)]
    how = Narrowing((), CLUSTER, 8, ahead, {})
    got = narrow_allowed(snap, waiting, how)
    assert got == {jobs[None]: {"n1", "n4"}, jobs[INFINITE]: {"n1", "n4"},
                   jobs[60]: {"n1", "n4"}, jobs[10]: {"n1", "n2", "n4"},
                   linked: {"n1", "n2", "n4"}}
    assert got[jobs[None]] is got[jobs[60]] and got[jobs[10]] is got[linked]
    assert left_out_texts(snap, waiting[2], how) == [
        "n2: reservation maint starts in 28m20s, before its time limit (1h) would end",
        "n3: reservation now has started, before its time limit (1h) would end"]


def test_the_fake_keeps_a_job_off_a_reservation_its_run_would_reach() -> None:
    """As measured on 22.05: a reservation 30 min away keeps jobs limited to 60 min or without
    a limit off its node (``ReqNodeNotAvail``); a 10-min job starts there. A job linked to it
    waits for it to start. Until it starts the node is not flagged RESERVED and the
    reservation lists as INACTIVE. Reservations may share a node at other times, not at the
    same time, unless one is flagged MAINT (or OVERLAP), as Slurm allows."""
    fake = FakeSlurm([FakeNode("n1", gpus=8)], now=0)
    fake.admin_reservation("maint", ["n1"], ["root"], start=1800, minutes=60)
    late = [fake.submit(name=f"t{limit}", gpus_per_node=1, time_limit=limit)
            for limit in (60, None, INFINITE)]
    short = fake.submit(name="short", gpus_per_node=1, time_limit=10)
    assert fake.schedule() == (short,)
    assert all(fake.jobs[j].state is JobState.PENDING for j in late)
    assert fake.jobs[late[0]].reason.startswith("ReqNodeNotAvail")
    (node,) = fake.snapshot().nodes
    assert node.state_flags == () and fake.reservations()[0].state == "INACTIVE"
    fake.jobs[late[0]].reservation = "maint"
    assert fake.schedule() == ()
    fake.create_reservation("guard", ["n1"], ["root"], 40)   # over a MAINT one: allowed
    fake.admin_reservation("team", ["n1"], ["root"], start=3000, minutes=10, flags=())
    with pytest.raises(SlurmError, match="overlaps"):
        fake.create_reservation("guard2", ["n1"], ["root"], 60)   # reaches "team"
    fake.advance(1800)
    assert fake.reservations("maint")[0].state == "ACTIVE"
    assert "RESERVED" in fake.snapshot().nodes[0].state_flags


def test_plan_short_names_nodes_a_plans_victims_leave_without_room() -> None:
    """n1: a LOW 4-GPU job of 1 CPU and 15,000 of 16,000 MiB, and one of 14 CPUs (1 CPU
    free). A plan taking the first for a job asking 8 CPUs per node leaves 2: n1 is short;
    taking the second leaves 15: not short, unless the job asks 2,000 MiB too. A request of 0
    never is. explain names the nodes left out so."""
    fake = FakeSlurm([FakeNode(f"n{i}", gpus=8, cpus=16) for i in range(1, 3)], now=0)
    light = fake.submit(name="light", gpus_per_node=4, cpus_per_node=1, nodelist="n1",
                        memory_per_node_mb=15000)
    heavy = fake.submit(name="heavy", gpus_per_node=4, cpus_per_node=14, nodelist="n1")
    bene = fake.submit(name="bene", gpus_per_node=4, cpus_per_node=8, hold=True,
                       memory_per_node_mb=2000)
    fake.schedule()
    snap = fake.snapshot()

    nodes = {n.name: n for n in snap.nodes}

    def plan(*victims: int) -> PreemptionPlan:
        return PreemptionPlan(bene, HIGH, "t", tuple(
            Victim(v, "t", LOW, 4, False, 60.0, 240.0, "") for v in victims),
            (), ("n1",), 4, 240.0, 1000.0, "")

    assert plan_short(snap, plan(light), (8, 0), nodes) == {"n1"}
    assert plan_short(snap, plan(heavy), (8, 0), nodes) == frozenset()
    assert plan_short(snap, plan(light), (0, 0), nodes) == frozenset()
    assert plan_short(snap, plan(light, heavy), (16, 0), nodes) == frozenset()
    assert plan_short(snap, plan(heavy), (8, 2000), nodes) == {"n1"}   # light keeps the memory
    waiting = [Waiting(bene, "t", HIGH, 4)]
    how = Narrowing([_holder(fake, light, LOW), _holder(fake, heavy, LOW)],
                    frozenset({"n1", "n2"}), 8, (), asks(snap, waiting),
                    after_victims={bene: frozenset({"n1"})})
    assert narrow_allowed(snap, waiting, how) == {bene: {"n2"}}
    assert left_out_texts(snap, waiting[0], how) == [
        "n1: the victims that free its GPUs there would not free the room it asks (8 CPUs, "
        "2000 MiB per node)"]
