"""hai-run: forwards checkpoint requests to a child and reports whether it saved."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hai_slurm.checkpoint import Phase, read_job_report

HAI_RUN = str(Path(sys.executable).parent / "hai-run")

# A program that cannot import the library: on its signal it "saves" (writes the marker hai-run
# names in $HAI_SAVE_MARKER, atomically) and exits 75 -- or, in mode "ignore", does nothing; in
# "save-on" it saves and trains on, exiting 75 at its second save; in "term-late" it ignores
# USR2 and saves 1.5 s after a SIGTERM; in "save-late" it saves 1.5 s after its signal; in
# "save-once" it saves for its first signal and trains on, ignoring later ones.
CHILD = """
import json, os, signal, sys, time
mode, ready = sys.argv[1], sys.argv[2]
got = []
signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
if mode in ("ignore", "term-late"):
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
with open(ready + ".tmp", "w") as f:   # renamed into place: never read half written
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
step = saves = 0
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    time.sleep(0.01)
    step += 1
    if mode == "save-once" and saves:
        got.clear()
    if got and mode in ("save", "save-on", "term-late", "save-late", "save-once"):
        if mode in ("term-late", "save-late"):
            time.sleep(1.5)
        marker = os.environ["HAI_SAVE_MARKER"]
        with open(marker + ".tmp", "w") as f:
            json.dump({"step": step, "sha256": "c0ffee"}, f)
        os.replace(marker + ".tmp", marker)
        print("child got", signal.Signals(got[0]).name, flush=True)
        saves += 1
        got.clear()
        if mode not in ("save-on", "save-once") or saves == 2:
            sys.exit(75)
sys.exit(3)
"""


def start(tmp_path: Path, mode: str, *, grace: float, lifetime: float = 20.0,
          task: int | None = None, tasks: int = 1) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    ready = tmp_path / ("ready" if task is None else f"ready-{task}")
    control = tmp_path / "ctl"
    env = {**os.environ, "SLURM_JOB_ID": "31", "SLURM_RESTART_COUNT": "2"}
    if task is not None:   # one task of a multi-task srun step
        env.update(SLURM_PROCID=str(task), SLURM_NTASKS=str(tasks), SLURM_STEP_ID="0",
                   SLURM_STEP_NUM_TASKS=str(tasks))
    proc = subprocess.Popen(
        [HAI_RUN, "--grace", str(grace), "--control-dir", str(control), "--",
         sys.executable, str(script), mode, str(ready), str(lifetime)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _out, err = proc.communicate()
            pytest.fail(f"child never became ready (hai-run rc {proc.returncode}): {err}")
        time.sleep(0.01)
    return proc, control


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"hai-run did not finish: {err}")
    return proc.returncode, out, err


def test_request_is_forwarded_and_the_save_acknowledged(tmp_path: Path) -> None:
    """USR2 to hai-run reaches the child; its marker becomes an ack; its exit code comes back."""
    proc, control = start(tmp_path, "save", grace=10)
    assert read_job_report(control, "31", os.geteuid()).phase is not None
    proc.send_signal(signal.SIGUSR2)
    rc, out, err = finish(proc)
    assert rc == 75
    assert "child got SIGUSR2" in out
    assert "sent SIGUSR2 to child" in err and "child saved" in err
    report = read_job_report(control, "31", os.geteuid(), restart_count=2)
    assert report.problems == ()
    assert report.ack is not None and report.ack.source == "hai-run"
    assert report.ack.step is not None and report.ack.step > 0 and report.ack.sha256 == "c0ffee"
    assert report.phase is not None and report.phase.phase is Phase.EXITING


def test_child_that_does_not_save_is_reported(tmp_path: Path) -> None:
    """A child ignoring the request: hai-run says so after the grace time, no ack is written."""
    proc, control = start(tmp_path, "ignore", grace=0.5, lifetime=1.5)
    proc.send_signal(signal.SIGUSR2)
    rc, _, err = finish(proc)
    assert rc == 3
    assert "child did not save within 0.5 s; it keeps running" in err
    report = read_job_report(control, "31", os.geteuid())
    assert not report.acknowledged
    assert report.phase is not None and report.phase.phase is Phase.EXITING


def test_sigterm_is_forwarded_and_counts_as_a_request(tmp_path: Path) -> None:
    """SIGTERM (Slurm's own preemption) is passed on; a child saving on it is acknowledged."""
    proc, control = start(tmp_path, "save", grace=10)
    proc.send_signal(signal.SIGTERM)
    rc, out, _err = finish(proc)
    assert rc == 75 and "child got SIGTERM" in out
    report = read_job_report(control, "31", os.geteuid())
    assert report.ack is not None and report.ack.request_signal == "SIGTERM"


def test_child_exit_code_and_missing_command(tmp_path: Path) -> None:
    """Without a request the child's exit code passes through; no command is a usage error."""
    done = subprocess.run([HAI_RUN, "--control-dir", str(tmp_path / "c"), "--", sys.executable,
                           "-c", "raise SystemExit(4)"], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 4
    assert not (tmp_path / "c" / "ack.json").exists()
    usage = subprocess.run([HAI_RUN, "--"], capture_output=True, text=True, timeout=30,
                           check=False)
    assert usage.returncode == 2 and "no command given" in usage.stderr
    bad = subprocess.run([HAI_RUN, "--signal", "NOPE", "--", "true"], capture_output=True,
                         text=True, timeout=30, check=False)
    assert bad.returncode == 2 and "--signal='NOPE' is not a signal" in bad.stderr


def test_a_child_that_saves_and_trains_on_gets_its_next_request_too(tmp_path: Path) -> None:
    """The child saves for a first request and keeps training (its plan was given up): a later
    request is forwarded and acknowledged again. (Before: hai-run ignored every request after
    the first one its child answered.)"""
    proc, control = start(tmp_path, "save-on", grace=10)
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while read_job_report(control, "31", os.geteuid(), restart_count=2).ack is None:
        assert time.monotonic() < deadline, "no ack for the first request"
        time.sleep(0.05)
    first = read_job_report(control, "31", os.geteuid(), restart_count=2).ack
    assert first is not None
    time.sleep(0.3)
    proc.send_signal(signal.SIGUSR2)
    rc, out, err = finish(proc)
    assert rc == 75 and out.count("child got SIGUSR2") == 2, err
    assert err.count("sent SIGUSR2 to child") == 2, err
    second = read_job_report(control, "31", os.geteuid(), restart_count=2).ack
    assert second is not None and second.time > first.time and second.step > first.step


def test_a_sigterm_during_a_pending_request_keeps_it_from_expiring(tmp_path: Path) -> None:
    """USR2 (grace 1 s) that the child ignores, then SIGTERM: the child saves 1.5 s later, past
    the USR2 grace, and the save is acknowledged as the SIGTERM's (a SIGTERM request never
    expires, PROTOCOL.md). (Before: the request expired at 1 s and the save went unseen.)"""
    proc, control = start(tmp_path, "term-late", grace=1)
    proc.send_signal(signal.SIGUSR2)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    rc, out, err = finish(proc)
    assert rc == 75 and "child got SIGTERM" in out, err
    assert "the request expires" not in err
    report = read_job_report(control, "31", os.geteuid(), restart_count=2)
    assert report.ack is not None and report.ack.request_signal == "SIGTERM", err


@pytest.mark.parametrize("value", ["60s", "-5", "nan", "inf", "0"])
def test_a_bad_grace_is_refused_naming_where_it_came_from(tmp_path: Path, value: str) -> None:
    """HAI_CHECKPOINT_GRACE and --grace must be a finite number of seconds above 0: a clear
    error, not a traceback (60s) or a request that expires at once (-5) or never (nan)."""
    env = {**os.environ, "HAI_CHECKPOINT_GRACE": value}
    done = subprocess.run([HAI_RUN, "--control-dir", str(tmp_path / "c"), "--", "true"],
                          env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2, done.stderr
    assert f"HAI_CHECKPOINT_GRACE={value!r} is not a number of seconds above 0" in done.stderr
    assert "Traceback" not in done.stderr
    flag = subprocess.run([HAI_RUN, "--grace", value, "--", "true"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert flag.returncode == 2 and "is not a number of seconds above 0" in flag.stderr


def test_a_request_sent_again_keeps_the_wait_open(tmp_path: Path) -> None:
    """A child that never saves, grace 1 s, the request sent again every 0.5 s for 2.5 s: it
    stays one request, forwarded once (the scheduler still waits: the grace counts from the
    latest arrival), and expires after the last. (Before: it expired 1 s after the first and
    the next arrival was forwarded as a new request.)"""
    proc, _control = start(tmp_path, "ignore", grace=1, lifetime=4.5)
    sent = time.monotonic()
    for _ in range(5):
        proc.send_signal(signal.SIGUSR2)
        time.sleep(0.5)
    rc, _, err = finish(proc)
    assert rc == 3
    assert err.count("sent SIGUSR2 to child") == 1, err
    assert "the request expires" in err
    assert time.monotonic() - sent > 3.0


def test_several_tasks_are_acknowledged_once_every_tasks_child_saved(tmp_path: Path) -> None:
    """`srun -n 2 hai-run -- prog`: both tasks forward the request; task 0's child saves at
    once, task 1's 1.5 s later. The job's ack is written only after task 1's child saved,
    by task 0, and task 1 writes none. (Before: the first task to see its child's marker
    acknowledged for the whole job, and the daemon requeued it while task 1 still saved;
    the tasks also shared one marker file.)"""
    procs = [start(tmp_path, mode, grace=10, task=t, tasks=2)[0]
             for t, mode in ((0, "save"), (1, "save-late"))]
    control = tmp_path / "ctl"
    for proc in procs:
        proc.send_signal(signal.SIGUSR2)
    sent = time.monotonic()
    first_ack: float | None = None
    while time.monotonic() - sent < 10 and first_ack is None:
        if (control / "ack.json").exists():
            first_ack = time.monotonic() - sent
        time.sleep(0.02)
    results = [finish(p) for p in procs]
    assert [r[0] for r in results] == [75, 75], results
    assert first_ack is not None and first_ack >= 1.4, first_ack
    assert "waiting for the other 1 task(s) to save" in results[0][2]
    assert "every task's child saved" in results[0][2]
    report = read_job_report(control, "31", os.geteuid(), restart_count=2)
    assert report.ack is not None and report.ack.source == "hai-run"
    assert not (control / "child-saved.json").exists()


def test_a_child_that_hears_the_request_first_is_acknowledged(tmp_path: Path) -> None:
    """Slurm signals every process of a step, so the child may get the request, and save,
    before hai-run forwards it: its fresh marker is the answer (acknowledged), not removed as
    stale. (Before: hai-run's forward deleted it, and the save went unacknowledged.)"""
    proc, control = start(tmp_path, "save-once", grace=2, lifetime=4)
    child = int((tmp_path / "ready").read_text())
    os.kill(child, signal.SIGUSR2)          # the child first...
    time.sleep(0.2)
    proc.send_signal(signal.SIGUSR2)        # ...then hai-run
    rc, out, err = finish(proc)
    assert rc == 3 and out.count("child got SIGUSR2") == 1, err
    assert "child saved (it wrote $HAI_SAVE_MARKER" in err, err
    report = read_job_report(control, "31", os.geteuid(), restart_count=2)
    assert report.ack is not None and report.ack.source == "hai-run"


def test_a_child_that_saved_and_exited_before_hai_run_looked_is_acknowledged(
        tmp_path: Path) -> None:
    """Slurm signals hai-run and its child together; the child saves and exits 75 before
    hai-run's loop looked at its own copy (hai-run stopped meanwhile, to make it certain): the
    request is still answered, the save acknowledged. (Before: hai-run saw the exit first and
    acknowledged nothing.)"""
    proc, control = start(tmp_path, "save", grace=10)
    child = int((tmp_path / "ready").read_text())
    proc.send_signal(signal.SIGSTOP)
    try:
        proc.send_signal(signal.SIGUSR2)     # pending until hai-run runs again
        os.kill(child, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while not (control / "child-saved.json").exists():
            assert time.monotonic() < deadline, "the child did not save"
            time.sleep(0.02)
        time.sleep(0.2)                      # it has exited 75 by now
    finally:
        proc.send_signal(signal.SIGCONT)
    rc, _out, err = finish(proc)
    assert rc == 75, err
    report = read_job_report(control, "31", os.geteuid(), restart_count=2)
    assert report.ack is not None and report.ack.source == "hai-run", err


def test_hai_run_in_the_batch_shell_of_a_job_of_several_tasks_acknowledges_alone(
        tmp_path: Path) -> None:
    """The batch shell of a job of 4 tasks has SLURM_NTASKS=4 and SLURM_PROCID=0 but is one
    process (hai-run -- python train.py in the batch script): it acknowledges its child's save
    itself. (Reviewed: it waited for 3 tasks that do not exist and wrote no ack.)"""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    ready, control = tmp_path / "ready", tmp_path / "ctl"
    env = {**os.environ, "SLURM_JOB_ID": "31", "SLURM_RESTART_COUNT": "2",
           "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}
    proc = subprocess.Popen(
        [HAI_RUN, "--grace", "5", "--control-dir", str(control), "--",
         sys.executable, str(script), "save", str(ready), "20"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "child never ready"
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR2)
    rc, _out, err = finish(proc)
    assert rc == 75 and "waiting for the other" not in err, err
    report = read_job_report(control, "31", os.geteuid(), restart_count=2)
    assert report.ack is not None and report.ack.source == "hai-run"


def test_the_requeues_sigterm_after_an_acknowledged_save_is_only_passed_on(
        tmp_path: Path) -> None:
    """The child saved for a request and trains on; the requeue's SIGTERM then comes: hai-run
    passes it on without taking it for a new request (no second 'saving'). (Reviewed: it
    published 'saving' again and said the child exited without saving.)"""
    proc, control = start(tmp_path, "save-once", grace=10, lifetime=3)
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while read_job_report(control, "31", os.geteuid(), restart_count=2).ack is None:
        assert time.monotonic() < deadline, "no ack"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    phase = read_job_report(control, "31", os.geteuid(), restart_count=2).phase
    assert phase is not None and phase.phase is Phase.SAVED
    _rc, _out, err = finish(proc)   # the child runs out its 3 s
    assert "SIGTERM received: forwarding it to child" in err, err
    assert err.count("waiting up to") == 1, err
