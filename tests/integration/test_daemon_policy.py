"""The daemon's decisions on the real testbed: Slurm starts jobs in the order the daemon wrote.

Each test runs daemon cycles in this process (``Daemon.run_once`` with the CLI backend) against
the session testbed, with a configuration whose bounds and decay time are seconds, not hours.
A "blocker" job holds the whole cluster while the daemon decides; once it is cancelled and no
more cycles run, Slurm's own scheduler picks the jobs, so the start order is Slurm's reading of
the priorities the daemon wrote.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from conftest import Submitter, Testbed
from daemon_support import (
    HAI_SLURM,
    ONE_NODE,
    WHOLE,
    band,
    in_process,
    job,
    priority,
    write_config,
)

from hai_slurm.priority.daemon.loop import Outcome
from hai_slurm.priority.daemon.metrics import sample
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.testbed.waiting import check


def start_times(bed: Testbed, jobs: list[str]) -> dict[str, str]:
    """Job id -> StartTime (ISO seconds) as scontrol reports it."""
    out = {}
    for j in jobs:
        fields = check(bed.run, ["scontrol", "show", "job", "-o", j])
        out[j] = next(w.split("=", 1)[1] for w in fields.split() if w.startswith("StartTime="))
    return out


def test_start_order_follows_class_then_each_class_rule(testbed: Testbed, submit: Submitter,
                                                        tmp_path: Path) -> None:
    """HIGH (FCFS) > NORMAL (fair share: the idle team first) > LOW (round robin between teams)."""
    _, cfg = write_config(tmp_path)
    blocker = job(submit, "NORMAL", "team-b")  # team-b runs 32 GPUs: twice its quota
    submit.wait(blocker, "RUNNING")
    order = []
    for cls, team in (("LOW", "team-a"), ("LOW", "team-a"), ("LOW", "team-b"),
                      ("NORMAL", "team-b"), ("NORMAL", "team-a"), ("HIGH", "team-b"),
                      ("HIGH", "team-a")):
        order.append(job(submit, cls, team, WHOLE, body="sleep 2"))
        time.sleep(1.05)  # distinct submit seconds: FCFS keys are whole seconds
    la1, la2, lb1, nb, na, h1, h2 = order
    d = in_process(cfg)
    report = d.run_once()
    assert report.outcome is Outcome.OK and report.writes == 7
    expected = [h1, h2, na, nb, la1, lb1, la2]
    written = sorted(expected, key=lambda j: -priority(testbed, j))
    assert written[:4] == expected[:4]
    assert [band(testbed, j) for j in (h1, na, la1)] == ["HIGH", "NORMAL", "LOW"]
    assert d.run_once().writes == 0  # nothing changed: nothing written

    check(testbed.run, ["scancel", blocker])
    for j in expected:
        submit.wait(j, "COMPLETED", timeout=90)
    started = start_times(testbed, expected)
    assert sorted(expected, key=lambda j: (started[j], int(j))) == expected, started


def test_above_normal_decays_to_normal_after_the_decay_time(testbed: Testbed, submit: Submitter,
                                                            tmp_path: Path) -> None:
    """After 4 s of running, ABOVE_NORMAL counts as NORMAL: requeued, it waits in NORMAL."""
    _, cfg = write_config(tmp_path, '[decay]\nafter = "4s"\n')
    blocker = job(submit, "NORMAL", "team-b", ("-N3", "--gres=gpu:8"))
    decaying = job(submit, "ABOVE_NORMAL", "team-a", ONE_NODE)
    submit.wait(blocker, "RUNNING")
    submit.wait(decaying, "RUNNING")
    d = in_process(cfg)
    first = d.run_once()
    assert first.decision is not None
    assert first.decision.result.running[int(decaying)].effective.value == "ABOVE_NORMAL"
    time.sleep(4.5)
    later = d.run_once()
    assert later.decision is not None
    decided = later.decision.result.running[int(decaying)]
    assert decided.decayed and decided.effective.value == "NORMAL"
    tracked = d.repository.get_job(int(decaying))
    assert tracked is not None and tracked.class_origin == "decay"
    assert sample(d.metrics, "hai_priority_decays_total") == 1

    fresh = job(submit, "ABOVE_NORMAL", "team-a", WHOLE)
    check(testbed.run, ["scontrol", "requeue", decaying])
    submit.wait(decaying, "PENDING", timeout=30)
    assert d.run_once().outcome is Outcome.OK
    assert band(testbed, decaying) == "NORMAL"
    assert band(testbed, fresh) == "ABOVE_NORMAL"
    assert priority(testbed, fresh) > priority(testbed, decaying)


def test_low_job_past_its_bound_is_promoted_and_starts(testbed: Testbed, submit: Submitter,
                                                       tmp_path: Path) -> None:
    """LOW with a 5 s bound: promoted to BELOW_NORMAL, it starts before a later BELOW_NORMAL."""
    _, cfg = write_config(tmp_path, '[classes.LOW]\nmax_wait = "5s"\n')
    blocker = job(submit, "NORMAL", "team-b")
    submit.wait(blocker, "RUNNING")
    low = job(submit, "LOW", "team-a", body="sleep 3")
    time.sleep(1.1)
    below = job(submit, "BELOW_NORMAL", "team-b", body="sleep 3")
    d = in_process(cfg)
    d.run_once()
    assert band(testbed, low) == "LOW" and priority(testbed, below) > priority(testbed, low)
    time.sleep(5.5)
    d.run_once()
    assert band(testbed, low) == "BELOW_NORMAL"
    assert priority(testbed, low) >= priority(testbed, below)
    assert sample(d.metrics, "hai_priority_promotions_total") == 1
    tracked = d.repository.get_job(int(low))
    assert tracked is not None and tracked.class_origin == "aging"

    check(testbed.run, ["scancel", blocker])
    submit.wait(low, "RUNNING", timeout=30)
    assert submit.info(below)["JobState"] == "PENDING"


def test_protected_team_and_demoted_team(testbed: Testbed, submit: Submitter,
                                         tmp_path: Path) -> None:
    """A team preempted too often is protected; a team that preempted too often is demoted."""
    path, cfg = write_config(tmp_path, "[fairness]\nprotect_after = 1\ndemote_after = 1\n")
    d = in_process(cfg)
    now = time.time()
    d.repository.add_events(
        [FairnessEvent(EventKind.PREEMPTED, "team-a", "root", now - 60 - i) for i in range(2)]
        + [FairnessEvent(EventKind.PREEMPTING, "team-b", "root", now - 60 - i)
           for i in range(2)])
    victim = job(submit, "NORMAL", "team-a", ("-N1", "--gres=gpu:1"))
    submit.wait(victim, "RUNNING")
    high_b = job(submit, "HIGH", "team-b")
    high_a = job(submit, "HIGH", "team-a")
    report = d.run_once()
    assert report.decision is not None
    res = report.decision.result
    assert res.running[int(victim)].protected  # what the preemption planner reads
    assert "team-a" in res.protected_teams and "team-b" not in res.protected_teams
    assert set(d.repository.active_protections(time.time())) == {"team-a"}
    assert band(testbed, high_a) == "HIGH"
    assert band(testbed, high_b) == "ABOVE_NORMAL"  # one class lower
    tracked = d.repository.get_job(int(high_b))
    assert tracked is not None and tracked.class_origin == "demotion"

    def explain(job_id: str) -> str:
        res = subprocess.run([HAI_SLURM, "priority", "explain", job_id, "--config", str(path)],
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 0, res.stderr
        return res.stdout

    assert "It is protected" in explain(victim)
    text = explain(high_b)
    assert "Fairness demotion" in text and "class ABOVE_NORMAL" in text


def test_daemon_once_runs_one_cycle_and_gives_the_lease_back(
        testbed: Testbed, submit: Submitter, tmp_path: Path) -> None:
    """``hai-slurm daemon --once``: one cycle, priorities written, lease released, exit 0."""
    path, cfg = write_config(tmp_path)
    blocker = job(submit, "NORMAL", "team-b")
    submit.wait(blocker, "RUNNING")
    waiting = job(submit, "VERY_HIGH", "team-a")
    res = subprocess.run([HAI_SLURM, "daemon", "--config", str(path), "--once"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "1 priorities written" in res.stderr and "leader lease released" in res.stderr
    assert band(testbed, waiting) == "VERY_HIGH"
    d = in_process(cfg, owner="next")
    assert d.lock.holder(time.time()) is None
    assert d.run_once().outcome is Outcome.OK  # no lease to wait for
