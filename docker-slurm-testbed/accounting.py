"""What the accounting database must hold, and the sacctmgr commands that get it there (pure).

Every ``sacctmgr add``/``modify`` costs a few hundred milliseconds, so :func:`accounting_plan`
compares the wanted state with an :class:`AccountingSnapshot` of the database (read once) and
returns only the commands that change something: a reused database costs one query.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hai_slurm.priority.classes import PriorityClass

from .shape import ClusterShape, PreemptionMode

DEMO_ACCOUNTS = ("team-a", "team-b")
"""Accounts created for the demo teams; root is a user in both (default: the first)."""

DEFAULT_QOS = PriorityClass.NORMAL.qos
ALL_QOS = tuple(cls.qos for cls in PriorityClass)


@dataclass(frozen=True)
class QosSpec:
    """The QOS fields the testbed sets (``preempt_mode`` as sacctmgr prints it, lower case)."""

    name: str
    priority: int
    preempt: frozenset[str]
    preempt_mode: str
    grace_time: int


@dataclass(frozen=True)
class AccountingSnapshot:
    """What the database holds now (empty: a fresh database)."""

    clusters: frozenset[str] = frozenset()
    qos: Mapping[str, QosSpec] = field(default_factory=dict)
    accounts: frozenset[str] = frozenset()
    root_assocs: Mapping[str, tuple[frozenset[str], str]] = field(default_factory=dict)
    """account -> (QOS list, default QOS) of root's associations on the testbed's cluster."""


def wanted_qos(shape: ClusterShape) -> list[QosSpec]:
    """One QOS per priority class; in native mode each preempts every lower class by requeue."""
    native = shape.preemption is PreemptionMode.NATIVE
    out = []
    for cls in PriorityClass:
        lower = (frozenset(o.qos for o in PriorityClass if cls.outranks(o)) if native
                 else frozenset[str]())
        out.append(QosSpec(cls.qos, cls.weight, lower, "requeue" if native else "cluster",
                           shape.grace_time(cls) if native else 0))
    return out


def accounting_plan(shape: ClusterShape, now: AccountingSnapshot) -> list[list[str]]:
    """sacctmgr argv lists that turn ``now`` into what ``shape`` needs; [] without accounting."""
    if not shape.accounting:
        return []
    sac = ["sacctmgr", "-i"]
    cluster = shape.cluster_name
    cmds: list[list[str]] = []
    if cluster not in now.clusters:
        cmds.append([*sac, "add", "cluster", cluster])
    missing = [q for q in ALL_QOS if q not in now.qos]
    if missing:
        cmds.append([*sac, "add", "qos", ",".join(missing)])
    for spec in wanted_qos(shape):
        if now.qos.get(spec.name) != spec:
            cmds.append([*sac, "modify", "qos", "where", f"name={spec.name}", "set",
                         f"Priority={spec.priority}", f"Preempt={','.join(sorted(spec.preempt))}",
                         f"PreemptMode={spec.preempt_mode}", f"GraceTime={spec.grace_time}"])
    new_accounts = [a for a in DEMO_ACCOUNTS if a not in now.accounts]
    if new_accounts:
        cmds.append([*sac, "add", "account", ",".join(new_accounts), f"cluster={cluster}",
                     "description=demo team", "organization=demo"])
    if any(a not in now.root_assocs for a in DEMO_ACCOUNTS):
        cmds.append([*sac, "add", "user", "root", f"account={','.join(DEMO_ACCOUNTS)}",
                     f"cluster={cluster}", f"defaultaccount={DEMO_ACCOUNTS[0]}"])
    want = (frozenset(ALL_QOS), DEFAULT_QOS)
    if any(now.root_assocs.get(a) != want for a in DEMO_ACCOUNTS):
        cmds.append([*sac, "modify", "user", "where", "name=root", f"cluster={cluster}",
                     f"account={','.join(DEMO_ACCOUNTS)}", "set", f"qos={','.join(ALL_QOS)}",
                     f"defaultqos={DEFAULT_QOS}"])
    return cmds


def parse_duration(text: str) -> int:
    """sacctmgr's ``[D-]HH:MM:SS`` / ``MM:SS`` (or empty) as seconds."""
    text = text.strip()
    if not text:
        return 0
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return (int(days) if days else 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def parse_snapshot(cluster: str, clusters_out: str, qos_out: str, accounts_out: str,
                   assoc_out: str) -> AccountingSnapshot:
    """Build a snapshot from ``sacctmgr -n -P show`` outputs (see :data:`SNAPSHOT_QUERIES`)."""
    qos: dict[str, QosSpec] = {}
    for line in qos_out.splitlines():
        f = line.split("|")
        if len(f) >= 5 and f[0]:
            qos[f[0]] = QosSpec(f[0], int(f[1] or 0), frozenset(p for p in f[2].split(",") if p),
                                f[3].lower(), parse_duration(f[4]))
    assocs: dict[str, tuple[frozenset[str], str]] = {}
    for line in assoc_out.splitlines():
        f = line.split("|")
        if len(f) >= 5 and f[0] == cluster and f[2] == "root" and f[1]:
            assocs[f[1]] = (frozenset(q for q in f[3].split(",") if q), f[4])
    return AccountingSnapshot(
        clusters=frozenset(ln.split("|")[0] for ln in clusters_out.splitlines() if ln),
        qos=qos,
        accounts=frozenset(ln.split("|")[0] for ln in accounts_out.splitlines() if ln),
        root_assocs=assocs)


SNAPSHOT_QUERIES: tuple[tuple[str, ...], ...] = (
    ("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"),
    ("sacctmgr", "-n", "-P", "show", "qos", "format=name,priority,preempt,preemptmode,gracetime"),
    ("sacctmgr", "-n", "-P", "show", "account", "format=account"),
    ("sacctmgr", "-n", "-P", "show", "assoc", "where", "user=root",
     "format=cluster,account,user,qos,defaultqos"),
)
"""The four queries whose outputs :func:`parse_snapshot` reads, in its argument order."""
