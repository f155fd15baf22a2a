"""Whole-description checks. Each failure is a :class:`ConfigError` naming file, key and value.

Checked: GPU layouts (indices 0..n-1 once each, NVLink GPUs exist, cores in range), node groups
(known type, no node in two groups), switches (known nodes and switches, each node in exactly one
leaf, no cycles), partitions (known nodes, one default), classes (a class only preempts lower
classes, distinct QOS names) and team quotas (within the cluster's GPU capacity).
"""

from __future__ import annotations

import re

from hai_slurm.conf.hostlist import expand
from hai_slurm.conf.model import ClusterDescription, NodeType, Switch
from hai_slurm.errors import ConfigError

_TEAM_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


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


def _check_node_type(nt: NodeType, src: str) -> None:
    path = f"node_types.{nt.name}"
    for key, value in (("cores_per_socket", nt.cores_per_socket),
                       ("threads_per_core", nt.threads_per_core), ("memory_mb", nt.memory_mb)):
        if value < 1:
            raise ConfigError("must be at least 1", source=src, key=f"{path}.{key}", value=value)
    if not nt.sockets:
        raise ConfigError("needs at least one [[...socket]]", source=src, key=f"{path}.socket")
    if "{index}" not in nt.device_pattern:
        raise ConfigError("must contain {index} (else every GPU gets the same File=)",
                          source=src, key=f"{path}.device_pattern", value=nt.device_pattern)
    seen: dict[int, str] = {}
    total_cores = len(nt.sockets) * nt.cores_per_socket
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
                cores = parse_cores(sw.cores, source=src, key=f"{wpath}.cores")
                if cores[-1] >= total_cores:
                    raise ConfigError(
                        f"core {cores[-1]} does not exist ({len(nt.sockets)} sockets x "
                        f"{nt.cores_per_socket} cores = ids 0-{total_cores - 1})",
                        source=src, key=f"{wpath}.cores", value=sw.cores)
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
        if sw.name in by_name:
            raise ConfigError(f"switch name used twice (also switch[{by_name[sw.name][0]}])",
                              source=src, key=f"switch[{i}].name", value=sw.name)
        by_name[sw.name] = (i, sw)
    leaf_of: dict[str, str] = {}
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


def validate(desc: ClusterDescription) -> None:
    """Raise the first :class:`ConfigError` found in ``desc`` (return None when it is sound)."""
    src = desc.source
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
        if not _TEAM_NAME.fullmatch(team.name):
            raise ConfigError("a team (Slurm account) name is 1-64 lower-case letters, digits, "
                              "'_', '.', '-'", source=src, key=f"teams.{team.name}",
                              value=team.name)
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
