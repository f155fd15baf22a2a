"""The policy: one pure function from jobs, counters, quotas, state and ``now`` to priorities.

Per pending job: requested class (AUTO resolved) -> fairness demotion -> decay -> aging gives the
*effective* class; the class's own rule orders jobs inside it (FCFS for HIGH and above, team fair
share for ABOVE_NORMAL..UNDER_NORMAL, round robin between teams for BELOW_NORMAL and LOW); and
:mod:`hai_slurm.priority.policy.scoring` turns (class, key) into the absolute Slurm priority.
Per running job: effective class after decay, borrowed and protected flags (for the planner).

Round robin keeps state: each job gets a *tag* when it enters a round-robin class; tags are kept in
:class:`PolicyState` so later arrivals and departures never renumber anyone. A job entering the
class gets ``head`` (the lowest tag still pending in the class: the current round) when its team
has nothing else queued in the class, else ``max(head, last tag of its team) + 1``: the back of
its own team's line. A job that aged into the class gets ``head``. Jobs with equal priority are
ordered by Slurm itself by submit time, then job id.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from operator import is_
from types import MappingProxyType
from typing import NamedTuple

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.policy import fairness, scoring
from hai_slurm.priority.policy.aging import age, compensation_boost, decays
from hai_slurm.priority.policy.ladder import RANK, step
from hai_slurm.priority.policy.quota import borrowed_jobs, dominant_share, resolve_auto, team_usage
from hai_slurm.priority.policy.settings import FairnessConfig, PolicyConfig
from hai_slurm.priority.policy.state import (
    FairnessEvent,
    PendingDecision,
    PendingJob,
    PendingReason,
    PolicyResult,
    PolicyState,
    Resources,
    Rule,
    RunningDecision,
    RunningJob,
    TeamState,
)

#: The ordering rule of each class.
RULES: Mapping[PriorityClass, Rule] = MappingProxyType({
    PriorityClass.EXTREME_HIGH: Rule.FCFS,
    PriorityClass.VERY_HIGH: Rule.FCFS,
    PriorityClass.HIGH: Rule.FCFS,
    PriorityClass.ABOVE_NORMAL: Rule.FAIR_SHARE,
    PriorityClass.NORMAL: Rule.FAIR_SHARE,
    PriorityClass.UNDER_NORMAL: Rule.FAIR_SHARE,
    PriorityClass.BELOW_NORMAL: Rule.ROUND_ROBIN,
    PriorityClass.LOW: Rule.ROUND_ROBIN,
})
_EMPTY: tuple[float, ...] = ()


class _Kept(NamedTuple):
    """A pending job's decision as :class:`PolicyMemo` keeps it (see ``PolicyMemo.rows``):
    what it was made from and what does not move with ``now`` while it stays below its
    class's bound (``next_in`` None: at or above the aging ceiling, no bound)."""

    job: PendingJob
    base: PriorityClass
    depth: int
    share: float | None
    since: float
    bound: float
    boost: int
    next_in: float | None
    priority: int
    rule: Rule
    age_restored: float
    tag: int | None
    """Its round-robin tag (round-robin classes), None otherwise."""
    old: tuple[PriorityClass, int] | None
    """The (class, tag) the policy state gave it (round-robin classes)."""


class _Row(NamedTuple):
    job: PendingJob
    effective: PriorityClass
    gained: int
    next_in: float | None
    wait: float
    boost: int
    original: float


def _base_class(cls: PriorityClass, demote: bool, run_time: float,
                config: PolicyConfig, *, decay: bool = True) -> tuple[PriorityClass, bool, bool]:
    """(class before aging, demoted?, decayed?) for a job whose requested class is ``cls``.

    Decay is for jobs that asked for its source class: a job demoted into it (``demote``, or
    ``decay`` False for a running job that started demoted) is one class down, not two.
    """
    demoted = demote and RANK[cls] >= RANK[config.fairness.demote_from]
    if demoted:
        cls = step(cls, -1)
    decayed = decay and not demoted and decays(cls, run_time, config.decay)
    if decayed:
        cls = config.decay.target
    return cls, demoted, decayed


DECAY_MARGIN = 1.0
"""Seconds before a running job's decay threshold at which :class:`PolicyMemo` stops reusing
decisions (its run time is a sum of floats: the exact crossing is left to a fresh pass)."""


@dataclass
class PolicyMemo:
    """What :func:`compute_priorities` keeps from one call to the next for the running jobs, so
    a pass in which none of them changed does not decide them again (most passes of a cycle or
    an urgent look start or end no job). Owned by the caller, who passes the same one to each
    call (the daemon's and the simulator's :class:`~hai_slurm.priority.daemon.cycle.CycleMemo`
    holds one).

    The running jobs' decisions, each team's usage and GPUs per class, and the decayed jobs
    are reused only when the call's running jobs are the very same (frozen) objects, in the
    same order, as last time's, with the same config object and the same teams protected, and
    nothing that moves with ``now`` can have changed them: ``now`` did not go back, no job that
    may still decay has come within :data:`DECAY_MARGIN` of its threshold (``decay_at``), and no
    team with a running job without a start class is demoting (that job's demotion depends on
    ``now`` and the events). Reused, they are what computing afresh gives."""

    running: tuple[RunningJob, ...] = ()
    config: PolicyConfig | None = None
    usage: dict[str, Resources] = dataclass_field(default_factory=dict)
    decisions: dict[int, RunningDecision] | None = None
    """None: nothing to reuse (the last pass's could not be: see :meth:`keep`)."""
    class_usage: dict[str, dict[PriorityClass, int]] = dataclass_field(default_factory=dict)
    decayed: tuple[int, ...] = ()
    protected: frozenset[str] = frozenset()
    no_start: frozenset[str] = frozenset()
    """Teams with a running job without a start class."""
    since: float = math.inf
    decay_at: float = -math.inf
    events: tuple[FairnessEvent, ...] | None = None
    index: fairness.FairnessIndex | None = None
    """The last events and their index (an index is a function of the events alone)."""
    rows: dict[int, _Kept] = dataclass_field(default_factory=dict)
    """The last pass's pending decisions of jobs not aged (round-robin ones only with a tag
    from the policy state), by job id, with what each was made from (:class:`_Kept`); reused
    for the same job object and class before aging, queue depth of that class, team share
    (fair-share classes) or tag in the state (round robin), boost,
    config and epoch while its wait stays below its class's bound: its priority then is the
    same, and its wait and time to promotion are worked out anew (a round-robin job's tag is
    counted in its class's round as the rule counts it)."""
    rows_config: PolicyConfig | None = None
    rows_epoch: int | None = None
    protecting: dict[str, tuple[tuple[float, ...], FairnessConfig, tuple[float, ...], float,
                                tuple[float, ...]]] = dataclass_field(default_factory=dict)
    """Per team, the last :func:`fairness.protecting_events` asked and its answer: the team's
    PREEMPTED times, the config, everyone's times and the team's fraction it was asked with."""

    def protecting_events(self, team: str, times: tuple[float, ...], cfg: FairnessConfig,
                          everyone: tuple[float, ...], fraction: float) -> tuple[float, ...]:
        """:func:`fairness.protecting_events` of these values, the kept one when the times
        are the very tuples of the last call for ``team`` (the kept index's: the same events
        give the same objects) and the config and fraction are the same."""
        last = self.protecting.get(team)
        if (last is not None and last[0] is times and last[1] is cfg and last[2] is everyone
                and last[3] == fraction):
            return last[4]
        starts = fairness.protecting_events(times, cfg, everyone, fraction)
        self.protecting[team] = (times, cfg, everyone, fraction, starts)
        return starts

    def index_of(self, events: Iterable[FairnessEvent]) -> fairness.FairnessIndex:
        """:func:`fairness.index_events` of ``events``, the kept one when they equal the last
        ones (compared element by element: the same event objects by identity, no hashing)."""
        given = tuple(events)
        if self.index is None or given != self.events:
            self.events, self.index = given, fairness.index_events(given)
        return self.index

    def same_running(self, running: Sequence[RunningJob], config: PolicyConfig) -> bool:
        """Whether ``running`` and ``config`` are the very objects of the last pass; if not,
        they become the memo's, with nothing to reuse yet."""
        if (config is self.config and len(running) == len(self.running)
                and all(map(is_, running, self.running))):
            return True
        self.running, self.config, self.decisions = tuple(running), config, None
        return False

    def reusable(self, protected: Mapping[str, float], demoting: set[str],
                 now: float) -> bool:
        """Whether the kept decisions hold for this pass (see the class docstring); call
        after :meth:`same_running` said the jobs are the same."""
        return (self.decisions is not None and self.since <= now < self.decay_at
                and protected.keys() == self.protected and demoting.isdisjoint(self.no_start))

    def keep(self, running: Sequence[RunningJob], config: PolicyConfig,
             decisions: dict[int, RunningDecision],
             class_usage: dict[str, dict[PriorityClass, int]], protected: Mapping[str, float],
             demoting: set[str], now: float) -> None:
        """Remember this pass's running decisions (not when a job without a start class was
        demoted or may be: those depend on ``now`` and the events)."""
        no_start = frozenset(r.team for r in running if r.start_class is None)
        if not demoting.isdisjoint(no_start):
            self.decisions = None
            return
        self.decisions, self.class_usage = decisions, class_usage
        self.decayed = tuple(j for j, d in decisions.items() if d.decayed)
        self.protected, self.no_start, self.since = frozenset(protected), no_start, now
        self.decay_at = _next_decay(running, decisions, config, now)


def _next_decay(running: Sequence[RunningJob], decisions: Mapping[int, RunningDecision],
                config: PolicyConfig, now: float) -> float:
    """The earliest time, less :data:`DECAY_MARGIN`, at which a running job not decayed at
    ``now`` may reach the decay threshold (infinite: none can): a job of the decay's source
    class, or without a start class (its class is worked out each pass), that runs now."""
    decay = config.decay
    if decay.after <= 0:
        return math.inf
    first = math.inf
    source = decay.source
    for run in running:
        since = run.running_since
        if since is None or decisions[run.job_id].decayed or (
                run.start_class is not None and run.start_class is not source):
            continue
        ran = run.run_time_at(now)
        if ran < decay.after:   # past it and not decayed: it never will (not of the class)
            first = min(first, max(since, now) + (decay.after - ran))
    return first - DECAY_MARGIN


def quota_fractions(teams: Iterable[str], config: PolicyConfig) -> dict[str, float]:
    """Each team's part of the GPU quotas of ``teams`` (equal parts when none has a quota)."""
    names = sorted(set(teams))
    quotas = {t: max(0, config.quota(t).gpus) for t in names}
    total = sum(quotas.values())
    if total <= 0:
        return {t: 1.0 / len(names) for t in names}
    return {t: q / total for t, q in quotas.items()}


def _running(
    running: Sequence[RunningJob], config: PolicyConfig, index: fairness.FairnessIndex,
    protected: Mapping[str, float], demoting: set[str], fractions: Mapping[str, float],
    now: float,
) -> tuple[dict[int, RunningDecision], dict[str, dict[PriorityClass, int]]]:
    """Running jobs' decisions, and each team's GPUs in use per effective class."""
    classes: dict[int, tuple[PriorityClass, bool]] = {}
    by_team: defaultdict[str, list[tuple[RunningJob, PriorityClass]]] = defaultdict(list)
    class_usage: defaultdict[str, dict[PriorityClass, int]] = defaultdict(dict)
    demote_rank = RANK[config.fairness.demote_from]
    decay = config.decay
    for run in running:
        start = run.start_class
        if start is not None:
            # _base_class(start, False, ...) inlined (a running job's start class is its class
            # unless it decays; 10,000 running jobs a cycle). Started below what it asked for
            # (demoted): no decay on top of the demotion.
            asked = run.requested
            dec = start is decay.source and decays(start, run.run_time_at(now), decay) and not (
                isinstance(asked, PriorityClass) and RANK[asked] > RANK[start]
                and RANK[asked] >= demote_rank)
            cls = decay.target if dec else start
        else:
            req = run.requested if isinstance(run.requested, PriorityClass) else (
                config.default_class)  # AUTO without a recorded start class
            dem = run.team in demoting and fairness.demoted(
                index.preempting.get(run.team, _EMPTY), run.submit_time, now, config.fairness,
                everyone=index.all_preempting, fraction=fractions[run.team])
            cls, _, dec = _base_class(req, dem, run.run_time_at(now), config)
        classes[run.job_id] = (cls, dec)
        by_team[run.team].append((run, cls))
        usage = class_usage[run.team]
        usage[cls] = usage.get(cls, 0) + run.resources.gpus
    borrowed: set[int] = set()
    for team, jobs in by_team.items():
        borrowed |= borrowed_jobs(jobs, config.quota(team))
    protect_borrowed = config.fairness.protect_borrowed
    out: dict[int, RunningDecision] = {}
    for run in running:
        job_id = run.job_id
        cls, dec = classes[job_id]
        lent = job_id in borrowed
        out[job_id] = RunningDecision(job_id, run.team, cls, dec, lent, run.team in protected
                                      and (protect_borrowed or not lent), run.preemptible)
    return out, dict(class_usage)


def compute_priorities(
    pending: Sequence[PendingJob],
    running: Sequence[RunningJob],
    *,
    config: PolicyConfig,
    cluster: Resources,
    events: Iterable[FairnessEvent] = (),
    state: PolicyState | None = None,
    now: float,
    memo: PolicyMemo | None = None,
) -> PolicyResult:
    """Decide every pending job's effective class and priority, and every running job's flags.

    ``cluster`` is the total of the cluster's GPUs, CPUs and memory; ``events`` the fairness
    events (older than the window are ignored); ``state`` what the previous cycle returned;
    ``memo`` what the previous call kept (see :class:`PolicyMemo`; the result is the same).
    """
    state = state or PolicyState()
    fair_cfg = config.fairness
    index = fairness.index_events(events) if memo is None else memo.index_of(events)
    same = memo is not None and memo.same_running(running, config)
    if memo is not None and same:
        usage = memo.usage
    else:
        usage = team_usage(running)
        if memo is not None:
            memo.usage = usage
    teams = set(usage) | {j.team for j in pending} | set(config.teams)

    protected: dict[str, float] = {}
    demoting: set[str] = set()
    fractions = quota_fractions(teams, config) if teams else {}
    # A team without events of a kind is never protected (nothing put it over a limit) and,
    # with demote_after >= 0 (the loader's rule), never demoting (0 events are over no limit):
    # most teams of a cycle, so they are not asked.
    may_demote_idle = fair_cfg.demote_after < 0
    for team in teams:
        preempted = index.preempted.get(team)
        if preempted:
            everyone, fraction = index.all_preempted, fractions[team]
            until = fairness.protected_until(
                preempted, now, fair_cfg, everyone=everyone, fraction=fraction,
                starts=None if memo is None else memo.protecting_events(
                    team, preempted, fair_cfg, everyone, fraction))
            if until is not None:
                protected[team] = until
        preempting = index.preempting.get(team)
        if (preempting or may_demote_idle) and fairness.demoting(
                preempting or _EMPTY, now, fair_cfg, everyone=index.all_preempting,
                fraction=fractions[team]):
            demoting.add(team)

    if memo is not None and same and memo.reusable(protected, demoting, now):
        assert memo.decisions is not None
        running_out, class_usage = dict(memo.decisions), memo.class_usage
        decays_out: list[int] = list(memo.decayed)
    else:
        running_out, class_usage = _running(running, config, index, protected, demoting,
                                            fractions, now)
        decays_out = [j for j, d in running_out.items() if d.decayed]
        if memo is not None:
            memo.keep(running, config, dict(running_out), class_usage, protected, demoting,
                      now)
    zero = Resources()
    shares = {t: dominant_share(usage.get(t, zero), config.quota(t), cluster) for t in teams}
    window = fair_cfg.window
    team_states = {t: TeamState(
        team=t, usage=usage.get(t, zero), quota_gpus=config.quota(t).gpus, share=shares[t],
        preempted=fairness.count_in_window(index.preempted.get(t, _EMPTY), now, window),
        preempting=fairness.count_in_window(index.preempting.get(t, _EMPTY), now, window),
        protected_until=protected.get(t), demoting=t in demoting) for t in sorted(teams)}

    # Pending pass 1: class before aging, and queue depth per class.
    base: list[tuple[PriorityClass, PriorityClass | None, bool, bool]] = []
    depth: defaultdict[PriorityClass, int] = defaultdict(int)
    decay_source = config.decay.source
    for job in pending:
        auto = None
        if isinstance(job.requested, PriorityClass):
            requested = job.requested
        else:  # AUTO
            auto = requested = resolve_auto(job.team, job.resources.gpus,
                                            class_usage.get(job.team, {}), config)
        if job.team in demoting or requested is decay_source:
            dem_now = job.team in demoting and fairness.demoted(
                index.preempting.get(job.team, _EMPTY), job.original_submit, now, fair_cfg,
                everyone=index.all_preempting, fraction=fractions[job.team])
            cls, dem, dec = _base_class(requested, dem_now, job.run_time, config)
            base.append((cls, auto, dem, dec))
            depth[cls] += 1
        else:
            base.append((requested, auto, False, False))
            depth[requested] += 1

    # Pending pass 2: aging, rule keys, scores; round-robin jobs new to their class wait.
    levels = scoring.share_levels(config.fair_share.quantum, config.fair_share.max_share)
    epoch = scoring.choose_epoch(state.epoch, now, scoring.time_span(levels))
    share_lv = {t: scoring.share_level(s, config.fair_share.quantum, levels)
                for t, s in shares.items()}
    bounds = {c: p.max_wait for c, p in config.classes.items()}
    ceiling = RANK[config.aging.max_class]
    old_tags = state.rr_tags
    rr_tags: dict[int, tuple[PriorityClass, int]] = {}
    rr_head: dict[PriorityClass, int] = {}
    rr_last: dict[tuple[PriorityClass, str], int] = {}
    rr_new: list[tuple[int, _Row]] = []
    promotions: list[int] = []
    demotions: list[int] = []
    pending_out: dict[int, PendingDecision] = {}
    priorities: dict[int, int] = {}
    band = scoring.BAND
    lowest = scoring.BASE
    comp = config.compensation
    # The kept rows of the last pass (see PolicyMemo.rows), when made with this config and
    # epoch; this pass's rows, for the next one.
    kept_rows: dict[int, _Kept] = {}
    rows: dict[int, _Kept] | None = None
    if memo is not None:
        if memo.rows_config is config and memo.rows_epoch == epoch:
            kept_rows = memo.rows
        rows = memo.rows = {}
        memo.rows_config, memo.rows_epoch = config, epoch
    for i, job in enumerate(pending):
        cls, auto, dem, dec = base[i]
        job_id = job.job_id
        k = kept_rows.get(job_id)
        if (k is not None and k.job is job and k.base is cls and k.depth == depth[cls]
                and (k.share is None or k.share == shares[job.team])
                and (k.tag is None or old_tags.get(job_id) == k.old)):
            # The same job and class before aging as the last pass, with the same queue depth
            # (and team share, or round-robin tag), config and epoch: only what moves with its
            # wait may differ (its AUTO, demotion and decay flags are this pass's).
            since = k.since
            waited = now - since if now > since else 0.0
            wait = job.prior_wait + waited
            boost = compensation_boost(job.preemptions, waited, comp) \
                if job.preemptions else 0
            bound = k.bound
            if boost == k.boost and (k.next_in is None or wait < bound):
                kept_tag = k.tag
                if kept_tag is not None:   # as the round-robin rule does for a tagged job
                    rr_tags[job_id] = old_tags[job_id]
                    if kept_tag < rr_head.get(cls, kept_tag + 1):
                        rr_head[cls] = kept_tag
                    if kept_tag > rr_last.get((cls, job.team), kept_tag - 1):
                        rr_last[cls, job.team] = kept_tag
                if dem:
                    demotions.append(job_id)
                if dec:
                    decays_out.append(job_id)
                prio = k.priority
                priorities[job_id] = prio
                pending_out[job_id] = PendingDecision(job_id, cls, prio, PendingReason(
                    job.requested, job.source, cls, auto, dem, dec, wait, bound, 0,
                    None if k.next_in is None else bound - wait, k.depth, k.rule, k.share,
                    kept_tag, boost, k.age_restored))
                if rows is not None:
                    rows[job_id] = k
                continue
        since = job.submit_time
        if job.eligible_time is not None and job.eligible_time > since:
            since = job.eligible_time
        waited = now - since if now > since else 0.0
        wait = job.prior_wait + waited
        gained = 0
        eff = cls
        next_in: float | None = None
        rank = RANK[cls]
        if rank < ceiling:
            if wait < bounds[cls]:
                next_in = bounds[cls] - wait
            else:
                aged = age(cls, wait, config.classes, depth, config.aging)
                eff, gained, next_in = aged.effective, aged.gained, aged.next_in
                rank = RANK[eff]
                promotions.append(job_id)
        if dem:
            demotions.append(job_id)
        if dec:
            decays_out.append(job_id)
        boost = compensation_boost(job.preemptions, waited, config.compensation) \
            if job.preemptions else 0
        first = job.first_submit_time
        original = job.submit_time if first is None else first
        rule = RULES[eff]
        tag: int | None = None
        if rule is Rule.FCFS:
            score = scoring.time_score(original - boost, epoch, band)
        elif rule is Rule.FAIR_SHARE:
            score = scoring.fair_share_score(share_lv[job.team], levels, original - boost, epoch)
        else:
            old = old_tags.get(job_id)
            if old is None or old[0] is not eff:
                rr_new.append((i, _Row(job, eff, gained, next_in, wait, boost, original)))
                continue
            rr_tags[job_id] = old
            tag = old[1]
            if tag < rr_head.get(eff, tag + 1):
                rr_head[eff] = tag
            if tag > rr_last.get((eff, job.team), tag - 1):
                rr_last[eff, job.team] = tag
            score = scoring.time_score(tag - boost, epoch, band)
        prio = lowest + rank * band + score
        priorities[job_id] = prio
        share = shares[job.team] if rule is Rule.FAIR_SHARE else None
        restored = job.submit_time - original if job.submit_time > original else 0.0
        pending_out[job_id] = PendingDecision(job_id, eff, prio, PendingReason(
            job.requested, job.source, cls, auto, dem, dec, wait, bounds[cls], gained, next_in,
            depth[cls], rule, share, tag, boost, restored))
        if rows is not None and not gained:   # not aged
            rows[job_id] = _Kept(job, cls, depth[cls], share, since,
                                 bounds[cls], boost, next_in, prio, rule, restored, tag,
                                 None if tag is None else old_tags[job_id])

    # Round-robin tags for jobs new to their class, in submit order.
    rr_new.sort(key=lambda item: (item[1].original, item[1].job.job_id))
    for i, row in rr_new:
        job, eff = row.job, row.effective
        cls, auto, dem, dec = base[i]
        head = rr_head.setdefault(eff, int(now))
        last = rr_last.get((eff, job.team))
        # Aged in, or the team's only job here: the current round; else the back of its line.
        tag = head if row.gained or last is None else max(head, last + 1)
        if last is None or tag > last:
            rr_last[eff, job.team] = tag
        rr_tags[job.job_id] = (eff, tag)
        prio = scoring.priority_for(RANK[eff], scoring.time_score(tag - row.boost, epoch, band))
        priorities[job.job_id] = prio
        pending_out[job.job_id] = PendingDecision(job.job_id, eff, prio, PendingReason(
            job.requested, job.source, cls, auto, dem, dec, row.wait, bounds[cls], row.gained,
            row.next_in, depth[cls], Rule.ROUND_ROBIN, None, tag, row.boost,
            max(0.0, job.submit_time - row.original)))
    return PolicyResult(
        pending=pending_out, running=running_out, priorities=priorities, teams=team_states,
        state=PolicyState(epoch=epoch, rr_tags=rr_tags), promotions=tuple(promotions),
        demotions=tuple(demotions), decays=tuple(decays_out),
        protected_teams=frozenset(protected), users=fairness.user_counts(
            index, now, fair_cfg.window))
