"""Turn what the planner returns into the executor's :class:`ExecutionRequest` (pure).

Accepted: an :class:`ExecutionRequest` (as is), a planner
:class:`~hai_slurm.priority.planner.types.PreemptionPlan`, or a
:class:`~hai_slurm.priority.planner.types.PlanningResult` (each of its plans, in order).

* a victim's deadline is its ``#HAI --grace`` (from the ``hai:v1`` record in its admin_comment;
  the executor's default when it has none) capped by its class's ``grace_cap``;
* the miss policy is the ``on_deadline`` of the **beneficiary's** class: how urgent the waiting
  job is decides whether a slow victim is requeued anyway (``force``) or the plan is given up
  (``abort``).
"""

from __future__ import annotations

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.planner.types import PlanningResult, PreemptionPlan
from hai_slurm.priority.policy.settings import DeadlineAction, PolicyConfig
from hai_slurm.slurm_plugins.job_record import job_record
from hai_slurm.slurm_plugins.types import ClusterSnapshot

DEFAULT_GRACE = 60.0


def victim_deadline(job_id: int, cls: PriorityClass, snap: ClusterSnapshot,
                    config: PolicyConfig, default: float = DEFAULT_GRACE) -> float:
    """The job's own grace, capped by its class's grace cap (at least 1 s)."""
    job = snap.job(job_id)
    asked = job_record(job).grace if job is not None else None
    grace = float(asked) if asked is not None else default
    cap = config.classes[cls].grace_cap
    return max(1.0, min(grace, cap) if cap > 0 else grace)


def miss_policy(cls: PriorityClass, config: PolicyConfig) -> DeadlineAction:
    """What happens to a plan for a job of class ``cls`` when a victim misses its deadline."""
    action = config.classes[cls].on_deadline
    return DeadlineAction.FORCE if action is DeadlineAction.FORCE else DeadlineAction.ABORT


def request_from_plan(plan: PreemptionPlan, snap: ClusterSnapshot,
                      config: PolicyConfig, default_grace: float = DEFAULT_GRACE
                      ) -> ExecutionRequest:
    """One planner plan as an executor request (``default_grace``: a victim's deadline when
    it gave no ``#HAI --grace``, before the class cap)."""
    return ExecutionRequest(
        beneficiary=plan.beneficiary, victims=plan.victim_ids, nodes=tuple(plan.nodes),
        deadlines={v.job_id: victim_deadline(v.job_id, v.effective, snap, config, default_grace)
                   for v in plan.victims},
        on_miss=miss_policy(plan.beneficiary_class, config), reason=plan.reason,
        lost_work=plan.lost_work)


def requests_from(plan: object, snap: ClusterSnapshot, config: PolicyConfig,
                  default_grace: float = DEFAULT_GRACE) -> tuple[ExecutionRequest, ...]:
    """Every request in what a planner returned (see the module docstring)."""
    if isinstance(plan, ExecutionRequest):
        return (plan,)
    if isinstance(plan, PreemptionPlan):
        return (request_from_plan(plan, snap, config, default_grace),)
    if isinstance(plan, PlanningResult):
        return tuple(request_from_plan(p, snap, config, default_grace) for p in plan.plans)
    raise ConfigError(f"the executor cannot run a {type(plan).__name__}; the planner must return "
                      "a PreemptionPlan, a PlanningResult or an ExecutionRequest",
                      key="planner", value=type(plan).__name__)
