"""Whole-description checks. Each failure is a :class:`ConfigError` naming file, key and value.

Checked: names that reach Slurm's files (cluster, node types, GPU model = node feature, switches,
partitions, QOS, teams: no character Slurm reads as a separator or comment; lower case where
Slurm or sacctmgr lower-cases), GPU layouts (indices 0..n-1 once each, NVLink GPUs exist, a PCIe
switch's cores on its own socket, device patterns with only ``{index}``/``{node}``), memory
(at least :data:`MIN_MEMORY_MB`), node groups (known type, no node in two groups), switches (known
nodes and switches, each node in exactly one leaf, each switch under at most one parent, no
cycles, one tree), partitions (known nodes, one default, a MaxTime Slurm reads), classes (a class
only preempts lower classes, distinct QOS names) and team quotas (within the cluster's GPUs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hai_slurm.conf.hostlist import expand
from hai_slurm.conf.model import ClusterDescription, NodeType, Partition, Switch
from hai_slurm.errors import ConfigError
from hai_slurm.slurm_formats import DurationContext, duration_seconds

MIN_MEMORY_MB = 1024
"""The smallest ``memory_mb`` (Slurm RealMemory) accepted. slurm.conf's DefMemPerCPU is the
smallest memory_mb per CPU of all node types, so a placeholder such as 1 would give every job
without ``--mem`` that little memory on the whole cluster."""


@dataclass(frozen=True)
class _NameRule:
    """What a kind of name may look like, said in words for the error message."""

    pattern: re.Pattern[str]
    words: str
    lower: bool = False
    max_len: int | None = None


_WORD = _NameRule(
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*"),
    "letters, digits, '_', '.', '-', starting with a letter or digit (Slurm reads a space, "
    "',', '=' or '#' as the end of the value or a comment)")
_CLUSTER = _NameRule(
    re.compile(r"[a-z0-9][a-z0-9_-]{0,39}"),
    "1-40 lower-case letters, digits, '_', '-' (slurm.conf(5): Slurm maps ClusterName to lower "
    "case and the accounting database allows 40 characters)", lower=True, max_len=40)
_QOS = _NameRule(
    re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}"),
    "1-64 lower-case letters, digits, '_', '.', '-' (sacctmgr lower-cases QOS names, so a "
    "mixed-case name never matches the accounting database)", lower=True, max_len=64)
_TEAM = _NameRule(_QOS.pattern, "1-64 lower-case letters, digits, '_', '.', '-'", lower=True,
                  max_len=64)
_NOT_WORD = re.compile(r"[^A-Za-z0-9_.-]+")
_VENDOR_PREFIXES = ("NVIDIA ", "Tesla ")
_DEVICE_PLACEHOLDERS = ("{index}", "{node}")
_STRAY_BRACE = re.compile(r"\{[^{}]*\}?|\}")
_NOT_IN_DEVICE = re.compile(r"[\s#,=\[\]]")


def slurm_word(text: str, *, lower: bool = False, max_len: int | None = None) -> str:
    """``text`` as a name Slurm takes: runs of other characters become '-'
    (``"Tesla V100 SXM2"`` -> ``"Tesla-V100-SXM2"``)."""
    word = _NOT_WORD.sub("-", text.lower() if lower else text).strip("-_.")
    return word[:max_len].rstrip("-_.") if max_len else word


def feature_name(model: str) -> str:
    """A GPU model as a Slurm node feature: ``"NVIDIA A100-SXM4-40GB"`` -> ``"A100-SXM4-40GB"``,
    ``"Tesla V100 SXM2"`` -> ``"V100-SXM2"``."""
    for prefix in _VENDOR_PREFIXES:
        model = model.removeprefix(prefix)
    return slurm_word(model)


def _check_name(value: str, rule: _NameRule, what: str, src: str, key: str,
                suggestion: str | None = None) -> None:
    if rule.pattern.fullmatch(value):
        return
    example = suggestion or slurm_word(value, lower=rule.lower, max_len=rule.max_len)
    instead = f"; write e.g. {example!r}" if example else ""
    raise ConfigError(f"{what} is {rule.words}{instead}", source=src, key=key, value=value)


def parse_cores(text: str, *, source: str | None = None, key: str | None = None) -> list[int]:
    """``"0-15,32-47"`` -> core ids (sorted, unique)."""
    cores: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ConfigError(f"bad core list {text!r} (use e.g. 0-15,32-47)",
                              source=source, key=key, value=text)
        a, b = int(lo), int(hi or lo)
        if a > b:
            raise ConfigError(f"core range {part!r} runs backwards", source=source, key=key,
                              value=text)
        cores.update(range(a, b + 1))
    return sorted(cores)


def format_cores(cores: list[int] | set[int]) -> str:
    """Core ids -> ``"0-15,32-47"``."""
    ordered = sorted(set(cores))
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def _check_memory(nt: NodeType, src: str, key: str) -> None:
    if nt.memory_mb < MIN_MEMORY_MB:
        raise ConfigError(
            f"{nt.memory_mb} MiB: fill in the node's memory in MiB (Slurm RealMemory, at least "
            f"{MIN_MEMORY_MB}: `free -m` total minus about 5 %); DefMemPerCPU is the smallest "
            "memory_mb per CPU of all node types, so a placeholder here would give every job "
            "without --mem that little memory", source=src, key=key, value=nt.memory_mb)


def _check_device_pattern(pattern: str, src: str, key: str) -> None:
    if "{index}" not in pattern:
        raise ConfigError("must contain {index} (else every GPU gets the same File=)",
                          source=src, key=key, value=pattern)
    rest = pattern
    for placeholder in _DEVICE_PLACEHOLDERS:
        rest = rest.replace(placeholder, "")
    stray = _STRAY_BRACE.search(rest)
    if stray:
        raise ConfigError(
            f"{stray.group()!r} is not a placeholder: the only ones are {{index}} (GPU index) and "
            "{node} (node name), and a device path has no other braces; write e.g. "
            "/dev/nvidia{index}", source=src, key=key, value=pattern)
    if _NOT_IN_DEVICE.search(pattern.format(index=0, node="n1")):
        raise ConfigError(
            "a device path has no spaces, '#', ',', '=', '[' or ']' (gres.conf reads them as "
            "separators, a comment or a hostlist); write e.g. /dev/nvidia{index}",
            source=src, key=key, value=pattern)


def _check_switch_cores(nt: NodeType, socket: int, text: str, src: str, key: str) -> None:
    """A PCIe switch's cores exist and lie on its own socket (Slurm 23.02+ widens ``Cores=`` to
    the GPU's socket, 22.05 takes them as written: both must mean the same socket)."""
    cores = parse_cores(text, source=src, key=key)
    total = len(nt.sockets) * nt.cores_per_socket
    if cores[-1] >= total:
        raise ConfigError(
            f"core {cores[-1]} does not exist ({len(nt.sockets)} sockets x "
            f"{nt.cores_per_socket} cores = ids 0-{total - 1})", source=src, key=key, value=text)
    first, last = socket * nt.cores_per_socket, (socket + 1) * nt.cores_per_socket - 1
    outside = [c for c in cores if not first <= c <= last]
    if outside:
        raise ConfigError(
            f"core(s) {format_cores(outside)} are not on socket {socket} (cores {first}-{last}), "
            "the socket this PCIe switch is listed under; Slurm 22.05 would bind its GPUs to "
            "these cores and 23.02+ to the whole socket: write cores within "
            f"{first}-{last}, or list the switch under the socket that has these cores",
            source=src, key=key, value=text)


def _check_node_type(nt: NodeType, src: str) -> None:
    path = f"node_types.{nt.name}"
    _check_name(nt.name, _WORD, "a node type name", src, path)
    if nt.gpu_model:
        _check_name(nt.gpu_model, _WORD, "gpu_model (the node's Slurm feature)", src,
                    f"{path}.gpu_model", feature_name(nt.gpu_model))
    for key, value, lscpu in (("cores_per_socket", nt.cores_per_socket, "Core(s) per socket"),
                              ("threads_per_core", nt.threads_per_core, "Thread(s) per core")):
        if value < 1:
            raise ConfigError(
                f"must be at least 1: fill in the node's {key.replace('_', ' ')} (`lscpu` "
                f"\"{lscpu}\"); discovery without lscpu output writes 0 here", source=src,
                key=f"{path}.{key}", value=value)
    _check_memory(nt, src, f"{path}.memory_mb")
    if not nt.sockets:
        raise ConfigError("needs at least one [[...socket]]", source=src, key=f"{path}.socket")
    _check_device_pattern(nt.device_pattern, src, f"{path}.device_pattern")
    seen: dict[int, str] = {}
    for si, sock in enumerate(nt.sockets):
        for wi, sw in enumerate(sock.pcie_switches):
            wpath = f"{path}.socket[{si}].pcie_switch[{wi}]"
            if not sw.gpus:
                raise ConfigError("lists no GPUs", source=src, key=f"{wpath}.gpus", value=[])
            for g in sw.gpus:
                if g in seen:
                    raise ConfigError(f"GPU {g} is listed twice (also in {seen[g]})",
                                      source=src, key=f"{wpath}.gpus", value=list(sw.gpus))
                seen[g] = wpath
            if sw.cores is not None:
                _check_switch_cores(nt, si, sw.cores, src, f"{wpath}.cores")
    expected = set(range(len(seen)))
    if set(seen) != expected:
        raise ConfigError(
            f"GPU indices must be 0..{len(seen) - 1} with none missing; got {sorted(seen)}",
            source=src, key=f"{path}.socket", value=sorted(seen))
    for li, grp in enumerate(nt.nvlink):
        lpath = f"{path}.nvlink[{li}]"
        unknown = [g for g in grp.gpus if g not in seen]
        if unknown:
            raise ConfigError(f"unknown GPU(s) {unknown} (node type has 0..{len(seen) - 1})",
                              source=src, key=f"{lpath}.gpus", value=list(grp.gpus))
        if len(set(grp.gpus)) < 2:
            raise ConfigError("an NVLink group needs at least two GPUs", source=src,
                              key=f"{lpath}.gpus", value=list(grp.gpus))
        if grp.links < 1:
            raise ConfigError("must be at least 1", source=src, key=f"{lpath}.links",
                              value=grp.links)


def _check_switches(desc: ClusterDescription, owner: dict[str, str]) -> None:
    src = desc.source
    by_name: dict[str, tuple[int, Switch]] = {}
    for i, sw in enumerate(desc.switches):
        _check_name(sw.name, _WORD, "a switch name (topology.conf SwitchName)", src,
                    f"switch[{i}].name")
        if sw.name in by_name:
            raise ConfigError(f"switch name used twice (also switch[{by_name[sw.name][0]}])",
                              source=src, key=f"switch[{i}].name", value=sw.name)
        by_name[sw.name] = (i, sw)
    leaf_of: dict[str, str] = {}
    parent_of: dict[str, str] = {}
    for i, sw in enumerate(desc.switches):
        if (sw.nodes is None) == (not sw.switches):
            raise ConfigError("a switch lists either nodes (leaf) or switches (spine)",
                              source=src, key=f"switch[{i}]", value=sw.name)
        if sw.nodes is not None:
            for n in expand(sw.nodes, source=src, key=f"switch[{i}].nodes"):
                if n not in owner:
                    raise ConfigError(f"unknown node {n!r} (not in any [[nodes]] names)",
                                      source=src, key=f"switch[{i}].nodes", value=sw.nodes)
                if n in leaf_of:
                    raise ConfigError(f"node {n!r} is already under leaf switch {leaf_of[n]!r}",
                                      source=src, key=f"switch[{i}].nodes", value=sw.nodes)
                leaf_of[n] = sw.name
        for child in sw.switches:
            if child not in by_name:
                raise ConfigError(f"unknown switch {child!r}", source=src,
                                  key=f"switch[{i}].switches", value=list(sw.switches))
            if child in parent_of:
                where = ("twice here" if parent_of[child] == sw.name
                         else f"under {parent_of[child]!r} too")
                raise ConfigError(
                    f"switch {child!r} is listed {where}; in topology/tree a switch has one "
                    f"parent (else its GPUs count twice): list {child!r} under one switch only",
                    source=src, key=f"switch[{i}].switches", value=list(sw.switches))
            parent_of[child] = sw.name
    if desc.switches:
        missing = [n for n in owner if n not in leaf_of]
        if missing:
            raise ConfigError(
                f"node(s) {missing[:5]} are under no leaf switch; Slurm's topology/tree cannot "
                "place jobs on them with others", source=src, key="switch", value=missing[:5])
    # cycles: depth-first walk with colours
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        i, sw = by_name[name]
        for child in sw.switches:
            if state.get(child) == 1:
                loop = " -> ".join([*trail[trail.index(child):], child])
                raise ConfigError(f"switch cycle {loop}", source=src,
                                  key=f"switch[{i}].switches", value=list(sw.switches))
            if child not in state:
                visit(child, [*trail, child])
        state[name] = 2

    for name in by_name:
        if name not in state:
            visit(name, [name])
    _check_one_tree([s.name for s in desc.switches if s.name not in parent_of], src)


def _check_one_tree(roots: list[str], src: str) -> None:
    """Switches without a parent; more than one means separate trees. Slurm's topology/tree
    never runs a job across them (sites use that for fabrics that are not connected), but
    hai-slurm's topology model and planner take the switches as one tree and would plan
    placements across them, so such a description is refused until they model fabrics."""
    if len(roots) <= 1:
        return
    top = "spine" if "spine" not in roots else "top"
    listed = ", ".join(f'"{r}"' for r in roots)
    raise ConfigError(
        f"the switches form {len(roots)} separate trees (roots: {', '.join(roots)}); hai-slurm "
        "plans as if one tree held every node, and Slurm never runs a job across separate "
        "trees. If the fabrics are connected, list the switch that joins them, e.g. "
        f'[[switch]] name = "{top}" switches = [{listed}]; if they are not, hai-slurm does not '
        "support that layout yet (describe one fabric per cluster description)", source=src,
        key="switch", value=roots)


def _check_partition(part: Partition, src: str, path: str) -> None:
    _check_name(part.name, _WORD, "a partition name", src, f"{path}.name")
    if part.name.upper() == "DEFAULT":
        raise ConfigError("PartitionName=DEFAULT sets defaults for the other partitions in "
                          "slurm.conf, it is no partition; choose another name, e.g. 'gpu'",
                          source=src, key=f"{path}.name", value=part.name)
    try:
        seconds = duration_seconds(part.max_time, DurationContext.TIME_LIMIT)
    except ValueError:
        seconds = None
    if seconds is None or part.max_time != part.max_time.strip():
        raise ConfigError(
            "is not a Slurm time limit: write minutes (\"90\"), M:S, H:M:S (\"48:00:00\"), "
            "D-H, D-H:M, D-H:M:S (\"2-00:00:00\" is two days) or \"INFINITE\"", source=src,
            key=f"{path}.max_time", value=part.max_time)


def validate(desc: ClusterDescription) -> None:
    """Raise the first :class:`ConfigError` found in ``desc`` (return None when it is sound)."""
    src = desc.source
    _check_name(desc.name, _CLUSTER, "a cluster name (Slurm ClusterName)", src, "cluster.name")
    types = {nt.name: nt for nt in desc.node_types}
    for nt in desc.node_types:
        _check_node_type(nt, src)
    owner: dict[str, str] = {}
    for i, grp in enumerate(desc.node_groups):
        if grp.type not in types:
            raise ConfigError(f"unknown node type {grp.type!r} (known: {', '.join(types)})",
                              source=src, key=f"nodes[{i}].type", value=grp.type)
        for n in expand(grp.nodes, source=src, key=f"nodes[{i}].names"):
            if n in owner:
                raise ConfigError(f"node {n!r} is also in {owner[n]}; node ranges overlap",
                                  source=src, key=f"nodes[{i}].names", value=grp.nodes)
            owner[n] = f"nodes[{i}] ({grp.nodes})"
    if not owner:
        raise ConfigError("the cluster has no nodes", source=src, key="nodes")
    _check_switches(desc, owner)
    names: set[str] = set()
    for i, part in enumerate(desc.partitions):
        _check_partition(part, src, f"partition[{i}]")
        if part.name in names:
            raise ConfigError("partition name used twice", source=src,
                              key=f"partition[{i}].name", value=part.name)
        names.add(part.name)
        if part.nodes != "ALL":
            for n in expand(part.nodes, source=src, key=f"partition[{i}].nodes"):
                if n not in owner:
                    raise ConfigError(f"unknown node {n!r}", source=src,
                                      key=f"partition[{i}].nodes", value=part.nodes)
    if sum(p.default for p in desc.partitions) > 1:
        raise ConfigError("more than one partition has default = true", source=src,
                          key="partition", value=[p.name for p in desc.partitions if p.default])
    qos_names: dict[str, str] = {}
    for cp in desc.classes:
        key = f"classes.{cp.cls.value}"
        for victim in cp.preempts:
            if victim.weight >= cp.cls.weight:
                raise ConfigError(f"{cp.cls.value} may only preempt lower classes, not "
                                  f"{victim.value}", source=src, key=f"{key}.preempts",
                                  value=victim.value)
        _check_name(cp.qos, _QOS, "a QOS name", src, f"{key}.qos")
        if cp.qos in qos_names:
            raise ConfigError(f"QOS name also used by {qos_names[cp.qos]}", source=src,
                              key=f"{key}.qos", value=cp.qos)
        qos_names[cp.qos] = cp.cls.value
        if cp.grace_time_s < 0:
            raise ConfigError("must be >= 0 seconds", source=src, key=f"{key}.grace_time",
                              value=cp.grace_time_s)
    capacity = sum(types[g.type].gpu_count * len(expand(g.nodes)) for g in desc.node_groups)
    total = 0
    for team in desc.teams:
        _check_name(team.name, _TEAM, "a team (Slurm account) name", src, f"teams.{team.name}")
        if team.gpu_limit is not None and not 0 <= team.gpu_limit <= capacity:
            raise ConfigError(f"must be between 0 and the cluster's {capacity} GPUs", source=src,
                              key=f"teams.{team.name}.gpu_limit", value=team.gpu_limit)
        key = f"teams.{team.name}.gpu_quota"
        if team.gpu_quota is None:
            continue
        if team.gpu_quota < 0:
            raise ConfigError("must be >= 0", source=src, key=key, value=team.gpu_quota)
        if team.gpu_quota > capacity:
            raise ConfigError(f"quota is more than the cluster's {capacity} GPUs", source=src,
                              key=key, value=team.gpu_quota)
        if team.gpu_limit is not None and team.gpu_limit < team.gpu_quota:
            raise ConfigError(f"gpu_limit {team.gpu_limit} is below gpu_quota {team.gpu_quota}",
                              source=src, key=f"teams.{team.name}.gpu_limit",
                              value=team.gpu_limit)
        total += team.gpu_quota
        if total > capacity:
            raise ConfigError(
                f"quotas add up to {total} GPUs, more than the cluster's {capacity}: quotas are "
                "guarantees, so they must fit (borrowing beyond them is the daemon's job)",
                source=src, key=key, value=team.gpu_quota)
