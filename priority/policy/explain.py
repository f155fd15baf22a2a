"""Plain-words explanations of the policy's decisions (``hai-slurm priority explain JOBID``).

Pure text builders: they read the job, the policy's decision and the team's standing, and return
the text; fetching those from the daemon's state is the caller's business.
"""

from __future__ import annotations

import time
from enum import Enum

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.priority.policy.ladder import LADDER, RANK, URGENT_FROM
from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.priority.policy.state import (
    AUTO,
    PendingDecision,
    PendingJob,
    Rule,
    RunningDecision,
    RunningJob,
    TeamState,
)
from hai_slurm.priority.policy.units import format_duration as dur


def _name(value: object) -> str:
    """A class's name as users write it (str-mixin enums format as 'PriorityClass.X' in 3.11)."""
    return value.value if isinstance(value, Enum) else str(value)


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _times(n: int) -> str:
    return "1 time" if n == 1 else f"{n} times"


def _class_origin(job: PendingJob | RunningJob, auto_class: object) -> str:
    if job.requested == AUTO:
        return (f"requested AUTO, which resolved to {_name(auto_class)} (the highest class whose "
                "per-class GPU quota still has room, else the default class)")
    if job.source is ClassOrigin.DEFAULT:
        return (f"{_name(job.requested)} is the default class (the script has no "
                "#HAI --priority line)")
    return f"requested {_name(job.requested)} with #HAI --priority"


def _borrowed_rule(weight: float | None) -> str:
    """How the planner weighs a borrowed victim (``[planner] borrowed_discount``; None:
    not known here), as a sentence about borrowed jobs."""
    if weight is None:
        return ("borrowed jobs are preferred as victims when a team under its quota is "
                "waiting, as far as [planner] borrowed_discount says")
    if weight <= 0:
        return "borrowed jobs give way first when a team under its quota is waiting"
    if weight >= 1:
        return ("borrowed jobs give way like jobs within quota, by least lost work ([planner] "
                "borrowed_discount = 1)")
    return (f"borrowed jobs are preferred as victims: their lost work counts {weight:g} x "
            "against jobs within quota, so a job within quota gives way instead only when the "
            f"borrowed one would lose over {1 / weight:.3g} x its work")


def _team_lines(team: TeamState | None, config: PolicyConfig,
                borrowed_discount: float | None = None) -> list[str]:
    if team is None:
        return []
    window = dur(config.fairness.window)
    quota = f"{team.usage.gpus} of its {team.quota_gpus} GPU quota"
    if team.over_quota:
        quota += (f" ({team.usage.gpus - team.quota_gpus} GPUs borrowed: "
                  f"{_borrowed_rule(borrowed_discount)})")
    lines = [f"Quota: team {team.team} runs {quota}."]
    fair = (f"Fairness: in the last {window} team {team.team} was preempted "
            f"{_times(team.preempted)} and preempted others {_times(team.preempting)}.")
    if team.protected_until is not None:
        fair += (f" It is protected until {_clock(team.protected_until)}: its running jobs are "
                 f"not preemption victims (more than {config.fairness.protect_after} "
                 f"preemptions in the window{_protect_excess(config)}), except for urgent "
                 f"jobs ({_name(URGENT_FROM)} and above) and jobs past their class bound.")
    if team.demoting:
        fair += (f" It preempted more than {config.fairness.demote_after} times"
                 f"{_excess(config)}, so its new "
                 f"jobs of class {_name(config.fairness.demote_from)} and above are demoted one "
                 "class until the window clears.")
    lines.append(fair)
    return lines


def _protect_excess(config: PolicyConfig) -> str:
    """The share-relative part of the protection rule, in words ('' when it is off)."""
    y = config.fairness.protect_excess
    return (f", and more than {y:g} x as often per quota GPU as the other teams: a team "
            "preempted only in proportion to its quota is not protected" if y > 0 else "")


def _excess(config: PolicyConfig) -> str:
    """The share-relative part of the demotion rule, in words ('' when it is off)."""
    x = config.fairness.demote_excess
    return (f" and more than {x:g} x as often per quota GPU as the other teams" if x > 0 else "")


def explain(job: PendingJob, decision: PendingDecision, team: TeamState | None = None, *,
            config: PolicyConfig, jobs_ahead: int | None = None,
            borrowed_discount: float | None = None) -> str:
    """Why a pending job has its place, in plain words (one statement per line).

    ``borrowed_discount``: the planner's ``borrowed_discount``, for the words on borrowed jobs
    (None: not known; the setting is named instead)."""
    r = decision.reason
    eff = decision.effective
    lines = [f"Job {job.job_id} (user {job.user}, team {job.team}) is pending at priority "
             f"{decision.priority} in class {_name(eff)}."]
    lines.append(f"Class: {_class_origin(job, r.auto_class)}.")
    if r.demoted:
        lines.append(f"Fairness demotion: submitted while team {job.team} had preempted others "
                     f"more than {config.fairness.demote_after} times{_excess(config)} in the "
                     f"last {dur(config.fairness.window)}, so it counts one class lower until the "
                     "window clears.")
    if r.decayed:
        lines.append(f"Decay: it has run {dur(job.run_time)} in total, and "
                     f"{_name(config.decay.source)} counts as {_name(config.decay.target)} after "
                     f"{dur(config.decay.after)} of running.")
    if r.aging_steps:
        lines.append(f"Aging: it has waited {dur(r.wait)}, past the {dur(r.bound)} bound of "
                     f"{_name(r.base)}, so it was promoted {r.aging_steps} "
                     f"class{'es' if r.aging_steps > 1 else ''} to {_name(eff)} ({r.depth} "
                     f"job{'s' if r.depth != 1 else ''} pending in {_name(r.base)}; deep queues "
                     "promote further). Once running it keeps that rank against the classes it "
                     f"overtook, but counts one class lower against jobs that asked for "
                     f"{_name(eff)}: they may preempt it after the minimum run time (aged-in "
                     "jobs yield within their class).")
        if RANK[r.base] == 0:
            lines.append(f"Aging orders the queue only: {_name(r.base)} preempts nothing.")
        else:
            lines.append(f"Aging orders the queue; past the bound of {_name(r.base)} it preempts "
                         f"jobs below {_name(r.base)} (unless [planner] aged_preempt = true: "
                         f"below {_name(eff)}) as urgent work does, protected teams' jobs too, "
                         "whatever its class's weight.")
    elif RANK[eff] >= RANK[config.aging.max_class]:
        lines.append(f"Aging: it has waited {dur(r.wait)}; {_name(eff)} is at or above the aging "
                     f"ceiling {_name(config.aging.max_class)}, so waiting does not promote it.")
    else:
        lines.append(f"Aging: it has waited {dur(r.wait)} of the {dur(r.bound)} bound of "
                     f"{_name(eff)}.")
    if r.next_promotion_in is not None and r.aging_steps:
        lines.append(f"Next promotion in {dur(r.next_promotion_in)} if it is still waiting.")
    elif r.next_promotion_in is not None:
        lines.append(f"Promotion in {dur(r.next_promotion_in)} if it is still waiting.")
    order = f"Order within {_name(eff)}: {r.rule.value}"
    if r.rule is Rule.FCFS:
        order += "; earlier submissions go first."
    elif r.rule is Rule.FAIR_SHARE and r.share is not None:
        share = "none (quota 0)" if r.share == float("inf") else f"{r.share:.2f}"
        order += (f"; team {job.team}'s dominant share of its quota (GPU, CPU, memory) is "
                  f"{share}; lower shares go first, then earlier submissions.")
    else:
        order += (f"; each team's jobs take turns (round-robin tag {r.rr_tag}); a team's own "
                  "jobs keep their submit order.")
    lines.append(order)
    if job.preemptions:
        lines.append(f"Compensation: preempted (requeued by the daemon) {_times(job.preemptions)}; "
                     f"its original submit time counts ({dur(r.age_restored)} of age restored) "
                     f"and it gets {dur(r.boost)} of extra age (grows with preemptions and "
                     f"waiting, capped at {dur(config.compensation.cap)}, never crosses into "
                     "another class).")
    other = job.restarts - job.preemptions
    if other > 0:
        lines.append(f"Requeued {_times(other)} not by the daemon (by its owner, an admin or "
                     "Slurm): no compensation for those; the job waits as Slurm restarted it.")
    lines.extend(_team_lines(team, config, borrowed_discount))
    waits = f"Waiting for: {job.slurm_reason}" if job.slurm_reason else "Waiting for: its turn"
    if jobs_ahead is not None:
        waits += f"; {jobs_ahead} pending job{'s' if jobs_ahead != 1 else ''} ahead of it"
    lines.append(waits + ".")
    return "\n".join(lines)


def explain_running(job: RunningJob, decision: RunningDecision, team: TeamState | None = None,
                    *, config: PolicyConfig, now: float,
                    borrowed_discount: float | None = None) -> str:
    """Why a running job may or may not give way to others (``borrowed_discount`` as in
    :func:`explain`; ``now``: when the policy decided, for the run time the job has then, see
    :meth:`RunningJob.run_time_at`)."""
    ran = job.run_time_at(now)
    lines = [f"Job {job.job_id} (user {job.user}, team {job.team}) is running in class "
             f"{_name(decision.effective)} since {_clock(job.start_time)}."]
    if decision.decayed:
        lines.append(f"Decay: {_name(config.decay.source)} counts as "
                     f"{_name(config.decay.target)} after {dur(config.decay.after)} of running; "
                     f"it has run {dur(ran)}.")
    if not decision.preemptible:
        lines.append("It is not preemptible: #HAI --preemptible=no, sbatch --no-requeue, or an "
                     "interactive srun or salloc job (Slurm requeues neither of the last two).")
    elif decision.protected:
        lines.append(f"It is protected: team {job.team} was preempted often recently. Of the "
                     f"jobs above its class, only urgent ones ({_name(URGENT_FROM)} and above) "
                     "and ones past their class bound may preempt it.")
    else:
        above = f"Jobs of a class above {_name(decision.effective)} may preempt it"
        if RANK[decision.effective] + 1 >= RANK[URGENT_FROM]:
            lines.append(above + ".")
        else:
            lines.append(above + f": urgent ones ({_name(URGENT_FROM)} and above), and the "
                         "others once they have waited past their class bound (or sooner, by "
                         "the benefit test, when [planner.class_weights] weighs their class).")
    asked = job.requested
    eff = decision.effective
    if isinstance(asked, PriorityClass) and RANK[asked] < RANK[eff] and decision.preemptible:
        lines.append(f"It asked for {_name(asked)} and reached {_name(eff)} by aging: against "
                     f"jobs that asked for {_name(eff)} it counts as {_name(LADDER[RANK[eff] - 1])}"
                     ", so they may preempt it too (aged-in jobs yield within their class).")
    if decision.borrowed:
        lines.append("It runs on borrowed GPUs (beyond its team's quota): "
                     f"{_borrowed_rule(borrowed_discount)}.")
    lines.extend(_team_lines(team, config, borrowed_discount))
    return "\n".join(lines)
