"""Build the planner's inputs from the policy's values (pure; the daemon's glue).

The policy gives each running job its class after decay and its borrowed/protected/preemptible
flags (:class:`~hai_slurm.priority.policy.state.RunningDecision`) and each pending job its effective
class and priority (:class:`~hai_slurm.priority.policy.state.PendingDecision`). The GPUs a running
job
holds come from the Slurm adapter: exact indices when Slurm reports them, otherwise only counts
per node, which :func:`gpus_from_counts` turns into indices the way Slurm's topology-aware
selection would (lowest cell, best fit) so the planner sees a consistent picture.

**Aged-in jobs yield within their class** (:func:`victim_class`): a running job that reached its
class by aging (it asked for a lower one) is a victim one class below it, so a job that asked for
that class may preempt it (after ``min_run_time``, and by the benefit test), while the classes
it overtook still may not. Without it, on an overloaded cluster every node fills with jobs aged
into HIGH and a job that asked for HIGH waits for them to end (issue 16).

**Aging buys queue order, not preemption** (:func:`preempt_class`, unless
``PlannerConfig.aged_preempt``): a waiting job that reached its class by aging is planned as its
class before aging (the one it asked for, after AUTO, demotion and decay), so it may preempt
only what that class may; being past its bound, it does so as urgent work does
(:func:`overrides_protection`). Slurm still starts it before the jobs it overtook (its
priority is the aged one). On the scenario matrix nine in ten plans,
and most of the lost work, were aged NORMAL and BELOW_NORMAL jobs preempting the classes just
below their aged class, which the jobs they preempted then did in turn (issue 16).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.topology import GpuRef, Topology
from hai_slurm.priority.planner.placement import ClusterView
from hai_slurm.priority.planner.types import Holder, Waiting
from hai_slurm.priority.policy.ladder import LADDER, RANK, URGENT_FROM
from hai_slurm.priority.policy.state import PendingDecision, PendingJob, RunningDecision, RunningJob

_job_id = attrgetter("job_id")


def gpus_from_counts(topology: Topology, counts: Mapping[int, Mapping[str, int]],
                     known: Mapping[int, tuple[GpuRef, ...]] | None = None,
                     ) -> dict[int, tuple[GpuRef, ...]]:
    """GPUs per job: ``known`` ones as they are, the others picked from ``counts`` (node ->
    GPUs) in job id order. Counts that no longer fit (or unknown nodes) are left out; the
    planner then sees fewer busy GPUs on that node, never the same GPU twice."""
    view = ClusterView(topology)
    out: dict[int, tuple[GpuRef, ...]] = {}
    for jid, refs in sorted((known or {}).items()):
        masks = view.masks(refs)
        if isinstance(masks, dict):
            if any(view.busy[n] & m for n, m in masks.items()):
                continue
            for node, mask in masks.items():
                view.occupy(node, mask)
            out[jid] = tuple(sorted(refs))
    for jid in sorted(counts):
        if jid in out:
            continue
        picked: list[GpuRef] = []
        for node, count in sorted(counts[jid].items()):
            layout = view.nodes.get(node)
            if layout is None:
                continue
            got = layout.pick(view.free(node), count)
            if got is None:
                continue
            view.occupy(node, got[1])
            picked += layout.gpus(got[1])
        out[jid] = tuple(sorted(picked))
    return out


def victim_class(job: RunningJob, decision: RunningDecision) -> PriorityClass:
    """The class ``job`` has as a preemption victim: its effective class, or one below it when
    it aged into that class from the class it asked for (see the module doc)."""
    eff = decision.effective
    asked = job.requested
    if isinstance(asked, PriorityClass) and RANK[asked] < RANK[eff]:
        return LADDER[RANK[eff] - 1]
    return eff


def preempt_class(decision: PendingDecision, *, aged_preempt: bool = False) -> PriorityClass:
    """The class a pending job with ``decision`` is planned as: its effective class, or (unless
    ``aged_preempt``) the class it had before aging lifted it (see the module doc): the class
    it asked for after AUTO, demotion and decay (``PendingReason.base``). So an aged AUTO job
    preempts as the class AUTO gave it, and a demoted job that aged back keeps its demoted
    class."""
    if aged_preempt or not decision.reason.aging_steps:
        return decision.effective
    return decision.reason.base


@dataclass
class HolderMemo:
    """The holders of the last :func:`holders_from_policy` call by job id, each with what it was
    made from (the running job, its decision and the values given for it). Owned by the caller
    (one per planning loop) and passed to each call: a running job whose inputs are all equal
    to last time's gets the same :class:`Holder` object again instead of a new one (most
    running jobs of a pass are unchanged; a holder costs several times the comparison). Equal
    inputs give an equal holder, so what the memo gives is what building afresh gives."""

    holders: dict[int, tuple[tuple[object, ...], Holder]] = field(default_factory=dict)


def holders_from_policy(running: Sequence[RunningJob], decisions: Mapping[int, RunningDecision],
                        gpus: Mapping[int, tuple[GpuRef, ...]], *,
                        restart_costs: Mapping[int, float] | None = None,
                        saves: Mapping[int, float | None] | None = None,
                        aged_yield: bool = True,
                        checkpoints: Mapping[int, float | None] | None = None,
                        victims: Container[int] = (),
                        memo: HolderMemo | None = None) -> tuple[Holder, ...]:
    """One :class:`Holder` per running job the policy decided on, in job id order.

    ``saves`` holds the jobs that save on request (``Holder.can_ack``) and their save-time
    estimates (None: the planner's ``save_cost``); see :func:`save_estimates`. With
    ``aged_yield`` a job's class is its :func:`victim_class` (aged-in jobs one class lower).
    ``checkpoints``: each job's last checkpoint when known better than the job's own
    ``last_checkpoint`` (the simulator's periodic saves); ``victims``: jobs an open plan
    already asked to save, no victims again (not preemptible); ``memo``: see
    :class:`HolderMemo`."""
    costs = restart_costs or {}
    acks = saves or {}
    ckpts = checkpoints or {}
    last = memo.holders if memo is not None else {}
    made: dict[int, tuple[tuple[object, ...], Holder]] = {}
    out = []
    for job in sorted(running, key=_job_id):
        job_id = job.job_id
        d = decisions.get(job_id)
        if d is None:
            continue
        # The job and decision themselves (the same objects from pass to pass when the
        # policy's memos kept them: compared by identity first) and the values given with them
        key = (job, d, aged_yield, gpus.get(job_id, ()), ckpts.get(job_id, job.last_checkpoint),
               costs.get(job_id), job_id in victims, job_id in acks, acks.get(job_id))
        m = last.get(job_id)
        if m is not None and m[0] == key:
            holder = m[1]
        else:
            _, _, _, held, ckpt, restart, victim, can_ack, save = key
            holder = Holder(job_id, job.team, victim_class(job, d) if aged_yield else d.effective,
                            held, job.start_time, last_checkpoint=ckpt, restart_cost=restart,
                            borrowed=d.borrowed, protected=d.protected,
                            preemptible=d.preemptible and not victim, user=job.user,
                            can_ack=can_ack, save_cost=save)
        made[job_id] = (key, holder)
        out.append(holder)
    if memo is not None:
        memo.holders = made
    return tuple(out)


def save_estimates(records: Mapping[int, tuple[str | None, int | None]],
                   measured: Mapping[int, float] | None = None) -> dict[int, float | None]:
    """Jobs that save on request and their save-time estimate, from each job's ``#HAI``
    (checkpoint directory, grace) record and the save times jobs ``measured`` themselves.

    A job with a checkpoint directory saves when asked (its ``hai-run`` acknowledges the
    request). Its estimate is the time its newest save took, as it measured it, never more than
    its grace; without a measurement, its grace (what it said it may need to save: an upper
    bound); without either, None (the planner's ``save_cost``). A job without a checkpoint
    directory is left out: it cannot acknowledge."""
    took = measured or {}
    out: dict[int, float | None] = {}
    for jid, (ckpt, grace) in records.items():
        if not ckpt:
            continue
        bound = float(grace) if grace is not None else None
        m = took.get(jid)
        out[jid] = bound if m is None else m if bound is None else min(m, bound)
    return out


def max_leaves(switches: int, switch_wait: float, waited: float) -> int | None:
    """The leaf switches a job may span now: its ``--switches`` count while it has waited less
    than ``switch_wait`` for it, else any (None), as Slurm's topology/tree decides."""
    return switches if switches > 0 and waited < switch_wait else None


def allowed_nodes(partition: str, partitions: Mapping[str, frozenset[str]],
                  cluster: frozenset[str]) -> frozenset[str] | None:
    """The ``cluster`` nodes a job submitted to ``partition`` may use (Slurm lists a job
    submitted to several as ``"a,b"``: their union), or None when that is every node (or when
    none of the names is known: no restriction is better than a wrong one)."""
    known = [partitions[p] for p in partition.split(",") if p in partitions]
    if not known:
        return None
    out = cluster.intersection(frozenset().union(*known))
    return None if out == cluster else out


def whole_node_request(usable: frozenset[str], gpus_of: Mapping[str, int],
                       idle: frozenset[str], gpus: int, nodes: int
                       ) -> tuple[int, int, frozenset[str]] | None:
    """What a job that takes its nodes whole (``--exclusive``) and asked for ``gpus`` GPUs on
    ``nodes`` nodes (0: as few as fit) waits for, among the ``usable`` nodes it may run on
    (``gpus_of``: each node's GPUs; ``idle``: those no job runs on): every GPU of each node it
    gets. Slurm starts such a job only on a node no other job runs on and gives it all the
    node's GPUs (22.05: ``--exclusive --gpus=2`` holds ``gpu:8``): free GPUs beside a running
    job do not start it, and a plan that frees only the GPUs it asked for would requeue its
    victims for nothing.

    A plan is for one size of node: ``(GPUs per node, nodes, the usable nodes of that size)``
    for a size that holds the job's share per node (``ceil(gpus / nodes)``; without
    ``nodes``, as many nodes of the size as its GPUs need) and has that many nodes: the
    smallest size with that many idle nodes (the job fits there now), else the largest (the
    fewest nodes to empty). None when no size can hold it (the caller gives no plan)."""
    sizes: dict[int, list[str]] = {}
    for n in usable:
        g = gpus_of.get(n, 0)
        if g > 0:
            sizes.setdefault(g, []).append(n)
    fitting: list[tuple[int, int]] = []
    for size, names in sizes.items():
        count = nodes if nodes > 0 else max(1, -(-gpus // size))
        if -(-gpus // count) <= size and len(names) >= count:
            fitting.append((size, count))
    if not fitting:
        return None
    ready = [(size, count) for size, count in fitting
             if sum(1 for n in sizes[size] if n in idle) >= count]
    size, count = min(ready) if ready else max(fitting)
    return size, count, frozenset(sizes[size])


def overrides_protection(decision: PendingDecision) -> bool:
    """Whether a protected team's jobs give way to this pending job too
    (:attr:`Waiting.overrides_protection`): it is urgent (a class of
    :data:`~hai_slurm.priority.policy.ladder.URGENT_FROM` or above), or it has waited past the
    bound of its class before aging (the class it asked for after AUTO, demotion and decay),
    aged or not: a bounded wait is a guarantee, and the middle classes' default weight 0 leaves
    it the only way such a job preempts (aging lifts its place in Slurm's queue; it still
    preempts as that class, :func:`preempt_class`, unless ``aged_preempt``). The wait counts
    the waits before earlier requeues (age restored), so a victim requeued past its bound may
    preempt lower classes at once: down the ladder only, each step to a lower class."""
    r = decision.reason
    return RANK[r.base] >= RANK[URGENT_FROM] or 0 < r.bound <= r.wait


def waiting_from_policy(pending: Sequence[PendingJob], decisions: Mapping[int, PendingDecision],
                        *, nodes: Mapping[int, int] | None = None,
                        switches: Mapping[int, tuple[int, float]] | None = None,
                        allowed: Mapping[int, frozenset[str]] | None = None,
                        whole_nodes: Mapping[int, tuple[int, int]] | None = None,
                        aged_preempt: bool = False) -> tuple[Waiting, ...]:
    """Pending jobs as :class:`Waiting`, highest priority first (ties: job id).

    ``nodes`` gives the node count a job asked for (``--nodes``), when it did; ``switches`` its
    ``--switches`` count and the seconds it waits for them (see :func:`max_leaves`); ``allowed``
    the nodes it may use, when not all (see :func:`allowed_nodes`); ``whole_nodes`` the
    (GPUs per node, nodes) of each job that takes its nodes whole (``--exclusive``:
    :func:`whole_node_request`): it waits for all of those. A job's class is its
    :func:`preempt_class` (``aged_preempt``: its effective class as it is)."""
    wanted = nodes or {}
    asked = switches or {}
    where = allowed or {}
    whole = whole_nodes or {}
    rows = [(decisions[j.job_id], j) for j in pending if j.job_id in decisions]
    rows.sort(key=lambda r: (-r[0].priority, r[1].job_id))
    return tuple(Waiting(
        job_id=j.job_id, team=j.team,
        effective=preempt_class(d, aged_preempt=aged_preempt),
        gpus=j.resources.gpus if (w := whole.get(j.job_id)) is None else w[0] * w[1],
        nodes=wanted.get(j.job_id) if w is None else w[1], wait=d.reason.wait, user=j.user,
        max_leaves=max_leaves(*asked.get(j.job_id, (0, 0.0)), d.reason.wait),
        allowed=where.get(j.job_id), overrides_protection=overrides_protection(d))
        for d, j in rows)
