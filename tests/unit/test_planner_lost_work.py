"""Lost work as it really is: a victim that saves on request loses its save time plus its
restart; one that cannot acknowledge loses everything since its last save (hand-made schedules,
then the daemon's path from a job's ``#HAI`` record)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from executor_world import Behaviour, World, make_world, plan_for_high_job

from hai_slurm.checkpoint import Phase
from hai_slurm.checkpoint.protocol import make_phase, write_phase
from hai_slurm.classes import PriorityClass
from hai_slurm.priority.daemon.save_times import SaveTimes
from hai_slurm.priority.planner.inputs import save_estimates
from hai_slurm.priority.planner.search import lost_seconds, plan_preemptions
from hai_slurm.priority.planner.testing import (
    NOW,
    gpu_cluster,
    gpus,
    holder,
    snapshot,
    waiting,
)
from hai_slurm.priority.planner.types import Outcome, PlannerConfig

NORMAL, HIGH = PriorityClass.NORMAL, PriorityClass.HIGH
ALL8 = tuple(range(8))
CFG = PlannerConfig(restart_cost=120.0, save_cost=60.0)


def test_a_job_that_saves_on_request_loses_save_plus_restart() -> None:
    """Its last checkpoint does not matter; its own estimate wins over the configured one."""
    old = holder(1, NORMAL, gpus("n1", 0), checkpoint=NOW - 7200, can_ack=True)
    assert lost_seconds(old, CFG, NOW) == 60 + 120
    never = replace(old, last_checkpoint=None)
    assert lost_seconds(never, CFG, NOW) == 60 + 120
    own = replace(old, save_cost=15.0, restart_cost=5.0)
    assert lost_seconds(own, CFG, NOW) == 20
    assert lost_seconds(old, replace(CFG, save_cost=300.0), NOW) == 300 + 120


def test_a_job_that_cannot_acknowledge_loses_all_since_its_last_save() -> None:
    """Without can_ack: the time since its last checkpoint (else its start) plus restart."""
    saved = holder(1, NORMAL, gpus("n1", 0), checkpoint=NOW - 1800)
    assert lost_seconds(saved, CFG, NOW) == 1800 + 120
    never = replace(saved, last_checkpoint=None, start_time=NOW - 5000)
    assert lost_seconds(never, CFG, NOW) == 5000 + 120


def test_the_checkpointing_victim_is_chosen_over_one_that_saved_long_ago() -> None:
    """Two full nodes: n1's job saves on request but last saved 2 h ago, n2's cannot and saved
    30 min ago. Counting time since the last save would pick n2; the real loss picks n1."""
    topo = gpu_cluster(1, 2)
    acker = holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 7200, can_ack=True)
    killed = holder(2, NORMAL, gpus("n2", *ALL8), checkpoint=NOW - 1800)
    result = plan_preemptions(snapshot(topo, [acker, killed], [waiting(10, HIGH, 8)]),
                              config=CFG, now=NOW)
    (plan,) = result.plans
    assert plan.victim_ids == (1,) and plan.nodes == ("n1",)
    assert plan.victims[0].lost_seconds == 180 and plan.lost_work == 180 * 8
    assert "saves on request" in plan.victims[0].reason
    as_before = replace(acker, can_ack=False)
    (old,) = plan_preemptions(snapshot(topo, [as_before, killed], [waiting(10, HIGH, 8)]),
                              config=CFG, now=NOW).plans
    assert old.victim_ids == (2,)


def test_a_recent_periodic_save_can_beat_a_slow_save_on_request() -> None:
    """A job that cannot acknowledge but saved 10 s ago loses less than one whose save on
    request takes 10 min: the planner takes the one that really loses less."""
    topo = gpu_cluster(1, 2)
    slow = holder(1, NORMAL, gpus("n1", *ALL8), can_ack=True, save_cost=600.0)
    fresh = holder(2, NORMAL, gpus("n2", *ALL8), checkpoint=NOW - 10)
    (plan,) = plan_preemptions(snapshot(topo, [slow, fresh], [waiting(10, HIGH, 8)]),
                               config=CFG, now=NOW).plans
    assert plan.victim_ids == (2,) and plan.victims[0].lost_seconds == 130


def test_saving_on_request_makes_a_preemption_worth_it() -> None:
    """The benefit (30 x 60 s x 8 GPUs = 14,400) is below a 2 h loss but above save + restart
    (180 s x 8 GPUs = 1,440): NOT_WORTH without acknowledgement, PREEMPT with it."""
    topo = gpu_cluster(1, 1)
    job = waiting(10, HIGH, 8, wait=60.0)
    lost = holder(1, NORMAL, gpus("n1", *ALL8), checkpoint=NOW - 7200)
    no = plan_preemptions(snapshot(topo, [lost], [job]), config=CFG, now=NOW)
    assert no.decisions[10].outcome is Outcome.NOT_WORTH and not no.plans
    yes = plan_preemptions(snapshot(topo, [replace(lost, can_ack=True)], [job]), config=CFG,
                           now=NOW)
    assert yes.decisions[10].outcome is Outcome.PREEMPT and yes.plans[0].lost_work == 1440


def test_save_estimates_read_checkpoint_dir_and_grace() -> None:
    """A checkpoint directory means the job saves on request, its grace the estimate; without
    a grace the planner's default applies; without a directory it cannot acknowledge."""
    got = save_estimates({1: ("/ck/a", 45), 2: ("/ck/b", None), 3: (None, 30), 4: ("", 10)})
    assert got == {1: 45.0, 2: None}


def test_save_estimates_take_the_measured_save_up_to_the_grace() -> None:
    """A save time the job measured replaces its grace when shorter, and is capped by it when
    longer (a job cannot make itself look dearer than it declared); without a grace it stands
    alone; a job without a checkpoint directory stays out whatever it measured."""
    records = {1: ("/ck/a", 300), 2: ("/ck/b", 30), 3: ("/ck/c", None), 4: ("/ck/d", 45),
               5: (None, 30)}
    got = save_estimates(records, {1: 20.0, 2: 90.0, 3: 12.5, 5: 1.0})
    assert got == {1: 20.0, 2: 30.0, 3: 12.5, 4: 45.0}


def test_daemon_reads_the_record_and_picks_the_checkpointing_victim(tmp_path: Path) -> None:
    """Four LOW jobs of equal age fill 4 x 8 GPUs, only v3 has a checkpoint directory (grace
    30 s); the daemon's planner takes v3 for the HIGH 8-GPU job, losing 30 s + restart."""
    world = make_world(tmp_path)
    victims = [world.victim(f"v{i}", Behaviour(ack_after=0.5), checkpoint=i == 3)
               for i in range(4)]
    (plan,) = plan_for_high_job(world, tmp_path)[0].plans
    assert plan.victim_ids == (victims[3],)
    assert plan.victims[0].lost_seconds == 30 + PlannerConfig().restart_cost


def _one_saver(tmp_path: Path, name: str) -> tuple[Path, World, list[int]]:
    """A world in ``tmp_path / name``: four LOW 8-GPU victims, of which only v3 saves on
    request (has a checkpoint directory)."""
    tmp = tmp_path / name
    tmp.mkdir()
    world = make_world(tmp)
    return tmp, world, [world.victim(f"v{i}", Behaviour(ack_after=0.5), checkpoint=i == 3)
                        for i in range(4)]


def test_daemon_charges_a_victim_the_save_time_it_measured(tmp_path: Path) -> None:
    """The same cluster, but v3's phase.json says its last save took 7.5 s: the daemon's planner
    (with the daemon's SaveTimes) charges 7.5 s + restart, not the 30-s grace. A phase.json in a
    directory others may write is not trusted: the grace stands."""
    for trusted in (True, False):
        tmp, world, victims = _one_saver(tmp_path, str(trusted))
        ctl = world.control(victims[3])
        write_phase(ctl, make_phase(str(victims[3]), 0, Phase.COMPUTING, 40, save_seconds=7.5))
        if not trusted:
            ctl.chmod(0o777)
        times = SaveTimes()
        (plan,) = plan_for_high_job(world, tmp, save_times=times)[0].plans
        assert plan.victim_ids == (victims[3],)
        save = 7.5 if trusted else 30
        assert plan.victims[0].lost_seconds == save + PlannerConfig().restart_cost
        assert times.reads == 1


def test_a_victim_whose_control_directory_the_daemon_may_not_open_counts_as_unable_to_save(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Only v3 saves on request, so it is the cheapest victim; but when the daemon may not
    open its control directory (EACCES: a 0700 home above it, the daemon not root), no
    acknowledgement of v3's would ever be seen: it is weighed as a job that cannot save (its
    hour since the last checkpoint), another victim is taken, and the log says what to fix."""
    from hai_slurm.checkpoint import read_job_report
    from hai_slurm.checkpoint.protocol import JobReport

    for denied in (False, True):
        tmp, world, victims = _one_saver(tmp_path, str(denied))

        def reader(control_dir: Any, job_id: str, uid: int, denied: bool = denied,
                   **kw: Any) -> JobReport:
            if denied:
                return JobReport(job_id, None, None, ("Permission denied",), denied=True)
            return read_job_report(control_dir, job_id, uid, **kw)

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hai_slurm.priority.daemon.planning"):
            (plan,) = plan_for_high_job(world, tmp, save_times=SaveTimes(reader))[0].plans
        if denied:
            assert plan.victim_ids != (victims[3],)
            assert any(f"job {victims[3]}: the daemon may not open its control directory" in m
                       and "setfacl" in m for m in caplog.messages), caplog.messages
        else:
            assert plan.victim_ids == (victims[3],)


def test_daemon_charges_a_measured_restart_but_never_above_the_configured_one(
        tmp_path: Path) -> None:
    """v3 measured a 4-s restart: charged 4 s, not the configured 120 s. A job claiming a 900-s
    restart (to look dear and be passed over) is charged the configured 120 s."""
    for claimed, charged in ((4.0, 4.0), (900.0, PlannerConfig().restart_cost)):
        tmp, world, victims = _one_saver(tmp_path, str(claimed))
        write_phase(world.control(victims[3]), make_phase(
            str(victims[3]), 0, Phase.COMPUTING, 40, save_seconds=7.5, restart_seconds=claimed))
        (plan,) = plan_for_high_job(world, tmp, save_times=SaveTimes())[0].plans
        assert plan.victim_ids == (victims[3],)
        assert plan.victims[0].lost_seconds == 7.5 + charged


def test_daemon_frees_gpus_only_in_the_partition_of_the_job(tmp_path: Path) -> None:
    """Four equal LOW victims fill n1-n4 (partition main); the HIGH job is submitted to
    partition ``part-b`` (n3, n4): the plan takes the victim on n3, not the first node's (n1) that
    it takes when submitted to ``main``, and its verdict names the nodes it may use."""
    for partition, node in (("main", "n1"), ("part-b", "n3")):
        tmp = tmp_path / partition
        tmp.mkdir()
        # "main" sorts first, so the fake makes it the default partition (the victims')
        world = make_world(tmp, partitions={"part-b": ("n3", "n4")})
        victims = [world.victim(f"v{i}", Behaviour(ack_after=0.5)) for i in range(4)]
        on = {j.nodes[0]: j.job_id for j in world.fake.snapshot().running}
        assert sorted(on.values()) == sorted(victims)
        result, bene = plan_for_high_job(world, tmp, partition)
        (plan,) = result.plans
        assert plan.nodes == (node,) and plan.victim_ids == (on[node],)
        said = result.decisions[bene].reason
        assert ("of the 2 nodes it may use" in said) is (partition == "part-b"), said
