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
from bisect import bisect_left, insort
from collections.abc import Sequence
from operator import attrgetter

from hai_slurm.priority.planner.placement import LEVELS, ClusterView, Placement
from hai_slurm.priority.planner.victims import Candidate, Option, best_on_node, group_option

_Best = tuple[tuple[float, ...], int, int, frozenset[int]] | None
_Bound = tuple[float, float]
_Elig = tuple[int, list[Candidate], int]
_NO_BEST: _Best = ((), -1, 0, frozenset())
_NO_BOUND: _Bound = (-1.0, -1.0)
"""Defaults of ``dict.get`` on the per-node caches, told apart by identity: not cached (None
is a cached answer). Most reads there are misses (a node is bounded again after each
touch), and a raised ``KeyError`` costs about twenty times a ``get``."""
_Pre = tuple[float, int, int, int]
_Leaf = tuple[_Bound, int, str, int]
"""A leaf switch's entry in a multi-node search: (its bound, index, name, its version when
bounded)."""
_Entry = tuple[float, float, tuple[float, ...], str, int, int, Option | None]
"""A ranking's heap entry: (key[0], key[1], key[2:], node, token, node version or -1, option
or None); a key flattened so that heap comparisons mostly compare two floats, in the order
of (key, node, ...): a bound's key is (discounted loss, loss) and its tail (), which sorts
before any longer key with the same first two items, as the 2-tuple did."""


_INF = float("inf")


def _ratio(part: _Pre) -> float:
    return part[0] / part[1] if part[1] else float("inf")


def _cover(need: int, parts: list[_Pre]) -> float:
    """The least cost of ``need`` GPUs when parts (cost, GPUs, class, job id) may be taken in
    fractions: a lower bound of any whole set's cost (kept a hair low so rounding never lifts
    it above). ``parts`` sorted by cost per GPU (stable: as ``sorted(parts, key=_ratio)``)."""
    total = 0.0
    for cost, gpus, _, _ in parts:
        if gpus <= 0:
            continue
        take = gpus if gpus <= need else need   # min(gpus, need), without the call
        total += cost * take / gpus
        need -= take
        if need <= 0:
            break
    low = total * (1 - 1e-9) - 1e-6
    return low if low > 0.0 else 0.0


class _Node:
    """One node's candidates and what was derived from them, valid until the node changes
    (then :meth:`VictimIndex.touch` empties the caches and bumps the version)."""

    __slots__ = ("best", "cands", "elig", "group", "low", "name", "parts", "pre", "version")

    def __init__(self, name: str, group: str) -> None:
        self.name, self.group = name, group
        self.cands: list[Candidate] = []
        self.version = 0
        self.elig: dict[int, _Elig] = {}                 # per beneficiary class
        # per (GPUs per node, class bucket): key per * 16 + bucket + 1
        self.best: dict[int, _Best] = {}
        self.low: dict[int, _Bound | None] = {}
        # per class bucket (+ 16: losses spread, see _share): the parts of the lower bounds,
        # (discounted loss, GPUs, class, job id) and (loss, GPUs, class, job id) of each
        # candidate, by cost per GPU
        self.parts: dict[int, tuple[list[_Pre], list[_Pre]]] = {}
        # the parts of every candidate the node had, (cost, GPUs, class, job id), by cost per
        # GPU: made once a pass (see VictimIndex.lower)
        self.pre: tuple[list[_Pre], list[_Pre]] | None = None


class _Ranking:
    """Single-node options of every node for one (GPUs per node, class), best first (lazy).

    Within a pass a node only gets worse (plans take its free GPUs and its candidates), so a
    lower bound computed once stays a lower bound: a changed node is pushed again with its last
    bound (``low``) and looked at only when that reaches the top. Each node has one live heap
    entry (``live`` holds its token); entries with another token are dead. The live entry of
    a bound has a negative token: it stays a bound when its node changes (a node only gets
    worse), so only a node whose live token is positive (an exact option, or no entry) is
    pushed again; a bound made at an earlier version of its node is made again when it
    reaches the top, before the exact option.

    The exact options a search returned are kept out of the heap, best first (``top``): the
    next search starts from them (those whose node has not changed since) instead of popping
    and pushing back the same four entries every time."""

    __slots__ = ("cursor", "heap", "live", "low", "top")

    def __init__(self) -> None:
        # entries as _Entry (key flattened, node, token, node version or -1, option); option
        # None: the key is a lower bound of 2 items (tail ()), and with a version other than
        # the node's (-1: pushed again, or seeded) one from an earlier version (computed again
        # first)
        self.heap: list[_Entry] = []
        self.live: dict[str, int] = {}
        self.low: dict[str, _Bound] = {}   # nodes that may ever have an option: a lower bound
        self.cursor = 0
        self.top: list[_Entry] = []   # exact options below every entry of the heap, in order


class _Reach:
    """The nodes of a leaf switch or of the cluster that can reach some GPUs per node for a
    class (see :meth:`VictimIndex._reach`): each one's lower bound (None: it needs no
    victim, or has no option), those with one sorted as (bound, node), and the others."""

    __slots__ = ("cursor", "lows", "order", "unbounded")

    def __init__(self) -> None:
        self.cursor = 0   # the change log's length when last brought up to date
        self.lows: dict[str, _Bound | None] = {}
        self.order: list[tuple[_Bound, str]] = []
        self.unbounded: set[str] = set()


class VictimIndex:
    """Candidates per node and cached per-node results for one pass (mutable, not shared)."""

    def __init__(self, view: ClusterView, cands: dict[int, Candidate],
                 usable: Sequence[int], limit: int) -> None:
        self.view, self.cands, self.limit = view, cands, limit
        # each node's GPUs, and the view's busy GPUs (the same dict, changed in place): a
        # node's free GPUs read without a method call (``view.free``), thousands a pass
        self.full = {n: lay.full for n, lay in view.nodes.items()}
        self.busy = view.busy
        self.nodes: dict[str, _Node] = {n: _Node(n, lay.group) for n, lay in view.nodes.items()}
        for jid in usable:
            c = cands[jid]
            for node in c.masks:
                self.nodes[node].cands.append(c)
        self.changes: list[str] = []
        self.gone: set[int] = set()   # candidates claimed so far
        self.rankings: dict[tuple[int, int, frozenset[str] | None], _Ranking] = {}
        # per leaf switch, its nodes' touches in order (its length: the leaf's version)
        self.group_changes: dict[str, list[str]] = {g: [] for g in view.groups}
        self.changed = 0   # touches so far (the version of the whole cluster)
        self.token = 0     # heap entry tokens of the rankings
        self.greedy: dict[tuple[str | None, int, int, int, frozenset[str] | None],
                          tuple[int, Option | None]] = {}
        self.reaches: dict[tuple[str | None, int, int], _Reach] = {}   # see _reach
        self.position = {n: lay.order for n, lay in view.nodes.items()}
        # per (leaf, GPUs per node, class): the leaf's version and the share bound of each of
        # its nodes that can reach the GPUs; per (nodes, GPUs per node, class): each leaf's
        # bound (see _group_bound) and the leaf's version then (see _leaves)
        self.shares: dict[tuple[str, int, int], tuple[int, dict[str, _Bound]]] = {}
        self.leaves: dict[tuple[int, int, int], list[_Leaf]] = {}

    def touch(self, node: str) -> None:
        """The node's busy GPUs or candidates changed."""
        n = self.nodes[node]
        n.version += 1
        n.elig.clear()
        n.best.clear()
        n.low.clear()
        n.parts.clear()
        self.changes.append(node)
        self.group_changes[n.group].append(node)
        self.changed += 1

    def claim(self, jids: Sequence[int]) -> None:
        """``jids`` give way to a plan: no later search counts them. Each of their nodes is
        touched once (in the order of the jobs, then of their nodes)."""
        self.gone.update(jids)
        cands, nodes = self.cands, self.nodes
        touched: dict[str, None] = {}
        for jid in jids:
            c = cands[jid]
            for node in c.masks:
                # removed in place (a C-level scan by identity, not a new list per node);
                # absent when this index never held it (a protected or young job)
                held = nodes[node].cands
                if c in held:
                    held.remove(c)
                touched[node] = None
        for node in touched:
            self.touch(node)

    def eligible(self, node: str, rank: int) -> _Elig:
        """(class bucket, candidates on ``node`` that may give way to a job of ``rank``, the
        node's GPUs free or held by them), cached until the node changes. The bucket is the
        highest class among them (-1: none): classes with one bucket see the same jobs."""
        n = self.nodes[node]
        got = n.elig.get(rank)
        if got is None:
            out: list[Candidate] = []
            reach = self.full[node] & ~self.busy[node]
            bucket = -1
            for c in n.cands:   # one loop, not a list comprehension and a loop over it
                r = c.rank
                if r < rank:
                    out.append(c)
                    reach |= c.masks[node]
                    if r > bucket:
                        bucket = r
            got = n.elig[rank] = (bucket, out, reach)
        return got

    def best(self, node: str, per: int, rank: int) -> _Best:
        """best_on_node for the node's candidates below ``rank``, nothing paid (cached)."""
        n = self.nodes[node]
        bucket, cands, reach = n.elig.get(rank) or self.eligible(node, rank)
        key = per * 16 + bucket + 1
        got = n.best.get(key, _NO_BEST)
        if got is not _NO_BEST:
            return got
        got = None
        if reach.bit_count() >= per:  # else best_on_node finds nothing either
            got = best_on_node(self.view, node, per, cands, frozenset(), self.limit)
        n.best[key] = got
        return got

    def search(self, nodes: int, per: int, rank: int, *, cross_leaf: bool = False,
               keep: int = 4, allowed: frozenset[str] | None = None) -> list[Option]:
        """What :func:`~hai_slurm.priority.planner.victims.search` returns for the candidates
        that may give way to a job of ``rank``."""
        if allowed is not None:
            return self._restricted(nodes, per, rank, cross_leaf, keep, allowed)
        if nodes == 1:
            return self._single(per, rank, keep)
        # leaf switches by a lower bound of their option; stop once ``keep`` distinct sets
        # beat every bound left
        found = self._leaves(nodes, per, rank, keep)
        if not found and cross_leaf:
            option = self._group(None, nodes, per, rank)
            if option is not None:
                found.append(option)
        return _distinct(found, keep)

    def _leaves(self, nodes: int, per: int, rank: int, keep: int) -> list[Option]:
        """The greedy's options of the leaf switches whose lower bound (:meth:`_group_bound`)
        is not above the ``keep``-th distinct option found, cheapest bound first.

        A leaf's bound only grows within a pass (its nodes only get worse), so the bounds of
        the last search of the shape stay lower bounds: a leaf touched since is bounded again
        only when its old bound comes first (most leaves never do: a multi-node search looks
        at three or four leaves, and by then most of the 25 have had a touch or two). The
        leaves searched are those a fresh bound of every leaf gives: a leaf's greedy runs
        when its bound is fresh and the least of all left."""
        key = (nodes, per, rank)
        logs = self.group_changes
        heap = self.leaves.get(key)
        if heap is None:
            donor = next((d for k in range(rank + 1, rank + 17)
                          if (d := self.leaves.get((nodes, per, k))) is not None), None)
            if donor is not None:
                # a higher class's bounds, as bounds made at no version (each is bounded
                # again when it comes first): it sees more candidates, so they are lower,
                # and a leaf without one has none for this class either (as _ranking)
                heap = [(bound, gi, group, -1) for bound, gi, group, _ in donor]
            else:
                heap = []
                for gi, group in enumerate(self.view.groups):
                    bound = self._group_bound(group, nodes, per, rank)
                    if bound is not None:   # none now: none later in the pass either
                        heap.append((bound, gi, group, len(logs[group])))
        heap.sort()   # a sorted list is a heap
        found: list[Option] = []
        done: list[_Leaf] = []   # fresh entries taken, in order
        last: tuple[float, ...] | None = None   # the ``keep``-th distinct option's key
        while heap:
            bound, gi, group, ver = heap[0]
            if last is not None and bound > last:
                break
            if ver != len(logs[group]):   # touched since: its bound now, or gone
                fresh = self._group_bound(group, nodes, per, rank)
                if fresh is None:
                    heapq.heappop(heap)
                else:
                    heapq.heapreplace(heap, (fresh, gi, group, len(logs[group])))
                continue
            done.append(heapq.heappop(heap))
            option = self._group(group, nodes, per, rank)
            if option is not None:
                found.append(option)
                if len(found) >= keep:
                    top = _distinct(found, keep)
                    if len(top) >= keep:
                        last = top[-1].key
        done.extend(heap)
        self.leaves[key] = done
        return found

    def _restricted(self, nodes: int, per: int, rank: int, cross_leaf: bool, keep: int,
                    allowed: frozenset[str]) -> list[Option]:
        """:meth:`search` for a job that may use the ``allowed`` nodes only (a partition, a
        node list): a ranking of the allowed nodes (one node), or each leaf's greedy over its
        allowed nodes (several; without the leaves' bounds)."""
        view = self.view
        found: list[Option] = []
        if nodes == 1:
            return self._single(per, rank, keep, allowed)
        for group, members in view.groups_for(nodes, allowed):
            option = self._group(group, nodes, per, rank, allowed, members)
            if option is not None:
                found.append(option)
        if not found and cross_leaf:
            option = self._group(None, nodes, per, rank, allowed, view.members(None, allowed))
            if option is not None:
                found.append(option)
        return _distinct(found, keep)

    def _option(self, node: str, per: int, rank: int) -> Option | None:
        got = self.best(node, per, rank)
        if got is None or not got[3]:
            return None
        key, level, mask, victims = got
        return Option(key, victims, Placement(((node, mask),), LEVELS[level]))

    def lower(self, node: str, per: int, rank: int) -> _Bound | None:
        """A lower bound of the (discounted loss, loss) that opens the node's best set for
        ``per`` GPUs (fractional cover of the GPUs missing); None: the node has no option
        (it cannot hold ``per`` GPUs, or they are free). Cached until the node changes."""
        n = self.nodes[node]
        elig = n.elig.get(rank) or self.eligible(node, rank)
        key = per * 16 + elig[0] + 1
        hit = n.low.get(key, _NO_BOUND)
        if hit is not _NO_BOUND:
            return hit
        return self._lower(n, per, elig, key)

    def _lower(self, n: _Node, per: int, elig: _Elig, key: int) -> _Bound | None:
        """:meth:`lower` of node ``n`` not cached yet (``elig``: its eligible candidates,
        ``key`` its cache key), cached now: for callers that looked the cache up already
        (:meth:`_bound`, thousands a pass)."""
        name = n.name
        bucket, cands, reach = elig
        need = per - (self.full[name] & ~self.busy[name]).bit_count()
        got: _Bound | None = None
        if need > 0 and reach.bit_count() >= per:
            parts = n.parts.get(bucket)
            if parts is None:
                # the candidates below ``rank`` are those of a class up to the bucket not yet
                # claimed; filtered from the node's parts sorted once a pass, they keep the
                # order a stable sort of their own parts gives (candidates in job id order),
                # and are those parts themselves while every candidate is eligible
                pre = n.pre or self._presort(n)
                if len(cands) == len(pre[0]):
                    parts = pre
                else:
                    gone = self.gone
                    first = [p for p in pre[0] if p[2] <= bucket and p[3] not in gone]
                    parts = (first, first if pre[1] is pre[0] else [
                        p for p in pre[1] if p[2] <= bucket and p[3] not in gone])
                n.parts[bucket] = parts
            low = _cover(need, parts[0])
            got = (low, low if parts[1] is parts[0] else _cover(need, parts[1]))
        n.low[key] = got
        return got

    def _presort(self, n: _Node) -> tuple[list[_Pre], list[_Pre]]:
        """The node's parts of :meth:`lower`, (discounted loss, GPUs, class, job id) and
        (loss, GPUs, class, job id) of each of its candidates, by cost per GPU (a stable
        sort of the job id order): the candidates only leave a node during a pass, so the
        parts of any class bucket are these, filtered. The same list twice when no loss is
        discounted (the two covers are then equal)."""
        name = n.name
        first: list[_Pre] = []
        second: list[_Pre] = []
        # cost per GPU of each (as _ratio gives it): the parts are sorted by index, with a
        # C-level key (a Python key function is a call from C per item)
        ratios: list[float] = []
        spread: list[float] = []
        same = True   # no loss discounted (no borrowed job here)
        for c in n.cands:
            g = c.masks[name].bit_count()
            nb, lw, rank, jid = c.cost[0], c.lost_work, c.rank, c.job_id
            first.append((nb, g, rank, jid))
            second.append((lw, g, rank, jid))
            ratios.append(nb / g if g else _INF)
            spread.append(lw / g if g else _INF)
            if nb != lw:
                same = False
        first = [first[i] for i in sorted(range(len(first)), key=ratios.__getitem__)]
        if same:
            # both parts are the same list, and :meth:`lower` covers it once
            n.pre = pre = (first, first)
        else:
            n.pre = pre = (first, [second[i] for i in sorted(range(len(second)),
                                                             key=spread.__getitem__)])
        return pre

    def _single(self, per: int, rank: int, keep: int,
                allowed: frozenset[str] | None = None) -> list[Option]:
        r = self.rankings.get((per, rank, allowed))
        if r is None:
            r = self.rankings[per, rank, allowed] = self._ranking(per, rank, allowed)
        else:
            changes = self.changes
            if r.cursor < len(changes):
                # each node changed since the last search, once (the order of the pushes
                # does not matter: live entries never tie, their nodes differ); nodes without a
                # bound here have no option, or are not among the allowed ones
                low_of, live, heap, token = r.low, r.live, r.heap, self.token
                nodes = self.nodes
                for name in set(changes[r.cursor:]):
                    low = low_of.get(name)
                    # still a bound: the node only got worse; a node whose live entry is a
                    # bound already (a negative token) keeps it
                    if low is not None and live[name] > 0:
                        if (nodes[name].elig.get(rank)
                                or self.eligible(name, rank))[2].bit_count() < per:
                            # cannot hold ``per`` GPUs, now or later in the pass (a plan
                            # took its candidates): gone from this ranking, as when bounded,
                            # and its entry (an exact option) dead
                            del low_of[name]
                            token += 1
                            live[name] = token
                            continue
                        token += 1
                        live[name] = -token
                        heapq.heappush(heap, (low[0], low[1], (), name, -token, -1, None))
                self.token = token
                r.cursor = len(changes)
        taken: list[_Entry] = []
        out: list[Option] = []
        sets: set[frozenset[int]] = set()
        heap, live, nodes, limit = r.heap, r.live, self.nodes, self.limit
        pop, push = heapq.heappop, heapq.heappush
        top = [e for e in r.top if live[e[3]] == e[4]]   # of nodes not changed since
        ti, tn = 0, len(top)
        while len(out) < keep:
            entry: _Entry | None
            if ti < tn and (not heap or top[ti] < heap[0]):
                entry, ti = top[ti], ti + 1
                option = entry[6]
                assert option is not None
                taken.append(entry)
                if option.victims not in sets:
                    sets.add(option.victims)
                    out.append(option)
                continue
            if not heap:
                break
            entry = pop(heap)
            # an entry replaced by a new one for its node (a bound, an exact option) is pushed
            # back, unless it is below the heap's top and the kept options: then it would be
            # taken next anyway
            while entry is not None:
                _, _, _, name, token, ver, option = entry
                if token != live[name]:
                    break  # dead: the node was pushed again since
                if option is None and ver != nodes[name].version:
                    # a bound of an earlier version: the node's bound now (no entry when it
                    # has no option now: a positive token, so that a change pushes it again)
                    entry = self._bound(r, name, per, rank, token)
                    if entry is None:
                        live[name] = -token
                elif option is None:  # a bound: the exact option now (never below the bound)
                    exact = self._option(name, per, rank)
                    token = live[name] = -token   # an exact option's token, or no entry
                    if exact is None:
                        entry = None
                    else:
                        k = exact.key
                        entry = (k[0], k[1], k[2:], name, token, ver, exact)
                        if len(nodes[name].elig[rank][1]) <= limit:
                            # every candidate was tried: the node's later options (it only
                            # gets worse) lose no less, nor those of a lower class or of
                            # more GPUs (fewer sets): a bound higher than the cover
                            r.low[name] = (k[0], k[1])
                else:
                    taken.append(entry)
                    if option.victims not in sets:
                        sets.add(option.victims)
                        out.append(option)
                    break
                if entry is not None and ((heap and heap[0] < entry)
                                          or (ti < tn and top[ti] < entry)):
                    push(heap, entry)
                    break
        # taken in order, each below the kept options not reached: still in order
        taken.extend(top[ti:])
        r.top = taken
        return out

    def _bound(self, r: _Ranking, name: str, per: int, rank: int, token: int) -> _Entry | None:
        """``name``'s lower bound at its version as a heap entry (None when it has no option
        now)."""
        n = self.nodes[name]
        elig = n.elig.get(rank) or self.eligible(name, rank)
        lb: _Bound | None
        if per == 1:
            # one GPU: any one candidate frees it, so the best set is one victim, and its
            # (discounted loss, loss) is the least of the candidates' (the first two items of
            # the exact key): a lower bound as tight as it gets (the cover divides a
            # several-GPU victim's loss by its GPUs), None when a GPU is free or no
            # candidate is left, as with lower()
            cands = elig[1]
            if not cands or self.full[name] & ~self.busy[name]:
                lb = None
            else:
                least = min(map(_cost, cands))
                lb = (least[0], least[1])
        else:
            # lower()'s cache read here (most bounds of a ranking are of nodes that another
            # ranking of the class or of its bucket bounded already), its computation otherwise
            key = per * 16 + elig[0] + 1
            lb = n.low.get(key, _NO_BOUND)
            if lb is _NO_BOUND:
                lb = self._lower(n, per, elig, key)
        if lb is not None:
            r.low[name] = lb
            return (lb[0], lb[1], (), name, token, n.version, None)
        if elig[2].bit_count() >= per:
            r.low[name] = (0.0, 0.0)   # free enough now; a later plan may take them
        else:
            r.low.pop(name, None)      # cannot hold ``per`` GPUs, now or later in the pass
        return None

    def _ranking(self, per: int, rank: int, allowed: frozenset[str] | None) -> _Ranking:
        """A new ranking of the ``allowed`` nodes (None: all): seeded lazily with the bounds of
        a higher class's ranking (it sees more candidates, so its bounds are lower) when there
        is one, else computed now.

        A node whose seeded bound reaches the top is bounded then, as any node changed since
        its bound was made; the options found are the same (each bound stays at or below the
        node's option), only fewer nodes are bounded. The bounds of a ranking of fewer GPUs
        per node (a cover of fewer GPUs missing) were seeds too when no higher class had a
        ranking: they were so far below the options that nearly every node reached the top
        and was bounded there, one pop at a time, and the next class's ranking then took
        these looser bounds as its seeds (priority/planner/README.md)."""
        r = _Ranking()
        donor = next((d for k in range(rank + 1, rank + 17)
                      if (d := self.rankings.get((per, k, allowed))) is not None), None)
        names = self.view.members(None, allowed)
        token = self.token
        # a node with no candidate left and fewer than ``per`` GPUs free cannot hold them
        # now or later in the pass: left out (bounding it would drop it, one pop each)
        nodes, full, busy = self.nodes, self.full, self.busy
        dead = {name for name in (names if donor is None else donor.low)
                if not nodes[name].cands and (full[name] & ~busy[name]).bit_count() < per}
        if donor is not None:
            r.low = low = {name: b for name, b in donor.low.items() if name not in dead}
            r.live = live = dict(zip(low, range(-token - 1, -token - 1 - len(low), -1),
                                     strict=True))
            r.heap = [(b[0], b[1], (), name, live[name], -1, None) for name, b in low.items()]
            self.token = token + len(low)
        else:
            low, live, heap, bound = r.low, r.live, r.heap, self._bound
            for name in names:
                if name in dead:
                    continue
                token += 1
                low[name] = (0.0, 0.0)
                entry = bound(r, name, per, rank, -token)
                if entry is not None:
                    heap.append(entry)
                    live[name] = -token
                else:
                    live[name] = token
            self.token = token
        heapq.heapify(r.heap)
        r.cursor = len(self.changes)
        return r

    def _share(self, node: str, per: int, rank: int) -> _Bound:
        """Like :meth:`lower` (0 where the GPUs are free), with each victim's loss spread over
        all its GPUs, on every node: bounds of distinct nodes then add up (a victim spanning two
        nodes is paid once, and counts at most its whole loss over both)."""
        n = self.nodes[node]
        bucket, cands, _ = n.elig.get(rank) or self.eligible(node, rank)
        key = 1024 + per * 16 + bucket + 1
        got = n.low.get(key)
        if got is None:
            if all(len(c.masks) == 1 for c in cands):
                got = self.lower(node, per, rank) or (0.0, 0.0)
            else:
                need = per - self.view.free(node).bit_count()
                got = (0.0, 0.0)
                if need > 0:
                    spread = n.parts.get(bucket + 16)
                    if spread is None:
                        first: list[_Pre] = []
                        second: list[_Pre] = []
                        for c in cands:
                            total = sum(m.bit_count() for m in c.masks.values())
                            on = c.masks[node].bit_count()
                            first.append((c.cost[0] * on / total, on, c.rank, c.job_id))
                            second.append((c.lost_work * on / total, on, c.rank, c.job_id))
                        spread = n.parts[bucket + 16] = (sorted(first, key=_ratio),
                                                         sorted(second, key=_ratio))
                    got = (_cover(need, spread[0]), _cover(need, spread[1]))
            n.low[key] = got
        return got

    def _group_bound(self, group: str, nodes: int, per: int, rank: int) -> _Bound | None:
        """A lower bound of the greedy's option key on ``group`` (None: it has none, now and
        for the rest of the pass: its nodes' reach only shrinks).

        Each node the greedy picks gets ``per`` GPUs from the free ones and the victims
        chosen; with each victim's loss spread over all its GPUs (:meth:`_share`), the
        ``nodes`` nodes picked need at least the sum of their bounds, so at least the sum of
        the ``nodes`` smallest bounds of the leaf (nodes that cannot reach ``per`` GPUs are
        never picked).

        The nodes' bounds are kept per (leaf, GPUs per node, class), for every number of
        nodes, and only the nodes touched since (the leaf's change log) are bounded again: a
        multi-node search comes every few plans, and by then most leaves have had a touch or
        two, so bounding all 20 nodes of each leaf again was most of this. The smallest
        bounds are the same whatever order they are kept in."""
        lows = self._shares(group, per, rank)
        if len(lows) < nodes:
            return None
        low = sorted(lows.values())[:nodes]
        # kept a hair low so that rounding in the sums never lifts it above (lists, not
        # generators: cheaper for a few items; ``x if x > 0.0 else 0.0`` is max(0.0, x))
        first = sum([b[0] for b in low]) * (1 - 1e-9) - 1e-6
        second = sum([b[1] for b in low]) * (1 - 1e-9) - 1e-6
        return (first if first > 0.0 else 0.0, second if second > 0.0 else 0.0)

    def _shares(self, group: str, per: int, rank: int) -> dict[str, _Bound]:
        """The share bound (:meth:`_share`) of each node of ``group`` that can reach ``per``
        GPUs for a job of ``rank``, brought up to date with the leaf's change log."""
        log = self.group_changes[group]
        key = (group, per, rank)
        hit = self.shares.get(key)
        if hit is not None:
            if hit[0] == len(log):
                return hit[1]
            names: Sequence[str] | set[str] = set(log[hit[0]:])
            lows = hit[1]
        else:
            names, lows = self.view.groups[group], {}
        nodes_ = self.nodes
        share = 1024 + per * 16 + 1   # + bucket: _share's cache key
        for name in names:
            n = nodes_[name]
            e = n.elig.get(rank) or self.eligible(name, rank)
            if e[2].bit_count() >= per:
                lows[name] = n.low.get(share + e[0]) or self._share(name, per, rank)
            else:   # a node's reach only shrinks within a pass
                lows.pop(name, None)
        self.shares[key] = (len(log), lows)
        return lows

    def _group(self, group: str | None, nodes: int, per: int, rank: int,
               allowed: frozenset[str] | None = None,
               members: Sequence[str] | None = None) -> Option | None:
        """The greedy's option for one leaf switch (None: the whole cluster), over its
        ``allowed`` nodes (None: all; ``members``: those nodes, when known), cached until one of
        its nodes changes."""
        ver = self.changed if group is None else len(self.group_changes[group])
        key = (group, nodes, per, rank, allowed)
        hit = self.greedy.get(key)
        if hit is not None and hit[0] == ver:
            return hit[1]
        if allowed is None:   # the nodes' bounds kept across the pass (see _reach)
            got = self._greedy(self._reach(group, per, rank), nodes, per, rank)
        else:
            if members is None:
                members = self.view.members(group, allowed)
            got = self._greedy(self._reach_of(members, per, rank), nodes, per, rank)
        self.greedy[key] = (ver, got)
        return got

    def _reach(self, group: str | None, per: int, rank: int) -> _Reach:
        """The nodes of leaf switch ``group`` (None: of the cluster) that can reach ``per``
        GPUs for a job of ``rank``, with their lower bounds, kept across the pass: only the
        nodes touched since (the leaf's change log, or the cluster's) are looked at again.
        A greedy over the whole cluster (when no leaf can hold a job) otherwise bounded
        all 500 nodes each time."""
        key = (group, per, rank)
        got = self.reaches.get(key)
        log = self.changes if group is None else self.group_changes[group]
        if got is None:
            got = self.reaches[key] = self._reach_of(
                self.view.all_nodes if group is None else self.view.groups[group], per, rank)
        elif got.cursor < len(log):
            lows, order, unbounded = got.lows, got.order, got.unbounded
            nodes_ = self.nodes
            for name in set(log[got.cursor:]):
                old = lows.pop(name, _NO_BOUND)
                if old is None:
                    unbounded.discard(name)
                elif old is not _NO_BOUND:
                    del order[bisect_left(order, (old, name))]
                if (nodes_[name].elig.get(rank)
                        or self.eligible(name, rank))[2].bit_count() >= per:
                    lb = lows[name] = self.lower(name, per, rank)
                    if lb is None:
                        unbounded.add(name)
                    else:
                        insort(order, (lb, name))
        got.cursor = len(log)
        return got

    def _reach_of(self, members: Sequence[str], per: int, rank: int) -> _Reach:
        """:meth:`_reach` of ``members``, made now."""
        got = _Reach()
        lows, order, unbounded = got.lows, got.order, got.unbounded
        nodes_ = self.nodes
        for name in members:
            if (nodes_[name].elig.get(rank) or self.eligible(name, rank))[2].bit_count() >= per:
                lb = lows[name] = self.lower(name, per, rank)
                if lb is None:
                    unbounded.add(name)
                else:
                    order.append((lb, name))
        order.sort()
        return got

    def _greedy(self, reach: _Reach, nodes: int, per: int, rank: int) -> Option | None:
        """The plain search's greedy (see victims._greedy_group) over the nodes of ``reach``
        (those that can reach ``per`` GPUs: the others are never picked)."""
        view = self.view
        if len(reach.lows) < nodes:
            return None
        paid: frozenset[int] = frozenset()
        picked: list[tuple[str, int, int]] = []
        near: set[str] = set()   # nodes where a chosen victim holds GPUs
        # nodes with a lower bound, cheapest first: each round looks at them in this order
        # (skipping those picked or near a chosen victim) until one cannot beat the best so
        # far; the others (free enough, or none) are looked at every round, in node order
        order = reach.order
        unbounded = (sorted(reach.unbounded, key=self.position.__getitem__)
                     if reach.unbounded else ())
        remaining = set(reach.lows)
        for _ in range(nodes):
            best: tuple[tuple[float, ...], str, int, int, frozenset[int]] | None = None
            for name in near.intersection(remaining) if near else ():
                # shares a victim already chosen: search it again, with that victim paid
                got = best_on_node(view, name, per, self.eligible(name, rank)[1], paid,
                                   self.limit)
                if got is not None and (best is None or got[0] < best[0]):
                    best = (got[0], name, got[1], got[2], got[3])
            for name in unbounded:
                if name in near or name not in remaining:
                    continue
                got = self.best(name, per, rank)  # fits on free GPUs, or cannot
                if got is not None and (best is None or got[0] < best[0]):
                    best = (got[0], name, got[1], got[2], got[3])
            for lb, name in order:
                if name in near or name not in remaining:
                    continue
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
            remaining.discard(name)
        if not paid:
            return None
        return group_option(view, picked, [self.cands[j] for j in sorted(paid)])


_cost = attrgetter("cost")
"""A candidate's (discounted loss, loss, job id), as a C-level map reads it."""

_option_key = attrgetter("key")
"""An option's key, the sort key of :func:`_distinct` (C-level, not a Python call)."""


def _distinct(found: list[Option], keep: int) -> list[Option]:
    """The best ``keep`` options of ``found``, one per victim set (a victim spanning two
    leaves may free both)."""
    seen: set[frozenset[int]] = set()
    out: list[Option] = []
    for o in sorted(found, key=_option_key):
        if o.victims not in seen:
            seen.add(o.victims)
            out.append(o)
            if len(out) >= keep:
                break
    return out
