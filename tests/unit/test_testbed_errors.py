"""Error paths of the local testbed: busy ports, missing programs, not root, nothing up."""

from __future__ import annotations

import socket

import pytest

from hai_slurm.errors import ConfigError, TestbedError
from hai_slurm.testbed import local, procs
from hai_slurm.testbed.layout import Ports
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.testbed.status import local_status
from hai_slurm.testbed.waiting import Result, parse_oneliner, wait_job_state


@pytest.fixture
def busy_port():
    """A port something really listens on (loopback only)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def _free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_port_in_use_names_port_component_and_option(busy_port):
    """A busy slurmd port fails before anything starts, naming the option that moves it."""
    ports = Ports(slurmctld=_free_port(), slurmdbd=_free_port(), mariadb=_free_port(),
                  redis=_free_port(), slurmd_base=busy_port - 1)
    with pytest.raises(TestbedError) as err:
        procs.check_ports(ports.wanted(ClusterShape(nodes=2)))
    text = str(err.value)
    assert f"port {busy_port} (for slurmd n2) is already in use" in text
    assert "--slurmd-port-base" in text


def test_port_check_passes_for_free_ports(busy_port):
    """A free port is not reported as busy."""
    assert procs.port_in_use(busy_port)
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    assert not procs.port_in_use(port)


def test_same_port_twice_is_a_config_error():
    """Two components given one port are refused with the option name."""
    with pytest.raises(ConfigError, match="given to both slurmctld and redis"):
        Ports(slurmctld=20000, redis=20000).wanted(ClusterShape())


def test_missing_programs_name_the_apt_get_command(monkeypatch):
    """With nothing on PATH the error lists the programs and the exact apt-get line."""
    monkeypatch.setattr(local, "_SEARCH_PATH", "/nonexistent")
    with pytest.raises(TestbedError) as err:
        local.find_programs(ClusterShape())
    text = str(err.value)
    assert "missing programs for the testbed: " in text
    assert "apt-get install -y " in text
    for pkg in ("munge", "slurmctld", "slurmd", "slurmdbd", "mariadb-server", "redis-server"):
        assert f" {pkg}" in text.split("apt-get install -y", 1)[1]


def test_not_root_says_to_run_as_root(monkeypatch):
    """A non-root user is told to run the command as root."""
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match=r"run the same command as root \(log in as root"):
        local.require_root()


def test_down_with_nothing_up_is_a_quiet_no_op(tmp_path):
    """No state file: down returns no names and prints nothing; status says so."""
    said = []
    assert local.down(tmp_path, echo=said.append) == []
    assert said == []
    st = local_status(tmp_path)
    assert not st.up and st.lines() == [f"no testbed in {tmp_path.resolve()}"]


def test_env_without_testbed_says_how_to_start_one(tmp_path):
    """`env` with no testbed points at `testbed up`."""
    with pytest.raises(TestbedError, match="hai-slurm testbed up --state-dir"):
        local.slurm_conf_path(tmp_path)


def test_dead_or_reused_pid_is_not_alive():
    """A record whose start time differs from the process's is treated as gone."""
    import os
    me = procs.start_ticks(os.getpid())
    assert me is not None
    assert procs.pid_alive(os.getpid(), me)
    assert not procs.pid_alive(os.getpid(), me + 1)


def test_parse_oneliner_keeps_values_with_spaces():
    """scontrol -o values may contain spaces (Reason=...)."""
    line = "NodeName=n1 State=DOWN* Reason=Not responding [slurm@2026] Gres=gpu:8"
    assert parse_oneliner(line) == {"NodeName": "n1", "State": "DOWN*",
                                    "Reason": "Not responding [slurm@2026]", "Gres": "gpu:8"}


class _FakeRunner:
    """Answers `scontrol show job` with a fixed line (same interface as LocalRunner)."""

    def __init__(self, line: str) -> None:
        self.line = line

    def __call__(self, argv, *, timeout=30.0):
        return Result(0, self.line + "\n", "")


def test_wait_message_says_state_and_reason():
    """A job that never starts fails with its state and Slurm's reason."""
    run = _FakeRunner("JobId=12 JobState=PENDING Reason=Resources ExitCode=0:0")
    with pytest.raises(TimeoutError) as err:
        wait_job_state(run, "12", "RUNNING", timeout=0.3)
    assert str(err.value) == ("job 12 did not reach RUNNING within 0.3 s "
                              "(now PENDING, reason Resources)")


def test_wait_fails_at_once_when_job_ends_otherwise():
    """A job that failed does not make the caller wait for the deadline."""
    run = _FakeRunner("JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0")
    with pytest.raises(TimeoutError, match="job 7 ended now FAILED, reason NonZeroExitCode, "
                                           "exit code 1:0"):
        wait_job_state(run, "7", "COMPLETED", timeout=30)


def test_up_turns_sigterm_into_a_clean_stop_but_leaves_an_ignored_sighup_ignored():
    """While `up` runs, SIGTERM (a CI timeout) raises, so its clean-up runs; a SIGHUP that
    nohup set to be ignored stays ignored (`nohup hai-slurm testbed up &` survives a logout);
    the handlers are put back afterwards."""
    import os
    import signal

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    term = signal.getsignal(signal.SIGTERM)
    try:
        with local._signals_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)   # ignored: nothing raised
            with pytest.raises(TestbedError, match="interrupted by SIGTERM"):
                os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is term
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_signal_while_a_daemon_is_started_waits_until_it_is_recorded():
    """Inside ``held`` (fork, then record) SIGTERM and SIGINT are raised only when the block
    ends, so the record is kept and the clean-up stops that daemon; outside, at once."""
    import os
    import signal

    int_before = signal.getsignal(signal.SIGINT)
    with local._signals_interrupt() as interrupts:
        recorded: list[str] = []
        with pytest.raises(TestbedError, match="interrupted by SIGTERM"), interrupts.held():
            os.kill(os.getpid(), signal.SIGTERM)
            recorded.append("slurmd-n2")   # reached: the signal waited
        assert recorded == ["slurmd-n2"]
        with pytest.raises(KeyboardInterrupt), interrupts.held():
            with interrupts.held():
                os.kill(os.getpid(), signal.SIGINT)
            recorded.append("slurmd-n3")   # nested: raised where the outer one ends
        assert recorded == ["slurmd-n2", "slurmd-n3"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        with interrupts.held():   # nothing pending any more
            recorded.append("slurmd-n4")
    assert signal.getsignal(signal.SIGINT) is int_before


def test_a_signal_during_a_failed_start_or_the_clean_up_does_not_hide_the_error():
    """A block that raised keeps its error (the signal held meanwhile is dropped, not raised
    at the next block's end), and the clean-up's block (``drop``) lets the error that stopped
    `up` go on: the user reads why it failed, not "interrupted by SIGTERM"."""
    import os
    import signal

    with local._signals_interrupt() as interrupts:
        with pytest.raises(TestbedError, match="cannot start slurmd-n2"), interrupts.held():
            os.kill(os.getpid(), signal.SIGTERM)
            raise TestbedError("cannot start slurmd-n2 (slurmd): No such file")
        with interrupts.held():   # the signal was dropped with that error
            pass
        cleaned = []
        with pytest.raises(TestbedError, match="slurmctld did not answer"):
            try:
                raise TestbedError("slurmctld did not answer scontrol ping within 30 s")
            except TestbedError:
                with interrupts.held(drop=True):
                    os.kill(os.getpid(), signal.SIGTERM)
                    cleaned.append("stopped")
                raise
        assert cleaned == ["stopped"]




def test_a_signal_after_the_testbed_came_up_does_not_say_it_was_stopped():
    """Once `up` recorded the testbed as ready, a signal before `up` returns (its handlers are
    still in place) says that the testbed runs and how to stop it; before, it said "stopped
    what was started" of a testbed that nothing stopped."""
    import os
    import signal

    with local._signals_interrupt() as interrupts:
        interrupts.came_up = True
        with pytest.raises(TestbedError, match=r"after the testbed came up; it runs "
                                               r"\(`hai-slurm testbed down` stops it\)"):
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_slurmd_port_range_past_65535_is_named_before_anything_starts():
    """The base is checked alone; node 3 of 4 would listen on 65536 (an OverflowError
    traceback when the port was tried)."""
    from hai_slurm.errors import ConfigError
    from hai_slurm.testbed.layout import Ports
    from hai_slurm.testbed.shape import ClusterShape

    with pytest.raises(ConfigError, match=r"--slurmd-port-base.*slurmd n3 would listen on "
                                          r"port 65536, outside 1-65535"):
        Ports(slurmd_base=65534).wanted(ClusterShape(nodes=4))


def test_down_as_another_user_and_an_unusable_state_dir_are_clear_errors(tmp_path, monkeypatch):
    """A non-root `down` of a recorded testbed says to run it as root (it was a
    PermissionError traceback from os.kill); a state dir that cannot be made names
    --state-dir (a NotADirectoryError traceback)."""
    (tmp_path / "testbed.json").write_text("{}")
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="run the same command as root"):
        local.down(tmp_path)
    (tmp_path / "afile").write_text("")
    with pytest.raises(TestbedError, match=r"--state-dir .*afile/tb: cannot make it"):
        local._usable_dir(tmp_path / "afile" / "tb")


def _mariadb_ctx(tmp_path, install: str):
    """A testbed context whose ``mariadb-install-db`` is the shell script ``install`` (its
    ``--datadir=`` argument is ``$dir``)."""
    from hai_slurm.testbed import services
    from hai_slurm.testbed.layout import local_layout

    script = tmp_path / "install-db"
    script.write_text("#!/bin/sh\nfor a; do case $a in --datadir=*) dir=${a#--datadir=};; "
                      f"esac; done\n{install}\n")
    script.chmod(0o755)
    shape = ClusterShape()
    layout = local_layout(shape, Ports(), tmp_path, "host1", "pw")
    return services.Ctx(tmp_path / "state", shape, Ports(), layout, {},
                        {"mariadb-install-db": str(script)})


def test_a_mariadb_datadir_made_half_way_is_not_taken_as_made(tmp_path):
    """An install that fails (or is interrupted) after writing ``mysql/`` leaves no ``data``
    that the next ``up`` would start mariadbd on; the next install starts afresh and its
    complete datadir is kept from then on. (Before: the half-made ``data/mysql`` was taken as
    made, and mariadbd failed on it at every later ``up``.)"""
    from hai_slurm.testbed import services

    half = _mariadb_ctx(tmp_path, 'mkdir -p "$dir/mysql" && echo partial > "$dir/ibdata1"; '
                                  "echo 'killed' >&2; exit 137")
    with pytest.raises(TestbedError, match="mariadb-install-db failed"):
        services.init_mariadb(half)
    data = half.path("mariadb", "data")
    assert not data.exists()

    good = _mariadb_ctx(tmp_path, 'mkdir -p "$dir/mysql" && echo whole > "$dir/ibdata1"')
    services.init_mariadb(good)
    assert (data / "ibdata1").read_text() == "whole\n"
    assert not data.with_name("data.new").exists()

    again = _mariadb_ctx(tmp_path, "echo 'must not run' >&2; exit 1")
    services.init_mariadb(again)   # made: reused as it is
    assert (data / "ibdata1").read_text() == "whole\n"
