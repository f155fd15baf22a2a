"""``priority explain`` gives the planner's verdict as the next cycle would reach it: every kind
for pending jobs, and for running jobs whether they may be a victim now (FakeSlurm + SQLite)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from daemon_helpers import Rig, rig
from executor_world import Behaviour, make_world

from hai_slurm.checkpoint import Phase
from hai_slurm.checkpoint.protocol import (
    control_dir_of,
    make_phase,
    prepare_control_dir,
    write_phase,
)
from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.errors import SlurmError
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.config.preempt import PreemptConfig
from hai_slurm.priority.daemon.live import explain_live, open_repository
from hai_slurm.priority.daemon.loop import Daemon
from hai_slurm.priority.daemon.planning import SnapshotPlanner
from hai_slurm.priority.planner.testing import gpu_cluster
from hai_slurm.priority.planner.types import PlannerConfig
from hai_slurm.priority.store.engine import upgrade
from hai_slurm.priority.store.lock import LeaderLock
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.types import Reservation

HIGH, LOW = PriorityClass.HIGH, PriorityClass.LOW


def _explain(r: Rig, job: int) -> str:
    return explain_live(job, r.slurm, open_repository(r.cfg), r.cfg, now=r.clock.now)


def _full_of_low(r: Rig) -> list[int]:
    jobs = [r.submit(LOW, "team-a", gpus=8) for _ in range(4)]
    r.slurm.schedule()
    return jobs


def test_each_verdict_kind_reads_in_plain_words(tmp_path: Path) -> None:
    """FITS, IMPOSSIBLE, NO_VICTIMS (with the exclusion counts), NOT_WORTH (a class weighing 0,
    and both sides of the benefit test) and PREEMPT (with its victims), one job each."""
    r = rig(tmp_path)
    r.daemon().run_once()
    fits = r.submit(HIGH, gpus=1)
    assert "Planner: FITS: 1 GPUs on one node fit on free GPUs" in _explain(r, fits)
    r.slurm.cancel(fits)
    huge = r.submit(HIGH, gpus=8, nodes=5)
    assert "Planner: IMPOSSIBLE: needs 5 x 8 GPUs" in _explain(r, huge)
    r.slurm.cancel(huge)

    _full_of_low(r)
    young = r.submit(PriorityClass.ABOVE_NORMAL, gpus=8)
    r.tick(60)
    text = _explain(r, young)
    assert ("Planner: NOT_WORTH: needs 8 GPUs on one node, none free; ABOVE_NORMAL weighs 0 "
            "([planner.class_weights]): it preempts only once it has waited past its class "
            "bound") in text
    # weighted, it is searched for: the LOW jobs are too young for it
    weighted = replace(r.cfg, preempt=PreemptConfig(planner=PlannerConfig(
        class_weights={**PlannerConfig().class_weights, PriorityClass.ABOVE_NORMAL: 5.0})))
    text = explain_live(young, r.slurm, open_repository(weighted), weighted, now=r.clock.now)
    assert "Planner: NO_VICTIMS: needs 8 GPUs on one node, none free" in text
    assert "running jobs left out: 4 too young" in text
    urgent = r.submit(HIGH, gpus=8)   # urgent work cuts the minimum run time short
    r.tick(30)
    text = _explain(r, urgent)
    assert "Planner: PREEMPT: job" in text and "ran 1m30s" in text, text
    r.slurm.cancel(urgent)

    r.tick(3600)  # the LOW jobs are old enough now; the ABOVE_NORMAL job is past its bound
    r.daemon().run_once()
    # but they cannot save on request (no checkpoint directory): both sides of the benefit
    # test, and why a job past its bound does not take them anyway
    text = _explain(r, young)
    assert "Planner: NOT_WORTH:" in text and "would lose" in text, text
    assert "benefit 0 = class weight 0 x wait" in text and "is not more than 1 x that" in text
    assert ("past its bound it takes only victims that save on request (bound_no_save_wait "
            "off), and one here cannot") in text
    taking = replace(r.cfg, preempt=PreemptConfig(planner=PlannerConfig(
        bound_no_save_wait=0.0)))
    text = explain_live(young, r.slurm, open_repository(taking), taking, now=r.clock.now)
    assert "Planner: PREEMPT: job" in text and "preempts 1 job(s)" in text
    assert "  victim job" in text and "loses" in text
    assert "urgent work that waited 1h01m >= bound_no_save_wait 0s" in text, text


def test_a_running_job_says_whether_it_may_be_a_victim(tmp_path: Path) -> None:
    """Too young, may give way, and the top class that nothing outranks."""
    r = rig(tmp_path)
    low = _full_of_low(r)[0]
    r.tick(30)
    r.daemon().run_once()
    text = _explain(r, low)
    assert "Planner: not a victim now: too young (ran 30s < 2m00s)" in text
    assert "urgent work" not in text   # younger than urgent_min_run_time (1 min) too
    r.tick(60)
    assert ("Planner: not a victim now: too young (ran 1m30s < 2m00s); urgent work (HIGH and "
            "above, or a job past its bound) may take it now: it ran over urgent_min_run_time "
            "1m00s") in _explain(r, low)
    r.tick(3600)
    assert "Planner: may give way now to a job of a class higher than LOW" in _explain(r, low)
    other = rig(tmp_path / "other")
    top = other.submit(PriorityClass.EXTREME_HIGH, gpus=8)
    other.slurm.schedule()
    other.tick(3600)
    other.daemon().run_once()
    assert "Planner: not a victim now: no class is higher than EXTREME_HIGH" in _explain(other,
                                                                                         top)


def test_a_running_job_is_charged_the_save_and_restart_it_measured(tmp_path: Path) -> None:
    """A LOW job that saves on request (checkpoint directory, 300-s grace) would lose its grace
    plus the configured 2-min restart; once its phase.json says its saves take 12 s and its
    restart 5 s, explain charges those, as the daemon's planner does."""
    r = rig(tmp_path)
    ck = tmp_path / "ck"
    info = HaiJobInfo(priority="LOW", job_class="LOW", team="team-a", preemptible=True,
                      grace=300, source=ClassOrigin.DIRECTIVE, checkpoint_dir=str(ck))
    low = r.slurm.submit(admin_comment=format_admin_comment(info), account="team-a",
                         gpus_per_node=8, uid=os.getuid())
    r.slurm.schedule()
    r.tick(3600)
    r.daemon().run_once()
    assert "would lose 7m00s x 8 GPUs" in _explain(r, low)
    ctl = control_dir_of(ck, low)
    prepare_control_dir(ctl)
    write_phase(ctl, make_phase(str(low), 0, Phase.COMPUTING, 9, save_seconds=12.0,
                                restart_seconds=5.0))
    assert "would lose 17s x 8 GPUs" in _explain(r, low)


def test_preemption_off_says_so(tmp_path: Path) -> None:
    """With [planner] enabled = false the verdict says preemption is off."""
    r = rig(tmp_path)
    r.daemon().run_once()
    job = r.submit(HIGH, gpus=1)
    off = replace(r.cfg, preempt=PreemptConfig(enabled=False))
    assert "Planner: preemption is off" in explain_live(job, r.slurm, open_repository(off), off,
                                                        now=r.clock.now)


def test_free_gpus_of_a_drained_node_fit_nobody(tmp_path: Path) -> None:
    """Slurm starts nothing on a drained node, so its free GPUs are left out of the planner's
    view: a job that would fit only there gets a preemption on another node, not FITS. (Before:
    "FITS ... on free GPUs of n4" while n4 was drained, and no preemption ever came: the fault
    tier's cases after one that left a node drained.)"""
    r = rig(tmp_path)
    r.daemon().run_once()
    r.slurm.nodes["n4"] = replace(r.slurm.nodes["n4"], state="DRAIN")
    lows = [r.submit(LOW, "team-a", gpus=8) for _ in range(3)]
    r.slurm.schedule()
    r.tick(3600)
    urgent = r.submit(HIGH, gpus=8)
    r.tick(60)
    text = _explain(r, urgent)
    assert "FITS" not in text and "n4" not in text
    r.tick(3600)
    r.daemon().run_once()
    text = _explain(r, urgent)
    assert "Planner: PREEMPT: job" in text, text
    assert any(f"victim job {j}" in text for j in lows), text


def test_no_victim_is_taken_on_a_draining_node(tmp_path: Path) -> None:
    """GPUs freed on a node Slurm is draining go to nobody: a job running there is never the
    victim, whichever order the planner would otherwise take them in."""
    for drained in ("n1", "n4"):
        r = rig(tmp_path / drained)
        r.daemon().run_once()
        lows = _full_of_low(r)
        r.slurm.nodes[drained] = replace(r.slurm.nodes[drained], state="DRAIN")
        there = next(j for j in lows if r.slurm.jobs[j].nodes == (drained,))
        r.tick(3600)
        urgent = r.submit(HIGH, gpus=8)
        r.tick(3600)
        r.daemon().run_once()
        text = _explain(r, urgent)
        assert "Planner: PREEMPT: job" in text, text
        assert f"victim job {there}" not in text, text


def test_a_node_not_registered_since_slurmctld_started_is_left_out(tmp_path: Path) -> None:
    """Right after a slurmctld restart, a node whose slurmd has not registered yet shows the
    state of slurmctld's last save (``BootTime=None``): the planner does not count on its free
    GPUs until it has registered."""
    r = rig(tmp_path)
    r.daemon().run_once()
    for _ in range(3):
        r.submit(LOW, "team-a", gpus=8)
    r.slurm.schedule()   # n1-n3 busy, n4 free
    r.slurm.nodes["n4"] = replace(r.slurm.nodes["n4"], registered=False)
    urgent = r.submit(HIGH, gpus=8)
    text = _explain(r, urgent)
    assert "FITS" not in text and "n4" not in text, text
    r.slurm.nodes["n4"] = replace(r.slurm.nodes["n4"], registered=True)
    assert "fit on free GPUs" in _explain(r, urgent)


def test_explain_names_the_nodes_left_out_for_room_or_a_reservation_ahead(
        tmp_path: Path) -> None:
    """n1 runs a 1-GPU job holding 12 of its 16 CPUs, n2 and n3 an 8-GPU job each, and an
    admin's maintenance starts on n4 in 30 min: a HIGH job asking 2 GPUs and 8 CPUs without
    a time limit is told which nodes its plans leave out, and why (n4; n1 is closed to every
    job, as no waiting job has room there, and its job may give way); a job asking 2 CPUs and
    limited to 20 min is told of none."""
    r = rig(tmp_path)
    r.daemon().run_once()
    r.submit(LOW, "team-a", gpus=1, cpus_per_node=12, nodelist="n1")
    for node in ("n2", "n3"):
        r.submit(LOW, "team-a", gpus=8, nodelist=node)
    r.slurm.schedule()
    r.slurm.admin_reservation("maint", ["n4"], ["root"], start=r.slurm.now + 1800, minutes=60)
    wide = r.submit(HIGH, gpus=2, cpus_per_node=8)
    text = _explain(r, wide)
    assert ("  left out of its plans: n4: reservation maint starts in 30m, before its time "
            "limit (none) would end") in text, text
    assert text.count("left out of its plans") == 1, text
    assert "Planner: NO_VICTIMS" in text and "of the 3 nodes it may use" in text, text
    r.slurm.cancel(wide)
    short = r.submit(HIGH, gpus=2, cpus_per_node=2, time_limit=20)
    text = _explain(r, short)
    assert "left out" not in text and "Planner: FITS" in text, text


def test_no_job_is_planned_while_slurms_reservations_cannot_be_read(tmp_path: Path) -> None:
    """A job might otherwise be planned onto nodes a reservation keeps it off: explain says
    why the pass planned nothing."""
    r = rig(tmp_path)
    r.daemon().run_once()
    job = r.submit(HIGH, gpus=1)

    def broken(prefix: str = "") -> tuple[Reservation, ...]:
        raise SlurmError("scontrol show reservation failed: Unable to contact slurm controller")

    r.slurm.reservations = broken  # type: ignore[method-assign]
    text = _explain(r, job)
    assert ("Planner: not planned: reading Slurm's reservations failed (scontrol show "
            "reservation failed: Unable to contact slurm controller)") in text, text


def test_explain_during_an_open_plan_reads_the_plans_claims(tmp_path: Path) -> None:
    """While a plan is open (its victims saving), explain says what the daemon does: the
    beneficiary is left to the plan (no priority write, not "impossible"), a victim gives way
    to it; a second HIGH job's verdict leaves the first plan's nodes and victims out. Before,
    explain read no plan: the beneficiary was IMPOSSIBLE "of the 0 nodes it may use" and the
    next cycle "wrote" a priority the daemon leaves alone."""
    world = make_world(tmp_path)
    for i in range(4):
        world.victim(f"v{i}", Behaviour(ack_after=100))
    world.fake.advance(world.fake.now + 3600)
    world.clock.now = float(world.fake.now)
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-b", preemptible=True,
                      grace=30, source=ClassOrigin.DIRECTIVE)

    def high(name: str) -> int:
        return world.fake.submit(name=name, uid=1000, account="team-b", qos="high", nodes=2,
                                 gpus_per_node=8, admin_comment=format_admin_comment(info),
                                 now=world.fake.now - 600)

    bene = high("bene")
    planner_config = PlannerConfig(min_run_time=60.0)
    cfg = replace(DaemonConfig(), database_url=f"sqlite:///{tmp_path / 'state.db'}",
                  state_dir=str(tmp_path), preempt=PreemptConfig(planner=planner_config))
    lock = LeaderLock(upgrade(f"sqlite:///{tmp_path / 'state.db'}"))
    daemon = Daemon(world.fake, world.repo, lock, config=cfg, clock=world.clock,
                    planner=SnapshotPlanner(gpu_cluster(2, 2), planner_config),
                    executor=world.executor(), interval=1.0)
    assert daemon.run_once().outcome.value == "ok"
    (plan,) = world.repo.history()
    victims = sorted(v.job_id for v in plan.victims)
    text = explain_live(bene, world.fake, world.repo, cfg, now=world.clock.now)
    assert "the daemon leaves it to the open plan that frees GPUs for it" in text
    assert "an open plan is freeing GPUs for it" in text
    assert "IMPOSSIBLE" not in text and "next cycle writes" not in text
    text = explain_live(victims[0], world.fake, world.repo, cfg, now=world.clock.now)
    assert "gives way to an open plan" in text
    second = high("second")
    text = explain_live(second, world.fake, world.repo, cfg, now=world.clock.now)
    assert "Planner: PREEMPT" in text
    assert not any(f"job {v}," in text or f"jobs {v}," in text for v in victims), text


def test_explain_makes_the_room_re_pass_the_daemon_makes(tmp_path: Path) -> None:
    """n1: LOW "light" (4 GPUs, 1 CPU) and "heavy" (4 GPUs, 14 CPUs); n2-n4 full. A HIGH job
    of 4 GPUs and 8 CPUs: explain shows the plan the daemon would carry out, taking "heavy"
    (the pass without the room check took "light", which frees too few CPUs)."""
    r = rig(tmp_path)
    r.daemon().run_once()
    light = r.submit(LOW, "team-a", gpus=4, cpus_per_node=1, nodelist="n1")
    heavy = r.submit(LOW, "team-a", gpus=4, cpus_per_node=14, nodelist="n1")
    for node in ("n2", "n3", "n4"):
        r.submit(LOW, "team-a", gpus=8, nodelist=node)
    r.slurm.schedule()
    r.tick(3600)
    r.daemon().run_once()
    high = r.submit(HIGH, gpus=4, cpus_per_node=8)
    r.tick(30)
    text = _explain(r, high)
    assert "Planner: PREEMPT: job" in text and f"borrowed): job {heavy} on n1" in text, text
    assert f"job {light} on" not in text, text
