"""up is idempotent, down stops every process it started (checked by PID), and up works again."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conftest import Submitter, claim_slot

from hai_slurm.errors import TestbedError
from hai_slurm.testbed import local, procs
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.testbed.waiting import LocalRunner, check, wait_for


def _stepd_pids(state_dir: Path) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() != "slurmstepd":
                    continue
                env = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"HAI_TESTBED_STATE_DIR={state_dir}\0".encode() in env and procs.pid_alive(
                    int(entry.name)):
                out.add(int(entry.name))
    return out


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
        stepds = _stepd_pids(STATE_DIR.resolve())
        assert stepds, "the running job should have slurmstepd processes"

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


def test_up_replaces_a_testbed_with_a_dead_component(small):
    """If a recorded daemon died, `up` stops the rest and starts a fresh, working testbed."""
    state_dir, ports, state = small
    munged = next(p for p in state.processes if p.name == "munged")
    procs.stop({munged.pid: munged.start_ticks})
    assert not local.healthy(state)
    assert local.up(SMALL, state_dir=state_dir, ports=ports) is True
    assert [p for p in state.processes if procs.is_alive(p)] == []
    fresh = local.load_state(state_dir.resolve())
    assert fresh is not None and local.healthy(fresh)


def test_up_keeps_a_running_testbed_that_cannot_take_jobs(small):
    """A reserved node is usable (up is a no-op); a drained one makes `up` stop with the node
    named and every daemon left running, jobs included, never a restart on other ports."""
    state_dir, _ports, state = small
    run = LocalRunner(state.slurm_conf)
    check(run, ["scontrol", "create", "reservation", "ReservationName=hold", "Users=root",
                "StartTime=now", "Duration=10", "Nodes=n1", "Flags=IGNORE_JOBS"])
    assert local.up(SMALL, state_dir=state_dir) is False
    check(run, ["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=by-test"])
    with pytest.raises(TestbedError, match=r"node n2 is drain.*testbed down"):
        local.up(SMALL, state_dir=state_dir)
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
