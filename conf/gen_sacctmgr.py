"""The accounting set-up as an idempotent bash script of sacctmgr calls (pure: values -> text).

Each object is added (``add`` on an existing object only prints "Nothing new added", which the
script treats as success) and then ``modify``-ed to the wanted settings, so running the script
again converges instead of failing. Order: cluster, one QOS per priority class, one account per
team (plus its users, each allowed exactly its team's class QOS). QOS Preempt lists are compared
with the wanted ones and rewritten only when they differ, working around a 22.05 sacctmgr quirk
(see ``_PREEMPT_SYNC``). Daemon mode leaves them alone: with preempt/none Slurm ignores them.

Quotas and borrowing: a team's ``gpu_quota`` is a *guarantee* the hai-slurm daemon honours when it
chooses victims; it is deliberately **not** a Slurm limit, because ``GrpTRES=gres/gpu=<quota>``
would stop the team from borrowing idle GPUs beyond its quota. Only the optional ``gpu_limit``
(a hard cap) becomes ``GrpTRES=gres/gpu=N`` on the account. The quota is recorded in the account's
Description so ``sacctmgr show account`` shows it.
"""

from __future__ import annotations

import shlex

from hai_slurm.conf.deployment import Deployment, PreemptionMode
from hai_slurm.conf.model import ClassPolicy, ClusterDescription
from hai_slurm.priority.classes import PriorityClass

_PRELUDE = r'''set -euo pipefail
SACCTMGR=${SACCTMGR:-sacctmgr}

# sm ARGS...: run "sacctmgr -i ARGS"; "Nothing new added/modified" counts as success.
sm() {
  local out rc=0
  out=$("$SACCTMGR" -i "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] && ! grep -qiE 'nothing (new )?(added|modified)|already exist' <<<"$out"; then
    printf 'sacctmgr %s failed (%s):\n%s\n' "$*" "$rc" "$out" >&2
    return "$rc"
  fi
  return 0
}
'''


def _q(value: str) -> str:
    return shlex.quote(value)


def _qos_lines(cp: ClassPolicy, dep: Deployment) -> list[str]:
    """Priority, PreemptMode and GraceTime of one class's QOS (Preempt lists come separately)."""
    if dep.preemption is PreemptionMode.NATIVE:
        # PreemptMode/GraceTime of a QOS apply when a job *of this QOS* is the victim.
        settings = f"Priority={cp.cls.weight} PreemptMode=requeue GraceTime={cp.grace_time_s}"
    else:
        settings = f"Priority={cp.cls.weight} PreemptMode=cluster GraceTime=0"
    return [f"sm modify qos where name={_q(cp.qos)} set {settings}"]


_PREEMPT_SYNC = r'''
# Preempt lists: set only those that differ, each in one go. Slurm 22.05.8 quirk (seen on the
# testbed): after a list is emptied (Preempt='' or Preempt-=...), setting another QOS to preempt
# that QOS fails with "QOS Preemption loop detected" although there is no loop. So lists are only
# ever replaced by non-empty lists; emptying one (a class that preempts nothing but did before)
# is the one case that still uses Preempt=''.
preempt_of() {
  "$SACCTMGR" -n -P show qos where name="$1" format=preempt | tr ',' '\n' | sort | paste -sd, -
}
for q in "${QOS_ORDER[@]}"; do
  cur=$(preempt_of "$q")
  want=${WANT_PREEMPT[$q]}
  [ "$cur" = "$want" ] && continue
  sm modify qos where name="$q" set "Preempt=$want"
done
'''


def _preempt_lines(desc: ClusterDescription, dep: Deployment) -> list[str]:
    if dep.preemption is not PreemptionMode.NATIVE:
        # preempt/none ignores QOS Preempt lists, so they are left as they are (emptying them
        # would trip the quirk described in _PREEMPT_SYNC when native mode comes back).
        return ["# Daemon mode: Slurm never preempts (preempt/none); QOS Preempt lists unused."]
    by_cls = {cp.cls: cp for cp in desc.classes}
    lines = ["export LC_ALL=C  # the same sort order as the generator's",
             "QOS_ORDER=(" + " ".join(_q(cp.qos) for cp in desc.classes) + ")",
             "declare -A WANT_PREEMPT=("]
    for cp in desc.classes:
        victims = sorted(by_cls[v].qos for v in cp.preempts)
        lines.append(f"  [{_q(cp.qos)}]={_q(','.join(victims))}")
    lines.append(")")
    return lines + _PREEMPT_SYNC.strip("\n").splitlines()


def _default_qos(classes: tuple[PriorityClass, ...],
                 by_cls: dict[PriorityClass, ClassPolicy]) -> str | None:
    """A user's DefaultQOS: the team's highest class at or below NORMAL, else its lowest class."""
    if not classes:
        return None
    normal_or_below = [c for c in classes if c.weight <= PriorityClass.NORMAL.weight]
    if normal_or_below:
        return by_cls[max(normal_or_below, key=lambda c: c.weight)].qos
    return by_cls[min(classes, key=lambda c: c.weight)].qos


def render_sacctmgr(desc: ClusterDescription, dep: Deployment, header: str) -> str | None:
    """Bash script that creates the cluster, QOS, accounts, users and limits (None without
    accounting: there is no slurmdbd to talk to)."""
    if not dep.accounting:
        return None
    by_cls = {cp.cls: cp for cp in desc.classes}
    lines = ["#!/usr/bin/env bash", header, _PRELUDE,
             f"sm add cluster {_q(desc.name)}", "", "# One QOS per priority class; "
             "QOS priority = the class's hai-platform weight."]
    lines += [f"sm add qos {_q(cp.qos)}" for cp in desc.classes]
    for cp in desc.classes:
        lines += _qos_lines(cp, dep)
    lines += _preempt_lines(desc, dep)
    for team in desc.teams:
        qos = ",".join(by_cls[c].qos for c in team.classes)
        default = _default_qos(team.classes, by_cls)
        note = f"hai quota gpu={team.gpu_quota}" if team.gpu_quota is not None else "hai no quota"
        about = (f"quota {team.gpu_quota} GPUs is a guarantee the daemon keeps, not a Slurm "
                 "limit, so the team can borrow idle GPUs" if team.gpu_quota is not None
                 else "no quota")
        cap = (f"; hard cap {team.gpu_limit} GPUs (GrpTRES)" if team.gpu_limit is not None
               else "")
        lines += ["", f"# team {team.name}: {about}{cap}",
                  f"sm add account {_q(team.name)} Cluster={_q(desc.name)} "
                  f"Description={_q(note)}"]
        limit = f"gres/gpu={team.gpu_limit}" if team.gpu_limit is not None else "gres/gpu=-1"
        mod = [f"GrpTRES={limit}", f"Description={_q(note)}"]
        if qos:
            mod.append(f"QOS={qos}")
        lines.append(f"sm modify account where name={_q(team.name)} cluster={_q(desc.name)} "
                     f"set {' '.join(mod)}")
        for user in team.users:
            lines.append(f"sm add user {_q(user)} Account={_q(team.name)} "
                         f"Cluster={_q(desc.name)}")
            if qos and default:
                lines.append(f"sm modify user where name={_q(user)} account={_q(team.name)} "
                             f"cluster={_q(desc.name)} set QOS={qos} DefaultQOS={default}")
    return "\n".join(lines) + "\n"
