"""Victim-set search: the cheapest running jobs to stop so that a beneficiary's shape fits.

A candidate is a running job that may give way to this beneficiary (strictly lower class,
preemptible, not protected, old enough, not already given to another plan). Sets are compared
by a key, lowest first:

1. lost work with borrowed victims' at a discount (``PlannerConfig.borrowed_discount`` x their
   lost work; 0 would make a set of borrowed jobs only always win): borrowed jobs give way
   first unless they would lose over 1 / discount times the work of the jobs within quota;
2. total lost work (save time for a job that saves on request, else time since its last
   checkpoint; plus restart cost; times GPUs);
3. the highest victim class (lower classes give way first);
4. the number of victims;
5. the in-node level of the placement (one PCIe switch beats one socket beats the whole node);
6. free GPUs left on the chosen nodes (best fit: big free cells stay whole);
7. node order, then victim job ids (determinism).

One node: every subset of the node's candidates (cheapest first, supersets of a set that
already fits are skipped, bounded by the best key so far). Several nodes: per leaf switch, nodes
are added greedily one at a time, each the cheapest node given the victims already chosen (a
victim spanning two nodes is paid for once). The greedy step can miss a cheaper combination
across nodes; it never returns a set that does not free the placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from hai_slurm.priority.planner.placement import LEVELS, ClusterView, Placement


class Candidate:
    """A running job prepared for the search: masks per node, rank, lost work.

    A plain slotted class, not a frozen dataclass (2,000 a pass; a frozen dataclass sets each
    field through ``object.__setattr__``): treat it as read-only."""

    __slots__ = ("borrowed", "cost", "job_id", "lost_work", "masks", "rank")

    def __init__(self, job_id: int, rank: int, borrowed: bool, lost_work: float,
                 masks: Mapping[str, int], discount: float = 0.0) -> None:
        self.job_id, self.rank, self.borrowed = job_id, rank, borrowed
        self.lost_work, self.masks = lost_work, masks
        # its contribution to a set's key: (loss with borrowed at ``discount``, loss, id)
        self.cost: tuple[float, float, int] = (discount * lost_work if borrowed else lost_work,
                                               lost_work, job_id)

    def __repr__(self) -> str:
        return (f"Candidate(job_id={self.job_id!r}, rank={self.rank!r}, "
                f"borrowed={self.borrowed!r}, lost_work={self.lost_work!r}, "
                f"masks={self.masks!r})")


_cost = attrgetter("cost")
"""A candidate's cost, the sort key of :func:`best_on_node` (C-level, not a Python call)."""


class Option:
    """A victim set and the placement it frees, with its comparison key (a plain slotted
    class, as :class:`Candidate`: treat it as read-only)."""

    __slots__ = ("key", "placement", "victims")

    def __init__(self, key: tuple[float, ...], victims: frozenset[int],
                 placement: Placement) -> None:
        self.key, self.victims, self.placement = key, victims, placement

    def __repr__(self) -> str:
        return (f"Option(key={self.key!r}, victims={self.victims!r}, "
                f"placement={self.placement!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Option):
            return NotImplemented
        return (self.key, self.victims, self.placement) == (other.key, other.victims,
                                                             other.placement)

    def __hash__(self) -> int:
        return hash((self.key, self.victims, self.placement))


def _set_key(victims: Sequence[Candidate]) -> tuple[float, float, int, int]:
    # list comprehensions: cheaper than generators for a few items; sum() kept for its
    # rounding
    nb = sum([c.cost[0] for c in victims])
    loss = sum([c.lost_work for c in victims])
    return (nb, loss, max([c.rank for c in victims], default=-1), len(victims))


_NodeBest = tuple[tuple[float, ...], int, int, frozenset[int]]


class _Sets:
    """The search of :func:`best_on_node` past one victim: sets of two candidates or more
    (candidates by cost, ``rest[i]``: the GPUs candidates i, i + 1, ... hold together), the
    best found so far and its (discounted loss, loss)."""

    __slots__ = ("best", "bound", "chosen", "fresh", "masks", "node", "order", "per", "pick",
                 "rest")

    def __init__(self, view: ClusterView, node: str, per: int, order: int,
                 fresh: list[Candidate], masks: list[int], rest: list[int],
                 best: _NodeBest | None, bound: tuple[float, float] | None) -> None:
        self.pick, self.node, self.per, self.order = view.pick, node, per, order
        self.fresh, self.masks, self.rest = fresh, masks, rest
        self.best, self.bound = best, bound
        self.chosen: list[int] = []   # indices into fresh, ascending

    def visit(self, start: int, free: int, nb: float, loss: float) -> None:
        per, chosen = self.per, self.chosen
        have = free.bit_count()
        if have >= per:
            got = self.pick(self.node, free, per)
            if got is not None:
                level, mask = got
                fresh = self.fresh
                ids = sorted([fresh[i].job_id for i in chosen])
                # the set's key as _set_key makes it: ``nb`` and ``loss`` are the same sums,
                # added in the same order (from 0, by ascending index)
                key = (nb, loss, max([fresh[i].rank for i in chosen]), len(chosen), int(level),
                       have - per, self.order, *ids)
                best = self.best
                if best is None or key < best[0]:
                    self.best = (key, int(level), mask, frozenset(ids))
                    self.bound = (nb, loss)
            return  # a superset only loses more work
        rest, masks, fresh = self.rest, self.masks, self.fresh
        for i in range(start, len(fresh)):
            if (free | rest[i]).bit_count() < per:
                return  # the candidates left cannot free enough GPUs
            cost = fresh[i].cost
            total = (nb + cost[0], loss + cost[1])
            bound = self.bound
            if bound is not None and total > bound:
                continue  # already worse than the best set (costs never go down)
            chosen.append(i)
            self.visit(i + 1, free | masks[i], total[0], total[1])
            chosen.pop()


def best_on_node(view: ClusterView, node: str, per_node: int, cands: Sequence[Candidate],
                 paid: frozenset[int], limit: int) -> _NodeBest | None:
    """(key, level, mask, new victims) of the cheapest way to get ``per_node`` GPUs on ``node``.

    ``cands`` are the candidates with GPUs on the node; those in ``paid`` are already chosen
    (their GPUs count as free, their loss as zero). ``limit`` bounds the unpaid candidates tried.

    Every subset of those candidates that frees the GPUs is weighed, cheapest first: a
    superset of a set that fits is not (it loses no less), nor a set already worse than the
    best found in (discounted loss, loss). One victim is tried here, more by :class:`_Sets`
    (most nodes need one).
    """
    layout = view.nodes[node]
    base = layout.full & ~view.busy[node]
    if paid:
        fresh: list[Candidate] = []
        for c in cands:
            if c.job_id in paid:
                base |= c.masks[node]
            else:
                fresh.append(c)
        fresh.sort(key=_cost)
    else:
        fresh = sorted(cands, key=_cost)
    if len(fresh) > limit:
        del fresh[limit:]
    count = len(fresh)
    masks = [c.masks[node] for c in fresh]
    rest = [0] * (count + 1)   # GPUs that candidates i, i + 1, ... hold together
    reach = 0
    for i in range(count - 1, -1, -1):
        reach = rest[i] = reach | masks[i]
    if (base | reach).bit_count() < per_node:
        return None
    have = base.bit_count()
    order, pick = layout.order, view.pick
    if have >= per_node:   # fits without a victim (free GPUs, and those of paid ones)
        got = pick(node, base, per_node)
        if got is None:
            return None
        level = int(got[0])
        # the key of no victims: _set_key([]) is (0, 0, -1, 0), sum([]) being the int 0
        return ((0, 0, -1, 0, level, have - per_node, order), level, got[1], frozenset())
    best: _NodeBest | None = None
    bound: tuple[float, float] | None = None   # best's (discounted loss, loss)
    sets: _Sets | None = None
    for i in range(count):
        if (base | rest[i]).bit_count() < per_node:
            break  # the candidates left cannot free enough GPUs
        c = fresh[i]
        cost = (0.0 + c.cost[0], 0.0 + c.lost_work)
        if bound is not None and cost > bound:
            continue  # already worse than the best set (costs never go down)
        free = base | masks[i]
        have = free.bit_count()
        if have < per_node:   # sets of more victims, starting with this one
            if sets is None:
                sets = _Sets(view, node, per_node, order, fresh, masks, rest, best, bound)
            else:
                sets.best, sets.bound = best, bound
            sets.chosen.append(i)
            sets.visit(i + 1, free, cost[0], cost[1])
            sets.chosen.pop()
            best, bound = sets.best, sets.bound
            continue
        got = pick(node, free, per_node)
        if got is not None:
            level = int(got[0])
            key = (cost[0], cost[1], c.rank, 1, level, have - per_node, order, c.job_id)
            if best is None or key < best[0]:
                best = (key, level, got[1], frozenset((c.job_id,)))
                bound = cost
    return best


def search(view: ClusterView, nodes: int, per_node: int, by_node: Mapping[str, list[Candidate]],
           candidates: Mapping[int, Candidate], limit: int, *, cross_leaf: bool = False,
           keep: int = 4, allowed: frozenset[str] | None = None) -> list[Option]:
    """Victim sets that free ``nodes`` x ``per_node`` GPUs on the ``allowed`` nodes (None:
    any), best first (at most ``keep``)."""
    found = _search(view, view.groups_for(nodes, allowed), nodes, per_node, by_node,
                    candidates, limit)
    if not found and nodes > 1 and cross_leaf:  # no leaf switch can: across leaves
        found = _search(view, (("cluster", view.members(None, allowed)),), nodes, per_node,
                        by_node, candidates, limit)
    found.sort(key=lambda o: o.key)
    seen: set[frozenset[int]] = set()
    out: list[Option] = []
    for o in found:  # one option per victim set (a 2-node victim frees both its nodes)
        if o.victims not in seen:
            seen.add(o.victims)
            out.append(o)
    return out[:keep]


def _search(view: ClusterView, groups: Sequence[tuple[str, Sequence[str]]], nodes: int,
            per_node: int, by_node: Mapping[str, list[Candidate]],
            candidates: Mapping[int, Candidate], limit: int) -> list[Option]:
    found: list[Option] = []
    for _, members in groups:
        if nodes == 1:
            for name in members:
                got = best_on_node(view, name, per_node, by_node.get(name, []), frozenset(),
                                   limit)
                if got is not None and got[3]:
                    key, level, mask, victims = got
                    found.append(Option(key, victims, Placement(((name, mask),), LEVELS[level])))
            continue
        option = _greedy_group(view, members, nodes, per_node, by_node, candidates, limit)
        if option is not None:
            found.append(option)
    return found


def _greedy_group(view: ClusterView, members: Sequence[str], nodes: int, per_node: int,
                  by_node: Mapping[str, list[Candidate]], candidates: Mapping[int, Candidate],
                  limit: int) -> Option | None:
    reach = 0
    for name in members:
        free = view.free(name)
        for c in by_node.get(name, []):
            free |= c.masks[name]
        reach += free.bit_count() >= per_node
    if reach < nodes:
        return None
    paid: frozenset[int] = frozenset()
    picked: list[tuple[str, int, int]] = []
    left = list(members)
    for _ in range(nodes):
        best: tuple[tuple[float, ...], str, int, int, frozenset[int]] | None = None
        for name in left:
            got = best_on_node(view, name, per_node, by_node.get(name, []), paid, limit)
            if got is not None and (best is None or got[0] < best[0]):
                best = (got[0], name, got[1], got[2], got[3])
        if best is None:
            return None
        _, name, level, mask, new = best
        paid |= new
        picked.append((name, level, mask))
        left.remove(name)
    if not paid:
        return None  # fits without victims: not a preemption
    return group_option(view, picked, [candidates[j] for j in sorted(paid)])


def group_option(view: ClusterView, picked: Sequence[tuple[str, int, int]],
                 victims: Sequence[Candidate]) -> Option:
    """The option of a multi-node greedy: ``picked`` (node, level, mask) freed by ``victims``,
    keyed like every set (leftover free GPUs on the chosen nodes, first node, victim ids)."""
    leftover = 0
    for name, _, mask in picked:
        free = view.free(name)
        for c in victims:
            free |= c.masks.get(name, 0)
        leftover += free.bit_count() - mask.bit_count()
    level = max(lv for _, lv, _ in picked)
    first = min(view.nodes[n].order for n, _, _ in picked)
    ids = sorted(c.job_id for c in victims)
    key = (*_set_key(victims), level, leftover, first, *ids)
    placement = Placement(tuple(sorted((n, m) for n, _, m in picked)), LEVELS[level])
    return Option(key, frozenset(ids), placement)
