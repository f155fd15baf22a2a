"""``hai-slurm status``: the admin's view of the daemon's world, one frame at a time.

:func:`gather` reads, like ``priority explain`` does (:func:`~.live.live_decision`): one Slurm
snapshot, the stored jobs, events and policy state, the policy's decision for ``now``, plus the
leader lease, the unfinished and recent plans, the recent shadow plans and the credit balances.
Nothing is written. :func:`render` is pure: a :class:`Status` in, plain-text lines out (classes,
teams with their quota use, jobs past half their class's bound, open and recent plans).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import StateError
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.live import live_decision
from hai_slurm.priority.policy.ladder import LADDER
from hai_slurm.priority.policy.units import format_duration
from hai_slurm.priority.store import FINAL_PLAN_STATES, Plan, ShadowPlan
from hai_slurm.priority.store.lock import LeaderLock, LeaseHolder
from hai_slurm.priority.store.repository import Repository
from hai_slurm.priority.store.shadow import ShadowPlans
from hai_slurm.slurm_plugins.types import SlurmClient


@dataclass(frozen=True)
class ClassRow:
    """One priority class now (pending jobs by effective class; the bound of the base class)."""

    cls: PriorityClass
    pending: int
    running: int
    gpus_running: int
    longest_wait: float
    bound: float
    past_half: int


@dataclass(frozen=True)
class TeamRow:
    """One team now."""

    team: str
    quota_gpus: int
    gpus: int
    pending: int
    running: int
    preempted: int
    protected_until: float | None
    credit_gpu_hours: float


@dataclass(frozen=True)
class LateJob:
    """A pending job that waited more than half its class's bound."""

    job_id: int
    user: str
    team: str
    base: PriorityClass
    effective: PriorityClass
    wait: float
    bound: float


@dataclass(frozen=True)
class Status:
    """Everything one frame shows."""

    now: float
    nodes: int
    nodes_available: int
    gpus: int
    gpus_used: int
    leader: LeaseHolder | None
    classes: tuple[ClassRow, ...]
    teams: tuple[TeamRow, ...]
    late: tuple[LateJob, ...]
    open_plans: tuple[Plan, ...]
    recent_plans: tuple[Plan, ...]
    shadow_plans: tuple[ShadowPlan, ...]
    preempt_enabled: bool


def gather(slurm: SlurmClient, repo: Repository, config: DaemonConfig, *,
           now: float | None = None, recent: int = 5) -> Status:
    """Read everything a frame shows (see the module docstring); raises SlurmError/StateError
    when Slurm or the database cannot be read."""
    at = time.time() if now is None else now
    snap, _tracked, decision = live_decision(slurm, repo, config.policy, at)
    res, jobs = decision.result, decision.inputs.jobs
    pending, running, gpus_running = Counter[PriorityClass](), Counter[PriorityClass](), \
        Counter[PriorityClass]()
    longest: dict[PriorityClass, float] = {}
    past: Counter[PriorityClass] = Counter()
    late: list[LateJob] = []
    team_pending: Counter[str] = Counter()
    team_running: Counter[str] = Counter()
    for p in decision.inputs.pending:
        d = res.pending[p.job_id]
        pending[d.effective] += 1
        team_pending[p.team] += 1
        r = d.reason
        longest[r.base] = max(longest.get(r.base, 0.0), r.wait)
        if r.bound > 0 and r.wait > r.bound / 2:
            past[r.base] += 1
            late.append(LateJob(p.job_id, p.user, p.team, r.base, d.effective, r.wait, r.bound))
    for job_id, rd in res.running.items():
        running[rd.effective] += 1
        gpus_running[rd.effective] += jobs[job_id].gpus_allocated
        team_running[rd.team] += 1
    classes = tuple(ClassRow(c, pending[c], running[c], gpus_running[c], longest.get(c, 0.0),
                             config.policy.classes[c].max_wait, past[c])
                    for c in reversed(LADDER))
    credits = repo.credit_balances()
    teams = tuple(TeamRow(t.team, t.quota_gpus, t.usage.gpus, team_pending[t.team],
                          team_running[t.team], t.preempted, t.protected_until,
                          credits.get(t.team, 0.0))
                  for t in sorted(res.teams.values(), key=lambda t: t.team))
    history = repo.history(limit=recent)
    try:
        shadows = tuple(ShadowPlans(repo.engine).history(limit=recent))
    except StateError:  # a schema older than the shadow table: nothing to show
        shadows = ()
    return Status(
        now=at, nodes=len(snap.nodes), nodes_available=sum(1 for n in snap.nodes if n.available),
        gpus=sum(n.gpus for n in snap.nodes), gpus_used=sum(n.gpus_used for n in snap.nodes),
        leader=LeaderLock(repo.engine).holder(at), classes=classes, teams=teams,
        late=tuple(sorted(late, key=lambda j: -j.wait / j.bound)),
        open_plans=tuple(repo.unfinished_plans()),
        recent_plans=tuple(p for p in history if p.state in FINAL_PLAN_STATES),
        shadow_plans=shadows, preempt_enabled=config.preempt.enabled)


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _dur(seconds: float) -> str:
    return format_duration(round(seconds)) if seconds >= 1 else "0s"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return ["  " + fmt.format(*header).rstrip()] + ["  " + fmt.format(*r).rstrip() for r in rows]


def _plan_line(p: Plan, now: float) -> str:
    bene = ", ".join(f"{b.job_id} ({b.team})" for b in p.beneficiaries)
    victims = ", ".join(f"{v.job_id} ({v.team}, {v.state.value})" for v in p.victims)
    age = f"open {_dur(now - p.created_at)}" if p.state not in FINAL_PLAN_STATES else \
        f"took {_dur(p.updated_at - p.created_at)}"
    return (f"  plan {p.plan_id} {p.state.value:<11} {_clock(p.created_at)} {age}: for {bene} "
            f"from {victims}")


def render(s: Status, *, late_limit: int = 10) -> list[str]:
    """One frame as plain-text lines (see the module docstring)."""
    if s.leader is None:
        daemon = "no daemon holds the leader lease (none running, or all standing by)"
    else:
        daemon = (f"leader {s.leader.owner}, lease renewed {_dur(s.now - s.leader.renewed_at)} "
                  "ago")
    out = [f"hai-slurm status  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(s.now))}",
           f"cluster: {s.nodes} nodes ({s.nodes_available} available), {s.gpus_used}/{s.gpus} "
           f"GPUs in use; daemon: {daemon}; preemption "
           f"{'on' if s.preempt_enabled else 'off'}", "", "Classes"]
    out += _table(("class", "pending", "running", "GPUs", "longest wait", "bound",
                   "past half"),
                  [(c.cls.value, str(c.pending), str(c.running), str(c.gpus_running),
                    _dur(c.longest_wait), _dur(c.bound), str(c.past_half)) for c in s.classes])
    out += ["", "Teams"]
    if s.teams:
        out += _table(("team", "GPUs/quota", "use", "pending", "running", "preempted",
                       "protected", "owed GPU-h"),
                      [(t.team, f"{t.gpus}/{t.quota_gpus}",
                        f"{100 * t.gpus / t.quota_gpus:.0f}%" if t.quota_gpus else "-",
                        str(t.pending), str(t.running), str(t.preempted),
                        f"until {_clock(t.protected_until)}" if t.protected_until else "-",
                        f"{t.credit_gpu_hours:.2f}") for t in s.teams])
    else:
        out.append("  no team has pending or running jobs")
    out += ["", f"Jobs past half their bound ({len(s.late)})"]
    if s.late:
        out += _table(("job", "user", "team", "class", "waited", "of bound"),
                      [(str(j.job_id), j.user, j.team,
                        j.base.value if j.base is j.effective else
                        f"{j.base.value}->{j.effective.value}",
                        _dur(j.wait), f"{100 * j.wait / j.bound:.0f}% of {_dur(j.bound)}")
                       for j in s.late[:late_limit]])
        if len(s.late) > late_limit:
            out.append(f"  ... and {len(s.late) - late_limit} more")
    else:
        out.append("  none")
    out += ["", f"Open plans ({len(s.open_plans)})"]
    out += [_plan_line(p, s.now) for p in s.open_plans] or ["  none"]
    out += ["", "Recent plans"]
    out += [_plan_line(p, s.now) for p in s.recent_plans] or ["  none"]
    if s.shadow_plans:
        out += ["", "Recent shadow plans (daemon --shadow; not carried out)"]
        out += [f"  shadow plan {sp.plan_id} {_clock(sp.created_at)}: for "
                f"{sp.beneficiary.job_id} ({sp.beneficiary_class}, {sp.beneficiary.team}) from "
                + ", ".join(f"{v.job_id} ({v.priority_class}, {v.team})" for v in sp.victims)
                for sp in s.shadow_plans]
    return out
