"""The accounting set-up as values: what slurmdbd must hold, what it holds, and the calls between.

:func:`accounting_setup` derives the wanted state from a description and a deployment: the cluster,
one QOS per priority class, one account per team, the users of each team. Two consumers share it,
so the rules live here once:

* :mod:`hai_slurm.conf.gen_sacctmgr` writes it as an idempotent bash script (sites, CI);
* :func:`plan_changes` compares it with an :class:`AccountingSnapshot` (four ``sacctmgr show``
  queries, :data:`SNAPSHOT_QUERIES`, read by :func:`parse_snapshot`) and returns only the
  ``sacctmgr`` calls that change something (the testbed: a reused database costs no call).

QOS Preempt lists (Slurm 22.05.8 quirk, found on the testbed): once a QOS's list has been emptied
(``Preempt=``), another QOS can no longer be set to preempt it ("QOS Preemption loop detected"
although there is no loop). So lists are left alone in daemon mode (preempt/none ignores them),
replaced in one go only when they differ, and emptied only when native mode needs an empty one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.deployment import Deployment, PreemptionMode
from hai_slurm.conf.model import ClassPolicy, ClusterDescription
from hai_slurm.slurm_plugins.parse import parse_qos


@dataclass(frozen=True)
class QosSetting:
    """One QOS. ``preempt_mode`` upper case like every preempt mode in hai-slurm (``REQUEUE``,
    ``CLUSTER``; commands write it in sacctmgr's lower case); ``preempt`` None: the list is left
    as it is (daemon mode)."""

    name: str
    priority: int
    preempt_mode: str
    grace_time: int
    preempt: frozenset[str] | None = None


@dataclass(frozen=True)
class AccountSetting:
    """One team's account: its description (records the quota), hard GPU cap and QOS."""

    name: str
    description: str
    gpu_limit: int | None
    qos: tuple[str, ...]


@dataclass(frozen=True)
class UserSetting:
    """One user's association with one team's account. ``default_account`` is the first team
    that lists the user (set when the user is added)."""

    name: str
    account: str
    qos: tuple[str, ...]
    default_qos: str | None
    default_account: str


@dataclass(frozen=True)
class AccountingSetup:
    """Everything the accounting database must hold for the description."""

    cluster: str
    qos: tuple[QosSetting, ...]
    accounts: tuple[AccountSetting, ...]
    users: tuple[UserSetting, ...]


def default_qos(classes: tuple[PriorityClass, ...],
                by_cls: Mapping[PriorityClass, ClassPolicy]) -> str | None:
    """A user's DefaultQOS: the team's highest class at or below NORMAL, else its lowest class."""
    if not classes:
        return None
    normal_or_below = [c for c in classes if c.weight <= PriorityClass.NORMAL.weight]
    if normal_or_below:
        return by_cls[max(normal_or_below, key=lambda c: c.weight)].qos
    return by_cls[min(classes, key=lambda c: c.weight)].qos


def quota_note(gpu_quota: int | None) -> str:
    """The account Description that records a team's quota (a guarantee, not a Slurm limit)."""
    return f"hai quota gpu={gpu_quota}" if gpu_quota is not None else "hai no quota"


def accounting_setup(desc: ClusterDescription, dep: Deployment) -> AccountingSetup | None:
    """The wanted state (None without accounting: there is no slurmdbd)."""
    if not dep.accounting:
        return None
    native = dep.preemption is PreemptionMode.NATIVE
    by_cls = {cp.cls: cp for cp in desc.classes}
    qos = tuple(
        # PreemptMode/GraceTime of a QOS apply when a job *of this QOS* is the victim.
        QosSetting(cp.qos, cp.cls.weight, "REQUEUE" if native else "CLUSTER",
                   cp.grace_time_s if native else 0,
                   frozenset(by_cls[v].qos for v in cp.preempts) if native else None)
        for cp in desc.classes)
    accounts: list[AccountSetting] = []
    users: list[UserSetting] = []
    first_team: dict[str, str] = {}
    for team in desc.teams:
        team_qos = tuple(by_cls[c].qos for c in team.classes)
        accounts.append(AccountSetting(team.name, quota_note(team.gpu_quota), team.gpu_limit,
                                       team_qos))
        for user in team.users:
            users.append(UserSetting(user, team.name, team_qos,
                                     default_qos(team.classes, by_cls),
                                     first_team.setdefault(user, team.name)))
    return AccountingSetup(desc.name, qos, tuple(accounts), tuple(users))


# ---- what the database holds, and the calls that change it --------------------------------------

SNAPSHOT_QOS_FIELDS = ("Name", "Priority", "Preempt", "PreemptMode", "GraceTime")
"""The QOS columns the snapshot asks for (read by the adapter's one QOS reader, ``parse_qos``)."""

SNAPSHOT_QUERIES: tuple[tuple[str, ...], ...] = (
    ("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"),
    ("sacctmgr", "-n", "-P", "show", "qos", "format=" + ",".join(SNAPSHOT_QOS_FIELDS)),
    ("sacctmgr", "-n", "-P", "show", "account", "format=account,description"),
    ("sacctmgr", "-n", "-P", "show", "assoc", "format=cluster,account,user,qos,defaultqos,grptres"),
)
"""The four queries whose outputs :func:`parse_snapshot` reads, in its argument order."""


@dataclass(frozen=True)
class Assoc:
    """One association as ``sacctmgr show assoc`` prints it (user "" = the account's own)."""

    qos: frozenset[str] = frozenset()
    default_qos: str = ""
    grp_tres: str = ""


@dataclass(frozen=True)
class AccountingSnapshot:
    """What the database holds now (empty: a fresh database). ``assocs`` are those of one
    cluster, by (account, user)."""

    clusters: frozenset[str] = frozenset()
    qos: Mapping[str, QosSetting] = field(default_factory=dict)
    accounts: Mapping[str, str] = field(default_factory=dict)
    assocs: Mapping[tuple[str, str], Assoc] = field(default_factory=dict)


def _names(text: str) -> frozenset[str]:
    return frozenset(p.strip() for p in text.split(",") if p.strip())


def parse_snapshot(cluster: str, clusters_out: str, qos_out: str, accounts_out: str,
                   assoc_out: str) -> AccountingSnapshot:
    """A snapshot from the outputs of :data:`SNAPSHOT_QUERIES` (``-n -P``: ``|``-separated).

    QOS rows are read by the adapter's QOS reader
    (:func:`~hai_slurm.slurm_plugins.parse.parse_qos`: GraceTime as Slurm means it, preempt mode
    upper case), which raises SlurmError naming a row it cannot read. Account and association
    lines are read tolerantly: short or odd lines are skipped (the worst outcome is a call that
    changes nothing).
    """
    qos = {q.name: QosSetting(q.name, q.priority, q.preempt_mode, q.grace_time,
                              frozenset(q.preempt))
           for q in parse_qos(qos_out, SNAPSHOT_QOS_FIELDS)}
    accounts: dict[str, str] = {}
    for line in accounts_out.splitlines():
        f = line.split("|")
        if f[0]:
            accounts[f[0]] = f[1] if len(f) > 1 else ""
    assocs: dict[tuple[str, str], Assoc] = {}
    for line in assoc_out.splitlines():
        f = line.split("|")
        if len(f) >= 6 and f[0] == cluster and f[1]:
            assocs[(f[1], f[2])] = Assoc(_names(f[3]), f[4], f[5])
    return AccountingSnapshot(
        clusters=frozenset(ln.split("|")[0] for ln in clusters_out.splitlines() if ln),
        qos=qos, accounts=accounts, assocs=assocs)


def gpu_limit_tres(limit: int | None) -> str:
    """``GrpTRES`` value for a GPU cap (``-1`` clears it)."""
    return f"gres/gpu={limit if limit is not None else -1}"


_HARMLESS = re.compile(r"nothing (new )?(added|modified)|already exist", re.IGNORECASE)


def harmless(output: str) -> bool:
    """Whether a failed sacctmgr call only said there was nothing to do."""
    return bool(_HARMLESS.search(output))


FRESH_QOS = QosSetting("", 0, "CLUSTER", 0, frozenset())
"""What ``sacctmgr add qos NAME`` creates (compared against, so defaults are not sent again)."""


def _qos_changes(want: AccountingSetup, now: AccountingSnapshot) -> list[list[str]]:
    cmds: list[list[str]] = []
    missing = [q.name for q in want.qos if q.name not in now.qos]
    if missing:
        cmds.append(["add", "qos", ",".join(missing)])
    for q in want.qos:
        cur = now.qos.get(q.name, FRESH_QOS)
        sets = []
        if (cur.priority, cur.preempt_mode, cur.grace_time) != (
                q.priority, q.preempt_mode, q.grace_time):
            sets += [f"Priority={q.priority}", f"PreemptMode={q.preempt_mode.lower()}",
                     f"GraceTime={q.grace_time}"]
        if q.preempt is not None and cur.preempt != q.preempt:
            sets.append(f"Preempt={','.join(sorted(q.preempt))}")
        if sets:
            cmds.append(["modify", "qos", "where", f"name={q.name}", "set", *sets])
    return cmds


def _account_changes(want: AccountingSetup, now: AccountingSnapshot) -> list[list[str]]:
    cluster = want.cluster
    cmds: list[list[str]] = []
    # New accounts get everything at creation, those with equal settings in one call.
    new: dict[tuple[str, int | None, tuple[str, ...]], list[str]] = {}
    for acct in want.accounts:
        if acct.name not in now.accounts:
            new.setdefault((acct.description, acct.gpu_limit, acct.qos), []).append(acct.name)
            continue
        own = now.assocs.get((acct.name, ""))
        tres = "" if acct.gpu_limit is None else gpu_limit_tres(acct.gpu_limit)
        # GrpTRES only when a cap is wanted or must be cleared: sacctmgr refuses any gres/gpu
        # TRES until slurmctld has registered it, and the testbed sets accounting up first.
        touch_tres = own.grp_tres != tres if own is not None else acct.gpu_limit is not None
        if (own is None or touch_tres or own.qos != frozenset(acct.qos)
                or now.accounts[acct.name].lower() != acct.description.lower()):
            sets = [*([f"GrpTRES={gpu_limit_tres(acct.gpu_limit)}"] if touch_tres else []),
                    f"Description={acct.description}",
                    *([f"QOS={','.join(acct.qos)}"] if acct.qos else [])]
            cmds.append(["modify", "account", "where", f"name={acct.name}",
                         f"cluster={cluster}", "set", *sets])
    for (description, limit, qos), names in new.items():
        cmds.append(["add", "account", ",".join(names), f"Cluster={cluster}",
                     f"Description={description}",
                     *([f"QOS={','.join(qos)}"] if qos else []),
                     *([f"GrpTRES={gpu_limit_tres(limit)}"] if limit is not None else [])])
    return cmds


def _user_changes(want: AccountingSetup, now: AccountingSnapshot) -> list[list[str]]:
    cluster = want.cluster
    cmds: list[list[str]] = []
    # New associations of one user with equal QOS settings are added in one call (the default
    # account first, so sacctmgr accepts DefaultAccount=).
    new: dict[tuple[str, tuple[str, ...], str | None], list[UserSetting]] = {}
    for user in want.users:
        assoc = now.assocs.get((user.account, user.name))
        if assoc is None:
            new.setdefault((user.name, user.qos, user.default_qos), []).append(user)
        elif user.qos and user.default_qos and (
                assoc.qos != frozenset(user.qos) or assoc.default_qos != user.default_qos):
            cmds.append(["modify", "user", "where", f"name={user.name}",
                         f"account={user.account}", f"cluster={cluster}", "set",
                         f"QOS={','.join(user.qos)}", f"DefaultQOS={user.default_qos}"])
    for (name, qos, default_qos), users in new.items():
        users.sort(key=lambda u: u.account != u.default_account)
        first = users[0]
        cmds.append(["add", "user", name, f"Account={','.join(u.account for u in users)}",
                     f"Cluster={cluster}",
                     *([f"DefaultAccount={first.account}"]
                       if first.account == first.default_account else []),
                     *([f"QOS={','.join(qos)}", f"DefaultQOS={default_qos}"]
                       if qos and default_qos else [])])
    return cmds


def plan_changes(want: AccountingSetup | None, now: AccountingSnapshot) -> list[list[str]]:
    """``sacctmgr -i`` argv lists that turn ``now`` into ``want`` ([] when nothing differs).

    Objects that do not exist yet are created with their settings in as few calls as possible
    (each call costs a few hundred milliseconds); existing ones are modified only where they
    differ.
    """
    if want is None:
        return []
    cmds: list[list[str]] = []
    if want.cluster not in now.clusters:
        cmds.append(["add", "cluster", want.cluster])
    cmds += _qos_changes(want, now)
    cmds += _account_changes(want, now)
    cmds += _user_changes(want, now)
    return [["sacctmgr", "-i", *c] for c in cmds]
