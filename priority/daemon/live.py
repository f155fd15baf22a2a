"""Live inputs for ``hai-slurm priority explain JOBID``: Slurm's queue now plus the daemon's store.

The explanation is computed exactly as the daemon's next cycle would: one snapshot, the stored
jobs, fairness events and policy state, :func:`~hai_slurm.priority.daemon.cycle.decide` with
``now``, then the planner on that view (its verdict: PREEMPT with the victims, NOT_WORTH with
both sides of the benefit test or that the job's class weighs 0, NO_VICTIMS with a count per
exclusion reason, IMPOSSIBLE, FITS, ...; for a running job, whether it may be a victim now).
Nothing is written, neither to Slurm nor to the database.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from hai_slurm.errors import ConfigError, StateError
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.cycle import (
    POLICY_STATE_KEY,
    Decision,
    decide,
    requeue_candidates,
    state_from_json,
    with_preemptions,
)
from hai_slurm.priority.daemon.factory import read_switches, topology_source
from hai_slurm.priority.daemon.planning import SnapshotPlanner, foreign_reservation
from hai_slurm.priority.daemon.save_times import SaveTimes
from hai_slurm.priority.executor.preemption import PreemptionExecutor
from hai_slurm.priority.hooks import Claims, CycleView
from hai_slurm.priority.planner.search import victim_status
from hai_slurm.priority.policy.explain import explain, explain_running
from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.priority.policy.state import PendingJob, PolicyResult, RunningJob
from hai_slurm.priority.store.engine import current_revision, make_engine, masked
from hai_slurm.priority.store.records import TrackedJob
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.types import ClusterSnapshot, Job, JobState, SlurmClient


def explain_job(job_id: int, pending: tuple[PendingJob, ...], running: tuple[RunningJob, ...],
                result: PolicyResult, config: PolicyConfig,
                borrowed_discount: float | None = None, *, now: float) -> str | None:
    """The plain-words explanation of one pending or running job, or None if it is neither
    (``borrowed_discount``: the planner's ``borrowed_discount``, when preemption is on;
    ``now``: the time the policy decided at, for a running job's run time)."""
    for job in pending:
        if job.job_id == job_id:
            mine = result.priorities[job_id]
            ahead = sum(1 for p in result.priorities.values() if p > mine)
            return explain(job, result.pending[job_id], result.teams.get(job.team),
                           config=config, jobs_ahead=ahead, borrowed_discount=borrowed_discount)
    for run in running:
        if run.job_id == job_id:
            return explain_running(run, result.running[job_id], result.teams.get(run.team),
                                   config=config, now=now,
                                   borrowed_discount=borrowed_discount)
    return None


def borrowed_discount(config: DaemonConfig) -> float | None:
    """The planner's ``borrowed_discount`` for the explanations (None: preemption off)."""
    return config.preempt.planner.borrowed_discount if config.preempt.enabled else None


def live_decision(slurm: SlurmClient, repo: Repository, config: PolicyConfig,
                  now: float) -> tuple[ClusterSnapshot, Mapping[int, TrackedJob], Decision]:
    """What the daemon would decide now (read-only): the snapshot, stored jobs and decision."""
    snap = slurm.snapshot()
    loaded = repo.load_jobs()
    candidates = requeue_candidates(snap, loaded)
    tracked = with_preemptions(loaded, candidates, repo.daemon_requeues(candidates))
    decision = decide(snap, tracked=tracked,
                      events=repo.events_since(now - config.fairness.window),
                      state=state_from_json(repo.get_value(POLICY_STATE_KEY)),
                      protections=repo.active_protections(now), config=config, now=now)
    return snap, tracked, decision


def planner_verdict(job_id: int, view: CycleView, config: DaemonConfig) -> str:
    """The planner's verdict on ``job_id`` as the daemon's next cycle would reach it: for a
    pending job its outcome and why (victims listed for PREEMPT), for a running job whether it
    may be a victim now."""
    if not config.preempt.enabled:
        return "Planner: preemption is off ([planner] enabled = false)."
    switches = read_switches(view.slurm) if config.description is None else ()
    # every running job's own save and restart figures, read now (the daemon reads a few a
    # cycle and keeps them)
    planner = SnapshotPlanner(topology_source(config, switches), config.preempt.planner,
                              save_times=SaveTimes(reads_per_pass=max(1, len(view.running))))
    snapshot, result = planner.planning_pass(view)
    decision = result.decisions.get(job_id)
    if decision is not None:
        lines = [f"Planner: {decision.outcome.name}: {decision.reason}"]
        pending = view.snapshot.job(job_id)
        if pending is not None and pending.takes_whole_nodes:
            lines.append(f"  it takes whole nodes (sbatch --exclusive"
                         f"{'' if pending.exclusive == 'node' else '=' + pending.exclusive}):"
                         " it waits for every GPU of each node it gets")
        lines += [f"  left out of its plans: {text}" for text in planner.left_out(job_id)]
        plan = result.plan_for(job_id)
        if plan is not None:
            lines += [f"  victim {v.reason}" for v in plan.victims]
        return "\n".join(lines)
    job = view.snapshot.job(job_id)
    if job is not None and job.state is JobState.PENDING and planner.unplanned is not None:
        return f"Planner: not planned: {planner.unplanned}; no job is planned until it can be read."
    if job is not None and job.state is JobState.PENDING:
        return (f"Planner: not planned: "
                f"{not_planned(job, view.claims, view.now, planner.config.save_cost)}.")
    if job_id in view.claims.victims:
        return ("Planner: it gives way to an open plan now (asked to save, then requeued), so "
                "no other plan takes it.")
    holder = next((h for h in snapshot.running if h.job_id == job_id), None)
    if holder is None:
        return "Planner: the job holds no GPUs the planner places, so it is never a victim."
    return f"Planner: {victim_status(holder, planner.config, view.now)}."


_BLOCKERS = {
    "BeginTime": "its begin time (sbatch --begin)",
    "Dependency": "its dependency (sbatch --dependency)",
    "DependencyNeverSatisfied": "a dependency that can never be met",
    "JobArrayTaskLimit": "its array's limit on running tasks (--array=...%N)",
    "Reservation": "its reservation, not active yet",
    "Licenses": "licenses",
}


def not_planned(job: Job, claims: Claims, now: float, soon: float) -> str:
    """Why the planner's pass leaves pending ``job`` out (see SnapshotPlanner.snapshot), with
    the open plans' ``claims``, at ``now``, a begin time within ``soon`` not counting."""
    if job.job_id in claims.beneficiaries:
        return "an open plan is freeing GPUs for it"
    if job.held or job.job_id in claims.held:
        return f"it is held ({job.reason or 'held'}); a held job cannot start"
    blocker = job.start_blocker
    if blocker is not None and not job.waits_for_gpus(now, soon):
        what = _BLOCKERS.get(blocker, "a limit or setting of its partition, QOS or account")
        return (f"Slurm keeps it back for {what} ({blocker}), which free GPUs do not give, "
                f"so no job is preempted for it")
    if foreign_reservation(job):
        return (f"it waits for reservation {job.reservation} (sbatch --reservation), whose "
                "nodes the planner leaves out (only that reservation's jobs start there)")
    if job.exclusive == "topo":
        return ("it asks for a topology segment of its own (sbatch --exclusive=topo), which "
                "the planner does not free")
    if job.takes_whole_nodes:
        return ("it takes whole nodes (sbatch --exclusive) and no size of node it may use can "
                "hold it with enough such nodes where only jobs with GPUs run (the planner "
                "frees only those)")
    return "it is not among the jobs this pass looks at"


def open_repository(config: DaemonConfig) -> Repository:
    """The daemon's database, read as it is (never migrated or created here: connecting to
    an absent SQLite file would create it, owned by whoever ran the command)."""
    engine = make_engine(config.database_url)
    file = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if (file and file != ":memory:" and not file.startswith("file:")
            and not Path(file).exists()) or current_revision(engine) is None:
        raise StateError(f"database {masked(config.database_url)} holds no daemon state yet; "
                         "start the daemon (hai-slurm daemon) or pass --config with its "
                         "database_url")
    return Repository(engine)


def explain_live(job_id: int, slurm: SlurmClient, repo: Repository, config: DaemonConfig,
                 now: float | None = None) -> str:
    """Explain ``job_id`` from live state; ConfigError when Slurm has it neither pending nor
    running."""
    at = time.time() if now is None else now
    snap, tracked, decision = live_decision(slurm, repo, config.policy, at)
    text = explain_job(job_id, decision.inputs.pending, decision.inputs.running,
                       decision.result, config.policy, borrowed_discount(config), now=at)
    if text is None:
        raise ConfigError(f"job {job_id} is neither pending nor running in Slurm now",
                          key="JOBID", value=job_id)
    slurm_job = decision.inputs.jobs[job_id]
    # the open plans' beneficiaries, victims, held jobs and guarded nodes, as the daemon's
    # cycle reads them (read only: nothing is stepped)
    claims = PreemptionExecutor(slurm, repo).claims()
    if job_id in claims.beneficiaries or job_id in claims.held:
        text += (f"\nSlurm has priority {slurm_job.priority}; the daemon leaves it to the open "
                 "plan that " + ("frees GPUs for it." if job_id in claims.beneficiaries
                                 else "holds it."))
    elif job_id in decision.writes:
        text += (f"\nSlurm still has priority {slurm_job.priority}; the daemon's next cycle "
                 f"writes {decision.writes[job_id]}.")
    view = CycleView(now=at, snapshot=snap, pending=decision.inputs.pending,
                     running=decision.inputs.running, result=decision.result, tracked=tracked,
                     config=config.policy, slurm=slurm, repository=repo, claims=claims)
    return text + "\n" + planner_verdict(job_id, view, config)
