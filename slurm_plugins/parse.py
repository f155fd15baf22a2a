"""Pure parsers from Slurm's output to the adapter's values. No I/O here.

Tolerant by design: unknown extra fields are ignored; numbers may be plain (openapi v0.0.38,
Slurm 22.05) or wrapped as ``{"set": .., "infinite": .., "number": ..}`` (data_parser v0.0.39+);
states may be a string (``"RUNNING"``, ``"mixed"``) or a list (``["RUNNING", "COMPLETING"]``).
What cannot be understood raises :class:`~hai_slurm.errors.SlurmError` naming the field and the
value, so the daemon skips the cycle instead of acting on a half-read cluster.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import Any

from hai_slurm.conf.hostlist import expand
from hai_slurm.errors import ConfigError, SlurmError
from hai_slurm.slurm_formats import INFINITE, DurationContext, duration_minutes, duration_seconds
from hai_slurm.slurm_plugins.hostlist import (
    expand_hostlist,
    gres_gpu_count,
    split_top_level,
    tres_gpu_count,
)
from hai_slurm.slurm_plugins.tres import job_size
from hai_slurm.slurm_plugins.types import (
    Job,
    JobFacts,
    JobState,
    Node,
    Partition,
    PendingBrief,
    Qos,
    Reservation,
    SwitchInfo,
)

_NO_VAL = (0xFFFFFFFE, 0xFFFFFFFFFFFFFFFE, 0xFFFE)
_INFINITE_RAW = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0xFFFF)
_COMPACT_STATES = {"CD": "COMPLETED", "CG": "COMPLETING", "PD": "PENDING", "R": "RUNNING",
                   "S": "SUSPENDED"}
"""squeue's compact names (``%t``) that hai-slurm has met."""
_FLAG_SHOWN_AS_STATE = {
    "CONFIGURING": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING",
    "STOPPED": "RUNNING", "STAGE_OUT": "COMPLETING", "REQUEUED": "PENDING",
    "REQUEUE_FED": "PENDING", "REQUEUE_HOLD": "PENDING", "SPECIAL_EXIT": "PENDING",
    "RESV_DEL_HOLD": "PENDING", "REVOKED": "CANCELLED",
}
"""A state flag that Slurm's one-word state (``job_state_string``: ``squeue -O State``, openapi
v0.0.38) shows *instead of* the base state, and the base state it implies. Used only when no
base state is given; the word then stands for that state (no flag), as CONFIGURING always did."""
_NODE_BASE = ("IDLE", "DOWN", "ALLOCATED", "ALLOC", "ERROR", "MIXED", "FUTURE", "UNKNOWN")


def number(value: Any, where: str = "value") -> int | None:
    """An integer from a plain number or a ``{"set","infinite","number"}`` wrapper.

    ``None`` for unset/NO_VAL, :data:`INFINITE` for infinite. Floats are truncated.
    """
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return INFINITE
        if not value.get("set", True):
            return None
        value = value.get("number")
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise SlurmError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, int | float):
        n = int(value)
    elif isinstance(value, str) and re.fullmatch(r"-?\d+(\.\d+)?", value.strip()):
        n = int(float(value))
    else:
        raise SlurmError(f"{where}: expected a number, got {value!r}")
    if n in _NO_VAL:
        return None
    if n in _INFINITE_RAW:
        return INFINITE
    return n


def text(value: Any) -> str:
    """A string field; ``None`` and Slurm's ``(null)`` become ``""``."""
    if value is None or value == "(null)":
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def time_or_none(value: Any, where: str) -> int | None:
    """A POSIX time; 0, unset and infinite mean "no time" (``None``)."""
    n = number(value, where)
    return None if n in (None, 0, INFINITE) else n


def states(value: Any, where: str) -> list[str]:
    """A state given as ``"RUNNING"``, ``"mixed"``, ``"DOWN+DRAIN"`` or a list, upper-cased."""
    if isinstance(value, str):
        items = re.split(r"[+,\s]+", value)
    elif isinstance(value, list):
        items = [str(v) for v in value]
    else:
        raise SlurmError(f"{where}: expected a state string or list, got {value!r}")
    return [s.strip().upper().rstrip("*~#!%$@^-") for s in items if s.strip()]


def job_state(value: Any, where: str) -> tuple[JobState, tuple[str, ...]]:
    """Base job state and flags from any form Slurm writes a job's state in.

    ``"RUNNING"``, ``["PENDING", "REQUEUED"]`` (data_parser), ``"RUNNING+COMPLETING"``, compact
    ``"PD"``, or a flag shown alone (``"REQUEUED"``, ``"CONFIGURING"``; see
    ``_FLAG_SHOWN_AS_STATE``).
    A COMPLETING flag wins, as squeue shows it. Flags listed beside the base state are kept.
    The one reader of job states: ``squeue --json`` records here and ``squeue -O State`` lines
    (:func:`parse_job_facts`) both go through it.
    """
    words = [_COMPACT_STATES.get(s, s) for s in states(value, where)]
    if not words:
        raise SlurmError(f"{where}: empty job_state")
    known = {s.value for s in JobState}
    names = words if known.intersection(words) else [_FLAG_SHOWN_AS_STATE.get(s, s) for s in words]
    base_names = [s for s in names if s in known]
    if "COMPLETING" in names:
        base = JobState.COMPLETING
    elif base_names:
        base = JobState(base_names[0])
    else:
        raise SlurmError(f"{where}: unknown job_state {value!r}; known states: "
                         + ", ".join(sorted(known | set(_FLAG_SHOWN_AS_STATE))))
    flags = tuple(s for s in names if s != base.value)
    return base, flags


_SHARING = {"no": "node", "none": "node", "exclusive": "node", "user": "user", "mcs": "mcs",
            "topo": "topo"}
"""How each release names a job's node exclusivity (22.05's JSON ``shared``: ``none``, ``user``,
``mcs``, ``shared`` or null; ``squeue -O OverSubscribe`` and pyslurm's ``resource_sharing``:
``NO``, ``USER``, ``MCS``, ``YES``, ``OK``; later JSON a list of such flags), as
:attr:`Job.exclusive`; any other word (``yes``, ``ok``, ``shared``, ``oversubscribe``) shares."""


def exclusivity(value: Any) -> str:
    """:attr:`Job.exclusive` from any release's form of a job's sharing (see :data:`_SHARING`):
    ``"node"``, ``"user"``, ``"mcs"``, ``"topo"`` or ``""``."""
    if isinstance(value, list | tuple):
        found = [exclusivity(v) for v in value]
        return next((f for f in found if f), "")
    return _SHARING.get(text(value).strip().lower(), "") if value is not None else ""


#: ``squeue --Format`` of :func:`parse_exclusive_column` (Slurm 25.05+: see
#: :data:`~.version.EXCLUSIVE_COLUMN_SINCE`).
EXCLUSIVE_FORMAT = "JobID:|,Exclusive:|"
_EXCLUSIVE_WORDS = {"node": "node", "user": "user", "mcs": "mcs", "topo": "topo"}
"""``squeue -O Exclusive`` (26.05: ``NODE``, ``USER``, ``MCS``, ``TOPO``; ``NO`` for a job
that shares) as :attr:`Job.exclusive`. Not :func:`exclusivity`: there ``NO`` means no sharing."""


def parse_exclusive_column(output: str) -> dict[int, str]:
    """Job id -> :attr:`Job.exclusive` from ``squeue -O`` with :data:`EXCLUSIVE_FORMAT`; lines
    that do not parse are left out."""
    out: dict[int, str] = {}
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0].isdigit():
            out[int(parts[0])] = _EXCLUSIVE_WORDS.get(parts[1].strip().lower(), "")
    return out


def _requested_gpus(d: Mapping[str, Any], node_count: int) -> int:
    per_job = gres_gpu_count(text(d.get("tres_per_job")))
    if per_job:
        return per_job
    per_node = gres_gpu_count(text(d.get("tres_per_node")))
    if per_node:
        return per_node * max(node_count, 1)
    per_task = gres_gpu_count(text(d.get("tres_per_task")))
    if per_task:
        tasks = number(d.get("tasks"), "tasks") or number(d.get("num_tasks"), "num_tasks") or 1
        return per_task * max(tasks, 1)
    per_socket = gres_gpu_count(text(d.get("tres_per_socket")))
    if per_socket:
        sockets = number(d.get("sockets_per_node"), "sockets_per_node") or 1
        return per_socket * max(sockets, 1) * max(node_count, 1)
    return tres_gpu_count(text(d.get("tres_req_str"))) or tres_gpu_count(
        text(d.get("tres_alloc_str")))


def _gpus_per_node(d: Mapping[str, Any], nodes: tuple[str, ...]) -> dict[str, int]:
    detail = d.get("gres_detail") or []
    if not isinstance(detail, list) or not nodes:
        return {}
    if len(detail) == len(nodes):
        return {n: gres_gpu_count(text(g)) for n, g in zip(nodes, detail, strict=True)}
    return {}


def parse_job(d: Mapping[str, Any]) -> Job | None:
    """One job record from ``squeue --json``; ``None`` when it is no longer active."""
    job_id = number(d.get("job_id"), "job_id")
    if job_id is None or job_id <= 0:
        raise SlurmError(f"job record without a valid job_id: {d.get('job_id')!r}")
    where = f"job {job_id}"
    state, flags = job_state(d.get("job_state"), f"{where}: job_state")
    if not state.active:
        return None
    node_list = text(d.get("nodes"))
    nodes = expand_hostlist(node_list) if state is not JobState.PENDING else ()
    node_count = number(d.get("node_count"), f"{where}: node_count") or len(nodes)
    priority = number(d.get("priority"), f"{where}: priority") or 0
    reason = text(d.get("state_reason"))
    held = state is JobState.PENDING and (
        d.get("hold") is True
        or (priority == 0 and (reason.startswith("JobHeld") or "held state" in reason)))
    time_limit = number(d.get("time_limit"), f"{where}: time_limit")
    if time_limit is None and "time_limit" in d and d.get("time_limit") is None:
        time_limit = INFINITE   # v0.0.38 writes null for an UNLIMITED job time limit
    cpus, memory_mb = job_size(
        running=state is not JobState.PENDING, alloc=text(d.get("tres_alloc_str")),
        req=text(d.get("tres_req_str")), cpus=number(d.get("cpus"), f"{where}: cpus"),
        memory_per_node=number(d.get("memory_per_node"), f"{where}: memory_per_node"),
        memory_per_cpu=number(d.get("memory_per_cpu"), f"{where}: memory_per_cpu"),
        node_count=node_count, where=where)
    return Job(
        job_id=job_id,
        name=text(d.get("name")),
        user=text(d.get("user_name")),
        uid=number(d.get("user_id"), f"{where}: user_id") or 0,
        account=text(d.get("account")),
        partition=text(d.get("partition")),
        qos=text(d.get("qos")),
        state=state,
        state_flags=flags,
        reason=reason,
        priority=max(priority, 0),
        submit_time=time_or_none(d.get("submit_time"), f"{where}: submit_time"),
        eligible_time=time_or_none(d.get("eligible_time"), f"{where}: eligible_time"),
        start_time=(time_or_none(d.get("start_time"), f"{where}: start_time")
                    if state is not JobState.PENDING else None),
        time_limit=time_limit,
        node_count=node_count,
        nodes=nodes,
        node_list=node_list if nodes else "",
        gpus_requested=_requested_gpus(d, node_count),
        gpus_per_node=_gpus_per_node(d, nodes),
        restart_count=number(d.get("restart_cnt"), f"{where}: restart_cnt") or 0,
        requeue=bool(d.get("requeue", True)),
        comment=text(d.get("comment")),
        admin_comment=text(d.get("admin_comment")),
        batch=bool(d.get("batch_flag", True)),
        held=held,
        array_job_id=number(d.get("array_job_id"), f"{where}: array_job_id") or None,
        array_task_id=number(d.get("array_task_id"), f"{where}: array_task_id"),
        array_tasks=text(d.get("array_task_string")),
        cpus=cpus,
        memory_mb=memory_mb,
        switches=(number(d.get("required_switches"), f"{where}: required_switches") or 0
                  if "required_switches" in d else None),
        switch_wait=number(d.get("maximum_switch_wait_time"),
                           f"{where}: maximum_switch_wait_time") or 0,
        required_nodes=text(d.get("required_nodes")),
        excluded_nodes=text(d.get("excluded_nodes")),
        features=text(d.get("features")),
        exclusive=exclusivity(d.get("shared")),
        reservation=text(d.get("resv_name")),
    )


def _records(doc: Any, key: str, command: str) -> list[Mapping[str, Any]]:
    if not isinstance(doc, Mapping):
        raise SlurmError(f"{command}: expected a JSON object, got {type(doc).__name__}")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmError(f"{command} reported errors: {errors!r}")
    records = doc.get(key)
    if not isinstance(records, list):
        raise SlurmError(f"{command}: JSON has no '{key}' list (keys: {sorted(doc)})")
    return [r for r in records if isinstance(r, Mapping)]


def parse_jobs(doc: Any) -> tuple[Job, ...]:
    """Active jobs from a ``squeue --json`` document (terminal states are left out)."""
    jobs = (parse_job(r) for r in _records(doc, "jobs", "squeue --json"))
    return tuple(j for j in jobs if j is not None)


def parse_node(d: Mapping[str, Any]) -> Node:
    """One node record (``sinfo --json`` on 22.05, ``scontrol show nodes --json`` later)."""
    name = text(d.get("name"))
    if not name:
        raise SlurmError(f"node record without a name: {dict(d)!r:.200}")
    where = f"node {name}"
    names = states(d.get("state"), f"{where}: state")
    names += states(d.get("state_flags") or [], f"{where}: state_flags")
    base = next((s for s in names if s in _NODE_BASE), names[0] if names else "UNKNOWN")
    base = "ALLOCATED" if base == "ALLOC" else base
    flags = tuple(dict.fromkeys(s for s in names if s != base))
    alloc_mem = number(d.get("alloc_memory"), f"{where}: alloc_memory") or 0
    return Node(
        name=name,
        state=base,
        state_flags=flags,
        cpus=number(d.get("cpus"), f"{where}: cpus") or 0,
        cpus_allocated=number(d.get("alloc_cpus"), f"{where}: alloc_cpus") or 0,
        memory_mb=number(d.get("real_memory"), f"{where}: real_memory") or 0,
        memory_allocated_mb=alloc_mem,
        gpus=gres_gpu_count(text(d.get("gres"))),
        gpus_used=gres_gpu_count(text(d.get("gres_used"))),
        partitions=tuple(text(p) for p in d.get("partitions") or ()),
        reason=text(d.get("reason")),
        registered=bool(number(d.get("boot_time"), f"{where}: boot_time"))
        if "boot_time" in d else True,
        features=_feature_names(d.get("active_features", d.get("features"))),
        reservation=text(d.get("reservation")),
    )


def _feature_names(value: Any) -> tuple[str, ...]:
    """A node's features: a comma-separated string (22.05), a list of names (``scontrol show
    nodes --json`` later), or ``{"total": ..., "active": ...}`` (``sinfo --json`` later)."""
    if isinstance(value, Mapping):
        value = value.get("active") or value.get("total")
    items = value.split(",") if isinstance(value, str) else value or ()
    return tuple(dict.fromkeys(t for i in items if (t := text(i).strip())))


def parse_nodes(doc: Any, command: str = "sinfo --json") -> tuple[Node, ...]:
    """All nodes from a document with a ``nodes`` list."""
    return tuple(parse_node(r) for r in _records(doc, "nodes", command))


def _duration(value: str, context: DurationContext, where: str, *,
              minutes: bool) -> int | None:
    """A duration field (:mod:`hai_slurm.slurm_formats` rules) or SlurmError naming it."""
    try:
        return (duration_minutes if minutes else duration_seconds)(value, context)
    except ValueError as err:
        raise SlurmError(f"{where}: {err}") from None


def _grace(value: str, where: str) -> int:
    """A GraceTime in seconds (a bare number is seconds; empty is 0)."""
    seconds = _duration(value, DurationContext.GRACE_TIME, where, minutes=False)
    return 0 if seconds is None or seconds == INFINITE else seconds


def parse_partitions_text(output: str) -> tuple[Partition, ...]:
    """Partitions from ``scontrol --oneliner show partition`` (one ``Key=Value ...`` line each)."""
    parts: list[Partition] = []
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        kv = dict(tok.partition("=")[::2] for tok in line.split() if "=" in tok)
        name = kv.get("PartitionName", "")
        if not name:
            raise SlurmError(f"scontrol show partition, line {lineno}: no PartitionName in "
                             f"{line[:80]!r}")
        where = f"partition {name}"
        node_list = "" if kv.get("Nodes") in (None, "(null)") else kv["Nodes"]
        parts.append(Partition(
            name=name, nodes=expand_hostlist(node_list), node_list=node_list,
            state=kv.get("State", "UP").upper(), default=kv.get("Default") == "YES",
            priority_tier=int(kv.get("PriorityTier", "1")),
            max_time=_duration(kv.get("MaxTime", "UNLIMITED"), DurationContext.TIME_LIMIT,
                               f"{where}: MaxTime", minutes=True),
            preempt_mode=kv.get("PreemptMode", "OFF").upper(),
            grace_time=_grace(kv.get("GraceTime", "0"), f"{where}: GraceTime"),
        ))
    return tuple(parts)


def parse_partition(d: Mapping[str, Any]) -> Partition:
    """One partition record from ``scontrol show partitions --json`` (23.02 and later)."""
    name = text(d.get("name"))
    where = f"partition {name}"
    nodes = d.get("nodes")
    node_list = text(nodes.get("configured")) if isinstance(nodes, Mapping) else text(nodes)
    st = d.get("partition")
    state = states(st.get("state", ["UP"]) if isinstance(st, Mapping) else ["UP"], where)
    flags = states(d.get("flags") or (st.get("flags") if isinstance(st, Mapping) else None)
                   or [], where)
    prio = d.get("priority")
    tier = prio.get("tier") if isinstance(prio, Mapping) else d.get("priority_tier")
    maxima = d.get("maximums")
    max_time = number(maxima.get("time") if isinstance(maxima, Mapping)
                      else d.get("max_time", d.get("max_time_limit")), f"{where}: max_time")
    preempt = (d.get("preempt_mode") or d.get("preemption_mode")
               or (d.get("preemption") or {}).get("mode") or ["OFF"])
    grace = d.get("grace_time", d.get("preemption_grace_time"))
    return Partition(
        name=name, nodes=expand_hostlist(node_list), node_list=node_list,
        state=state[0] if state else "UP",
        default="DEFAULT" in flags or bool(d.get("default", False)),
        priority_tier=number(tier, f"{where}: priority tier") or 1,
        max_time=max_time,
        preempt_mode=",".join(states(preempt, f"{where}: preempt_mode")) or "OFF",
        grace_time=number(grace, f"{where}: grace_time") or 0,
    )


def parse_partitions_json(doc: Any) -> tuple[Partition, ...]:
    """All partitions from a document with a ``partitions`` list."""
    return tuple(parse_partition(r)
                 for r in _records(doc, "partitions", "scontrol show partitions --json"))


def parse_qos(output: str, fields: tuple[str, ...]) -> tuple[Qos, ...]:
    """QOS rows from ``sacctmgr -P -n show qos format=<fields>`` (``|``-separated).

    The one QOS reader (the adapter's snapshot and ``conf.accounting``'s database snapshot).
    ``fields`` name the columns in order (``Name`` is required; absent ones take defaults).
    ``preempt_mode`` is upper case (``CLUSTER``, ``REQUEUE``), as in slurm.conf and scontrol;
    sacctmgr prints it in lower case.
    """
    out: list[Qos] = []
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != len(fields):
            raise SlurmError(f"sacctmgr show qos, line {lineno}: expected {len(fields)} columns "
                             f"({','.join(fields)}), got {len(cols)}: {line!r}")
        row = dict(zip(fields, cols, strict=True))
        where = f"qos {row['Name']}"
        usage = row.get("UsageFactor", "") or "1"
        out.append(Qos(
            name=row["Name"],
            priority=number(row.get("Priority"), f"{where}: Priority") or 0,
            preempt=tuple(split_top_level(row.get("Preempt", ""))),
            preempt_mode=(row.get("PreemptMode") or "cluster").strip().upper(),
            grace_time=_grace(row.get("GraceTime", ""), f"{where}: GraceTime"),
            max_wall=_duration(row.get("MaxWall", ""), DurationContext.TIME_LIMIT,
                               f"{where}: MaxWall", minutes=True),
            usage_factor=float(usage),
            flags=tuple(split_top_level(row.get("Flags", ""))),
        ))
    return tuple(out)


_JOB_REF = r"(\d+(?:_\d[\d,:-]*)?)"
_SCANCEL_ERR = re.compile(r"error: Kill job error on job id " + _JOB_REF + r": (.*)$")
_SCONTROL_ERR = re.compile(r"^(.*?) for job " + _JOB_REF + r"\s*$")
_REF_FIRST = re.compile(r"^" + _JOB_REF + r": (.+)$")


def job_messages(stderr: str) -> tuple[dict[str, str], list[str]]:
    """Split a Slurm command's stderr into per-job messages and other lines.

    ``scontrol`` writes ``"<message> for job <ref>"``, and for an array task addressed as
    ``<array id>_<task>`` ``"<ref>: <message>"`` (22.05's ``scontrol requeuehold 1085_3``:
    ``1085_3: Job is pending execution``; for an array's pending tasks, ``1085_2-4: ...``,
    ``No error`` among them for the tasks it changed when others failed); ``scancel`` writes
    ``"scancel: error: Kill job error on job id <ref>: <message>"``. ``<ref>`` is a job id or,
    for array tasks, ``<array id>_<tasks>``; it is returned as written.
    """
    per_job: dict[str, str] = {}
    other: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _SCANCEL_ERR.search(line)
        if m:
            per_job[m.group(1)] = m.group(2).strip()
            continue
        m2 = _SCONTROL_ERR.match(line)
        if m2:
            per_job[m2.group(2)] = m2.group(1).strip()
            continue
        m3 = _REF_FIRST.match(line)
        if m3:
            per_job[m3.group(1)] = m3.group(2).strip()
            continue
        other.append(line)
    return per_job, other


_SWITCH_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_switches(text: str) -> tuple[SwitchInfo, ...]:
    """The switches in ``scontrol show topology`` output (unknown lines are ignored).

    Lines look like ``SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]`` and
    ``SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]``: an upper switch
    lists every node below it too, so only level-0 switches keep their nodes.
    """
    out = []
    for line in text.splitlines():
        fields = dict(_SWITCH_FIELD.findall(line))
        if "SwitchName" not in fields:
            continue
        try:
            level = int(fields.get("Level", "0"))
            nodes = tuple(expand(fields["Nodes"])) if fields.get("Nodes") and level == 0 else ()
            switches = tuple(expand(fields["Switches"])) if fields.get("Switches") else ()
        except (ValueError, ConfigError):  # a line this parser does not understand
            continue
        out.append(SwitchInfo(fields["SwitchName"], level, nodes, switches))
    return tuple(out)


#: ``squeue --Format`` of :func:`parse_job_facts`: only columns the job's owner cannot write (no
#: name, no comment), each ending in ``|``, which none of them can contain, so a job cannot make
#: the daemon misread its state. ``JobID`` is the job's own id (array tasks included).
JOB_FACTS_FORMAT = ("JobID:|,State:|,RestartCnt:|,PriorityLong:|,Reason:|,ReqNodes:|,"
                    "Reservation:|")


def parse_job_facts(line: str) -> JobFacts | None:
    """One line of ``squeue --noheader -O`` with :data:`JOB_FACTS_FORMAT`; None for any other."""
    parts = line.strip().split("|")
    if len(parts) < 7 or not parts[0].isdigit():  # 6 or 7 fields, each ending in "|"
        return None
    _, state, restarts, priority, reason, req = parts[:6]
    resv = parts[6] if len(parts) > 7 else ""
    base, _flags = job_state(state, f"squeue State of job {parts[0]}")
    return JobFacts(job_id=int(parts[0]), state=base,
                    restart_count=int(restarts) if restarts.isdigit() else 0,
                    held=priority.strip() == "0" and "held" in reason.lower(),
                    req_nodes="" if req in ("(null)", "") else req,
                    reservation="" if resv in ("(null)", "") else resv)


#: ``squeue --steps --Format`` of :func:`parse_srun_steps`: the step id and its job's own id.
STEPS_FORMAT = "StepId:|,JobId:|"


def parse_srun_steps(output: str) -> frozenset[int]:
    """Ids of the jobs that have an ``srun`` step (a numeric step id: ``12.0``, ``7_1.3``; not
    ``.batch``, ``.extern`` or ``.interactive``) in ``squeue --steps`` with :data:`STEPS_FORMAT`."""
    out: set[int] = set()
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        if parts[0].rpartition(".")[2].isdigit():
            out.add(int(parts[1]))
    return frozenset(out)


#: ``squeue --Format`` of :func:`parse_switch_requests` (22.05's JSON lacks these fields).
SWITCHES_FORMAT = "JobID:|,ReqSwitch:|,Wait4Switch:|"


def parse_switch_requests(output: str) -> dict[int, tuple[int, int]]:
    """Job id -> (``--switches`` count, seconds to wait for it) from ``squeue -O`` with
    :data:`SWITCHES_FORMAT`; lines that do not parse are left out."""
    out: dict[int, tuple[int, int]] = {}
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        try:
            wait = duration_seconds(parts[2], DurationContext.TIME_LIMIT) or 0
        except ValueError:
            wait = 0
        out[int(parts[0])] = (int(parts[1]), 0 if wait == INFINITE else wait)
    return out


#: The columns of :data:`COMPACT_JOBS_FORMAT`, in order. Only fields Slurm writes or validates:
#: no job name, comment, work dir or output paths, where a job's owner can put ``|`` or a newline
#: and so forge a line. What the compact listing lacks (name, admin_comment, gres_detail) comes
#: from the last ``squeue --json`` (:data:`DETAIL_KEYS`).
COMPACT_JOB_FIELDS = (
    "JobID", "ArrayJobID", "ArrayTaskID", "UserName", "UserID", "Account", "Partition", "QOS",
    "State", "PriorityLong", "Reason", "SubmitTime", "EligibleTime", "StartTime", "TimeLimit",
    "NumNodes", "NodeList", "tres-per-job", "tres-per-node", "tres-per-task", "tres-per-socket",
    "tres-alloc", "NumTasks", "Sockets", "RestartCnt", "Requeue", "BatchFlag", "NumCPUs",
    "ReqSwitch", "Wait4Switch", "ReqNodes", "OverSubscribe", "Reservation",
)
#: ``squeue --noheader --Format`` of :func:`compact_job_records`; run with
#: ``SLURM_TIME_FORMAT=%s`` so times are POSIX seconds.
COMPACT_JOBS_FORMAT = ",".join(f"{f}:|" for f in COMPACT_JOB_FIELDS)
#: The ``squeue --json`` keys a compact record lacks; the CLI backend keeps them per job, and
#: reads a new pending job's with :func:`detail_formats` (gres_detail then ``[]``).
#: ``features`` (``--constraint``) may hold ``|`` (OR), so it cannot be a compact column;
#: ``excluded_nodes`` has none in 22.05's ``squeue -O``. A job's owner may change either with
#: ``scontrol update`` while it waits: the kept value is then at most the CLI backend's
#: ``DETAIL_REFRESH`` old.
DETAIL_KEYS = ("name", "admin_comment", "comment", "gres_detail", "excluded_nodes", "features")
#: The :data:`DETAIL_KEYS` a per-job ``squeue -o`` gives (:func:`detail_formats`), with their
#: format letters: ``%A`` the job's own id (an array task's too), ``%j`` name, ``%k`` comment,
#: ``%f`` features (``--constraint``), ``%x`` excluded nodes. squeue prints the same strings of
#: the same job records ``squeue --json`` reads (the name, comment and constraint as written, the
#: excluded nodes as a compressed hostlist, ``n[1,3]``), except that an unset comment or
#: constraint is ``(null)`` where the JSON has ``""``: :func:`text` reads both as ``""``.
DETAIL_TEXT_FIELDS = (("job_id", "%A"), ("name", "%j"), ("comment", "%k"), ("features", "%f"),
                      ("excluded_nodes", "%x"))
#: The ``squeue -O`` columns of :func:`detail_formats`: ``admin_comment`` (no ``-o`` letter
#: has it), and the node list and restart count the kept details are checked against
#: (:func:`detail_signature`).
DETAIL_FACT_FIELDS = (("job_id", "JobID"), ("restart_cnt", "RestartCnt"), ("nodes", "NodeList"),
                      ("admin_comment", "admin_comment"))


def detail_formats(delimiter: str) -> tuple[str, str]:
    """The ``squeue -o`` and ``squeue -O`` formats of :func:`parse_job_details`: every field
    followed by ``delimiter``. A field with a suffix and no size is printed whole (checked on
    22.05.8: a 3,000-character admin_comment, a 1,000-character name, no padding). The
    delimiter must be fresh for each call and unguessable (``"Q" + secrets.token_hex(16)``):
    name, comment and constraint are the job owner's text, which may hold ``|``, newlines or
    ``AdminComment=``, but not a string the owner cannot know when submitting."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{15,}", delimiter):
        raise ValueError(f"delimiter must be a letter and 15+ letters or digits: {delimiter!r}")
    return ("".join(f + delimiter for _, f in DETAIL_TEXT_FIELDS),
            ",".join(f"{f}:{delimiter}" for _, f in DETAIL_FACT_FIELDS))


def _delimited(output: str, delimiter: str, keys: tuple[tuple[str, str], ...],
               what: str) -> dict[int, dict[str, str]]:
    """Records of ``output``, every field ending in ``delimiter`` and every record in a newline;
    SlurmError for anything else (a field is never taken from another one's text)."""
    width = len(keys)
    parts = output.split(delimiter)
    tail = parts.pop()
    if tail not in ("", "\n") or len(parts) % width:
        raise SlurmError(f"{what}: output is not {width}-field records "
                         f"({len(parts)} fields, then {tail[:40]!r})")
    out: dict[int, dict[str, str]] = {}
    for i in range(0, len(parts), width):
        head = parts[i]
        if i:
            if not head.startswith("\n"):
                raise SlurmError(f"{what}: record {i // width + 1} does not start on a new "
                                 f"line: {head[:40]!r}")
            head = head[1:]
        if not (head.isascii() and head.isdigit()):
            raise SlurmError(f"{what}: record {i // width + 1} does not start with a job id: "
                             f"{head[:40]!r}")
        rec = {k: v for (k, _), v in zip(keys, [head, *parts[i + 1:i + width]], strict=True)}
        job_id = int(head)
        if out.setdefault(job_id, rec) != rec:
            raise SlurmError(f"{what}: job {job_id} is listed twice, differently")
    return out


def parse_job_details(text_output: str, fact_output: str,
                      delimiter: str) -> list[dict[str, Any]]:
    """The :data:`DETAIL_KEYS` of the jobs in both outputs of :func:`detail_formats` (one
    ``squeue -o`` and one ``squeue -O``, run with the same ``delimiter``), with the
    :func:`detail_signature` keys (``nodes``, ``restart_cnt``).

    Only jobs without nodes are given (pending ones): their ``gres_detail`` (GPU indices per
    allocated node) is ``[]``, as in ``squeue --json``. A job with nodes is left out, so its
    caller reads it in full: no squeue column gives GPU indices, and ``scontrol show job -d``,
    which does, prints them in text the job's owner can forge lines into. When the two outputs
    do not list the same jobs (one ended or was submitted in between, or text forged a record)
    nothing is given; a record that does not parse, or a job listed twice differently, raises
    SlurmError. The delimiter is what keeps a job's text in its field; these checks only make a
    forgery that knew it fail loudly rather than pass."""
    texts = _delimited(text_output, delimiter, DETAIL_TEXT_FIELDS, "squeue -o (job details)")
    facts = _delimited(fact_output, delimiter, DETAIL_FACT_FIELDS, "squeue -O (job details)")
    if texts.keys() != facts.keys():
        return []
    out: list[dict[str, Any]] = []
    for job_id, fact in facts.items():
        txt = texts[job_id]
        if _compact_text(fact["nodes"]):
            continue
        restarts = _compact_int(fact["restart_cnt"], f"squeue -O, job {job_id}: RestartCnt")
        out.append({**txt, **fact, "job_id": job_id, "nodes": "", "restart_cnt": restarts or 0,
                    "gres_detail": []})
    return out


_UNSET = ("", "N/A", "Unknown", "None", "(null)", "*")


def _compact_time(value: str, where: str) -> int | None:
    if value.isdigit():
        return int(value) or None
    if value in _UNSET:
        return None
    if not value.isdigit():
        raise SlurmError(f"{where}: expected POSIX seconds (SLURM_TIME_FORMAT=%s), got {value!r}")
    return int(value)


def _compact_int(value: str, where: str) -> int | None:
    if value.isdigit():
        return int(value)
    if value in _UNSET:
        return None
    head = value.split("-", 1)[0]  # NumNodes may print a range, "4-4"
    if not head.isdigit():
        raise SlurmError(f"{where}: expected a number, got {value!r}")
    return int(head)


def _compact_text(value: str) -> str:
    return "" if value in _UNSET else value


def compact_job_records(output: str) -> list[dict[str, Any]]:
    """``squeue --noheader -O`` lines with :data:`COMPACT_JOBS_FORMAT` as records with the keys
    of ``squeue --json`` (openapi v0.0.38), for :func:`parse_job` once the
    :data:`DETAIL_KEYS` are added. A line that does not parse raises SlurmError: no column
    holds text a user chose, so such a line means the output is not what was asked for."""
    return [compact_job_record(line, lineno)
            for lineno, line in enumerate(output.splitlines(), 1) if line.strip()]


def compact_job_record(line: str, lineno: int = 1) -> dict[str, Any]:
    """One line of :func:`compact_job_records`."""
    width = len(COMPACT_JOB_FIELDS)
    cols = line.strip().split("|")
    if len(cols) != width + 1 or not cols[0].isdigit():
        raise SlurmError(f"squeue -O, line {lineno}: expected {width} '|'-ended columns "
                         f"starting with a job id, got {line[:160]!r}")
    f = dict(zip(COMPACT_JOB_FIELDS, cols, strict=False))
    where = f"squeue -O, job {f['JobID']}"
    task = f["ArrayTaskID"]
    if task in _UNSET:
        array_job, array_task, array_string = 0, None, ""
    elif task.isdigit():
        array_job, array_task, array_string = int(f["ArrayJobID"]), int(task), ""
    else:  # a pending array record standing for several tasks: "1-3", "[1-9%2]"
        array_job, array_task, array_string = int(f["ArrayJobID"]), None, task.strip("[]")
    limit = f["TimeLimit"]
    minutes = _duration(limit, DurationContext.TIME_LIMIT, f"{where}: TimeLimit", minutes=True)
    wait = _duration(f["Wait4Switch"], DurationContext.TIME_LIMIT, f"{where}: Wait4Switch",
                     minutes=False)
    tres = _compact_text(f["tres-alloc"])
    return {
        "job_id": int(f["JobID"]),
        "array_job_id": array_job,
        "array_task_id": array_task,
        "array_task_string": array_string,
        "user_name": _compact_text(f["UserName"]),
        "user_id": _compact_int(f["UserID"], f"{where}: UserID"),
        "account": _compact_text(f["Account"]),
        "partition": _compact_text(f["Partition"]),
        "qos": _compact_text(f["QOS"]),
        "job_state": f["State"],
        "priority": _compact_int(f["PriorityLong"], f"{where}: PriorityLong"),
        "state_reason": text(f["Reason"]),  # "None" as in the JSON
        "submit_time": _compact_time(f["SubmitTime"], f"{where}: SubmitTime"),
        "eligible_time": _compact_time(f["EligibleTime"], f"{where}: EligibleTime"),
        "start_time": _compact_time(f["StartTime"], f"{where}: StartTime"),
        "time_limit": None if minutes == INFINITE else minutes,
        "node_count": _compact_int(f["NumNodes"], f"{where}: NumNodes"),
        "nodes": _compact_text(f["NodeList"]),
        "tres_per_job": _compact_text(f["tres-per-job"]),
        "tres_per_node": _compact_text(f["tres-per-node"]),
        "tres_per_task": _compact_text(f["tres-per-task"]),
        "tres_per_socket": _compact_text(f["tres-per-socket"]),
        "tres_alloc_str": tres,
        "tres_req_str": tres,
        "tasks": _compact_int(f["NumTasks"], f"{where}: NumTasks"),
        "sockets_per_node": _compact_int(f["Sockets"], f"{where}: Sockets"),
        "restart_cnt": _compact_int(f["RestartCnt"], f"{where}: RestartCnt") or 0,
        "requeue": f["Requeue"] != "0",
        "batch_flag": f["BatchFlag"] != "0",
        "cpus": _compact_int(f["NumCPUs"], f"{where}: NumCPUs"),
        "required_switches": _compact_int(f["ReqSwitch"], f"{where}: ReqSwitch") or 0,
        "maximum_switch_wait_time": 0 if wait in (None, INFINITE) else wait,
        "required_nodes": _compact_text(f["ReqNodes"]),
        "shared": f["OverSubscribe"],   # NO, USER, MCS, YES, OK: read by exclusivity()
        "resv_name": _compact_text(f["Reservation"]),
    }


def detail_signature(record: Mapping[str, Any]) -> tuple[str, int]:
    """What must stay the same for a job's kept :data:`DETAIL_KEYS` to still hold: its node
    list (gres_detail is per allocated node) and restart count (a requeue may rewrite them)."""
    return text(record.get("nodes")), number(record.get("restart_cnt"), "restart_cnt") or 0


#: The columns of :data:`BRIEF_FORMAT` (``squeue --states=PENDING``), in order: only what the
#: urgent path needs to tell a job's class (the ``#HAI`` record, account, requeue) and whether it
#: is new. No job name or comment (a job's owner could put ``|`` or a newline there);
#: ``admin_comment`` (only admins write it; job_submit.lua's record uses ``|`` between segments)
#: comes last, so a ``|`` in it stays in its column.
BRIEF_FIELDS = ("JobID", "UserName", "Account", "QOS", "SubmitTime", "RestartCnt", "Requeue",
                "admin_comment")
#: ``squeue --noheader --states=PENDING --Format`` of :func:`parse_pending_briefs`; run with
#: ``SLURM_TIME_FORMAT=%s`` so the submit time is POSIX seconds.
BRIEF_FORMAT = ",".join(f"{f}:|" for f in BRIEF_FIELDS)


def parse_pending_briefs(output: str) -> tuple[PendingBrief, ...]:
    """The pending jobs of ``squeue -O`` with :data:`BRIEF_FORMAT`, in Slurm's order. A line
    that does not start with a job id and hold every column is left out (it cannot be a job's:
    only an admin's newline in an admin_comment makes one)."""
    width = len(BRIEF_FIELDS)
    out: list[PendingBrief] = []
    for line in output.splitlines():
        cols = line.strip().split("|", width - 1)
        if len(cols) != width or not cols[0].isdigit():
            continue
        job_id, user, account, qos, submit, restarts, requeue, comment = cols
        if comment.endswith("|"):
            comment = comment[:-1]  # the column's own suffix
        where = f"squeue -O, job {job_id}"
        out.append(PendingBrief(
            job_id=int(job_id), user=_compact_text(user.strip()),
            account=_compact_text(account.strip()), qos=_compact_text(qos.strip()),
            submit_time=_compact_time(submit.strip(), f"{where}: SubmitTime"),
            restart_count=_compact_int(restarts.strip(), f"{where}: RestartCnt") or 0,
            requeue=requeue.strip() != "0", admin_comment=_compact_text(comment.strip())))
    return tuple(out)


def _resv_time(value: str) -> int | None:
    """A reservation time: POSIX seconds (``SLURM_TIME_FORMAT=%s``) or Slurm's ISO local
    time; None for anything else (``Unknown``, ``(null)``)."""
    if value.isdigit():
        return int(value)
    try:
        return int(time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _items(fields: Mapping[str, str], key: str) -> tuple[str, ...]:
    """A comma-separated field ("" and "(null)": none)."""
    value = fields.get(key, "")
    return () if value in ("", "(null)") else tuple(value.split(","))


def parse_reservations(text: str) -> tuple[Reservation, ...]:
    """The reservations in ``scontrol show reservation --oneliner`` output (one
    ``ReservationName=... StartTime=... Nodes=... Flags=... Users=... State=...`` line each;
    "No reservations in the system" and lines without a name give nothing)."""
    out = []
    for line in text.splitlines():
        fields = dict(_SWITCH_FIELD.findall(line))
        name = fields.get("ReservationName")
        if not name:
            continue

        try:
            nodes = tuple(expand(fields["Nodes"])) if fields.get("Nodes", "(null)") != \
                "(null)" else ()
        except ConfigError:
            nodes = ()
        out.append(Reservation(name=name, nodes=nodes, users=_items(fields, "Users"),
                               start_time=_resv_time(fields.get("StartTime", "")),
                               end_time=_resv_time(fields.get("EndTime", "")),
                               flags=_items(fields, "Flags"), state=fields.get("State", "")))
    return tuple(out)
