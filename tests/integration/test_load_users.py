"""Load, CI-sized: 900 jobs from 20 real unprivileged users in bursts while the daemon preempts.

The 10,000-job run with the shipped 30 s cycle is ``bench/load`` (figures in README.md, "Load");
this is the same scenario small enough for CI (about 3 min): 20 throwaway Unix users
(``useradd``, as test_security_users.py makes them) in team-a and team-b submit 900 one-node GPU
jobs of classes NORMAL and below, each with its own sbatch, in three bursts, while four NORMAL
training jobs fill the GPUs and ``hai-slurm daemon`` (a child process: the shipped defaults, a
10 s cycle, and the first-try planner times so that seconds-old jobs can be preempted) runs on
the CLI backend (what a site without pyslurm runs, and the slower one at 10,000 jobs). Two
HIGH jobs from team-b users arrive during the bursts and each preempts a training job.

Checked: no sbatch refused; every accepted job still known to slurmctld (none lost) and none left
held once the plans are done; at least one plan done; every committed cycle shorter than the
interval, none skipped, and no cycle started late because the steps of open plans between cycles
overran.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import load_support as ls

from hai_slurm.priority.demo.scenario import ToyJob, submit_toy
from hai_slurm.priority.store import PlanState
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.adapter import CliSlurmClient
from hai_slurm.slurm_plugins.runner import SubprocessRunner

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USERS, PER_USER, BURSTS = 20, 15, 3
INTERVAL = 10.0
ONE_NODE = ("-N1", "--gres=gpu:8")
EXTRA = f"""
[intervals]
cycle = "{INTERVAL:g}s"
[planner]
min_run_time = "10s"
restart_cost = "10s"
"""


@pytest.fixture
def users(testbed: Testbed) -> Iterator[ls.LoadUsers]:
    made = ls.make_users(testbed.slurm_conf, USERS, ("team-a", "team-b"),
                         f"{os.getpid() % 10000}")
    try:
        yield made
    finally:
        made.remove()


def test_bursts_from_twenty_users_while_preempting(testbed: Testbed, users: ls.LoadUsers,
                                                   tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    conf = testbed.slurm_conf
    slurm = CliSlurmClient(SubprocessRunner(conf))
    config = ls.daemon_config(tmp_path / "daemon.toml", tmp_path / "daemon", testbed.redis_url,
                              EXTRA)
    sub, urgent = ls.Submitted(), ls.Submitted()
    training: list[ToyJob] = []
    daemon: ls.DaemonChild | None = None
    try:
        training = [submit_toy(slurm, tmp_path / "train", f"train{i}", steps=100000,
                               step_seconds=0.05, priority="NORMAL", account="team-a",
                               sbatch_args=ONE_NODE) for i in range(4)]
        deadline = time.monotonic() + 60
        while not all(f.running for f in slurm.job_facts([t.job_id for t in training]).values()):
            assert time.monotonic() < deadline, "the training jobs did not start within 60 s"
            time.sleep(0.5)
        daemon = ls.DaemonChild.start(config, tmp_path / "daemon.log", conf, cli=True)
        team_b = [n for n, a in users.accounts.items() if a == "team-b"]

        def urgent_jobs() -> None:
            for k in range(2):
                time.sleep(15)
                urgent.add(users.sbatch_many(team_b[k], [(
                    "#!/bin/bash\n#HAI --priority=HIGH\nsleep 20\n",
                    ["--output=/dev/null", "--chdir=/", "--job-name=hai-urgent", *ONE_NODE])]))

        thread = threading.Thread(target=urgent_jobs, daemon=True)
        thread.start()
        for k in range(BURSTS):
            ls.burst(users, PER_USER, k * PER_USER * USERS, sub, shape=ONE_NODE, seconds=3600)
            time.sleep(5)
        thread.join()
        repo = Repository(make_engine(f"sqlite:///{tmp_path / 'daemon'}/hai-slurm.db"))
        end = time.monotonic() + 120
        while time.monotonic() < end:
            facts = slurm.job_facts(urgent.ids)
            if len(facts) == len(urgent.ids) and all(f.running or f.finished
                                                     for f in facts.values()) \
                    and not repo.unfinished_plans():
                break
            time.sleep(2)
        time.sleep(INTERVAL)  # one more cycle at the full queue
        text = daemon.text()
        c = ls.census(conf, [*sub.ids, *urgent.ids])
        plans = repo.history(limit=100)
    finally:
        if daemon is not None:
            daemon.stop()
        ls.cancel(conf, [*sub.ids, *urgent.ids, *(t.job_id for t in training)])

    cs = ls.cycles(text)
    print(f"\nsbatch: {len(sub.ids)} + {len(urgent.ids)} accepted, "
          f"{len(sub.refused) + len(urgent.refused)} refused; at the end {dict(c.states)}, "
          f"lost {len(c.missing)}, held {len(c.held)}; plans "
          f"{[(p.plan_id, p.state.value) for p in plans]}\ncycles: {ls.cycle_line(cs, INTERVAL)}")
    assert sub.refused == [] and urgent.refused == [], (sub.refused + urgent.refused)[:5]
    assert len(sub.ids) == USERS * PER_USER * BURSTS and len(urgent.ids) == 2
    assert c.missing == (), f"accepted jobs slurmctld no longer knows: {c.missing[:20]}"
    assert c.held == (), f"jobs left held: {c.held[:20]}"
    assert any(p.state is PlanState.DONE for p in plans), [
        (p.plan_id, p.state, p.steps[-1].note if p.steps else "") for p in plans]
    assert not ls.skipped(text), ls.skipped(text)[:3]
    assert len(cs) >= 3, text[-3000:]
    assert max(x.pending for x in cs) >= USERS * PER_USER * BURSTS * 0.9, ls.cycle_line(
        cs, INTERVAL)
    assert all(x.seconds < INTERVAL for x in cs), ls.cycle_line(cs, INTERVAL)
    assert all(late < INTERVAL / 2 for late in ls.late_starts(cs, INTERVAL)), ls.cycle_line(
        cs, INTERVAL)
    assert daemon.backend().startswith("CLI"), daemon.backend()
