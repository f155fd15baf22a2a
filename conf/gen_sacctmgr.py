"""The accounting set-up as an idempotent bash script of sacctmgr calls (pure: values -> text).

The settings come from :func:`hai_slurm.conf.accounting.accounting_setup`, which the testbed's
change plan (:func:`hai_slurm.conf.accounting.plan_changes`) uses too.

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

from hai_slurm.conf.accounting import (
    AccountingSetup,
    QosSetting,
    accounting_setup,
    gpu_limit_tres,
)
from hai_slurm.conf.deployment import Deployment
from hai_slurm.conf.model import ClusterDescription

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


def _qos_lines(q: QosSetting) -> list[str]:
    """Priority, PreemptMode and GraceTime of one class's QOS (Preempt lists come separately)."""
    return [f"sm modify qos where name={_q(q.name)} set Priority={q.priority} "
            f"PreemptMode={q.preempt_mode.lower()} GraceTime={q.grace_time}"]


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


def _preempt_lines(setup: AccountingSetup) -> list[str]:
    if any(q.preempt is None for q in setup.qos):
        # preempt/none ignores QOS Preempt lists, so they are left as they are (emptying them
        # would trip the quirk described in _PREEMPT_SYNC when native mode comes back).
        return ["# Daemon mode: Slurm never preempts (preempt/none); QOS Preempt lists unused."]
    lines = ["export LC_ALL=C  # the same sort order as the generator's",
             "QOS_ORDER=(" + " ".join(_q(q.name) for q in setup.qos) + ")",
             "declare -A WANT_PREEMPT=("]
    for q in setup.qos:
        lines.append(f"  [{_q(q.name)}]={_q(','.join(sorted(q.preempt or ())))}")
    lines.append(")")
    return lines + _PREEMPT_SYNC.strip("\n").splitlines()


def render_sacctmgr(desc: ClusterDescription, dep: Deployment, header: str) -> str | None:
    """Bash script that creates the cluster, QOS, accounts, users and limits (None without
    accounting: there is no slurmdbd to talk to)."""
    setup = accounting_setup(desc, dep)
    if setup is None:
        return None
    cluster = _q(setup.cluster)
    lines = ["#!/usr/bin/env bash", header, _PRELUDE,
             f"sm add cluster {cluster}", "", "# One QOS per priority class; "
             "QOS priority = the class's hai-platform weight."]
    lines += [f"sm add qos {_q(q.name)}" for q in setup.qos]
    for q in setup.qos:
        lines += _qos_lines(q)
    lines += _preempt_lines(setup)
    for team, acct in zip(desc.teams, setup.accounts, strict=True):
        about = (f"quota {team.gpu_quota} GPUs is a guarantee the daemon keeps, not a Slurm "
                 "limit, so the team can borrow idle GPUs" if team.gpu_quota is not None
                 else "no quota")
        cap = (f"; hard cap {team.gpu_limit} GPUs (GrpTRES)" if team.gpu_limit is not None
               else "")
        note = _q(acct.description)
        lines += ["", f"# team {team.name}: {about}{cap}",
                  f"sm add account {_q(acct.name)} Cluster={cluster} Description={note}"]
        mod = [f"GrpTRES={gpu_limit_tres(acct.gpu_limit)}", f"Description={note}"]
        if acct.qos:
            mod.append(f"QOS={','.join(acct.qos)}")
        lines.append(f"sm modify account where name={_q(acct.name)} cluster={cluster} "
                     f"set {' '.join(mod)}")
        for user in (u for u in setup.users if u.account == acct.name):
            # A user's default account is the first team listing them (also for a user who
            # exists already, such as root in the root account).
            default = (f" DefaultAccount={_q(user.default_account)}"
                       if user.default_account == user.account else "")
            lines.append(f"sm add user {_q(user.name)} Account={_q(acct.name)} "
                         f"Cluster={cluster}{default}")
            if user.qos and user.default_qos:
                lines.append(f"sm modify user where name={_q(user.name)} "
                             f"account={_q(acct.name)} cluster={cluster} "
                             f"set QOS={','.join(user.qos)} DefaultQOS={user.default_qos}")
    return "\n".join(lines) + "\n"
