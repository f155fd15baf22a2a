"""``hai-slurm daemon --shadow`` on the real testbed, and ``hai-slurm daemon --check``.

Four LOW team-a toy jobs fill the 4 x 8 GPUs, a HIGH team-b job waits for one node: a queue the
real daemon preempts for within seconds (test_daemon_preempt_cli.py). The shadow daemon (the
real command, a child process, the same config) logs and records the plan it would carry out,
and Slurm is left exactly alone: every LOW job still runs its first run, nobody was signalled
or requeued, nothing is held, and no priority carries the daemon's class bands.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import HAI_SLURM, DaemonProcess, band, wait_until
from preempt_support import Bed, bed_for, daemon_config

from hai_slurm.priority.demo.scenario import toy_runs
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository
from hai_slurm.priority.store.shadow import ShadowPlans

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)



def _hai(bed: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SLURM_CONF=bed.slurm_conf)
    return subprocess.run([HAI_SLURM, *args], capture_output=True, text=True, timeout=120,
                          check=False, env=env)


def test_shadow_daemon_plans_a_preemption_and_touches_nothing(bed: Bed, tmp_path: Path) -> None:
    """The log, ``preempt history --shadow`` and ``status --once`` show the would-be plan (HIGH
    job for one LOW victim); after many cycles Slurm's jobs are as the test left them."""
    lows = [bed.toy(f"low{i}", steps=4000, sbatch=["-N1", "--gres=gpu:8"]) for i in range(4)]
    for job in lows:
        bed.wait(job, "RUNNING", timeout=60)
    high = bed.toy("high", steps=40, priority="HIGH", account="team-b",
                   sbatch=["-N1", "--gres=gpu:8"])
    bed.wait(high, "PENDING", timeout=10)
    for job in lows:
        bed.wait_progress(job, 20, timeout=60)
    # every LOW job past the test config's min_run_time (5 s), so the first plan's choice is
    # the last: on a loaded machine the youngest (the borrowed one, the cheapest victim) came
    # of age a cycle after another was chosen, and the shadow recorded a second plan
    started = [j.start_time or 0 for j in bed.slurm.snapshot().running
               if j.job_id in {low.job_id for low in lows}]
    time.sleep(max(0.0, max(started, default=0) + 7 - time.time()))
    ids = [j.job_id for j in (*lows, high)]
    config = daemon_config(tmp_path, bed.testbed)
    daemon = DaemonProcess.start(config, tmp_path / "daemon.log", bed.testbed, "--shadow")
    try:
        daemon.wait_log("SHADOW MODE: nothing is written to Slurm", timeout=30)
        daemon.wait_log("would preempt job", timeout=60)
        start = len(daemon.text())
        wait_until(lambda: daemon.text()[start:].count("cycle: ") >= 5 or None, 60,
                   f"fewer than 5 cycles after the plan; log:\n{daemon.text()[-3000:]}")
    finally:
        assert daemon.kill(15) == 0, daemon.text()[-3000:]
    log = daemon.text()
    assert re.search(rf"shadow: would set Priority=\d+ on job\(s\) [\d,]*{high.job_id}", log), log
    assert log.count("would preempt job") == 1, log  # recorded once, not every cycle
    facts = bed.slurm.job_facts(ids)
    assert all(facts[j.job_id].state == "RUNNING" for j in lows), facts
    assert all(facts[j].restart_count == 0 for j in ids), facts
    assert facts[high.job_id].pending, facts
    assert bed.held_jobs() == []
    assert all(band(bed.testbed, str(j)) == "none" for j in ids)  # Slurm's own priorities
    for job in lows:  # one run each: no checkpoint request, no requeue
        assert [r.number for r in toy_runs(job)] == [0], toy_runs(job)
    db = f"sqlite:///{tmp_path}/hai-slurm.db"
    assert Repository(make_engine(db)).history() == []
    (plan,) = ShadowPlans(make_engine(db)).history()
    assert plan.beneficiary.job_id == high.job_id and plan.beneficiary_class == "HIGH"
    (victim,) = plan.victims
    assert victim.job_id in {j.job_id for j in lows} and victim.team == "team-a"
    res = _hai(bed.testbed, "preempt", "history", "--shadow", "--config", str(config))
    assert res.returncode == 0, res.stderr
    assert f"for   job {high.job_id} (HIGH, team-b" in res.stdout, res.stdout
    assert f"scancel --signal=USR2 {victim.job_id}" in res.stdout, res.stdout
    frame = _hai(bed.testbed, "status", "--once", "--config", str(config))
    assert frame.returncode == 0, frame.stderr
    out = frame.stdout
    assert out.count("hai-slurm status ") == 1 and "\x1b" not in out, out
    assert "32/32 GPUs in use" in out, out
    assert re.search(r"^  HIGH\s+1\s+0\s+0\s", out, re.M), out
    assert re.search(r"^  LOW\s+0\s+4\s+32\s", out, re.M), out
    assert re.search(r"^  team-a\s+32/16\s+200%", out, re.M), out
    assert f"shadow plan {plan.plan_id}" in out and "Open plans (0)" in out, out


def test_check_passes_on_the_testbed_and_names_what_fails(bed: Bed, tmp_path: Path) -> None:
    """``daemon --check``: config, database, Slurm and Redis each ok, exit 0; an unreachable
    database and a wrong Redis password each give a FAIL line and exit 1."""
    config = daemon_config(tmp_path, bed.testbed)
    good = _hai(bed.testbed, "daemon", "--check", "--config", str(config))
    assert good.returncode == 0, good.stdout + good.stderr
    for word in ("ok   config", "ok   database", "ok   slurm", "ok   redis", "all checks passed"):
        assert word in good.stdout, good.stdout
    assert "nodes" in good.stdout
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = daemon_config(bad_dir, bed.testbed, database_url="mysql+pymysql://hai:x@127.0.0.1:1/nope")
    text = bad.read_text().replace(bed.testbed.redis_url, "redis://:wrong@" +
                                   bed.testbed.redis_url.rsplit("@", 1)[-1])
    bad.write_text(text)
    res = _hai(bed.testbed, "daemon", "--check", "--config", str(bad))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL database" in res.stdout and "127.0.0.1:1" in res.stdout, res.stdout
    assert "FAIL redis" in res.stdout, res.stdout
    assert "ok   slurm" in res.stdout and "wrong" not in res.stdout, res.stdout
