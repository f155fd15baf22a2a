"""Incremental victim search for one planning pass: the same options as
:func:`~hai_slurm.priority.planner.victims.search`, without a full search per waiting job.

A pass searches victims for hundreds of waiting jobs, and between two searches only the few
nodes a plan or a free placement touched change. So the index keeps, across the pass:

* per node, the running jobs that may ever give way (preemptible, unprotected, old enough) and
  are not yet given to a plan, with a version that changes whenever the node's busy GPUs or
  that list change;
* per (node, GPUs per node, class bucket), the node's best victim set
  (:func:`~hai_slurm.priority.planner.victims.best_on_node`) for that version; a class bucket is
  the highest class below the beneficiary's that has a candidate on the node, so classes that
  see the same candidates share the result;
* per (GPUs per node, beneficiary class), a heap of every node's best single-node option, of
  which only the nodes changed since the last search are recomputed; a node enters the heap
  with a cheap lower bound of its cost (the missing GPUs covered fractionally by the cheapest
  candidates) and its exact best set is searched only when that bound reaches the top;
* the multi-node greedy looks at nodes by the same bound and stops once no node left can
  beat the best found;
* the number of running jobs left out per reason and class, so the reasons need no walk over
  every running job.

Multi-node searches run the same greedy per leaf switch as the plain search, with each node's
first-round result taken from the cache (only nodes that share a victim already chosen are
searched again). ``tests/unit/test_planner_fast.py`` compares whole passes with the plain
search on random inputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hai_slurm.conf.topology import Level
from hai_slurm.priority.planner.placement import ClusterView, Placement
from hai_slurm.priority.planner.victims import Candidate, Option, best_on_node, group_option

_Best = tuple[tuple[float, ...], int, int, frozenset[int]] | None


def _cover(need: int, parts: list[tuple[float, int]]) -> float:
    """The least cost of ``need`` GPUs when parts (cost, GPUs) may be taken in fractions: a
    lower bound of any whole set's cost (kept a hair low so rounding never lifts it above)."""
    total = 0.0
    for cost, gpus in sorted(parts, key=lambda p: p[0] / p[1] if p[1] else float("inf")):
        if gpus <= 0:
            continue
        take = min(gpus, need)
        total += cost * take / gpus
        need -= take
        if need <= 0:
            break
    return max(0.0, total * (1 - 1e-9) - 1e-6)


class _Ranking:
    """Single-node options of every node for one (GPUs per node, class), best first (lazy)."""

    __slots__ = ("cursor", "heap", "seen")

    def __init__(self) -> None:
        # (key, node, node version, option); option None: key is a lower bound of 2 items
        self.heap: list[tuple[tuple[float, ...], str, int, Option | None]] = []
        self.seen: dict[str, int] = {}
        self.cursor = 0


class VictimIndex:
    """Candidates per node and cached per-node results for one pass (mutable, not shared)."""

    def __init__(self, view: ClusterView, cands: dict[int, Candidate],
                 usable: Sequence[int], limit: int) -> None:
        self.view, self.cands, self.limit = view, cands, limit
        self.on_node: dict[str, list[Candidate]] = {n: [] for n in view.nodes}
        for jid in usable:
            c = cands[jid]
            for node in c.masks:
                self.on_node[node].append(c)
        self.version: dict[str, int] = dict.fromkeys(view.nodes, 0)
        self.changes: list[str] = []
        self.cache: dict[tuple[str, int, int], tuple[int, _Best]] = {}   # per class bucket
        self.by_rank: dict[tuple[str, int, int], tuple[int, _Best]] = {}  # per class
        # per class (key >= 0) and per class bucket b (key -2 - b)
        self.lows: dict[tuple[str, int, int], tuple[int, tuple[float, float] | None]] = {}
        self.rankings: dict[tuple[int, int], _Ranking] = {}
        self.elig: dict[tuple[str, int], tuple[int, tuple[int, list[Candidate], int]]] = {}
        self.group_version: dict[str, int] = dict.fromkeys(view.groups, 0)
        self.changed = 0   # touches so far (the version of the whole cluster)
        self.greedy: dict[tuple[str | None, int, int, int], tuple[int, Option | None]] = {}

    def touch(self, node: str) -> None:
        """The node's busy GPUs or candidates changed."""
        self.version[node] += 1
        self.changes.append(node)
        self.group_version[self.view.nodes[node].group] += 1
        self.changed += 1

    def claim(self, jid: int) -> None:
        """``jid`` gives way to a plan: no later search counts it."""
        for node in self.cands[jid].masks:
            self.on_node[node] = [c for c in self.on_node[node] if c.job_id != jid]
            self.touch(node)

    def eligible(self, node: str, rank: int) -> tuple[int, list[Candidate], int]:
        """(class bucket, candidates on ``node`` that may give way to a job of ``rank``, the
        node's GPUs free or held by them), cached per node version."""
        ver = self.version[node]
        hit = self.elig.get((node, rank))
        if hit is not None and hit[0] == ver:
            return hit[1]
        out = [c for c in self.on_node[node] if c.rank < rank]
        reach = self.view.free(node)
        for c in out:
            reach |= c.masks[node]
        got = (max((c.rank for c in out), default=-1), out, reach)
        self.elig[node, rank] = (ver, got)
        return got

    def best(self, node: str, per: int, rank: int) -> _Best:
        """best_on_node for the node's candidates below ``rank``, nothing paid (cached)."""
        ver = self.version[node]
        fast = self.by_rank.get((node, per, rank))
        if fast is not None and fast[0] == ver:
            return fast[1]
        bucket, cands, reach = self.eligible(node, rank)
        got: _Best = None
        if reach.bit_count() >= per:  # else best_on_node finds nothing either
            key = (node, per, bucket)
            hit = self.cache.get(key)
            if hit is not None and hit[0] == ver:
                got = hit[1]
            else:
                got = best_on_node(self.view, node, per, cands, frozenset(), self.limit)
                self.cache[key] = (ver, got)
        self.by_rank[node, per, rank] = (ver, got)
        return got

    def search(self, nodes: int, per: int, rank: int, *, cross_leaf: bool = False,
               keep: int = 4) -> list[Option]:
        """What :func:`~hai_slurm.priority.planner.victims.search` returns for the candidates
        that may give way to a job of ``rank``."""
        if nodes == 1:
            return self._single(per, rank, keep)
        found: list[Option] = []
        for group in self.view.groups:
            option = self._group(group, nodes, per, rank)
            if option is not None:
                found.append(option)
        if not found and cross_leaf:
            option = self._group(None, nodes, per, rank)
            if option is not None:
                found.append(option)
        found.sort(key=lambda o: o.key)
        seen: set[frozenset[int]] = set()
        out: list[Option] = []
        for o in found:
            if o.victims not in seen:
                seen.add(o.victims)
                out.append(o)
        return out[:keep]

    def _option(self, node: str, per: int, rank: int) -> Option | None:
        got = self.best(node, per, rank)
        if got is None or not got[3]:
            return None
        key, level, mask, victims = got
        return Option(key, victims, Placement(((node, mask),), Level(level)))

    def lower(self, node: str, per: int, rank: int) -> tuple[float, float] | None:
        """A lower bound of the (non-borrowed loss, loss) that opens the node's best set for
        ``per`` GPUs (fractional cover of the GPUs missing); None: the node has no option
        (it cannot hold ``per`` GPUs, or they are free). Cached per node version."""
        ver = self.version[node]
        hit = self.lows.get((node, per, rank))
        if hit is not None and hit[0] == ver:
            return hit[1]
        bucket, cands, reach = self.eligible(node, rank)
        shared = self.lows.get((node, per, -2 - bucket))  # classes that see the same jobs
        if shared is not None and shared[0] == ver:
            self.lows[node, per, rank] = shared
            return shared[1]
        need = per - self.view.free(node).bit_count()
        got: tuple[float, float] | None = None
        if reach.bit_count() >= per and need > 0:
            parts = [(c.lost_work, (0.0 if c.borrowed else c.lost_work),
                      c.masks[node].bit_count()) for c in cands]
            got = (_cover(need, [(nb, g) for _, nb, g in parts]),
                   _cover(need, [(lw, g) for lw, _, g in parts]))
        self.lows[node, per, rank] = self.lows[node, per, -2 - bucket] = (ver, got)
        return got

    def _single(self, per: int, rank: int, keep: int) -> list[Option]:
        r = self.rankings.get((per, rank))
        if r is None:
            r = self.rankings[per, rank] = _Ranking()
            for node in self.view.nodes:
                ver = self.version[node]
                r.seen[node] = ver
                lb = self.lower(node, per, rank)
                if lb is not None:
                    r.heap.append((lb, node, ver, None))
            heapq.heapify(r.heap)
            r.cursor = len(self.changes)
        else:
            for node in self.changes[r.cursor:]:
                ver = self.version[node]
                if r.seen[node] == ver:
                    continue
                r.seen[node] = ver
                lb = self.lower(node, per, rank)
                if lb is not None:
                    heapq.heappush(r.heap, (lb, node, ver, None))
            r.cursor = len(self.changes)
        taken: list[tuple[tuple[float, ...], str, int, Option | None]] = []
        out: list[Option] = []
        sets: set[frozenset[int]] = set()
        while r.heap and len(out) < keep:
            entry = heapq.heappop(r.heap)
            _, node, ver, option = entry
            if ver != self.version[node]:
                continue  # stale: the node changed since
            if option is None:  # a bound: the exact option now (never below the bound)
                exact = self._option(node, per, rank)
                if exact is not None:
                    heapq.heappush(r.heap, (exact.key, node, ver, exact))
                continue
            taken.append(entry)
            if option.victims not in sets:
                sets.add(option.victims)
                out.append(option)
        for entry in taken:
            heapq.heappush(r.heap, entry)
        return out

    def _group(self, group: str | None, nodes: int, per: int, rank: int) -> Option | None:
        """The greedy's option for one leaf switch (None: the whole cluster), cached until one
        of its nodes changes."""
        ver = self.changed if group is None else self.group_version[group]
        key = (group, nodes, per, rank)
        hit = self.greedy.get(key)
        if hit is not None and hit[0] == ver:
            return hit[1]
        members = tuple(self.view.nodes) if group is None else self.view.groups[group]
        got = self._greedy(members, nodes, per, rank)
        self.greedy[key] = (ver, got)
        return got

    def _greedy(self, members: Sequence[str], nodes: int, per: int,
                rank: int) -> Option | None:
        """The plain search's greedy over ``members`` (see victims._greedy_group)."""
        view = self.view
        reach = 0
        for name in members:
            reach += self.eligible(name, rank)[2].bit_count() >= per
        if reach < nodes:
            return None
        paid: frozenset[int] = frozenset()
        picked: list[tuple[str, int, int]] = []
        left = list(members)
        bounds: dict[str, tuple[float, float] | None] = {}
        near: set[str] = set()   # nodes where a chosen victim holds GPUs
        for _ in range(nodes):
            best: tuple[tuple[float, ...], str, int, int, frozenset[int]] | None = None
            later: list[tuple[tuple[float, float], str]] = []
            for name in left:
                if name in near:  # shares a victim already chosen: search it again
                    got = best_on_node(view, name, per, self.eligible(name, rank)[1], paid,
                                       self.limit)
                else:
                    if name not in bounds:
                        bounds[name] = self.lower(name, per, rank)
                    lb = bounds[name]
                    if lb is not None:  # exact key >= lb: looked at below, cheapest first
                        later.append((lb, name))
                        continue
                    got = self.best(name, per, rank)  # fits on free GPUs, or cannot
                if got is not None and (best is None or got[0] < best[0]):
                    best = (got[0], name, got[1], got[2], got[3])
            later.sort()
            for lb, name in later:
                if best is not None and lb > best[0]:
                    break  # this node and the rest cannot beat the best so far
                got = self.best(name, per, rank)
                if got is not None and (best is None or got[0] < best[0]):
                    best = (got[0], name, got[1], got[2], got[3])
            if best is None:
                return None
            _, name, level, mask, new = best
            paid |= new
            for j in new:
                near.update(self.cands[j].masks)
            picked.append((name, level, mask))
            left.remove(name)
        if not paid:
            return None
        return group_option(view, picked, [self.cands[j] for j in sorted(paid)])
