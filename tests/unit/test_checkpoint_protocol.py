"""The daemon side of the protocol: only the job's owner can acknowledge for the job."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.checkpoint import Ack, Phase, read_job_report
from hai_slurm.checkpoint.protocol import (
    ACK_FILE,
    PHASE_FILE,
    make_phase,
    prepare_control_dir,
    write_ack,
    write_phase,
)

OTHER_UID = 12345
NOBODY = 65534


def job_files(control: Path, job_id: str = "77", restart: int = 0, when: float | None = None
              ) -> None:
    """What a job acknowledging at step 500 leaves in its control directory."""
    prepare_control_dir(control)
    write_phase(control, make_phase(job_id, restart, Phase.SAVED, 500))
    write_ack(control, Ack(job_id=job_id, restart_count=restart, step=500, sha256="ab" * 32,
                           checkpoint="ckpt-00000003-step500.pkl",
                           time=time.time() if when is None else when, exit_code=75,
                           request_signal="SIGUSR2"))


def test_owner_written_ack_is_accepted(tmp_path: Path) -> None:
    """Files written by the job's owner (here: this uid) are read back as an acknowledgement."""
    job_files(tmp_path / "ctl")
    report = read_job_report(tmp_path / "ctl", "77", os.geteuid(), restart_count=0)
    assert report.problems == ()
    assert report.acknowledged and report.ack is not None
    assert (report.ack.step, report.ack.exit_code) == (500, 75)
    assert report.phase is not None and report.phase.phase is Phase.SAVED


def test_ack_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    """An ack.json chowned to another uid is rejected with the reason; the phase still counts."""
    control = tmp_path / "ctl"
    job_files(control)
    os.chown(control / ACK_FILE, OTHER_UID, -1)
    report = read_job_report(control, "77", os.geteuid())
    assert not report.acknowledged
    assert report.phase is not None
    assert any(f"ack.json is owned by uid {OTHER_UID}, not by the job's owner uid "
               f"{os.geteuid()}" in p for p in report.problems)


def test_directory_of_another_user_is_not_trusted(tmp_path: Path) -> None:
    """A whole control directory owned by someone else acknowledges nothing for our job."""
    control = tmp_path / "ctl"
    job_files(control)
    for path in (control, control / ACK_FILE, control / PHASE_FILE):
        os.chown(path, OTHER_UID, -1)
    report = read_job_report(control, "77", os.geteuid())
    assert report.ack is None and report.phase is None
    assert "nothing in it is trusted" in report.problems[0]
    # ... while for a job of that user the same files are fine
    assert read_job_report(control, "77", OTHER_UID).acknowledged


def test_group_writable_ack_and_symlinks_are_refused(tmp_path: Path) -> None:
    """Files others could have written, and symlinks to an owner's files, do not count."""
    control = tmp_path / "ctl"
    job_files(control)
    (control / ACK_FILE).chmod(0o664)
    report = read_job_report(control, "77", os.geteuid())
    assert not report.acknowledged and "writable by group or others" in report.problems[0]
    (control / ACK_FILE).chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(control)
    report = read_job_report(link, "77", os.geteuid())
    assert not report.acknowledged and "symbolic link" in report.problems[0]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users can traverse (pytest's tmp_path lives under a 0700 directory)."""
    with tempfile.TemporaryDirectory(prefix="hai-ck-test-") as name:
        Path(name).chmod(0o755)
        yield Path(name)


def test_another_user_cannot_acknowledge_someone_elses_job(shared_dir: Path) -> None:
    """A real process of uid 'nobody' cannot write the ack, and its own forged ack is refused."""
    tmp_path = shared_dir
    control = tmp_path / "victim"
    prepare_control_dir(control)
    write_phase(control, make_phase("77", 0, Phase.COMPUTING, 10))
    forged = json.dumps({"version": 1, "job_id": "77", "restart_count": 0, "step": 10,
                         "sha256": None, "checkpoint": None, "time": time.time(),
                         "exit_code": 75, "request_signal": "SIGUSR2"})
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    os.chown(attacker, NOBODY, -1)
    script = ("import os, sys\n"
              "for target in sys.argv[1:]:\n"
              "    try:\n"
              "        with open(target, 'w') as f:\n"
              "            f.write(os.environ['FORGED'])\n"
              "        print('wrote', target)\n"
              "    except OSError as e:\n"
              "        print('denied', target, e.errno)\n")
    done = subprocess.run(
        ["/usr/bin/python3", "-c", script, str(control / ACK_FILE), str(attacker / ACK_FILE)],
        user=NOBODY, env={"FORGED": forged}, capture_output=True, text=True, timeout=30,
        check=True)
    assert f"denied {control / ACK_FILE}" in done.stdout
    assert f"wrote {attacker / ACK_FILE}" in done.stdout
    assert not read_job_report(control, "77", os.geteuid()).acknowledged
    report = read_job_report(attacker, "77", os.geteuid())  # daemon pointed at the forgery
    assert not report.acknowledged
    assert f"owned by uid {NOBODY}" in report.problems[0]


@pytest.mark.parametrize(("kwargs", "files", "reason"), [
    ({"restart_count": 1}, {}, "from run 0 of the job, expected 1 (stale)"),
    ({"not_before": 2000.0}, {"when": 1000.0}, "before the request at 2000.000 (stale)"),
    ({}, {"job_id": "78"}, "is for job 78, not 77"),
])
def test_stale_or_foreign_records_are_refused(tmp_path: Path, kwargs: dict[str, Any],
                                              files: dict[str, Any], reason: str) -> None:
    """Acks of an earlier run, from before the request, or of another job are refused."""
    job_files(tmp_path / "ctl", **files)
    report = read_job_report(tmp_path / "ctl", "77", os.geteuid(), **kwargs)
    assert not report.acknowledged
    assert any(reason in p for p in report.problems), report.problems


def test_malformed_files_are_problems_not_exceptions(tmp_path: Path) -> None:
    """Garbage, unknown versions and missing directories come back as problems."""
    control = tmp_path / "ctl"
    job_files(control)
    (control / ACK_FILE).write_text("{not json")
    (control / PHASE_FILE).write_text(json.dumps({"version": 99}))
    report = read_job_report(control, "77", os.geteuid())
    assert report.ack is None and report.phase is None
    assert any("ack.json is not valid JSON" in p for p in report.problems)
    assert any("protocol version 99" in p for p in report.problems)
    missing = read_job_report(tmp_path / "nope", "77", os.geteuid())
    assert missing.problems and "No such file" in missing.problems[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_a_control_directory_the_reader_may_not_open_is_reported_denied() -> None:
    """A reader (the daemon's user, not root) below a 0700 directory it does not own: the
    report says ``denied``, so the daemon knows it will never see that job's acknowledgement;
    a readable or a missing directory is not denied. Read in a child that drops to
    ``nobody``."""
    import pwd
    import shutil

    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(dir="/var/tmp"))   # pytest's tmp_path is under a 0700 dir
    try:
        top.chmod(0o755)
        for home, mode in (("closed", 0o700), ("open", 0o755)):
            (top / home / "ck" / ".hai" / "7").mkdir(parents=True)
            (top / home).chmod(mode)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: drop to nobody, read, report through the pipe
            try:
                os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
                os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)
                got = [read_job_report(top / home / "ck" / ".hai" / "7", "7", 0).denied
                       for home in ("closed", "open", "absent")]
                os.write(write_fd, repr(got).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        os.waitpid(pid, 0)
        with os.fdopen(read_fd) as pipe:
            assert pipe.read() == "[True, False, False]"
        assert read_job_report(top / "closed" / "ck" / ".hai" / "7", "7", 0).denied is False
    finally:
        shutil.rmtree(top)
