"""up is idempotent, down stops every process it started (checked by PID), and up works again."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import Submitter, claim_slot

from hai_slurm.cli import cli
from hai_slurm.errors import TestbedError
from hai_slurm.testbed import local, procs
from hai_slurm.testbed.layout import Ports
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.testbed.waiting import LocalRunner, check, wait_for


def _marked_pids(state_dir: Path, comm: str | None = None) -> set[int]:
    """Live processes started for the testbed in ``state_dir`` (its daemons and their job
    processes carry ``HAI_TESTBED_STATE_DIR``), only those named ``comm`` if given."""
    return {pid for pid in procs.marked([str(state_dir)], comm) if procs.pid_alive(pid)}


@pytest.fixture
def slot():
    """A state dir and ports of our own."""
    with claim_slot("hai-slurm-testbed-pytest-lifecycle", 20000) as claimed:
        yield claimed


def test_down_leaves_no_process_and_up_works_again(tmp_path, slot):
    """Down with a job running kills every daemon and job step by PID; a second up runs jobs."""
    STATE_DIR, PORTS = slot  # noqa: N806
    shape = ClusterShape(nodes=2, gpus_per_node=2, accounting=False)
    local.down(STATE_DIR)
    try:
        assert local.up(shape, state_dir=STATE_DIR, ports=PORTS) is True
        assert local.up(shape, state_dir=STATE_DIR, ports=PORTS) is False  # idempotent
        state = local.load_state(STATE_DIR.resolve())
        assert state is not None
        run = LocalRunner(state.slurm_conf)
        job = Submitter(run, tmp_path)(wrap="sleep 300", args=["--nodes=2", "--gres=gpu:1"])
        Submitter(run, tmp_path).wait(job, "RUNNING", timeout=30)
        # RUNNING comes with the allocation; slurmd forks the batch step's slurmstepd a moment
        # later (on a busy machine, after the first look: CI)
        stepds = wait_for(lambda: _marked_pids(STATE_DIR.resolve(), "slurmstepd") or None,
                          timeout=30, describe=lambda: "the running job has no slurmstepd "
                          "carrying the testbed's mark after 30 s")

        stopped = local.down(STATE_DIR)

        assert sorted(stopped) == sorted(p.name for p in state.processes)
        alive = [p for p in state.processes if procs.is_alive(p)]
        assert alive == []
        assert [pid for pid in stepds if procs.pid_alive(pid)] == []
        assert local.load_state(STATE_DIR.resolve()) is None
        assert local.down(STATE_DIR) == []  # nothing up: quiet no-op

        assert local.up(shape, state_dir=STATE_DIR, ports=PORTS) is True
        again = local.load_state(STATE_DIR.resolve())
        assert again is not None and all(procs.is_alive(p) for p in again.processes)
    finally:
        local.down(STATE_DIR)


SMALL = ClusterShape(nodes=2, gpus_per_node=1, accounting=False)


@pytest.fixture
def small(slot):
    """A 2-node testbed of our own, up: (state dir, ports, its recorded state); down after."""
    state_dir, ports = slot
    try:
        local.up(SMALL, state_dir=state_dir, ports=ports)
        state = local.load_state(state_dir.resolve())
        assert state is not None
        yield state_dir, ports, state
    finally:
        local.down(state_dir)


SMALL_ARGS = ["--nodes", "2", "--gpus-per-node", "1", "--no-accounting"]


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, ["testbed", *args])


def test_up_replaces_a_testbed_with_a_dead_component(small):
    """If a recorded daemon died, `testbed up` (no port options) stops the rest and starts a
    fresh, working testbed on the recorded ports (the defaults would strand clients that know
    the old ones); the dead testbed's logs stay in log.prev/."""
    state_dir, ports, state = small
    munged = next(p for p in state.processes if p.name == "munged")
    procs.stop({munged.pid: munged.start_ticks})
    with open(state_dir / "log" / "slurmctld.log", "a") as log:
        log.write("MARKER before the restart\n")
    assert not local.healthy(state)
    assert _cli("status", "--state-dir", str(state_dir)).exit_code == 1
    res = _cli("up", *SMALL_ARGS, "--state-dir", str(state_dir))
    assert res.exit_code == 0 and "log.prev" in res.output, res.output
    assert [p for p in state.processes if procs.is_alive(p)] == []
    fresh = local.load_state(state_dir.resolve())
    assert fresh is not None and local.healthy(fresh) and fresh.ports == ports
    assert "MARKER" in (state_dir / "log.prev" / "slurmctld.log").read_text()


def test_down_stops_a_record_another_version_wrote(small):
    """A testbed.json this version cannot read (a key it does not know) still lists the
    processes: `down` stops them; `status` says what is wrong, not a traceback."""
    state_dir, _ports, state = small
    record = json.loads((state_dir / "testbed.json").read_text())
    record["ports"]["future"] = 1
    (state_dir / "testbed.json").write_text(json.dumps(record))
    res = _cli("status", "--state-dir", str(state_dir))
    assert res.exit_code == 1 and "not a testbed record this hai-slurm reads" in res.output
    assert sorted(local.down(state_dir)) == sorted(p.name for p in state.processes)
    assert [p for p in state.processes if procs.is_alive(p)] == []


def test_sigterm_during_up_stops_what_it_started(slot):
    """A CI job's timeout sends SIGTERM: `up` stops every daemon it had started (it did on
    Ctrl-C only, and left them running on SIGTERM) and removes its record."""
    state_dir, ports = slot
    argv = [str(Path(sys.executable).parent / "hai-slurm"), "testbed", "up", *SMALL_ARGS,
            "--state-dir", str(state_dir), "--slurmctld-port", str(ports.slurmctld),
            "--redis-port", str(ports.redis), "--slurmd-port-base", str(ports.slurmd_base)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        started = wait_for(lambda: (s := local.load_state(state_dir.resolve())) is not None
                           and len(s.processes) >= 3 and s, timeout=60,
                           describe=lambda: "up never recorded three daemons")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        local.down(state_dir)
    assert proc.returncode == 1 and "interrupted by SIGTERM" in out, out
    assert [p.name for p in started.processes if procs.is_alive(p)] == []
    assert local.load_state(state_dir.resolve()) is None


def test_a_sigterm_as_a_daemon_starts_stops_that_daemon_as_well(slot, monkeypatch):
    """A SIGTERM between a daemon's start and its record (here: just as slurmd n2 started)
    waits until the record is made, so the clean-up stops n2 too. It had been raised there:
    n2 was never recorded, kept running on its port, and the next `up` failed on that port."""
    state_dir, ports = slot
    start = procs.start

    def start_then_sigterm(name, *args, **kwargs):
        rec = start(name, *args, **kwargs)
        if name == "slurmd-n2":
            os.kill(os.getpid(), signal.SIGTERM)
        return rec

    monkeypatch.setattr(procs, "start", start_then_sigterm)
    assert _left_by_a_sigterm(state_dir, ports) == set()
    assert local.load_state(state_dir.resolve()) is None
    assert not procs.port_in_use(ports.slurmd_base + 1)


def test_a_sigterm_as_up_records_the_testbed_ready_stops_it_as_it_says(slot, monkeypatch):
    """A SIGTERM while `up` writes its last record (the testbed ready) is held until the
    record is written, then stops everything, as its message says. Before, that record was
    written outside the clean-up's reach: `up` said "stopped what was started" and left
    every daemon running."""
    state_dir, ports = slot
    save = local._save

    def save_then_sigterm(where, state):
        save(where, state)
        if state.ready:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(local, "_save", save_then_sigterm)
    assert _left_by_a_sigterm(state_dir, ports) == set()
    assert local.load_state(state_dir.resolve()) is None


def _left_by_a_sigterm(state_dir: Path, ports: Ports) -> set[int]:
    """Run `up` (a patched step sends SIGTERM); it must fail saying it stopped what it
    started. Returns the testbed's processes left then (stopped afterwards in any case)."""
    try:
        with pytest.raises(TestbedError, match="interrupted by SIGTERM; stopped what was started"):
            local.up(SMALL, state_dir=state_dir, ports=ports)
        return _marked_pids(state_dir.resolve())
    finally:
        procs.stop(dict.fromkeys(_marked_pids(state_dir.resolve())))


def test_a_second_up_or_down_on_a_busy_state_dir_waits_its_turn(slot, tmp_path):
    """While one `up` or `down` works on a state dir, another is refused at once (it took the
    first's half-started daemons for a broken testbed and stopped them); a state dir Slurm's
    files cannot name is refused before anything starts."""
    state_dir, ports = slot
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(TestbedError, match="another `hai-slurm testbed up` or `down`"):
            local.up(SMALL, state_dir=state_dir, ports=ports)
    finally:
        os.close(fd)
    with pytest.raises(TestbedError, match=r"--state-dir .*no spaces"):
        local.up(SMALL, state_dir=tmp_path / "my testbed", ports=ports)
    assert local.load_state(state_dir.resolve()) is None


def test_up_keeps_a_running_testbed_that_cannot_take_jobs(small):
    """A reserved node is usable (up is a no-op); a drained one makes `up` stop with the node
    named and every daemon left running, jobs included, never a restart on other ports."""
    state_dir, _ports, state = small
    run = LocalRunner(state.slurm_conf)
    check(run, ["scontrol", "create", "reservation", "ReservationName=hold", "Users=root",
                "StartTime=now", "Duration=10", "Nodes=n1", "Flags=IGNORE_JOBS"])
    assert local.up(SMALL, state_dir=state_dir) is False
    assert _cli("status", "--state-dir", str(state_dir)).exit_code == 0
    check(run, ["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=by-test"])
    with pytest.raises(TestbedError, match=r"node n2 is drain.*testbed down"):
        local.up(SMALL, state_dir=state_dir)
    res = _cli("status", "--state-dir", str(state_dir))   # every daemon runs, yet: exit 1
    assert res.exit_code == 1 and "cannot take jobs: node n2 is drain (by-test)" in res.output
    assert all(procs.is_alive(p) for p in state.processes)
    assert local.load_state(state_dir.resolve()) == state
    check(run, ["scontrol", "update", "NodeName=n2", "State=RESUME"])
    # slurmctld shows a resumed node not responding (idle*) until its next ping
    wait_for(lambda: local.healthy(state), timeout=60,
             describe=lambda: str(local.problem(state)))
    assert local.up(SMALL, state_dir=state_dir) is False


def test_up_with_a_busy_port_fails_before_starting_anything(slot):
    """A port in use stops `up` with the port and option named, and leaves nothing behind."""
    state_dir, ports = slot
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT of older tests
        busy.bind(("127.0.0.1", ports.slurmctld))
        busy.listen()
        with pytest.raises(TestbedError, match=f"port {ports.slurmctld} .*--slurmctld-port"):
            local.up(ClusterShape(nodes=2, accounting=False), state_dir=state_dir, ports=ports)
    assert local.load_state(state_dir.resolve()) is None
