"""``hai-slurm daemon`` processes on the real testbed: SIGKILL and restart, slurmctld restarts,
two daemons at once.

Daemons run as child processes (1 s cycles, 3 s leader lease, back-off up to 4 s) with their
SQLite database and log under the test's tmp dir; the test reads the database and the log.
"""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Submitter, Testbed
from daemon_support import (
    DaemonProcess,
    band,
    free_port,
    in_process,
    job,
    priority,
    totals,
    wait_until,
    write_config,
)

# The store's MariaDB fixtures (the testbed's server, a fresh database per test).
from hai_slurm.priority.daemon.cycle import POLICY_STATE_KEY
from hai_slurm.priority.policy.state import EventKind, FairnessEvent
from hai_slurm.testbed import local


@pytest.fixture
def daemons() -> Iterator[list[DaemonProcess]]:
    """Daemon processes a test starts; every one still alive is killed at the end."""
    started: list[DaemonProcess] = []
    yield started
    for d in started:
        d.kill()


def metric(port: int, name: str) -> float:
    """One unlabelled sample from the daemon's /metrics endpoint on the loopback interface."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


@pytest.mark.parametrize("database", ["sqlite", "mariadb"])
def test_sigkilled_daemon_restarted_keeps_every_counter(
        testbed: Testbed, submit: Submitter, tmp_path: Path, daemons: list[DaemonProcess],
        database: str, request: pytest.FixtureRequest) -> None:
    """Counters, protections, round-robin tags and tracked jobs survive SIGKILL; no rewrite."""
    port = free_port()
    url = request.getfixturevalue("mariadb_url") if database == "mariadb" else None
    path, cfg = write_config(tmp_path, '[classes.LOW]\nmax_wait = "3s"\n'
                             "[fairness]\nprotect_after = 1\n", metrics_port=port,
                             database_url=url)
    repo = in_process(cfg).repository  # creates the schema
    now = time.time()
    repo.add_events(FairnessEvent(EventKind.PREEMPTED, "team-a", "root", now - 30 - i)
                    for i in range(2))
    blocker = job(submit, "NORMAL", "team-b")
    submit.wait(blocker, "RUNNING")
    lows = [job(submit, "LOW", team) for team in ("team-a", "team-b", "team-a")]
    first = DaemonProcess.start(path, tmp_path / "first.log", testbed)
    daemons.append(first)
    wait_until(lambda: totals(cfg).get("promotions", 0) == 3 and totals(cfg)["cycles"] >= 6,
               40, "three LOW jobs were not promoted")
    assert metric(port, "hai_priority_promotions_total") == 3
    assert first.kill(signal.SIGKILL) == -signal.SIGKILL
    before = totals(cfg)
    state = repo.get_value(POLICY_STATE_KEY)
    tracked = repo.load_jobs()
    prios = {j: priority(testbed, j) for j in lows}
    assert before["protections"] == 1 and before["slurm_writes"] >= 3

    second = DaemonProcess.start(path, tmp_path / "second.log", testbed)
    daemons.append(second)
    second.wait_log("leader lease taken", timeout=60)
    assert "standing by" in second.text()  # the dead daemon's lease had to run out first
    wait_until(lambda: totals(cfg)["cycles"] >= before["cycles"] + 3, 20,
               "the restarted daemon made no cycles")
    after = totals(cfg)
    for name in ("promotions", "protections", "demotions", "decays", "slurm_writes"):
        assert after[name] == before[name], name  # kept, not reset, not counted twice
    assert metric(port, "hai_priority_promotions_total") == 3
    assert metric(port, "hai_priority_protections_total") == 1
    assert repo.get_value(POLICY_STATE_KEY) == state
    assert {j: priority(testbed, j) for j in lows} == prios
    again = repo.load_jobs()
    for j in lows:
        assert again[int(j)].original_submit_at == tracked[int(j)].original_submit_at
        assert again[int(j)].effective_class == tracked[int(j)].effective_class == "BELOW_NORMAL"
    assert set(repo.active_protections(time.time())) == {"team-a"}


def test_slurmctld_down_and_back_while_the_daemon_runs(
        testbed: Testbed, submit: Submitter, tmp_path: Path,
        daemons: list[DaemonProcess]) -> None:
    """The daemon logs, skips cycles and writes nothing while slurmctld is down, then recovers."""
    if not testbed.started_here:
        pytest.skip("restarts slurmctld: only on a testbed this session started")
    path, cfg = write_config(tmp_path)
    repo = in_process(cfg).repository
    blocker = job(submit, "NORMAL", "team-b")
    submit.wait(blocker, "RUNNING")
    waiting = job(submit, "HIGH", "team-a")
    d = DaemonProcess.start(path, tmp_path / "daemon.log", testbed)
    daemons.append(d)
    wait_until(lambda: band(testbed, waiting) == "HIGH", 20, "the daemon did not write")
    # the cycle commits its totals after the Slurm write: wait for that commit too (CI once
    # read the totals in between: KeyError 'slurm_writes')
    wait_until(lambda: totals(cfg).get("slurm_writes", 0) >= 1, 20,
               "the daemon did not record its write")
    written = priority(testbed, waiting)
    before, jobs_before = totals(cfg), repo.load_jobs()

    mark = len(d.text())
    local.stop_component(testbed.state_dir, "slurmctld")
    try:
        # Slurm's clients retry an absent controller for about MessageTimeout (20 s here).
        d.wait_log("cycle skipped, nothing written: Slurm query failed", timeout=60, after=mark)
        wait_until(lambda: totals(cfg).get("slurm_errors", 0) >= 2, 60, "only one failed cycle")
        down = totals(cfg)
        assert down["slurm_errors"] >= before.get("slurm_errors", 0) + 2
        assert down["slurm_writes"] == before["slurm_writes"]
        assert repo.load_jobs() == jobs_before  # not even the store saw a partial snapshot
    finally:
        local.start_component(testbed.state_dir, "slurmctld")
    late = job(submit, "HIGH", "team-a")
    wait_until(lambda: band(testbed, late) == "HIGH", 20, "no write after slurmctld came back")
    d.wait_log("Slurm answers again", timeout=5, after=mark)
    assert priority(testbed, waiting) == written  # kept by slurmctld, not rewritten
    assert totals(cfg)["slurm_writes"] == before["slurm_writes"] + 1
    assert "writing priorities failed" not in d.text()
    state = local.load_state(testbed.state_dir)
    assert state is not None
    wait_until(lambda: local.healthy(state), 60, "the testbed did not become healthy again")


def test_second_daemon_stays_idle_until_the_first_dies(
        testbed: Testbed, submit: Submitter, tmp_path: Path,
        daemons: list[DaemonProcess]) -> None:
    """B stands by (and writes nothing) while A leads; after A's SIGKILL, B takes over."""
    path, _ = write_config(tmp_path)
    blocker = job(submit, "NORMAL", "team-b")
    submit.wait(blocker, "RUNNING")
    a = DaemonProcess.start(path, tmp_path / "a.log", testbed)
    daemons.append(a)
    a.wait_log("leader lease taken", timeout=60)  # start-up: imports, schema migration
    b = DaemonProcess.start(path, tmp_path / "b.log", testbed)
    daemons.append(b)
    b.wait_log("standing by", timeout=60)
    assert f"held by {a.owner()}" in b.text()
    first = job(submit, "HIGH", "team-a")
    wait_until(lambda: band(testbed, first) == "HIGH", 15, "A did not write")
    time.sleep(3)
    assert "leader lease taken" not in b.text() and "cycle:" not in b.text()

    a.kill(signal.SIGKILL)
    killed = time.monotonic()
    second = job(submit, "HIGH", "team-b")
    b.wait_log("leader lease taken", timeout=15)
    took = time.monotonic() - killed
    wait_until(lambda: band(testbed, second) == "HIGH", 15, "B did not write after taking over")
    assert took <= 3 + 10  # the 3 s lease, a standby wait, slack for a loaded machine
