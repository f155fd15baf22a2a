"""The preemption planner: which running jobs give way so that higher-class waiting jobs start.

Pure: :func:`plan_preemptions` reads a :class:`~hai_slurm.priority.planner.types.PlanSnapshot`, a
:class:`~hai_slurm.priority.planner.types.PlannerConfig` and ``now``, and returns values.

It simulates allocation over the whole cluster in priority order, as hai-platform's scheduler
does. Pending jobs are walked from the highest effective class down (input order within a
class). Each job first goes on free GPUs if it fits (topology-aware, see
:mod:`~hai_slurm.priority.planner.placement`); those GPUs are then taken for the rest of the pass.
If it
does not fit, the planner looks for victim sets among running jobs of a strictly lower class
that are preemptible, not protected and older than the minimum run time (see
:mod:`~hai_slurm.priority.planner.victims` for how sets are compared: least lost work with
borrowed jobs' at a discount, then least lost work, then placement quality). The best set
becomes a plan only when the beneficiary's benefit (class weight x wait x GPUs; the wait is at
least ``victim_age_wait`` x the youngest victim's run time) exceeds ``benefit_threshold`` x
lost work. A plan's victims and placement are then reserved: no later beneficiary counts them
again, and GPUs freed outside the placement stay unavailable for the pass (each plan stands on
its own if the executor aborts another).

The searches are incremental (:mod:`~hai_slurm.priority.planner.index`): candidates per node,
per-node best sets and per-shape rankings are kept across the pass and recomputed only for the
nodes a placement or plan changed; the results are those of the plain search.

A snapshot older than ``max_staleness`` (or that far in the future), a GPU held twice or a GPU
the topology does not have: no plan, and ``refused`` says why. Ties are broken by job id; the
same inputs always give the same plans.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import NamedTuple, overload

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import Level
from hai_slurm.priority.planner.index import VictimIndex
from hai_slurm.priority.planner.inputs import overrides_protection, preempt_class
from hai_slurm.priority.planner.placement import (
    ClusterView,
    Placement,
    group_capacity,
    place_free,
)
from hai_slurm.priority.planner.types import (
    Decision,
    Holder,
    Outcome,
    PlannerConfig,
    PlanningResult,
    PlanSnapshot,
    PreemptionPlan,
    Text,
    Victim,
    Waiting,
)
from hai_slurm.priority.planner.victims import Candidate, Option
from hai_slurm.priority.policy.ladder import LADDER, RANK, URGENT_FROM
from hai_slurm.priority.policy.state import PendingDecision

_NAME: dict[PriorityClass | Level, str] = {**{c: c.name for c in PriorityClass},
                                           **{lv: lv.name for lv in Level}}
"""Enum names (an enum's ``name`` is a property: thousands of reasons a pass)."""
# outcomes as module constants: an enum member looked up on its class costs a Python-level
# attribute lookup, 10,000 decisions a pass
_FITS, _PREEMPT, _NO_VICTIMS, _NOT_WORTH = (Outcome.FITS, Outcome.PREEMPT, Outcome.NO_VICTIMS,
                                            Outcome.NOT_WORTH)
_IMPOSSIBLE, _NO_GPUS, _SKIPPED = Outcome.IMPOSSIBLE, Outcome.NO_GPUS, Outcome.SKIPPED


def _dur(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _gs(value: float) -> str:
    return f"{value:,.0f} GPU-s"


def lost_seconds(holder: Holder, config: PlannerConfig, now: float,
                 nodes: int | None = None) -> float:
    """Seconds of work ``holder`` would lose, restart included.

    A job that saves on request (``can_ack``) loses its save time (its own estimate, else
    ``config.save_cost``) plus its restart; one that cannot loses everything since its last
    checkpoint (or its start) plus its restart. ``nodes``: the number of nodes its GPUs are on,
    when the caller knows it already.
    """
    restart = holder.restart_cost
    if restart is None:
        if nodes is None:
            nodes = len({g.node for g in holder.gpus})
        # config.restart_for(nodes), without the method call (2,000 a pass)
        restart = config.restart_cost + config.restart_cost_per_node * nodes
    # ``x if x > 0.0 else 0.0`` is max(0.0, x) (NaN too), without a builtin call: 2,000 a pass
    restart = restart if restart > 0.0 else 0.0
    if holder.can_ack:
        save = holder.save_cost if holder.save_cost is not None else config.save_cost
        return (save if save > 0.0 else 0.0) + restart
    since = holder.start_time
    if holder.last_checkpoint is not None and holder.last_checkpoint > since:
        since = holder.last_checkpoint
    ran = now - since
    return (ran if ran > 0.0 else 0.0) + restart


def shape(job: Waiting, max_node_gpus: int) -> tuple[int, int]:
    """(nodes, GPUs per node) the job needs; with ``nodes`` unset, as few nodes as hold it."""
    if job.nodes is not None and job.nodes > 0:
        return job.nodes, math.ceil(job.gpus / job.nodes)
    if job.gpus <= max_node_gpus or max_node_gpus <= 0:
        return 1, job.gpus
    nodes = math.ceil(job.gpus / max_node_gpus)
    return nodes, math.ceil(job.gpus / nodes)


def _why_not(h: Holder, rank: int, claimed: Mapping[int, int], config: PlannerConfig,
             now: float, waive_protection: bool = False) -> tuple[str, str] | None:
    """(category, details) of why ``h`` may not give way to a job of ``rank``
    (``waive_protection``: one that :attr:`Waiting.overrides_protection`, which also cuts the
    minimum run time short); None: it may."""
    if h.job_id in claimed:
        return "given to other plans", f"already gives way to job {claimed[h.job_id]}"
    if RANK[h.effective] >= rank:
        return "not of a lower class", f"class {_NAME[h.effective]} is not lower"
    if not h.preemptible:
        return "not preemptible", "not preemptible"
    if h.protected and not waive_protection:
        return "protected", f"team {h.team} is protected"
    ran = now - h.start_time
    least = config.min_run_for(h.effective, urgent=waive_protection)
    if ran < least:
        return "too young", f"too young (ran {_dur(ran)} < {_dur(least)})"
    return None


def victim_status(holder: Holder, config: PlannerConfig, now: float) -> str:
    """Whether a running job may give way to a higher-class job now, and if not, why."""
    top = max(RANK.values())
    why = _why_not(holder, top, {}, config, now)
    if why is not None:
        reason = (f"no class is higher than {holder.effective.name}"
                  if why[0] == "not of a lower class" else why[1])
        if why[0] == "too young" and _why_not(holder, top, {}, config, now, True) is None:
            reason += (f"; urgent work (HIGH and above, or a job past its bound) may take it "
                       f"now: it ran over urgent_min_run_time "
                       f"{_dur(config.urgent_min_run_time)}")
        return f"not a victim now: {reason}"
    lost = lost_seconds(holder, config, now)
    return (f"may give way now to a job of a class higher than {holder.effective.name} "
            f"(ran {_dur(now - holder.start_time)} >= min_run_time "
            f"{_dur(config.min_run_for(holder.effective))} of {holder.effective.name}; "
            f"would lose {_dur(lost)} x {len(holder.gpus)} GPUs"
            f"{_borrowed_note(config) if holder.borrowed else ''})")


def _borrowed_note(config: PlannerConfig) -> str:
    return (f", borrowed: its loss counts x {config.borrowed_discount:g} against jobs within "
            "quota")


def _victim_text(h: Holder, lost_work: float, secs: float, now: float) -> str:
    """A victim's reason (see :meth:`_Pass.victim`; built when first read)."""
    ckpt = ("saves on request" if h.can_ack
            else "no checkpoint this run" if h.last_checkpoint is None
            or h.last_checkpoint <= h.start_time
            else f"last checkpoint {_dur(now - h.last_checkpoint)} ago")
    tag = "borrowed (over quota)" if h.borrowed else "within quota"
    return (f"job {h.job_id} ({_NAME[h.effective]}, team {h.team}, {tag}, {len(h.gpus)} GPUs, "
            f"ran {_dur(now - h.start_time)}, {ckpt}): loses {_dur(secs)} = {_gs(lost_work)}")


_PROTECTED_YOUNG = "protected, too young"
"""The category of a running job that is both (:meth:`_Pass.excluded` counts it as protected,
or as too young for a job that overrides protection)."""
_URGENT_YOUNG = "too young but not for urgent work"
"""Younger than its minimum run time, older than ``urgent_min_run_time``: too young, except
for a job that overrides protection."""
_PROTECTED_URGENT_YOUNG = "protected, too young but not for urgent work"
"""Both: protected (or too young), except for a job that overrides protection."""
_WAIVED = frozenset({"protected", _URGENT_YOUNG, _PROTECTED_URGENT_YOUNG})
"""The categories a job that overrides protection may take, besides None."""
_RIPENING = frozenset({"too young", _PROTECTED_YOUNG})
"""The categories a job that overrides protection may take once they are old enough."""


def _left_out(left_out: Mapping[tuple[int, str | None], int], claims: int,
              rank: int, waive_protection: bool = False) -> dict[str, int]:
    """Running jobs that may not give way to a job of ``rank`` (``waive_protection``: one that
    overrides protection), per reason, from the counts per (class, reason) of those not given
    yet and the number given."""
    out: dict[str, int] = {}
    if claims:
        out["given to other plans"] = claims
    for (r, why), n in left_out.items():
        if n <= 0:
            continue
        cat = "not of a lower class" if r >= rank else why
        if cat == _PROTECTED_YOUNG:
            cat = "too young" if waive_protection else "protected"
        elif cat in _WAIVED:
            cat = (None if waive_protection else "too young" if cat == _URGENT_YOUNG
                   else "protected")
        if cat is not None:
            out[cat] = out.get(cat, 0) + n
    return out


class _Excluded(Mapping[str, int]):
    """:meth:`_Pass.excluded` for a rank as it was when made, counted when first read from
    the counts per (class, reason) then (``left``: a copy the pass never changes)."""

    __slots__ = ("_args", "_counts")

    def __init__(self, left: Mapping[tuple[int, str | None], int], claims: int,
                 rank: int, waive_protection: bool = False) -> None:
        self._args: tuple[Mapping[tuple[int, str | None], int], int, int, bool] | None = (
            left, claims, rank, waive_protection)
        self._counts: dict[str, int] | None = None

    def counts(self) -> dict[str, int]:
        """The counts (made now if not yet)."""
        if self._counts is None:
            assert self._args is not None
            self._counts = _left_out(*self._args)
            self._args = None
        return self._counts

    def __getitem__(self, key: str) -> int:
        return self.counts()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.counts())

    def __len__(self) -> int:
        return len(self.counts())

    def __repr__(self) -> str:
        return repr(self.counts())


def _summary(excluded: Mapping[str, int]) -> str:
    """'3 not of a lower class, 1 protected' (categories in a fixed order)."""
    return ", ".join(f"{excluded[k]} {k}" for k in sorted(excluded)) or "none"


_job_id = attrgetter("job_id")
"""A running job's id, the sort key of the pass's setup (C-level, not a Python call)."""


class _Pass:
    """The mutable state of one planning pass."""

    def __init__(self, snap: PlanSnapshot, config: PlannerConfig, now: float) -> None:
        self.config, self.now = config, now
        self.view = ClusterView(snap.topology)
        self.holders = {h.job_id: h for h in snap.running}
        self.claimed: dict[int, int] = {}
        self.cands: dict[int, Candidate] = {}
        self.problem: str | None = None
        view = self.view
        # why each candidate may not give way, leaving class and claims aside (None: it may);
        # the categories of _why_not, in its order, without its texts
        self.base: dict[int, str | None] = {}
        self.left_out: dict[tuple[int, str | None], int] = {}
        self.counted: dict[int, dict[str, int]] = {}   # excluded() per rank until a claim
        self.frozen_left: dict[tuple[int, str | None], int] | None = None   # see options()
        self.claim_no: dict[int, int] = {}   # victim -> how many were given before it
        self._on_node: dict[str, list[int]] | None = None   # see on_node
        # when each running job too young even for urgent work may give way to it (see ripens)
        self.ripe_at: dict[int, float] = {}
        self._ripe_index: VictimIndex | None = None
        held = self._candidates(sorted(snap.running, key=_job_id))
        if self.problem is not None:
            return
        view.load(held)   # once per node, not once per job and node
        for node in sorted(snap.closed):   # a guard's free GPUs: nobody else's in this pass
            if node in view.nodes:
                view.occupy(node, view.free(node))
        self.index = VictimIndex(self.view, self.cands,
                                 [j for j, cat in self.base.items() if cat is None],
                                 config.max_candidates_per_node)
        self._waived_index: VictimIndex | None = None
        """The index a job that overrides protection searches (protected jobs too, and jobs
        too young for others only), made when first needed."""
        self._waivable = not _WAIVED.isdisjoint(self.base.values())
        """Whether some running job may give way to a job that overrides protection only."""

    def _candidates(self, running: Sequence[Holder]) -> dict[str, int]:
        """A candidate per running job holding GPUs (``running`` in job id order), why it may
        not give way (``base``) and the counts per (class, reason); returns the GPUs they hold
        per node. Sets ``problem`` and stops at a GPU the topology does not have or held
        twice."""
        config, now, view, cands = self.config, self.now, self.view, self.cands
        base, left_out = self.base, self.left_out
        held = dict.fromkeys(view.nodes, 0)
        discount = config.borrowed_discount
        # per class: its rank, its minimum run time and the one urgent work sees (a lookup
        # and two method calls per job otherwise)
        least: dict[PriorityClass, tuple[int, float, float]] = {}
        for h in running:
            masks = view.masks(h.gpus)
            if not isinstance(masks, dict):
                self.problem = (f"job {h.job_id} holds GPU {masks}, which the cluster "
                                "description does not have; regenerate the description")
                return held
            for node, mask in masks.items():
                clash = held[node] & mask
                if clash:
                    other = min((j for j, c in cands.items()
                                 if c.masks.get(node, 0) & clash & -clash), default=None)
                    who = (f"jobs {other} and {h.job_id}" if other is not None
                           else f"job {h.job_id} and a job on a guarded node")
                    self.problem = (f"{who} both hold a GPU on {node}; the snapshot is "
                                    "inconsistent")
                    return held
                held[node] |= mask
            if masks:
                jid, cls = h.job_id, h.effective
                of_class = least.get(cls)
                if of_class is None:
                    of_class = least[cls] = (RANK[cls], config.min_run_for(cls),
                                             config.min_run_for(cls, True))
                rank, least_run, urgent_run = of_class
                lost = lost_seconds(h, config, now, len(masks)) * len(h.gpus)
                cands[jid] = Candidate(jid, rank, h.borrowed, lost, masks, discount)
                ran = now - h.start_time
                # young: too young for every job (2), or except for urgent work (1)
                young = 0 if ran >= least_run else 1 if ran >= urgent_run else 2
                if young == 2 and h.preemptible:
                    self.ripe_at[jid] = h.start_time + urgent_run
                cat = ("not preemptible" if not h.preemptible
                       else ("protected", _PROTECTED_URGENT_YOUNG, _PROTECTED_YOUNG)[young]
                       if h.protected else (None, _URGENT_YOUNG, "too young")[young])
                base[jid] = cat
                key = (rank, cat)
                left_out[key] = left_out.get(key, 0) + 1
        return held

    def ripens(self, nodes: int, per: int, rank: int, *, cross: bool,
               allowed: frozenset[str] | None, leaves: int | None) -> float | None:
        """For a job of ``rank`` that overrides protection and found no victims: seconds until
        the victims of some set are all old enough to give way to it (the sets the search
        finds when jobs too young for it now count too), or None when none would do."""
        ripe_at = self.ripe_at
        if not ripe_at:
            return None
        index = self._ripe_index
        if index is None:
            index = self._ripe_index = self._unclaimed_index(_WAIVED | _RIPENING)
        found = index.search(nodes, per, rank, cross_leaf=cross, allowed=allowed)
        at = min([max([ripe_at.get(v, 0.0) for v in o.victims]) for o in found
                  if leaves is None or _within(self.view, o.placement, leaves)],
                 default=0.0)
        return at - self.now if at > self.now else None

    @property
    def on_node(self) -> dict[str, list[int]]:
        """The running jobs with GPUs on each node, in job id order (made when first read:
        only plans' ``not_chosen`` texts read it)."""
        got = self._on_node
        if got is None:
            got = self._on_node = {}
            for jid, c in self.cands.items():
                for node in c.masks:
                    got.setdefault(node, []).append(jid)
        return got

    def _unclaimed_index(self, categories: frozenset[str]) -> VictimIndex:
        """A victim index of the running jobs not claimed yet that may give way (``base``
        None) or are left out only for one of ``categories`` (made when first needed: the
        first index is made in the setup)."""
        claimed = self.claimed
        return VictimIndex(self.view, self.cands,
                           [j for j, cat in self.base.items()
                            if (cat is None or cat in categories) and j not in claimed],
                           self.config.max_candidates_per_node)

    def _index_for(self, waive_protection: bool) -> VictimIndex:
        """The victim index of a job that overrides protection (``waive_protection``) or not
        (the same one when no running job may give way to the first only)."""
        if not waive_protection or not self._waivable:
            return self.index
        if self._waived_index is None:
            self._waived_index = self._unclaimed_index(_WAIVED)
        return self._waived_index

    def occupy(self, node: str, mask: int) -> None:
        """Take ``mask`` on ``node`` for the rest of the pass.

        A plan's placement mostly takes only GPUs its victims hold, which stay busy in the
        view: then nothing changes, and the indexes are not touched again (the claims did;
        a touch empties the node's caches and is logged for every ranking to look at)."""
        if not mask & ~self.view.busy[node]:
            return
        self.view.occupy(node, mask)
        self.index.touch(node)
        if self._waived_index is not None:
            self._waived_index.touch(node)

    def claim(self, victims: Sequence[int], beneficiary: int) -> None:
        """``victims`` (in order) give way to ``beneficiary``: later plans may not count
        them (the indexes touch each of their nodes once)."""
        claimed, claim_no, cands, base, left_out = (self.claimed, self.claim_no, self.cands,
                                                    self.base, self.left_out)
        for victim in victims:
            claim_no[victim] = len(claimed)
            claimed[victim] = beneficiary
            left_out[cands[victim].rank, base[victim]] -= 1
        self.counted.clear()
        self.frozen_left = None
        self.index.claim(victims)
        if self._waived_index is not None:
            self._waived_index.claim(victims)
        if self._ripe_index is not None:
            self._ripe_index.claim(victims)

    def excluded(self, rank: int) -> dict[str, int]:
        """How many running jobs may not give way to a job of ``rank``, per reason (what
        :meth:`eligible` counts, from running counts; the dict is shared: never change it)."""
        out = self.counted.get(rank)
        if out is not None:
            return out
        out = self.counted[rank] = _left_out(self.left_out, len(self.claimed), rank)
        return out

    def options(self, nodes: int, per: int, rank: int, *, cross: bool,
                allowed: frozenset[str] | None = None, waive_protection: bool = False
                ) -> tuple[list[Option], Mapping[str, int]]:
        """Victim sets for a job of ``rank`` (``waive_protection``: one that
        :attr:`Waiting.overrides_protection`) needing
        ``nodes`` x ``per`` GPUs on the ``allowed`` nodes (None: any), best first (at most 4),
        and the running jobs left out per reason (counted when first read: a plan reads them
        only in its ``not_chosen`` texts)."""
        left = self.frozen_left
        if left is None:   # a copy per claim (a few dozen counts), shared until the next
            left = self.frozen_left = dict(self.left_out)
        return (self._index_for(waive_protection).search(nodes, per, rank, cross_leaf=cross,
                                                allowed=allowed),
                _Excluded(left, len(self.claimed), rank, waive_protection))

    def eligible(self, rank: int, waive_protection: bool = False
                 ) -> tuple[dict[str, list[Candidate]], dict[int, Candidate], dict[str, int]]:
        """Candidates that may give way to a job of ``rank`` (``waive_protection``: one that
        overrides protection) per node and by id, and how many running jobs were left out for
        each reason."""
        by_node: dict[str, list[Candidate]] = {}
        by_id: dict[int, Candidate] = {}
        excluded: dict[str, int] = {}
        for jid, c in self.cands.items():
            why = _why_not(self.holders[jid], rank, self.claimed, self.config, self.now,
                           waive_protection)
            if why is not None:
                excluded[why[0]] = excluded.get(why[0], 0) + 1
                continue
            by_id[jid] = c
            for node in c.masks:
                by_node.setdefault(node, []).append(c)
        return by_node, by_id, excluded

    def all_save(self, victims: frozenset[int]) -> bool:
        """Whether every one of ``victims`` saves on request (:attr:`Holder.can_ack`)."""
        holders = self.holders
        return all([holders[v].can_ack for v in victims])

    def youngest(self, victims: frozenset[int]) -> float:
        """The shortest run time (seconds until now) among ``victims``."""
        holders, now = self.holders, self.now
        return max(0.0, min([now - holders[v].start_time for v in victims]))

    def victim(self, jid: int) -> Victim:
        h, c = self.holders[jid], self.cands[jid]
        secs = c.lost_work / len(h.gpus)
        return Victim(jid, h.team, h.effective, len(h.gpus), h.borrowed, secs, c.lost_work,
                      Text(_victim_text, h, c.lost_work, secs, self.now))

    def describe(self, option: Option) -> str:
        nodes = ",".join(option.placement.nodes)
        loss = sum(self.cands[j].lost_work for j in option.victims)
        borrowed = sum(self.cands[j].borrowed for j in option.victims)
        return (f"{nodes}: {len(option.victims)} victim(s) ({borrowed} borrowed), "
                f"{_gs(loss)} lost, in-node level {_NAME[option.placement.level]}")

    def passed_over(self, job: Waiting, best: Option, others: list[Option],
                    excluded: Mapping[str, int]) -> Sequence[str]:
        """Why the runner-up sets, the other jobs on the chosen nodes and the running jobs that
        may not give way were not taken: built when first read (:class:`_PassedOver`)."""
        return _PassedOver(self, job, best, others, excluded)

    def _passed_over(self, job: Waiting, best: Option, others: list[Option],
                     excluded: Mapping[str, int], claims: int) -> tuple[str, ...]:
        """The texts of :meth:`passed_over` as they were when ``claims`` victims were given."""
        claim_no = self.claim_no
        out = [f"not {self.describe(o)}: {self._worse(best, o)}" for o in others]
        out.append(f"running jobs that may not give way to it: {_summary(excluded)}")
        rank = RANK[job.effective]
        nodes = set(best.placement.nodes)
        near = sorted({j for n in nodes for j in self.on_node.get(n, ())})
        for jid in near:
            h = self.holders[jid]
            if jid in best.victims:
                continue
            if claim_no.get(jid, claims) < claims:   # given before this plan was made
                why = f"already gives way to job {self.claimed[jid]}"
            else:   # not given then (later plans' claims are not counted)
                no = _why_not(h, rank, {}, self.config, self.now, job.overrides_protection)
                why = "not needed" if no is None else no[1]
            out.append(f"job {jid} on {','.join(sorted(nodes & self.cands[jid].masks.keys()))} "
                       f"kept: {why}")
        return tuple(out)

    @staticmethod
    def _worse(best: Option, other: Option) -> str:
        names = ("loses more work (borrowed jobs' at a discount)", "loses more work",
                 "takes higher-class victims", "takes more victims", "worse in-node placement",
                 "fragments free GPUs more")
        for name, a, b in zip(names, best.key, other.key, strict=False):
            if a != b:
                return name
        return "later in node and job id order"


class _PassedOver(Sequence[str]):
    """A plan's ``not_chosen`` texts, built on first use and kept (most plans' texts are never
    read: 500 plans a pass). Reads the pass's state as it was when the plan was made: its
    claims are append-only, so the count at that time is enough; everything else it reads
    (holders, candidates, options, the left-out counts) does not change during a pass. Equal
    to the tuple of its texts, and its ``repr`` is that tuple's."""

    __slots__ = ("_args", "_lines")

    def __init__(self, st: _Pass, job: Waiting, best: Option, others: list[Option],
                 excluded: Mapping[str, int]) -> None:
        self._lines: tuple[str, ...] | None = None
        self._args: tuple[_Pass, Waiting, Option, list[Option], Mapping[str, int], int] | None = (
            st, job, best, others, excluded, len(st.claimed))

    def lines(self) -> tuple[str, ...]:
        """The texts (built now if not yet)."""
        if self._lines is None:
            assert self._args is not None
            st, job, best, others, excluded, claims = self._args
            self._lines = st._passed_over(job, best, others, excluded, claims)
            self._args = None   # the pass's state is no longer held
        return self._lines

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self.lines()[index]

    def __len__(self) -> int:
        return len(self.lines())

    def __iter__(self) -> Iterator[str]:
        return iter(self.lines())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _PassedOver):
            return self.lines() == other.lines()
        return self.lines() == other

    def __hash__(self) -> int:
        return hash(self.lines())

    def __repr__(self) -> str:
        return repr(self.lines())

    def __reduce__(self) -> tuple[type[tuple[str, ...]], tuple[tuple[str, ...]]]:
        return (tuple, (self.lines(),))   # pickled and copied as the plain tuple


def _refused(reason: str, pending: tuple[Waiting, ...]) -> PlanningResult:
    decisions = {j.job_id: Decision(j.job_id, Outcome.SKIPPED, f"no planning: {reason}")
                 for j in pending}
    return PlanningResult((), decisions, reason)


def plan_preemptions(snapshot: PlanSnapshot, *, config: PlannerConfig,
                     now: float) -> PlanningResult:
    """Plans that let waiting jobs of higher classes start (see the module doc).

    The cyclic garbage collector is paused during the pass (and resumed after it if it was
    on): a pass makes tens of thousands of objects that live until it ends (caches, heap
    entries, 10,000 decisions), none of them in cycles, and collecting while they pile up
    took about a seventh of a pass at 10,000 pending jobs (priority/planner/README.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _plan(snapshot, config, now, _Pass)
    finally:
        if enabled:
            gc.enable()


def may_plan(job: Waiting, config: PlannerConfig) -> bool:
    """Whether :func:`plan_preemptions` may make a plan for ``job`` or note when to look at it
    again (``worth_in``, ``ripe_in``): it overrides protection (urgent, or past its bound), or
    its class weighs more than 0. Any other job's verdict is FITS, IMPOSSIBLE, NO_GPUS,
    NO_VICTIMS or NOT_WORTH whatever the cluster, made without a victim search; a pass in which no
    waiting job may plan makes no plan and notes no time, so a caller that reads only those
    (the simulator) need not ask for it."""
    return _may_plan(job.overrides_protection, job.effective, config)


def may_plan_pending(decision: PendingDecision, config: PlannerConfig) -> bool:
    """:func:`may_plan` of the :class:`Waiting` that
    :func:`~hai_slurm.priority.planner.inputs.waiting_from_policy` makes of ``decision`` (with
    ``config.aged_preempt``), without making it: a caller that asks the planner only when a
    job may plan need not build a pass's waiting jobs when none may."""
    return _may_plan(overrides_protection(decision),
                     preempt_class(decision, aged_preempt=config.aged_preempt), config)


def _may_plan(overrides: bool, cls: PriorityClass, config: PlannerConfig) -> bool:
    """The rule of :func:`may_plan` on a job's protection override and the class it is
    planned as."""
    return overrides or config.class_weights.get(cls, 0.0) > 0


def _plan(snapshot: PlanSnapshot, config: PlannerConfig, now: float,
          kind: type[_Pass]) -> PlanningResult:
    """:func:`plan_preemptions` with the pass state ``kind`` (tests compare the plain search)."""
    age = now - snapshot.taken_at
    if not math.isfinite(age) or age > config.max_staleness:
        return _refused(f"snapshot is {_dur(age) if math.isfinite(age) else 'of unknown age'} "
                        f"old (limit {_dur(config.max_staleness)}); take a new one",
                        snapshot.pending)
    if age < -config.max_staleness:
        return _refused(f"snapshot is {_dur(-age)} in the future: check the clocks",
                        snapshot.pending)
    st = kind(snapshot, config, now)
    if st.problem is not None:
        return _refused(st.problem, snapshot.pending)
    view = st.view
    pending = snapshot.pending
    # highest class first, input order within a class (a stable sort by rank, made by
    # dealing the jobs to their classes: each class has a rank of its own)
    by_class: dict[PriorityClass, list[Waiting]] = {c: [] for c in LADDER}
    for w in pending:
        by_class[w.effective].append(w)
    jobs = list(chain.from_iterable([by_class[c] for c in reversed(LADDER)]))
    decisions: dict[int, Decision] = {}
    plans: list[PreemptionPlan] = []
    # shapes are (nodes, --switches limit or 0, allowed nodes[, GPUs per node])
    no_free: dict[_Key, int] = {}     # shape -> smallest per-node count that failed
    no_victims: dict[_VKey, int] = {}  # shape -> highest rank that found none
    # (rank, shape) -> (state version, loss of the best set, its expected-wait floor, the wait
    # after which urgent work takes it anyway (infinite: never), whether its victims all save
    # on request): reused only while nothing changed
    not_worth: dict[_NWKey, tuple[int, float, float, float, bool]] = {}
    worth_in: dict[int, float] = {}
    ripe_in: dict[int, float] = {}
    version = searches = 0
    max_plans, max_searches = config.limits(len(pending))
    shapes: dict[_Asked, _Shape] = {}  # per asked shape
    # per asked shape and class: what the walk derives from them (_Kind), once per pass, in
    # a cell shared by the jobs that ask alike (a verdict final for the rest of the pass
    # replaces it)
    kinds: dict[tuple[int, int | None, int | None, frozenset[str] | None, PriorityClass, bool],
                list[_Kind]] = {}
    limited = max_plans <= 0 or max_searches <= 0   # a search or plan limit was reached
    # once limited, which limit (it stays: no search, so no plan, is made after)
    limit = 0 if max_plans <= 0 else 1
    age_wait = config.victim_age_wait > 0
    for job in jobs:
        jid = job.job_id
        asked = (job.gpus, job.nodes, job.max_leaves, job.allowed, job.effective,
                 job.overrides_protection)
        cell = kinds.get(asked)
        if cell is None:
            cell = kinds[asked] = [_kind(job, view, config, shapes)]
        derived = cell[0]
        fixed = derived[0]
        if fixed is not None:   # no GPUs, cannot fit in this cluster, or a final verdict
            decisions[jid] = _decision(Decision, (jid, fixed[0], fixed[1]))
            if fixed[0] is _NO_VICTIMS and asked[5]:
                _ripe_later(ripe_in, jid, st, derived, asked)
            continue
        (_, nodes, per, what, cross, shape_key, vkey, lead, rank, none_text, nw_key,
         weight, skipped, _) = derived
        _, _, leaves, allowed, cls, waive_protection = asked
        if per < no_free.get(shape_key, per + 1):
            free = place_free(view, nodes, per, cross_leaf=cross, allowed=allowed)
            if free is not None and not _within(view, free, leaves):
                free = None
            if free is not None:
                for node, mask in free.masks:
                    st.occupy(node, mask)
                version += 1
                decisions[jid] = _decision(Decision, (jid, _FITS, (
                    f"{what} fit on free GPUs of {','.join(free.nodes)} "
                    f"(in-node level {_NAME[free.level]}); expected to start without preemption")))
                continue
            no_free[shape_key] = per
        if rank == 0 or no_victims.get(vkey, -1) >= rank:   # no class lower; none found
            # final for the rest of the pass: free GPUs only get fewer (the free check just
            # failed, or had), and a search that found none is not asked again: later jobs
            # of this shape and class take the verdict as a fixed one, without those lookups
            cell[0] = ((_NO_VICTIMS, none_text), *derived[1:])
            decisions[jid] = _decision(Decision, (jid, _NO_VICTIMS, none_text))
            if waive_protection:
                _ripe_later(ripe_in, jid, st, derived, asked)
            continue
        if not may_plan(job, config):
            # no benefit whatever its wait (class weight 0 x wait x GPUs), so no victim set is
            # worth it: not searched (a search would also spend the pass's search limit), and
            # final for the rest of the pass as a NO_VICTIMS verdict is
            unweighted = (f"{lead}; {_NAME[cls]} weighs 0 ([planner.class_weights]): it "
                          "preempts only once it has waited past its class bound (max_wait)")
            cell[0] = ((_NOT_WORTH, unweighted), *derived[1:])
            decisions[jid] = _decision(Decision, (jid, _NOT_WORTH, unweighted))
            continue
        seen = not_worth.get(nw_key)
        if seen is not None and seen[0] == version:
            benefit = weight * max(job.wait, seen[2]) * job.gpus
            urgent_wait = seen[3]   # the wait after which urgent work preempts (see below)
            if benefit <= config.benefit_threshold * seen[1] and job.wait < urgent_wait:
                _worth_later(worth_in, job, weight, config.benefit_threshold * seen[1])
                if urgent_wait < math.inf:
                    _urgent_later(worth_in, job, urgent_wait)
                decisions[jid] = _decision(Decision, (jid, _NOT_WORTH, (
                    f"{lead}; the best victim set loses {_gs(seen[1])}; benefit "
                    f"{benefit:,.0f} is not more than {config.benefit_threshold:g} x that"
                    + _urgent_text(urgent_wait, seen[4], waive_protection
                                   and rank < _URGENT_RANK))))
                continue
        if limited:
            text = skipped[limit]
            if text is None:
                text = skipped[limit] = (f"{lead}; this cycle's limit of "
                                         f"{_LIMITS[limit]} was reached")
            if seen is None or seen[0] != version:
                # final too: no search is made once limited, so no not-worth verdict is
                # noted after (and a stale one stays stale: the version only grows)
                cell[0] = ((_SKIPPED, text), *derived[1:])
            decisions[jid] = _decision(Decision, (jid, _SKIPPED, text))
            continue
        searches += 1
        limited = searches >= max_searches
        limit = 1
        found, excluded = st.options(nodes, per, rank, cross=cross, allowed=allowed,
                                     waive_protection=waive_protection)
        options = found if leaves is None else [o for o in found
                                                if _within(view, o.placement, leaves)]
        if not options:
            no_victims[vkey] = max(rank, no_victims.get(vkey, -1))
            decisions[jid] = _decision(Decision, (jid, _NO_VICTIMS, (
                f"{lead}; no set of lower-class, {_victim_kind(waive_protection, config)} "
                f"frees such a placement (running jobs left out: {_summary(excluded)})")))
            if waive_protection:
                _ripe_later(ripe_in, jid, st, derived, asked)
            continue
        best = options[0]
        cands = st.cands
        loss = sum([cands[v].lost_work for v in best.victims])   # lists: cheaper than generators
        # (the youngest victim's run time is looked up only when it counts: off by default)
        floor = config.victim_age_wait * st.youngest(best.victims) if age_wait else 0.0
        wait = max(0.0, job.wait, floor)
        benefit = weight * wait * job.gpus
        counted = (f"wait {_dur(job.wait)}" if wait <= job.wait else
                   f"expected wait {_dur(wait)} ({config.victim_age_wait:g} x the youngest "
                   f"victim's run time; waited {_dur(job.wait)})")
        weighed = f"benefit {benefit:,.0f} = class weight {weight:g} x {counted} x {job.gpus} GPUs"
        worth = benefit > config.benefit_threshold * loss
        # urgent work preempts once it waited urgent_benefit_wait when its victims all save on
        # request (each loses its save and restart, not hours of work), urgent_no_save_wait
        # when one cannot (bound_no_save_wait below HIGH: a job past its bound), whatever the
        # benefit
        saves, urgent_wait, top = False, math.inf, True
        if not worth and waive_protection:
            saves, top = st.all_save(best.victims), rank >= _URGENT_RANK
            urgent_wait = config.urgent_wait(saves, top)
        if not worth and job.wait < urgent_wait:
            not_worth[(rank, *vkey)] = (version, loss, floor, urgent_wait, saves)
            _worth_later(worth_in, job, weight, config.benefit_threshold * loss)
            if urgent_wait < math.inf:
                _urgent_later(worth_in, job, urgent_wait)
            decisions[jid] = _decision(Decision, (jid, _NOT_WORTH, (
                f"{lead}; the best victims ({_victim_list(best)}) would lose {_gs(loss)}; "
                f"{weighed} is not more than {config.benefit_threshold:g} x that"
                + _urgent_text(urgent_wait, saves, not top))))
            continue
        ids = sorted(best.victims)
        victims = tuple([st.victim(v) for v in ids])
        not_chosen = st.passed_over(job, best, options[1:], excluded)
        st.claim(ids, jid)
        for node, mask in best.placement.masks:
            st.occupy(node, mask)
        version += 1
        borrowed = sum([v.borrowed for v in victims])
        chosen = best.placement.nodes
        reason = (f"job {jid} ({_NAME[cls]}, team {job.team}, {what}) preempts "
                  f"{len(victims)} job(s) ({borrowed} borrowed): {_victim_list(best)} on "
                  f"{','.join(chosen)} (in-node level "
                  f"{_NAME[best.placement.level]}); lost work {_gs(loss)} x threshold "
                  + (f"{config.benefit_threshold:g} < {weighed}" if worth else
                     f"{config.benefit_threshold:g} >= {weighed}, but it is urgent work that "
                     f"waited {_dur(job.wait)} >= "
                     + (f"urgent_benefit_wait {_dur(urgent_wait)} and every victim saves on "
                        "request" if saves else
                        f"{_NO_SAVE_WAIT[top]} {_dur(urgent_wait)}")))
        plans.append(PreemptionPlan(
            beneficiary=jid, beneficiary_class=job.effective, team=job.team, victims=victims,
            placement=best.placement.gpus(view), nodes=chosen,
            gpus_per_node=per, lost_work=loss, benefit=benefit, reason=reason,
            not_chosen=not_chosen))
        decisions[jid] = _decision(Decision, (jid, _PREEMPT, reason))
        if len(plans) >= max_plans:
            limited, limit = True, 0
    return PlanningResult(tuple(plans), decisions, None, worth_in, ripe_in)


_UNSET = -1.0
"""A cell's ``ripe_in`` not worked out yet."""


def _ripe_later(ripe_in: dict[int, float], jid: int, st: _Pass, derived: _Kind,
                asked: tuple[int, int | None, int | None, frozenset[str] | None,
                             PriorityClass, bool]) -> None:
    """Note when job ``jid`` (refused for want of victims, overriding protection) may find
    victims old enough (:meth:`_Pass.ripens`, once per asked shape and class)."""
    cell = derived[13]
    secs = cell[0]
    if secs == _UNSET:
        secs = cell[0] = st.ripens(derived[1], derived[2], derived[8], cross=derived[4],
                                   allowed=asked[3], leaves=asked[2])
    if secs is not None:
        ripe_in[jid] = secs


def _urgent_later(worth_in: dict[int, float], job: Waiting, wait: float) -> None:
    """Note when urgent ``job`` has waited ``wait`` (urgent_benefit_wait, or
    urgent_no_save_wait when a victim cannot save), if that comes before its wait outweighs
    the loss."""
    secs = max(0.0, wait - job.wait)
    if secs < worth_in.get(job.job_id, math.inf):
        worth_in[job.job_id] = secs


def _urgent_text(wait: float, saves: bool, bound: bool = False) -> str:
    """What a not-worth verdict adds for urgent work that preempts once it waited ``wait``
    (infinite: never; ``bound``: a job below HIGH that overrides protection only as it is
    past its bound)."""
    if wait == math.inf:
        if bound and not saves:
            return ("; past its bound it takes only victims that save on request "
                    "(bound_no_save_wait off), and one here cannot")
        return ""
    if saves:
        return (f"; as urgent work whose victims save on request it preempts once it waited "
                f"urgent_benefit_wait {_dur(wait)}")
    return (f"; as urgent work it preempts once it waited {_NO_SAVE_WAIT[not bound]} "
            f"{_dur(wait)} (a victim cannot save on request)")


_NO_SAVE_WAIT = {True: "urgent_no_save_wait", False: "bound_no_save_wait"}
"""The setting that says when a job that overrides protection takes a victim that cannot save
on request, by whether the job is of HIGH or above."""

_URGENT_RANK = RANK[URGENT_FROM]


def _worth_later(worth_in: dict[int, float], job: Waiting, weight: float, bar: float) -> None:
    """Note when ``job``'s wait alone makes weight x wait x GPUs exceed ``bar``."""
    if weight > 0:
        worth_in[job.job_id] = max(0.0, bar / (weight * job.gpus) - job.wait)


_decision = tuple.__new__
"""``_decision(Decision, (job id, outcome, reason))``: a :class:`Decision` without the named
tuple's Python-level ``__new__`` (10,000 of them a pass)."""



_Asked = tuple[int, int | None, int | None, frozenset[str] | None]
"""A job's asked shape: GPUs, nodes, --switches limit, allowed nodes."""
_Key = tuple[int, int, frozenset[str] | None]
"""A shape's cache key: nodes, --switches limit or 0, allowed nodes."""
_VKey = tuple[int, int, frozenset[str] | None, int, bool]
"""_Key + (GPUs per node, waive_protection): the cache key of victim verdicts."""
_NWKey = tuple[int, int, int, frozenset[str] | None, int, bool]
"""(rank,) + _VKey: the cache key of not-worth verdicts."""


class _Shape(NamedTuple):
    """What a pass derives from a job's asked shape (GPUs, nodes, --switches, allowed nodes),
    once per shape."""

    nodes: int
    per: int
    what: str
    cross: bool
    key: _Key
    impossible: str | None
    vkey: tuple[int, int, frozenset[str] | None, int]   # key + (per,)
    lead: str                      # "needs <what>, none free"

    @classmethod
    def of(cls, job: Waiting, view: ClusterView, config: PlannerConfig) -> _Shape:
        nodes, per = shape(job, view.max_node_gpus)
        what = f"{nodes} x {per} GPUs" if nodes > 1 else f"{per} GPUs on one node"
        leaves, allowed = job.max_leaves, job.allowed
        cross = nodes > 1 and config.allow_cross_leaf and (leaves is None or leaves > 1)
        if leaves is not None and nodes > 1:
            what += f" on at most {leaves} leaf switch{'es' if leaves > 1 else ''} (--switches)"
        if allowed is not None:
            count = len(view.members(None, allowed))
            what += (f" of the {count} node{'s' if count != 1 else ''} it may use (partition, "
                     "--nodelist, --exclude, --constraint, --exclusive, room for its CPUs and "
                     "memory, reservations that start before its time limit would end)")
        impossible = None
        if group_capacity(view, per, cross_leaf=cross, allowed=allowed) < nodes:
            where = ("one node" if nodes == 1 else "the cluster" if cross
                     else "one leaf switch")
            impossible = (f"needs {what}; {where} of this cluster has not that many nodes with "
                          "enough GPUs" + ("" if allowed is None else " that it may use"))
        key = (nodes, leaves if nodes > 1 and leaves is not None else 0, allowed)
        return cls(nodes, per, what, cross, key, impossible, (*key, per),
                   f"needs {what}, none free")


_LIMITS = ("plans", "victim searches")

_Kind = tuple[tuple[Outcome, str] | None, int, int, str, bool, _Key, _VKey, str, int, str,
              _NWKey, float, list[str | None], list[float | None]]
"""What the walk derives from a job's asked shape and class, once per pass: (NO_GPUS or
IMPOSSIBLE verdict or None, nodes, GPUs per node, what, cross-leaf, shape key, victim-verdict
key, lead, rank, its NO_VICTIMS text, not-worth key, class weight, its SKIPPED texts per
limit (made when first needed), its ``ripe_in`` when refused for want of victims (made when
first needed: :data:`_UNSET` until then))."""


def _kind(job: Waiting, view: ClusterView, config: PlannerConfig,
          shapes: dict[_Asked, _Shape]) -> _Kind:
    cls = job.effective
    rank = RANK[cls]
    weight = config.class_weights.get(cls, 0.0)
    if job.gpus <= 0:
        return ((_NO_GPUS, "needs no GPUs: not planned"), 0, 0, "", False, (0, 0, None),
                (0, 0, None, 0, False), "", rank, "", (0, 0, 0, None, 0, False), weight,
                [None, None], [None])
    asked = (job.gpus, job.nodes, job.max_leaves, job.allowed)
    known = shapes.get(asked)
    if known is None:
        known = shapes[asked] = _Shape.of(job, view, config)
    nodes, per, what, cross, shape_key, impossible, shape_vkey, lead = known
    fixed = None if impossible is None else (_IMPOSSIBLE, impossible)
    vkey: _VKey = (*shape_vkey, job.overrides_protection)
    none_text = (f"{lead}; no class is lower than {_NAME[cls]}" if rank == 0 else
                 f"{lead}; no set of lower-class, "
                 f"{_victim_kind(job.overrides_protection, config)} frees such a placement")
    return (fixed, nodes, per, what, cross, shape_key, vkey, lead, rank, none_text,
            (rank, *vkey), weight, [None, None], [_UNSET])


def _victim_kind(overrides_protection: bool, config: PlannerConfig) -> str:
    """The running jobs a job may take, in its NO_VICTIMS verdict."""
    if not overrides_protection:
        return f"preemptible, unprotected jobs older than {_dur(config.min_run_time)}"
    age = config.urgent_min_run
    return ("preemptible jobs (protected teams' too: it is urgent or past its bound) "
            f"{'of any age' if age <= 0 else f'older than {_dur(age)}'}")


def _within(view: ClusterView, placement: Placement, leaves: int | None) -> bool:
    """Whether ``placement`` spans at most ``leaves`` leaf switches (None: any number)."""
    if leaves is None:
        return True
    return len({view.nodes[n].group for n in placement.nodes}) <= leaves


def _victim_list(option: Option) -> str:
    """The victim ids of ``option`` as text ("jobs 3, 7")."""
    ids = sorted(option.victims)
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(map(str, ids))
