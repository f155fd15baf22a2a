"""``hai-run``: checkpoint requests for programs that cannot import the library.

    hai-run [--signal USR2] [--forward-as SIG] [--grace S] [--control-dir D] -- CMD ARGS...

Runs CMD as a child (in its own process group, so a terminal's Ctrl-C is forwarded once, not
delivered twice). When the checkpoint request signal arrives, hai-run sends ``--forward-as``
(default: the same signal) to the child, publishes phase ``saving`` and waits up to ``--grace``
seconds for the child to say it saved, by either

- writing the file named by ``$HAI_SAVE_MARKER`` (optionally JSON ``{"step": N, "sha256": "..."}``)
  once its checkpoint is durable, or
- exiting with code 75 (``EXIT_REQUEUE``).

It then writes ``ack.json`` (source ``hai-run``) and reports on stderr. A child that does not save
in time keeps running; hai-run says so and the request expires. SIGTERM is forwarded as SIGTERM and
also counts as a checkpoint request (it never expires); SIGINT is forwarded as SIGINT. hai-run
returns the child's exit code (128 + N when the child died of signal N).

Under ``srun`` with several tasks (``SLURM_STEP_NUM_TASKS`` > 1, one hai-run per task), every task
forwards the request to its own child, whose marker is ``child-saved.<task>.json``; each task
records its child's save in ``hai-run-saved.<run>.<step>.<task>.json``, and task 0 alone
publishes the phase and writes ``ack.json``, once every task's child saved for this request (so
the job is not requeued while one still saves).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hai_slurm.checkpoint import protocol
from hai_slurm.checkpoint.atomic import write_atomic
from hai_slurm.checkpoint.env import (
    DEFAULT_GRACE_S,
    grace_from,
    job_id_from,
    launch_from,
    parse_seconds,
    parse_signal,
    rank_from,
    restart_count_from,
)
from hai_slurm.checkpoint.job_record import needs_record, with_job_record
from hai_slurm.checkpoint.protocol import Ack, Phase
from hai_slurm.checkpoint.signals import RequestListener
from hai_slurm.errors import CheckpointError

POLL_S = 0.05
MARKER_SKEW_S = 2.0
"""A child's marker up to this long before hai-run saw the request still answers it (the
child can get the request first)."""


def _say(message: str) -> None:
    print(f"hai-run: {message}", file=sys.stderr, flush=True)


def _seconds(text: str) -> float:
    """A ``--grace`` value: a decimal number of seconds above 0."""
    value = parse_seconds(text)
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hai-run", description="Run CMD, forwarding checkpoint requests to it as a signal "
        "and reporting to the scheduler whether it saved (see PROTOCOL.md).")
    parser.add_argument("--signal", default=None,
                        help="request signal to listen for "
                        "(default $HAI_CHECKPOINT_SIGNAL or USR2)")
    parser.add_argument("--forward-as", default=None,
                        help="signal to send to the child (default: the request signal)")
    parser.add_argument("--grace", type=_seconds, default=None,
                        help=f"seconds to wait for the child to save (default "
                        f"$HAI_CHECKPOINT_GRACE or {DEFAULT_GRACE_S:g})")
    parser.add_argument("--control-dir", default=None,
                        help="control directory for phase/ack files (default $HAI_CONTROL_DIR, "
                        "else $HAI_CHECKPOINT_DIR/.hai/$SLURM_JOB_ID)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def _control_dir(arg: str | None, environ: Mapping[str, str]) -> Path | None:
    if arg:
        return Path(arg)
    if environ.get("HAI_CONTROL_DIR"):
        return Path(environ["HAI_CONTROL_DIR"])
    if environ.get("HAI_CHECKPOINT_DIR"):
        return Path(environ["HAI_CHECKPOINT_DIR"]) / ".hai" / job_id_from(environ)
    return None


def _read_marker(path: Path) -> tuple[int | None, str | None]:
    try:
        doc = json.loads(path.read_bytes() or b"{}")
    except (OSError, ValueError):
        return None, None
    if not isinstance(doc, dict):
        return None, None
    step, sha = doc.get("step"), doc.get("sha256")
    return (step if isinstance(step, int) and not isinstance(step, bool) else None,
            sha if isinstance(sha, str) else None)


def task_of(environ: Mapping[str, str]) -> tuple[int, int]:
    """(this task, tasks of the step): ``SLURM_PROCID`` and ``SLURM_STEP_NUM_TASKS``, which
    only srun's steps have (0, 1 outside a multi-task step: the batch shell has the job's
    ``SLURM_NTASKS`` and ``SLURM_PROCID=0`` too, and is one process)."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "").strip()
    task = environ.get("SLURM_PROCID", "").strip()
    if tasks.isdigit() and task.isdigit() and int(tasks) > 1 and int(task) < int(tasks):
        return int(task), int(tasks)
    return 0, 1


class _Supervisor:
    """State of one hai-run: the child, the pending request, what was reported."""

    def __init__(self, control: Path | None, marker: Path, environ: Mapping[str, str],
                 request: signal.Signals, forward_as: signal.Signals, grace_s: float) -> None:
        self.control, self.marker = control, marker
        self.job_id = job_id_from(environ)
        raw = environ.get("SLURM_RESTART_COUNT", "").strip() or "0"
        if not raw.isdigit():
            raise CheckpointError(f"environment SLURM_RESTART_COUNT={raw!r} is not an integer")
        self.restart = int(raw)
        self.request, self.forward_as, self.grace_s = request, forward_as, grace_s
        self.forwarded_at: float | None = None
        self.request_name: str | None = None
        self.acked = False
        self.task, self.tasks = task_of(environ) if control is not None else (0, 1)
        self.launch = launch_from(environ) or "0"
        self.requests = 0
        """Requests forwarded so far (every task counts the same ones: Slurm signals them all)."""
        self.asked_at = math.inf
        """Wall time the pending request arrived, less ``MARKER_SKEW_S``."""
        self.taken = -math.inf
        """Modification time of the marker the last acknowledgement took."""
        self.saved_as: tuple[int | None, str | None, int] | None = None
        """Task 0 of several: its child saved (step, sha256, exit code); the ack waits for the
        other tasks' children."""

    def group_file(self, task: int) -> Path:
        assert self.control is not None
        return self.control / f"hai-run-saved.{self.restart}.{self.launch}.{task}.json"

    def group_saved(self) -> bool:
        """Every task's child saved for the current request (read from the tasks' files)."""
        for task in range(1, self.tasks):
            try:
                doc = json.loads(self.group_file(task).read_bytes())
            except (OSError, ValueError):
                return False
            if not isinstance(doc, dict) or doc.get("request") != self.requests:
                return False
        return True

    def publish(self, phase: Phase, step: int | None = None) -> None:
        if self.control is None or self.task != 0:
            return
        try:
            protocol.write_phase(self.control, protocol.make_phase(
                self.job_id, self.restart, phase, step, request_signal=self.request_name,
                source="hai-run"))
        except OSError as err:
            _say(f"cannot publish phase to {self.control} ({err.strerror})")

    def ack(self, how: str, exit_code: int) -> None:
        step, sha = _read_marker(self.marker)
        with contextlib.suppress(OSError):
            self.taken = self.marker.stat().st_mtime
        self.acked = True
        _say(f"child saved ({how}; step {step if step is not None else 'unknown'})")
        if self.control is None:
            return
        if self.tasks > 1 and self.task != 0:
            try:
                write_atomic(self.group_file(self.task), json.dumps(
                    {"request": self.requests, "step": step}).encode(), 0o644, durable=False)
            except OSError as err:
                _say(f"cannot tell task 0 that this task saved ({err.strerror})")
            return
        if self.tasks > 1 and not self.group_saved():
            self.saved_as = (step, sha, exit_code)
            _say(f"waiting for the other {self.tasks - 1} task(s) to save before "
                 "acknowledging")
            return
        self._write_ack(step, sha, exit_code)

    def ack_group(self) -> bool:
        """Task 0 of several: acknowledge once the other tasks' children saved too."""
        if self.saved_as is None or not self.group_saved():
            return False
        step, sha, exit_code = self.saved_as
        self.saved_as = None
        _say(f"every task's child saved: acknowledging for the {self.tasks} tasks")
        self._write_ack(step, sha, exit_code)
        return True

    def _write_ack(self, step: int | None, sha: str | None, exit_code: int) -> None:
        assert self.control is not None
        try:
            protocol.write_ack(self.control, Ack(
                job_id=self.job_id, restart_count=self.restart, step=step, sha256=sha,
                checkpoint=None, time=time.time(), exit_code=exit_code,
                request_signal=self.request_name, source="hai-run"))
        except OSError as err:
            _say(f"cannot write the acknowledgement to {self.control} ({err.strerror})")
            return
        self.publish(Phase.SAVED, step)

    def marker_fresh(self) -> bool:
        """The child's marker answers the pending request: written since it arrived (less
        ``MARKER_SKEW_S``), and not the one an earlier acknowledgement took."""
        try:
            mtime = self.marker.stat().st_mtime
        except OSError:
            return False
        return mtime >= self.asked_at and mtime > self.taken

    def forward(self, child: subprocess.Popen[bytes], sig: signal.Signals, why: str) -> None:
        # Slurm signals every process of a step (proctrack walks the task's descendants), so
        # the child may have the request, and have saved, before hai-run forwards it: a marker
        # written since the request arrived is its answer, only an older one is removed.
        self.asked_at = time.time() - MARKER_SKEW_S
        if not self.marker_fresh():
            self.marker.unlink(missing_ok=True)
        self.requests += 1
        self.saved_as = None
        self.forwarded_at = time.monotonic()
        self.request_name = why
        self.acked = False
        try:
            child.send_signal(sig)
        except ProcessLookupError:
            return  # it just ended: harmless race
        _say(f"{why} received: sent {sig.name} to child {child.pid}; waiting up to "
             f"{self.grace_s:g} s for it to save")
        self.publish(Phase.SAVING)


def run(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """Parse ``argv``, run the child and supervise it; return the exit code."""
    args = _parser().parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        _parser().error("no command given: hai-run [options] -- CMD ARGS...")
    if args.control_dir is None and not environ.get("HAI_CONTROL_DIR") and needs_record(environ):
        environ = with_job_record(environ, rank=rank_from(environ),
                                  restart=restart_count_from(environ))
    request = parse_signal(args.signal or environ.get("HAI_CHECKPOINT_SIGNAL", "") or "USR2",
                           source="--signal")
    forward_as = (parse_signal(args.forward_as, source="--forward-as") if args.forward_as
                  else request)
    grace_s = args.grace if args.grace is not None else grace_from(environ)
    control = _control_dir(args.control_dir, environ)
    scratch = None
    if control is not None:
        task, tasks = task_of(environ)
        protocol.prepare_control_dir(control)
        if task == 0:
            protocol.clear_ack(control)
        marker = control / (protocol.CHILD_MARKER if tasks == 1 else
                            protocol.CHILD_MARKER.replace(".json", f".{task}.json"))
    else:
        _say("no control directory (--control-dir, HAI_CONTROL_DIR or HAI_CHECKPOINT_DIR): "
             "reporting on stderr only")
        scratch = tempfile.TemporaryDirectory(prefix="hai-run-")
        marker = Path(scratch.name) / protocol.CHILD_MARKER
    marker.unlink(missing_ok=True)
    sup = _Supervisor(control, marker, environ, request, forward_as, grace_s)
    requests = RequestListener((request,), chain=False)
    terms = RequestListener((signal.SIGTERM, signal.SIGINT), chain=False)
    requests.install()
    terms.install()
    child_env = {**environ, "HAI_SAVE_MARKER": str(marker), "HAI_RUN_SIGNAL": forward_as.name}
    try:
        try:
            child = subprocess.Popen(cmd, env=child_env, process_group=0)
        except OSError as err:
            _say(f"cannot start {cmd[0]!r}: {err.strerror or err}")
            return 127
        sup.publish(Phase.COMPUTING)
        rc = _supervise(sup, child, requests, terms)
    finally:
        requests.uninstall()
        terms.uninstall()
        if scratch is not None:
            scratch.cleanup()
    return rc


def _take_signals(sup: _Supervisor, child: subprocess.Popen[bytes],
                  requests: RequestListener, terms: RequestListener) -> None:
    """Act on the signals hai-run received since the last look (forwarding them)."""
    term = terms.pending()
    if term is not None:
        terms.clear()
        # after an acknowledged save, a SIGTERM is the requeue's: passed on, not a new request
        if term.signal == signal.SIGTERM and sup.forwarded_at is None and not sup.acked:
            sup.forward(child, signal.SIGTERM, "SIGTERM")
        else:
            _say(f"{term.signal.name} received: forwarding it to child {child.pid}")
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(term.signal)
            if term.signal == signal.SIGTERM and not sup.acked:
                # the pending request becomes a SIGTERM one: it no longer expires
                sup.request_name = "SIGTERM"
                sup.publish(Phase.SAVING)
    req = requests.pending()
    if req is not None:
        requests.clear()
        if sup.forwarded_at is None:
            sup.forward(child, sup.forward_as, req.signal.name)
        elif not sup.acked:
            # sent again: the scheduler still waits, so the grace counts from now
            sup.forwarded_at = time.monotonic()


def _supervise(sup: _Supervisor, child: subprocess.Popen[bytes], requests: RequestListener,
               terms: RequestListener) -> int:
    while True:
        _take_signals(sup, child, requests, terms)
        try:
            code = child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            # Slurm signals the child too: it may have saved and exited before hai-run looked
            # at its own copy of the request, which it answered all the same
            _take_signals(sup, child, requests, terms)
            break
        sup.ack_group()
        if sup.forwarded_at is not None and not sup.acked:
            if sup.marker_fresh():
                sup.ack("it wrote $HAI_SAVE_MARKER", protocol.EXIT_REQUEUE)
                sup.forwarded_at = None  # answered: the next request is forwarded again
            elif (sup.request_name != "SIGTERM"
                  and time.monotonic() - sup.forwarded_at > sup.grace_s):
                _say(f"child did not save within {sup.grace_s:g} s; it keeps running and the "
                     "request expires (the scheduler's deadline policy decides)")
                sup.forwarded_at = None
                sup.request_name = None
                sup.publish(Phase.COMPUTING)
    rc = 128 - code if code < 0 else code
    # saved, then died of the request sent twice (Slurm's own and hai-run's) while exiting:
    # the save stands, so it exits as a saved job does (RequeueExit)
    died_of_request = code == -sup.forward_as.value
    if sup.forwarded_at is not None and not sup.acked:
        if sup.marker_fresh():
            sup.ack("it wrote $HAI_SAVE_MARKER",
                    protocol.EXIT_REQUEUE if died_of_request else rc)
        elif rc == protocol.EXIT_REQUEUE:
            sup.ack(f"exit code {rc}", rc)
        else:
            _say(f"child exited with code {rc} without saving (no $HAI_SAVE_MARKER, exit code "
                 f"not {protocol.EXIT_REQUEUE})")
    if sup.acked and died_of_request:
        _say(f"child died of {sup.forward_as.name} after it saved: exiting "
             f"{protocol.EXIT_REQUEUE}")
        rc = protocol.EXIT_REQUEUE
    if sup.saved_as is not None:   # task 0 of several: the others may still be saving
        until = time.monotonic() + sup.grace_s
        while not sup.ack_group() and time.monotonic() < until:
            time.sleep(POLL_S)
        if sup.saved_as is not None:
            _say(f"not every task's child saved within {sup.grace_s:g} s: no acknowledgement")
    sup.publish(Phase.EXITING)
    return rc


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``hai-run``."""
    try:
        code = run(sys.argv[1:] if argv is None else argv, dict(os.environ))
    except CheckpointError as err:
        _say(f"error: {err}")
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
