"""Values the preemption planner reads and returns (see :mod:`hai_slurm.priority.planner.search`).

Inputs are plain values, not Slurm types: :class:`Holder` (a running job and the GPUs it holds,
with its class after decay and its borrowed/protected/preemptible flags), :class:`Waiting` (a
pending job, in our effective priority order), :class:`PlannerConfig` and :class:`PlanSnapshot`
(topology, both job lists and the time the snapshot was taken). Outputs: one
:class:`PreemptionPlan` per beneficiary and one :class:`Decision` per pending job, gathered in a
:class:`PlanningResult`. Times are POSIX seconds, durations seconds; *lost work* and *benefit*
are GPU-seconds (benefit also multiplied by the beneficiary's class weight).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Topology
from hai_slurm.errors import ConfigError

#: Default class weights for the benefit: hai-platform's values for the top classes
#: (EXTREME_HIGH 50, VERY_HIGH 40, HIGH 30), 0 for the others: a middle-class job preempts only
#: once it has waited past its class's bound (``max_wait`` of its class before aging), as a
#: guarantee, and then as urgent work does (:attr:`Waiting.overrides_protection`). Preempting for
#: the middle classes' short waits (weights 5, 2, 1.5, 1 before) made most of the lost work and
#: served no urgent work: on the scenario matrix the bound rule lost 0.43 x hai-platform's work
#: instead of 0.80 x, and finished jobs sooner on average (priority/sim/README.md, "Middle
#: classes preempt at their bound"). ``[planner.class_weights]`` gives a class a weight again.
DEFAULT_WEIGHTS: Mapping[PriorityClass, float] = MappingProxyType({
    PriorityClass.EXTREME_HIGH: 50.0, PriorityClass.VERY_HIGH: 40.0, PriorityClass.HIGH: 30.0,
    PriorityClass.ABOVE_NORMAL: 0.0, PriorityClass.NORMAL: 0.0, PriorityClass.UNDER_NORMAL: 0.0,
    PriorityClass.BELOW_NORMAL: 0.0, PriorityClass.LOW: 0.0})


@dataclass(frozen=True, slots=True)
class Holder:
    """A running job as the planner sees it: its GPUs, class after decay, and what it would lose.

    ``restart_cost`` (seconds to get back to where it was, e.g. loading a checkpoint) overrides
    the configured model when known. ``last_checkpoint`` None means no checkpoint this run.
    ``can_ack``: the job saves when asked (it has ``#HAI --checkpoint-dir``), so preempting it
    costs its save time (``save_cost`` seconds, or the configured ``save_cost`` when None) plus
    its restart, not the work since its last checkpoint; a job that cannot acknowledge loses
    everything since its last periodic save (or its start).
    """

    job_id: int
    team: str
    effective: PriorityClass
    gpus: tuple[GpuRef, ...]
    start_time: float
    last_checkpoint: float | None = None
    restart_cost: float | None = None
    borrowed: bool = False
    protected: bool = False
    preemptible: bool = True
    user: str = ""
    can_ack: bool = False
    save_cost: float | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending job: class after aging, GPUs in total, nodes asked for (None: as few as fit).

    With ``nodes`` set, each node needs ``ceil(gpus / nodes)`` GPUs (Slurm may spread unevenly;
    the planner reserves for the largest share). ``wait`` is the time waited so far (seconds).
    """

    job_id: int
    team: str
    effective: PriorityClass
    gpus: int
    nodes: int | None = None
    wait: float = 0.0
    user: str = ""
    max_leaves: int | None = None
    """``sbatch --switches=N`` while the job still waits for it: its nodes may span at most N
    leaf switches. None: any (Slurm's topology/tree then spans the spine when it must)."""
    allowed: frozenset[str] | None = None
    """The nodes the job may run on: those of its partitions, within its ``--nodelist`` and
    outside its ``--exclude``, with the features its ``--constraint`` asks for (the daemon also
    leaves out nodes it cannot start on for want of CPUs or memory, or for a reservation:
    ``hai_slurm.priority.daemon.room``). None: any node.
    A plan frees GPUs only there (freeing GPUs elsewhere would help nobody: Slurm would not
    start the job on them). Give jobs with the same restriction the same set object: the pass
    keys its caches by it."""
    overrides_protection: bool = False
    """A protected team's jobs may give way to this job too, and jobs younger than their
    minimum run time once they ran ``PlannerConfig.urgent_min_run_time``: it is urgent (HIGH
    and above: the work preemption exists for), or it has waited past its class bound (a
    guarantee).
    Protection still shields a team that was preempted too often from every other job
    (:func:`~hai_slurm.priority.planner.inputs.overrides_protection`)."""


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Planner settings.

    * ``min_run_time``: a job younger than this (seconds since its start) is never a victim;
      ``class_min_run_time`` overrides it per victim class (e.g. a shorter one for LOW, whose
      jobs are expected to give way, a longer one for ABOVE_NORMAL); see :meth:`min_run_for`.
      Default 2 min (was 10): a victim that saves on request loses its save + restart whatever
      its age, which the benefit test charges, so this only keeps a restarted job from being
      taken again before it made about a restart's worth of progress; on the scenario matrix
      10 min kept top-class jobs waiting behind young lower-class jobs ("too young"), see
      ``priority/sim/README.md``.
    * ``urgent_min_run_time``: the top classes cut the minimum run time short: a job that
      :attr:`Waiting.overrides_protection` (HIGH and above, or past its class bound) may take
      victims that ran this long, when that is shorter than their class's minimum
      (:meth:`min_run_for` with ``urgent``). Default 1 min: on the scenario matrix the
      class minimum of 2 min kept multi-node urgent jobs waiting behind small jobs that kept
      starting on the nodes they needed; 0 met a few more delay targets but lost one
      replay's bound, and a job younger than about its restart time may still be loading, with
      nothing to save yet (``priority/sim/README.md``, "Urgent work and young victims").
    * ``class_weights``: benefit = weight of the beneficiary's class x wait x GPUs (0, the
      middle classes' and LOW's default: the job preempts only once it waited past its class
      bound, see :data:`DEFAULT_WEIGHTS`).
    * ``benefit_threshold``: preempt only when benefit > threshold x lost work.
    * ``urgent_benefit_wait``: ... except a job that :attr:`Waiting.overrides_protection` (HIGH
      and above, or past its class bound) whose best victims all save on request
      (:attr:`Holder.can_ack`: each loses its save and restart, not the work since its last
      save): it preempts once it waited this long, whatever the benefit. The test's wait
      otherwise grows with the victims' size over the job's (a 1-GPU HIGH job taking an 8-GPU
      victim waited 37 s): on the scenario matrix 7 s met the most targets of the tuning part
      (5-10 s alike; 2 s and 0 fewer, as plans come before GPUs free on their own), as
      hai-platform's 10 s does for every victim (``priority/sim/README.md``, "Urgent work
      that waited").
    * ``urgent_no_save_wait``: the same for urgent work whose best victim set has a job that
      cannot save on request (it loses the work since its last save, which the benefit test
      counts: an hour's work on 8 GPUs kept a 1-GPU HIGH job waiting 16 min). None: never,
      the benefit test decides. On the scenario matrix with jobs that cannot save, 0-10 s met
      the most targets of the tuning part (7 s as for victims that save; 15 s and more fewer,
      and never 6 fewer): ``priority/sim/README.md``, "Urgent work and victims that cannot
      save". The planner still prefers the set that loses least, so such a victim is taken
      only when no set of victims that save loses less.
    * ``bound_no_save_wait``: the same for a job below HIGH that waited past its class bound
      (it overrides protection only for that): it takes a best victim set with a job that
      cannot save once it waited this long in all. None, the default: never (the benefit
      test decides, and the middle classes weigh 0), so a job that cannot save gives way to
      urgent work only, and the bound is kept by victims that save. On the scenario matrix
      with jobs that cannot save, taking them at the bound (0) lost 28 % more work over the
      generated parts (2 seeds), while off left 3 more of 50 runs with a middle-class wait
      over 3x its bound (``priority/sim/README.md``, "A job past its bound takes victims that
      save").
    * ``borrowed_discount``: victim sets are compared first by their lost work with a borrowed
      victim's (a job running beyond its team's quota) counted at this fraction: borrowed jobs
      give way before jobs within quota unless they would lose more than 1 / discount times
      as much. 0: borrowed jobs always first, however much they lose (the old rule); 1: no
      preference. See ``priority/sim/README.md``, "fourth pass", for the matrix it was
      chosen on.
    * ``victim_age_wait``: the wait the benefit counts is at least this fraction of the
      youngest chosen victim's run time. A job that has run for T is expected to run about T
      more (the Lindy estimate), so without preemption the beneficiary would wait about that
      long; the elapsed wait alone is 0 when an urgent job arrives, which delayed every plan by
      the seconds the wait took to outgrow the loss. 0: the elapsed wait only, the default
      (0.1 to 1 lost more work on the scenario matrix, ``priority/sim/README.md``).
    * ``restart_cost`` + ``restart_cost_per_node`` x nodes: a victim's restart cost in seconds
      when its :class:`Holder` has no estimate of its own.
    * ``save_cost``: seconds a victim that saves on request (``Holder.can_ack``) needs to save
      when its :class:`Holder` has no estimate of its own. Such a victim loses save + restart;
      one that cannot acknowledge loses the time since its last checkpoint + restart.
    * ``max_staleness``: refuse to plan from a snapshot older than this (seconds).
    * ``max_plans``: plans per cycle; ``max_searches``: victim searches per cycle (bounds the
      cycle's time); ``max_candidates_per_node``: victims considered per node (cheapest first).
    * ``plans_per_pending``: the limits grow with the queue: a cycle may make
      ``max(max_plans, ceil(plans_per_pending x pending jobs))`` plans, and its search limit
      grows by the same factor (so a long queue of high-class jobs is not served four per
      cycle). 0: fixed limits. ``max_plans`` 0 still means no plans at all.
    * ``allow_cross_leaf``: let a multi-node beneficiary span leaf switches when no single leaf
      can hold it, as Slurm's topology/tree does for a job without ``--switches`` (on by
      default; off: nodes under one leaf switch, or no plan). A job's own ``--switches=N``
      limits it further while it waits for that.
    * ``reserve_after``: a waiting job of HIGH or above that has waited this fraction of its
      class's ``max_wait`` gets a reservation: smaller jobs may not backfill onto the nodes it
      needs (the daemon gives it the top Slurm priority, so Slurm's backfill plans it first; the
      simulator models the reservation, :meth:`hai_slurm.priority.sim.slurm.SimSlurm.reserve`).
      0: no reservations, the default (was 0.5): the daemon makes none, and the simulator's
      model idled GPUs the planner counts as free (a job of a lower class than the reserving
      job's got "fits on free GPUs" on the closed nodes every cycle, so nothing was preempted
      for it: 1-GPU HIGH jobs waited over an hour on ``full-large-1leaf``); see
      ``priority/sim/README.md``, "Tuning on the matrix, second pass".
    * ``aged_preempt``: whether a waiting job that aged into a higher class may preempt as that
      class (off: it is planned as its class before aging, the one it asked for after AUTO,
      demotion and decay; aging still orders the queue; see
      :func:`hai_slurm.priority.planner.inputs.preempt_class`). Either way an aged job is past
      its bound, so it preempts as urgent work does (:attr:`Waiting.overrides_protection`).
    """

    min_run_time: float = 120.0
    urgent_min_run_time: float = 60.0
    class_weights: Mapping[PriorityClass, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    class_min_run_time: Mapping[PriorityClass, float] = field(
        default_factory=lambda: MappingProxyType({}))
    benefit_threshold: float = 1.0
    urgent_benefit_wait: float = 7.0
    urgent_no_save_wait: float | None = 7.0
    bound_no_save_wait: float | None = None
    borrowed_discount: float = 0.5
    victim_age_wait: float = 0.0
    restart_cost: float = 120.0
    restart_cost_per_node: float = 0.0
    save_cost: float = 60.0
    max_staleness: float = 60.0
    max_plans: int = 4
    max_searches: int = 64
    plans_per_pending: float = 0.05
    max_candidates_per_node: int = 8
    allow_cross_leaf: bool = True
    reserve_after: float = 0.0
    aged_preempt: bool = False

    def restart_for(self, nodes: int) -> float:
        """The configured restart cost of a victim on ``nodes`` nodes (seconds)."""
        return self.restart_cost + self.restart_cost_per_node * nodes

    def urgent_wait(self, saves: bool, top: bool = True) -> float:
        """How long a job that overrides protection waits before it preempts whatever the
        benefit: for victims that all save on request (``saves``) or not, for a job of HIGH
        and above (``top``) or one below that is past its bound (infinite: never)."""
        if saves:
            return self.urgent_benefit_wait
        wait = self.urgent_no_save_wait if top else self.bound_no_save_wait
        return math.inf if wait is None else wait

    @property
    def urgent_min_run(self) -> float:
        """The minimum run time urgent work sees in a victim of a class without a minimum of
        its own (``min_run_time`` cut short to ``urgent_min_run_time``)."""
        return min(self.min_run_time, self.urgent_min_run_time)

    def min_run_for(self, cls: PriorityClass, urgent: bool = False) -> float:
        """The minimum run time of a victim of class ``cls`` (``urgent``: for a beneficiary
        that overrides protection, which may cut it short to ``urgent_min_run_time``)."""
        least = self.class_min_run_time.get(cls, self.min_run_time)
        return min(least, self.urgent_min_run_time) if urgent else least

    def limits(self, pending: int) -> tuple[int, int]:
        """(plans, victim searches) allowed in a cycle with ``pending`` jobs waiting."""
        if self.max_plans <= 0:
            return 0, self.max_searches
        plans = max(self.max_plans, math.ceil(self.plans_per_pending * pending))
        return plans, max(self.max_searches, self.max_searches * plans // self.max_plans)

    def __post_init__(self) -> None:
        for key in ("min_run_time", "urgent_min_run_time", "benefit_threshold",
                    "urgent_benefit_wait", "victim_age_wait", "restart_cost",
                    "restart_cost_per_node", "save_cost", "max_staleness", "plans_per_pending",
                    "reserve_after"):
            _check(key, getattr(self, key), "a number >= 0", lambda v: v >= 0)
        for key in ("urgent_no_save_wait", "bound_no_save_wait"):
            if getattr(self, key) is not None:
                _check(key, getattr(self, key), "a number >= 0", lambda v: v >= 0)
        _check("borrowed_discount", self.borrowed_discount, "a number from 0 to 1",
               lambda v: 0 <= v <= 1)
        for key in ("max_plans", "max_searches"):
            _check(key, getattr(self, key), "an integer >= 0",
                   lambda v: isinstance(v, int) and v >= 0)
        _check("max_candidates_per_node", self.max_candidates_per_node,
               "an integer from 1 to 16 (sets tried per node grow as 2^n)",
               lambda v: isinstance(v, int) and 1 <= v <= 16)
        for cls, weight in self.class_weights.items():
            _check(f"class_weights.{cls.name}", weight, "a number >= 0", lambda v: v >= 0)
        for cls, secs in self.class_min_run_time.items():
            _check(f"class_min_run_time.{cls.name}", secs, "a number >= 0", lambda v: v >= 0)


def _check(key: str, value: object, allowed: str, ok: Callable[[float], bool]) -> None:
    """Raise a ConfigError naming ``planner.<key>`` unless ``value`` is a finite, allowed number."""
    good = (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and ok(value))
    if not good:
        raise ConfigError(f"must be {allowed}, not {value!r}", source="planner",
                          key=key, value=value)


@dataclass(frozen=True, slots=True)
class PlanSnapshot:
    """Everything one planning pass reads. ``pending`` is in effective priority order."""

    topology: Topology
    running: tuple[Holder, ...]
    pending: tuple[Waiting, ...]
    taken_at: float
    closed: frozenset[str] = frozenset()
    """Nodes another plan's guard (a Slurm reservation for its beneficiary) stands on, or
    without room for the CPUs or memory any waiting job asks (``hai_slurm.priority.daemon.room``):
    their free GPUs fit nobody in this pass. The jobs running there may still give way to a new
    plan: its beneficiary starts there once that guard ends (when the other beneficiary runs),
    its victims' saves overlapping the wait (or their CPUs come free with their GPUs). Slurm refuses
    a second reservation on the node, so the daemon guards such a plan with holds
    (:mod:`hai_slurm.priority.executor.guard`). Leaving those jobs out served a burst of small
    urgent jobs one save at a time per node (alibaba-b: 34 top-class jobs past their bound
    instead of 7, ``priority/sim/README.md``). Names the topology does not have are ignored."""


class Outcome(StrEnum):
    """What the planner concluded for one pending job."""

    FITS = "fits on free GPUs"
    PREEMPT = "preemption planned"
    NO_VICTIMS = "no usable victims"
    NOT_WORTH = "loss outweighs benefit"
    IMPOSSIBLE = "cannot fit in this cluster"
    NO_GPUS = "needs no GPUs"
    SKIPPED = "not examined this cycle"


class Decision(NamedTuple):
    """The planner's verdict on one pending job, in words for ``explain`` and history."""

    job_id: int
    outcome: Outcome
    reason: str


class Text:
    """A text built when first read (the planner's per-victim texts: most are never read).

    ``make(*args)`` builds it once; ``str()``, formatting, ``==`` (with a str or a Text),
    ``hash``, ``in`` and ``len`` act on the text, and ``repr`` is the text's repr, so a
    value holding a Text prints as if it held the str. Pickled and copied as the str."""

    __slots__ = ("_args", "_make", "_text")

    def __init__(self, make: Callable[..., str], *args: object) -> None:
        self._make: Callable[..., str] | None = make
        self._args = args
        self._text: str | None = None

    def __str__(self) -> str:
        text = self._text
        if text is None:
            assert self._make is not None
            text = self._text = self._make(*self._args)
            self._make, self._args = None, ()
        return text

    def __repr__(self) -> str:
        return repr(str(self))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Text):
            return str(self) == str(other)
        return str(self) == other

    def __hash__(self) -> int:
        return hash(str(self))

    def __contains__(self, part: str) -> bool:
        return part in str(self)

    def __len__(self) -> int:
        return len(str(self))

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return (str, (str(self),))


_setattr = object.__setattr__
"""Sets a field of a frozen dataclass: :class:`Victim` and :class:`PreemptionPlan` have
``__init__``s of their own that look it up once (the generated one of a frozen dataclass looks
``object.__setattr__`` up for each field; a pass makes 1,354 victims and 500 plans)."""


@dataclass(frozen=True, slots=True)
class Victim:
    """One job that gives way, and what it loses."""

    job_id: int
    team: str
    effective: PriorityClass
    gpus: int
    borrowed: bool
    lost_seconds: float      # save time (saves on request) or time since its last checkpoint,
    #                          plus its restart cost
    lost_work: float         # lost_seconds x GPUs
    reason: str | Text       # the planner's: a Text, built when first read (str() it)

    def __init__(self, job_id: int, team: str, effective: PriorityClass, gpus: int,
                 borrowed: bool, lost_seconds: float, lost_work: float,
                 reason: str | Text) -> None:
        # the generated __init__, with ``object.__setattr__`` looked up once (see _setattr)
        _setattr(self, "job_id", job_id)
        _setattr(self, "team", team)
        _setattr(self, "effective", effective)
        _setattr(self, "gpus", gpus)
        _setattr(self, "borrowed", borrowed)
        _setattr(self, "lost_seconds", lost_seconds)
        _setattr(self, "lost_work", lost_work)
        _setattr(self, "reason", reason)


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Preempt ``victims`` so that ``beneficiary`` starts on ``placement``.

    ``nodes`` is what the executor pins the beneficiary to (``scontrol update JobId=..
    ReqNodeList=..``), ``gpus_per_node`` the GPUs it needs on each. ``placement`` lists the exact
    GPUs reserved for it in this plan (free ones and ones the victims free). ``not_chosen`` says
    why other victim sets and other jobs on those nodes were passed over (the planner's is
    built when first read; it equals, and prints as, the tuple of its lines).
    """

    beneficiary: int
    beneficiary_class: PriorityClass
    team: str
    victims: tuple[Victim, ...]
    placement: tuple[GpuRef, ...]
    nodes: tuple[str, ...]
    gpus_per_node: int
    lost_work: float
    benefit: float
    reason: str
    not_chosen: Sequence[str] = ()

    def __init__(self, beneficiary: int, beneficiary_class: PriorityClass, team: str,
                 victims: tuple[Victim, ...], placement: tuple[GpuRef, ...],
                 nodes: tuple[str, ...], gpus_per_node: int, lost_work: float,
                 benefit: float, reason: str, not_chosen: Sequence[str] = ()) -> None:
        # as Victim's: one ``object.__setattr__`` lookup, not one per field
        _setattr(self, "beneficiary", beneficiary)
        _setattr(self, "beneficiary_class", beneficiary_class)
        _setattr(self, "team", team)
        _setattr(self, "victims", victims)
        _setattr(self, "placement", placement)
        _setattr(self, "nodes", nodes)
        _setattr(self, "gpus_per_node", gpus_per_node)
        _setattr(self, "lost_work", lost_work)
        _setattr(self, "benefit", benefit)
        _setattr(self, "reason", reason)
        _setattr(self, "not_chosen", not_chosen)

    @property
    def victim_ids(self) -> tuple[int, ...]:
        """Ids of the victims, ascending."""
        return tuple(v.job_id for v in self.victims)


@dataclass(frozen=True, slots=True)
class PlanningResult:
    """One planning pass: the plans, a decision per pending job, or why nothing was planned."""

    plans: tuple[PreemptionPlan, ...] = ()
    decisions: Mapping[int, Decision] = field(default_factory=dict)
    refused: str | None = None
    worth_in: Mapping[int, float] = field(default_factory=dict)
    """For each job refused as not worth it: seconds from ``now`` after which its own growing
    wait alone outweighs the loss of the best victim set found, or, for urgent work, it has
    waited ``urgent_benefit_wait`` (its best victims all save on request) or
    ``urgent_no_save_wait`` (one cannot; ``bound_no_save_wait`` below HIGH), the sooner, if
    nothing else changes (the daemon's urgent path looks at it again then, rather than at its
    next fixed look)."""
    ripe_in: Mapping[int, float] = field(default_factory=dict)
    """For each job that overrides protection and was refused for want of victims: seconds
    from ``now`` until the victims of some set that would make room for it, counting jobs now
    younger than ``urgent_min_run_time``, are all old enough to give way to it (absent when no
    such set exists). The daemon's urgent path looks again then, so a top-class job waiting
    for young victims is planned when they may give way, not at the next cycle."""

    def plan_for(self, job_id: int) -> PreemptionPlan | None:
        """The plan whose beneficiary is ``job_id``, if any."""
        return next((p for p in self.plans if p.beneficiary == job_id), None)
