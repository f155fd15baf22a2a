"""``hai-slurm preempt history [--team T]``: what the executor did, newest plan first.

Reads the daemon's database (``--config`` like the daemon, or ``--state-dir`` for the built-in
defaults) and never writes. :func:`format_plan` is the pure part: one plan in plain words.
"""

from __future__ import annotations

import time

import click

from hai_slurm.priority.store import Plan, PlanVictim, ShadowPlan, VictimState

_VICTIM_WORDS = {
    VictimState.CHOSEN: "chosen, not asked yet",
    VictimState.ASKED: "asked, no answer yet",
    VictimState.ACKED: "saved",
    VictimState.MISSED: "missed its deadline",
    VictimState.REQUEUED: "requeued",
    VictimState.ENDED: "ended without an acknowledgement, to be requeued",
    VictimState.GONE: "not requeued (completed, cancelled, or forgotten by Slurm)",
}


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _victim(v: PlanVictim) -> str:
    words = _VICTIM_WORDS[v.state]
    if v.ack_step is not None:
        words = f"saved at step {v.ack_step}" + (", requeued" if v.state is VictimState.REQUEUED
                                                 else "")
    if v.asked_at is not None and v.acked_at is not None:
        words += f" ({v.acked_at - v.asked_at:.1f} s to save)"
    return f"job {v.job_id} ({v.team}, {v.user}, {v.gpus} GPUs): {words}"


def format_plan(plan: Plan) -> list[str]:
    """One plan as indented lines: state, who gained, who gave way, the recorded steps."""
    took = plan.updated_at - plan.created_at
    lines = [f"plan {plan.plan_id}  {_clock(plan.created_at)}  {plan.state.value}  "
             f"(took {took:.1f} s, on miss: {plan.on_miss.value})"]
    for b in plan.beneficiaries:
        lines.append(f"  for   job {b.job_id} ({b.team}, {b.user}, {b.gpus} GPUs)")
    for i, v in enumerate(plan.victims):
        lines.append(f"  {'from' if i == 0 else '':<5} {_victim(v)}")
    lines.append(f"  why   {plan.reason}")
    t0 = plan.steps[0].at if plan.steps else plan.created_at
    trail = " -> ".join(f"{s.to_state.value} +{s.at - t0:.1f}s" for s in plan.steps)
    lines.append(f"  steps {trail}")
    if plan.steps and plan.steps[-1].note and plan.steps[-1].note != plan.reason:
        lines.append(f"  end   {plan.steps[-1].note}")
    return lines


def format_shadow_plan(plan: ShadowPlan) -> list[str]:
    """One would-be plan as indented lines: who would gain, who would give way, the commands."""
    b = plan.beneficiary
    lines = [f"shadow plan {plan.plan_id}  {_clock(plan.created_at)}  not carried out "
             f"(on miss: {plan.on_miss.value})",
             f"  for   job {b.job_id} ({plan.beneficiary_class}, {b.team}, {b.user}, "
             f"{b.gpus} GPUs)" + (f" on {','.join(plan.nodes)}" if plan.nodes else "")]
    for i, v in enumerate(plan.victims):
        lines.append(f"  {'from' if i == 0 else '':<5} job {v.job_id} ({v.priority_class}, "
                     f"{v.team}, {v.user}, {v.gpus} GPUs), {v.deadline:g} s to save")
    lines.append(f"  why   {plan.reason}")
    for i, action in enumerate(plan.actions):
        lines.append(f"  {'would' if i == 0 else '':<5} {action}")
    return lines


@click.group()
def preempt() -> None:
    """Preemption plans: what was preempted for whom, and how it went."""


@preempt.command()
@click.option("--team", default=None, help="Only plans where this team gained or lost a job.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10000))
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="HAI_SLURM_CONFIG", help="Daemon configuration (for its database_url).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Without --config: the daemon's state dir (SQLite database inside).")
@click.option("--shadow", is_flag=True,
              help="The plans `hai-slurm daemon --shadow` would have carried out instead.")
def history(team: str | None, limit: int, config_path: str | None,
            state_dir: str | None, shadow: bool) -> None:
    """Newest preemption plans first, with their victims and recorded steps."""
    from hai_slurm.priority.cli.daemon import daemon_config
    from hai_slurm.priority.daemon.live import open_repository

    repo = open_repository(daemon_config(config_path, state_dir, None))
    if shadow:
        from hai_slurm.errors import StateError
        from hai_slurm.priority.store.engine import current_revision, head_revision
        from hai_slurm.priority.store.shadow import ShadowPlans

        at = current_revision(repo.engine)
        if at is not None and at < "0002":
            raise StateError(f"the database is at schema revision {at}, older than the shadow "
                             f"plans (0002; this hai-slurm is at {head_revision()}): run "
                             "hai-slurm daemon --migrate (back the database up first)")
        shadows = ShadowPlans(repo.engine).history(team=team, limit=limit)
        if not shadows:
            click.echo("no shadow plans recorded" + (f" for team {team}" if team else "")
                       + " (they come from hai-slurm daemon --shadow)")
            return
        for i, sp in enumerate(shadows):
            if i:
                click.echo("")
            for line in format_shadow_plan(sp):
                click.echo(line)
        return
    plans = repo.history(team=team, limit=limit)
    if not plans:
        click.echo("no preemption plans recorded" + (f" for team {team}" if team else ""))
        return
    for i, plan in enumerate(plans):
        if i:
            click.echo("")
        for line in format_plan(plan):
            click.echo(line)
