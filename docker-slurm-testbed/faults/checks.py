"""The checks every fault case ends with.

1. **no job lost**: every job the case submitted completes (Slurm's COMPLETED) with the result of
   an uninterrupted run (the toy's digest of its whole trajectory), and no plan records as
   ``gone`` a victim that did not complete;
2. **none left held**: once no plan is open, none of the case's jobs is pending and held
   (within :data:`HOLD_SETTLE` s; a job still ending on a node that does not answer is released
   once it is pending), and none is held at the end. Slurm's own reactions to a slurmctld that
   lost its state are undone first as an admin would (:meth:`FaultBed.repair`: a node drained
   for "Duplicate jobid" resumed, the job Slurm held after that failed launch released), and
   reported;
3. **no checkpoint lost**: each run of a job after a restart starts from the newest checkpoint
   an earlier run saved (``saved N`` / ``acked N`` lines of its output), never from an older one;
4. **counters consistent**: every plan ended; each job's Slurm restart count equals the number
   of plans that recorded it requeued, plus the requeues Slurm made itself after slurmd refused
   a launch ("Duplicate jobid" in slurmctld's log)
   (``restarts_by_plans_only``; else at least that number);
   the daemons' persisted cycle totals match the cycles their logs show (within one per
   SIGKILL: a daemon killed between its commit and its log line), and every daemon stopped
   within 30 s of SIGTERM.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from hai_slurm.priority.daemon.metrics import TOTALS_KEY
from hai_slurm.priority.demo.scenario import ToyJob
from hai_slurm.priority.demo.toy_train import reference
from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.priority.store.repository import Repository
from hai_slurm.priority.store.states import FINAL_PLAN_STATES

from .bed import SIGTERM_WAIT, FaultBed

HOLD_SETTLE = 20.0
"""Seconds a job may still be pending and held once no plan is open (its release may be a
cycle away)."""
NAMES = ("no job lost", "none left held", "no checkpoint lost", "counters consistent")


@dataclass(frozen=True)
class Check:
    """One check's outcome."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class RunLog:
    """One run of a toy job, read from its output: where it started and what it saved."""

    number: int
    start: int
    saved: tuple[int, ...]


def run_logs(job: ToyJob) -> list[RunLog]:
    """The job's runs in order, each with the steps it saved (periodic and requested)."""
    runs: list[RunLog] = []
    text = job.output.read_text(errors="replace") if job.output.exists() else ""
    for line in text.splitlines():
        m = re.match(r"start (\d+) run (\d+)$", line)
        if m:
            runs.append(RunLog(int(m.group(2)), int(m.group(1)), ()))
            continue
        m = re.match(r"(?:saved|acked) (\d+)", line)
        if m and runs:
            last = runs[-1]
            runs[-1] = RunLog(last.number, last.start, (*last.saved, int(m.group(1))))
    return runs


def checkpoint_problems(job: ToyJob) -> list[str]:
    """Runs that started from an older checkpoint than the newest one saved before them."""
    out = []
    newest = 0
    for run in run_logs(job):
        if run.number > 0 and run.start < newest:
            out.append(f"{job.name} run {run.number} started at step {run.start}, but step "
                       f"{newest} had been saved")
        newest = max(newest, *run.saved, run.start)
    return out


def _wait_plans_closed(repos: Sequence[Repository], timeout: float) -> list[int]:
    end = time.monotonic() + timeout
    while True:
        open_ = [p.plan_id for r in repos for p in r.unfinished_plans()]
        if not open_ or time.monotonic() > end:
            return open_
        time.sleep(0.5)


def end_checks(fb: FaultBed, repos: Sequence[Repository], *, timeout: float = 180.0,
               restarts_by_plans_only: bool = True) -> list[Check]:
    """Run the four checks (see the module docstring); stops the case's daemons with SIGTERM
    once the jobs are done."""
    still_open = _wait_plans_closed(repos, timeout)
    fb.repair()
    held = fb.held(pending_only=True)
    settle = time.monotonic() + HOLD_SETTLE
    while held and not still_open and time.monotonic() < settle:
        time.sleep(1)  # a release may be one cycle away
        fb.repair()
        held = fb.held(pending_only=True)
    end = time.monotonic() + timeout
    states: dict[int, str] = {}
    while time.monotonic() < end:
        facts = fb.slurm.job_facts([j.job_id for j in fb.jobs]) if fb.jobs else {}
        states = {j.job_id: (facts[j.job_id].state.value if j.job_id in facts else "GONE")
                  for j in fb.jobs}
        if all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "GONE",
                     "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")
               for s in states.values()):
            break
        fb.repair()
        time.sleep(0.5)
    for d in fb.daemons:
        d.stop()
    held = sorted({*held, *fb.held()})  # and none is held at the end either

    lost = [f"{j.name} ({j.job_id}) {states.get(j.job_id)}" for j in fb.jobs
            if states.get(j.job_id) != "COMPLETED"]
    wrong = []
    for j in fb.jobs:
        if states.get(j.job_id) == "COMPLETED":
            want = json.loads(json.dumps(reference(fb.steps_of(j))))
            got = json.loads(j.result.read_text()) if j.result.exists() else None
            if got != want:
                wrong.append(f"{j.name}: result differs from an uninterrupted run")
    # ``gone`` is also a victim that completed during the plan: lost only if it did not
    gone = [f"plan {p.plan_id} victim {v.job_id}" for r in repos for p in r.history(limit=1000)
            for v in p.victims if v.state is VictimState.GONE
            and states.get(v.job_id) != "COMPLETED"]
    out = [Check(NAMES[0], not (lost or wrong or gone),
                 "; ".join([*(f"not completed: {x}" for x in lost), *wrong,
                            *(f"recorded gone: {x}" for x in gone)])
                 or f"{len(fb.jobs)} job(s) completed, results bit-identical")]
    out.append(Check(NAMES[1], not held and not still_open,
                     "; ".join([*([f"held: {held}"] if held else []),
                                *([f"plans still open: {still_open}"] if still_open else []),
                                ]) or "nothing held, no plan open"
                     + (f" (admin: {'; '.join(fb.repairs)})" if fb.repairs else "")))
    problems = [p for j in fb.jobs for p in checkpoint_problems(j)]
    restarts = sum(max(0, len(run_logs(j)) - 1) for j in fb.jobs)
    out.append(Check(NAMES[2], not problems, "; ".join(problems)
                     or f"{restarts} restart(s), each from the newest checkpoint"))
    out.append(_counters(fb, repos, restarts_by_plans_only))
    return out


def _counters(fb: FaultBed, repos: Sequence[Repository], strict: bool) -> Check:
    bad: list[str] = []
    plans = [p for r in repos for p in r.history(limit=1000)]
    bad += [f"plan {p.plan_id} is {p.state}" for p in plans if p.state not in FINAL_PLAN_STATES]
    requeued: dict[int, int] = {}
    for p in plans:
        for v in p.victims:
            if v.state is VictimState.REQUEUED:
                requeued[v.job_id] = requeued.get(v.job_id, 0) + 1
    facts = fb.slurm.job_facts([j.job_id for j in fb.jobs]) if fb.jobs else {}
    for j in fb.jobs:
        f = facts.get(j.job_id)
        if f is None:
            continue
        want = requeued.get(j.job_id, 0) + fb.launch_requeues.get(j.job_id, 0)
        if (f.restart_count != want) if strict else (f.restart_count < want):
            bad.append(f"{j.name}: Slurm restarted it {f.restart_count} time(s), plans "
                       f"recorded {requeued.get(j.job_id, 0)} requeue(s)"
                       + (f" and Slurm {fb.launch_requeues[j.job_id]} after a refused launch"
                          if j.job_id in fb.launch_requeues else ""))
    logged = sum(d.cycles() for d in fb.daemons)
    kills = sum(1 for d in fb.daemons if d.sigkilled)
    totals: dict[str, int] = {}
    for r in repos:
        raw = r.get_value(TOTALS_KEY)
        if isinstance(raw, dict):
            for key, value in raw.items():
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
    if fb.daemons and not logged <= totals.get("cycles", 0) <= logged + kills:
        bad.append(f"the daemons' stored cycle total is {totals.get('cycles', 0)}, their logs "
                   f"show {logged} committed cycle(s) and {kills} SIGKILL(s)")
    hung = [d.log.name for d in fb.daemons if d.term_timeout]
    bad += [f"{name}: the daemon did not stop within {SIGTERM_WAIT:g} s of SIGTERM"
            for name in hung]
    done = sum(1 for p in plans if p.state is PlanState.DONE)
    detail = (f"{len(plans)} plan(s) ({done} done), {sum(requeued.values())} requeue(s) = "
              f"Slurm restarts; stored cycles {totals.get('cycles', 0)} vs logged {logged} "
              f"(+{kills} SIGKILL(s)), skipped {totals.get('cycles_skipped', 0)}"
              if fb.daemons else f"{len(plans)} plan(s) ({done} done), "
              f"{sum(requeued.values())} requeue(s) = Slurm restarts")
    return Check(NAMES[3], not bad, "; ".join(bad) or detail)

