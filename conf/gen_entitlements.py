"""job_submit.lua's entitlements table from the description (pure).

The table's format and its Lua renderer belong to :mod:`hai_slurm.slurm_plugins.entitlements`;
this module only maps the description onto it: one class rule per priority class (its QOS, value,
grace defaults) and one account rule per team (its classes, highest first).
"""

from __future__ import annotations

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.model import ClassPolicy, ClusterDescription, Team
from hai_slurm.slurm_plugins.entitlements import (
    AccountRule,
    ClassRule,
    Entitlements,
    render_entitlements,
)


def _class_rule(cp: ClassPolicy, preempted: set[PriorityClass]) -> ClassRule:
    default_grace = max(1, cp.grace_time_s)
    allow = (cp.allow_non_preemptible if cp.allow_non_preemptible is not None
             else cp.cls not in preempted)
    return ClassRule(name=cp.cls.value, qos=cp.qos, value=cp.cls.weight,
                     allow_non_preemptible=allow,
                     max_grace=max(default_grace, cp.max_grace_s or 0),
                     default_grace=default_grace)


def _account_rule(team: Team) -> AccountRule:
    classes = tuple(sorted(team.classes, key=lambda c: -c.weight))
    normal_or_below = [c for c in classes if c.weight <= PriorityClass.NORMAL.weight]
    default = normal_or_below[0] if normal_or_below else classes[-1]
    # AUTO tries the team's classes from its highest down to its default class.
    auto = tuple(c.value for c in classes if c.weight >= default.weight)
    return AccountRule(account=team.name, classes=tuple(c.value for c in classes),
                       default_class=default.value, auto=auto)


def entitlements_of(desc: ClusterDescription) -> Entitlements:
    """The entitlements table the description implies."""
    preempted = {v for cp in desc.classes for v in cp.preempts}
    classes = tuple(_class_rule(desc.class_policy(c), preempted) for c in PriorityClass)
    accounts = tuple(_account_rule(t) for t in desc.teams if t.classes)
    default_team = desc.teams[0].name if desc.teams else "default"
    return Entitlements(classes=classes, accounts=accounts, default_team=default_team)


def render_entitlements_lua(desc: ClusterDescription) -> str:
    """Text of ``hai_entitlements.lua`` for the description."""
    return render_entitlements(entitlements_of(desc))
