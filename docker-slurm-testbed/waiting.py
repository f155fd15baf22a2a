"""Small Slurm queries and polling helpers with monotonic deadlines.

Commands go through a :class:`Runner`, so the Docker mode can run the same checks with
``docker exec``. Parsing is tolerant: ``scontrol show -o`` output is read as ``Key=Value`` pairs and
unknown keys are ignored, which holds across Slurm 22.05 to 26.05. (The full Slurm adapter lives in
``hai_slurm.slurm_plugins``; this is only what the testbed and its fixtures need.)
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from hai_slurm.errors import SlurmError

T = TypeVar("T")

TERMINAL_STATES = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
    "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT",
})


@dataclass(frozen=True)
class Result:
    """Exit code and output of one command."""

    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    """Runs a command (argv list) against the cluster and returns its :class:`Result`."""

    def __call__(self, argv: Sequence[str], *, timeout: float = 30.0) -> Result: ...


@dataclass(frozen=True)
class LocalRunner:
    """Runs Slurm clients on this host with ``SLURM_CONF`` set to the testbed's slurm.conf."""

    slurm_conf: str

    def __call__(self, argv: Sequence[str], *, timeout: float = 30.0) -> Result:
        """Run ``argv``; a missing program or a timeout becomes a non-zero :class:`Result`."""
        env = dict(os.environ, SLURM_CONF=self.slurm_conf)
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, env=env,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return Result(124, "", f"{argv[0]} timed out after {timeout:g} s")
        except OSError as err:
            return Result(127, "", f"{argv[0]}: {err}")
        return Result(proc.returncode, proc.stdout, proc.stderr)


def check(run: Runner, argv: Sequence[str], *, timeout: float = 30.0) -> str:
    """Run ``argv`` and return stdout, or raise :class:`SlurmError` with Slurm's message."""
    res = run(argv, timeout=timeout)
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip() or f"exit code {res.returncode}"
        raise SlurmError(f"{' '.join(argv)} failed: {msg}", command=list(argv),
                         returncode=res.returncode, stderr=res.stderr)
    return res.stdout


_PAIR = re.compile(r"(\S+?)=(.*?)(?=\s+\S+?=|$)")


def parse_oneliner(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces`` (``scontrol show -o``) into a dict."""
    return {m.group(1): m.group(2).strip() for m in _PAIR.finditer(line.strip())}


def show_job(run: Runner, job_id: str) -> dict[str, str] | None:
    """``scontrol show job -o JOB`` as a dict, or None when Slurm no longer knows the job."""
    res = run(["scontrol", "show", "job", "-o", job_id], timeout=15)
    if res.returncode != 0:
        if "Invalid job id" in res.stderr or "Invalid job id" in res.stdout:
            return None
        raise SlurmError(f"scontrol show job {job_id} failed: {res.stderr.strip()}",
                         command=["scontrol", "show", "job", "-o", job_id],
                         returncode=res.returncode, stderr=res.stderr)
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    return parse_oneliner(lines[0]) if lines else None


def show_nodes(run: Runner) -> list[dict[str, str]]:
    """``scontrol show node -o`` as one dict per node."""
    out = check(run, ["scontrol", "show", "node", "-o"], timeout=15)
    return [parse_oneliner(ln) for ln in out.splitlines() if ln.strip()]


def job_state(info: Mapping[str, str] | None) -> str:
    """The base state word (``RUNNING`` from ``RUNNING+...``), or ``GONE`` for a purged job."""
    if info is None:
        return "GONE"
    return info.get("JobState", "UNKNOWN").split("+")[0]


def wait_for(what: Callable[[], T | None], *, timeout: float, interval: float = 0.1,
             describe: Callable[[], str]) -> T:
    """Poll ``what`` until it returns a value other than None or False, else TimeoutError.

    ``describe`` is called once at the deadline and says what the state was, for the message.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(describe())
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def wait_job_state(run: Runner, job_id: str, states: str | Sequence[str], *,
                   timeout: float = 30.0) -> dict[str, str]:
    """Wait until job ``job_id`` is in one of ``states``; return its ``scontrol`` fields.

    Raises TimeoutError like "job 12 did not reach RUNNING within 30 s (now PENDING, reason
    Resources)". A job that ends in another terminal state fails at once with that state.
    """
    wanted = {states} if isinstance(states, str) else set(states)
    last: dict[str, str] | None = None

    def poll() -> dict[str, str] | None:
        nonlocal last
        last = show_job(run, job_id)
        state = job_state(last)
        if state in wanted:
            return last or {"JobId": job_id, "JobState": "GONE"}
        if state in TERMINAL_STATES or state == "GONE":
            raise TimeoutError(f"job {job_id} ended {_now(last)} instead of reaching "
                               f"{'/'.join(sorted(wanted))}")
        return None

    def describe() -> str:
        return (f"job {job_id} did not reach {'/'.join(sorted(wanted))} within {timeout:g} s "
                f"({_now(last)})")

    return wait_for(poll, timeout=timeout, interval=0.1, describe=describe)


def wait_job_gone(run: Runner, job_id: str, *, timeout: float = 30.0) -> None:
    """Wait until the job has ended (any terminal state) or Slurm has forgotten it."""
    last: dict[str, str] | None = None

    def poll() -> bool:
        nonlocal last
        last = show_job(run, job_id)
        return job_state(last) in TERMINAL_STATES | {"GONE"}

    wait_for(poll, timeout=timeout, describe=lambda: (
        f"job {job_id} did not end within {timeout:g} s ({_now(last)})"))


def _now(info: Mapping[str, str] | None) -> str:
    if info is None:
        return "now unknown to Slurm"
    text = f"now {job_state(info)}, reason {info.get('Reason', '?')}"
    if info.get("ExitCode") not in (None, "0:0"):
        text += f", exit code {info['ExitCode']}"
    return text

