"""Bought priority, tried on the real testbed: ``scontrol requeue`` of one's own job earns no
compensation (no age restored, no boost); only the requeues the daemon's plans cause do.

Daemon cycles run in this process (``Daemon.run_once`` with the CLI backend), as in
test_daemon_policy.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from conftest import Submitter, Testbed
from daemon_support import ONE_NODE, WHOLE, band, in_process, job, priority, write_config

from hai_slurm.priority.daemon.loop import Outcome
from hai_slurm.testbed.waiting import check


def test_requeueing_ones_own_job_does_not_jump_the_queue(testbed: Testbed, submit: Submitter,
                                                         tmp_path: Path) -> None:
    """Job A runs, job B (same class, submitted later) waits; the owner requeues A. Before the
    fix A got its original submit time back plus 10 min of age and went ahead of B; now it
    waits behind B, and the daemon records no preemption for it."""
    _, cfg = write_config(tmp_path)
    blocker = job(submit, "NORMAL", "team-b", ("-N3", "--gres=gpu:8"))
    a = job(submit, "HIGH", "team-a", ONE_NODE)
    submit.wait(blocker, "RUNNING")
    submit.wait(a, "RUNNING")
    d = in_process(cfg)
    assert d.run_once().outcome is Outcome.OK  # the daemon now tracks A as running
    time.sleep(1.1)
    b = job(submit, "HIGH", "team-a", WHOLE)  # later, and cannot start while blocker runs
    assert d.run_once().outcome is Outcome.OK
    time.sleep(1.1)  # Slurm's new submit time of A: a later whole second than B's

    check(testbed.run, ["scontrol", "requeue", a])
    submit.wait(a, "PENDING", timeout=30)
    report = d.run_once()
    assert report.outcome is Outcome.OK and report.decision is not None
    assert band(testbed, a) == band(testbed, b) == "HIGH"
    assert priority(testbed, b) > priority(testbed, a)
    reason = report.decision.result.pending[int(a)].reason
    assert (reason.boost, reason.age_restored) == (0, 0.0)
    tracked = d.repository.get_job(int(a))
    assert tracked is not None and tracked.preemptions == 0
