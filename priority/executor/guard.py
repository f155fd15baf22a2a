"""Make sure the GPUs a plan frees go to its beneficiary, and undo that afterwards.

Between the moment the first victim exits (it acknowledges and exits 75 at once) and the moment
the beneficiary starts, Slurm's scheduler would give the freed GPUs to whichever waiting job fits
first. The guard prevents that, and is written down before it acts so that a daemon killed in
the middle can undo it (:class:`PlanContext`, stored as a named value in the daemon's database):

1. **before any victim is asked**: a Slurm reservation ``hai-plan-<plan id>-<time>`` on the plan's
   target nodes, for the beneficiary's user, starting now (``Flags=IGNORE_JOBS,FLEX``: created
   over the victims that still run there; the beneficiary may run past its end), and the
   beneficiary linked to it (``scontrol update JobId=B Reservation=hai-plan-...``). Slurm then
   starts no other job on those nodes, whatever its priority, whether the main scheduler or
   backfill looks, and whenever it was submitted: the guard holds nobody. The name is stored
   before the reservation is made. Only when Slurm refuses the reservation (an overlapping
   one, a plan that names no nodes) does the guard fall back to holds: every pending, not
   already held job of a lower declared class than the beneficiary's that could use the target
   nodes (same partition; all pending jobs when the plan names no nodes) is held
   (``scontrol hold``) and the list is stored first; one that another open plan's guard holds
   already is listed too (not held again), and stays held until the last of the two plans
   ends. Either way the beneficiary is pinned to
   the target nodes (``scontrol update JobId=B ReqNodeList=...``, the old value stored) and
   given the top priority;
2. **phase 2** requeues the victims *held* (``scontrol requeuehold``; acknowledged victims that
   already exited are requeued the same way), so they cannot take their GPUs back either;
3. once the beneficiary runs (or after ``start_timeout``, or when the plan is aborted): end the
   reservation (a beneficiary still pending is unlinked first; :meth:`SlurmClient.end_reservation`
   deletes it, or ends it now when the beneficiary runs in it: FLEX keeps it running), release
   exactly the jobs the guard held, release the victims, restore the beneficiary's ReqNodeList
   if it still waits. Jobs that were held before the plan (by their user or an admin) are never
   touched. A target node that goes down meanwhile (its slurmd died, say) unpins the beneficiary
   at once (:meth:`Guard.unpin`): it is unlinked from the reservation, which ends, so it can
   start on other free GPUs (the holds fallback guards the target nodes from then on).

The daemon writes priorities every cycle but never to held jobs nor to an open plan's
beneficiary, and :meth:`Guard.check` (each step) re-applies what slurmctld lost (the
reservation and the link, or the holds; the pin, the priority) and, under the holds fallback,
holds lower jobs submitted since, so nothing undoes the guard behind its back.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import SlurmError
from hai_slurm.priority.executor.types import VictimContext
from hai_slurm.priority.store.records import JsonValue
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.hostlist import expand_hostlist
from hai_slurm.slurm_plugins.job_record import job_record
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobState,
    SlurmClient,
)

log = logging.getLogger("hai_slurm.priority.executor.preemption")

CONTEXT_KEY = "executor.plan.{plan_id}"
RESERVATION_PREFIX = "hai-plan-"
"""Names of the guard's reservations: ``hai-plan-<plan id>-<time>`` (:func:`reservation_name`)."""
TOP_PRIORITY = 4_000_000_000
"""What the beneficiary's priority is raised to while the guard stands (below Slurm's limit)."""


RELEASE_LATER_KEY = "executor.release_later"
"""Named value: victims requeued held that had not ended when their guard was released ->
when the executor stops watching them (:func:`sweep_releases` releases them once pending)."""
RELEASE_WINDOW = 3600.0
"""Seconds such a victim is watched (a dead node's jobs end when it is declared DOWN or its
slurmd is back)."""


def remember_release(repo: Repository, job_ids: Sequence[int], at: float) -> None:
    """Watch ``job_ids`` until they are pending (then :func:`sweep_releases` releases them)."""
    raw = repo.get_value(RELEASE_LATER_KEY)
    kept: dict[str, JsonValue] = dict(raw) if isinstance(raw, dict) else {}
    kept.update({str(j): at + RELEASE_WINDOW for j in job_ids})
    repo.put_value(RELEASE_LATER_KEY, kept, at=at)
    log.warning("victim(s) %s not ended yet when their guard was released: released once "
                "they are pending", list(job_ids))


def sweep_releases(repo: Repository, slurm: SlurmClient, now: float) -> list[int]:
    """Release the watched victims that are now pending and held; forget those that are
    pending and free, gone, cancelled, running again, or past their window. Returns the ones
    released. One query when something is watched, none otherwise."""
    raw = repo.get_value(RELEASE_LATER_KEY)
    if not isinstance(raw, dict) or not raw:
        return []
    watched = {int(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}
    facts = slurm.job_facts(sorted(watched))
    # one another open plan's guard lists stays held for it (it releases it when it ends)
    guarded = {j for c in open_contexts(repo) for j in c.held} if watched else set()
    release = sorted(j for j, f in facts.items() if f.pending and f.held and j not in guarded)
    kept: dict[str, JsonValue] = {
        str(j): until for j, until in watched.items() if until > now and j in facts
            and j not in release and not facts[j].running
            and (not facts[j].pending or j in guarded)
            and facts[j].state is not JobState.CANCELLED}
    if release:
        slurm.release(release)
        log.warning("released victim(s) %s, requeued held after their guard was released",
                    release)
    if kept != raw:
        repo.put_value(RELEASE_LATER_KEY, kept, at=now)
    return release


UNPIN_LATER_KEY = "executor.unpin_later"
"""Named value: beneficiaries not pending when their guard was released (Slurm changes a job's
node list and reservation only while it is pending) -> ``{"from": their own node list, "pin":
the guard's, "reservation": the guard's}``; :func:`sweep_unpins` cleans up once they are
pending again."""


def remember_unpin(repo: Repository, job_id: int, pinned_from: str | None, pin: str,
                   reservation: str | None, at: float) -> None:
    """Watch a beneficiary that is not pending until it is pending again or has ended
    (:func:`sweep_unpins`)."""
    raw = repo.get_value(UNPIN_LATER_KEY)
    kept: dict[str, JsonValue] = dict(raw) if isinstance(raw, dict) else {}
    kept[str(job_id)] = {"from": pinned_from, "pin": pin, "reservation": reservation}
    repo.put_value(UNPIN_LATER_KEY, kept, at=at)


def sweep_unpins(repo: Repository, slurm: SlurmClient, snap: ClusterSnapshot,
                 now: float) -> list[int]:
    """Clean up after the watched beneficiaries that are pending again (requeued: by a later
    plan, a node failure, a failed launch): unlink them from the guard's ended reservation,
    release them when Slurm held them because that reservation went (``RESV_DEL_HOLD``, seen
    in the slurmctld fault case), and give them their own node list back while they still
    carry the guard's pin. Forgets those that ended and those it cleaned up. Returns the ones
    it changed. No query unless a watched job is pending in ``snap``."""
    raw = repo.get_value(UNPIN_LATER_KEY)
    if not isinstance(raw, dict) or not raw:
        return []
    watched = {int(k): v for k, v in raw.items() if k.isdigit() and isinstance(v, dict)}
    active = {j.job_id for j in snap.jobs if j.job_id in watched}
    pending = {j.job_id: j for j in snap.pending if j.job_id in watched}
    facts = slurm.job_facts(sorted(pending)) if pending else {}
    changed = []
    for jid, job in sorted(pending.items()):
        f, entry = facts.get(jid), watched[jid]
        if f is None or not f.pending:
            continue
        pin, own = str(entry.get("pin") or ""), str(entry.get("from") or "")
        resv = str(entry.get("reservation") or "")
        did = False
        if resv and f.reservation == resv:
            slurm.set_job_reservation(jid, "")
            did = True
        if job.reservation_deleted:
            slurm.release([jid])
            did = True
        if pin and entry.get("from") is not None and \
                set(expand_hostlist(f.req_nodes)) == set(expand_hostlist(pin)):
            slurm.set_req_nodes(jid, own)
            did = True
        if did:
            changed.append(jid)
    if changed:
        log.warning("job(s) %s pending again after the plan they were the beneficiary of: the "
                    "guard's pin, reservation link and reservation-deleted hold removed",
                    changed)
    kept: dict[str, JsonValue] = {str(j): watched[j] for j in sorted(active)
                                  if j not in pending}
    if kept != raw:
        repo.put_value(UNPIN_LATER_KEY, kept, at=now)
    return changed


def context_key(plan_id: int) -> str:
    """Name of a plan's stored context."""
    return CONTEXT_KEY.format(plan_id=plan_id)


def reservation_name(plan_id: int, at: float) -> str:
    """Name of a plan's reservation: ``hai-plan-<plan id>-<POSIX second it was made>``. The
    time keeps names unique when plan ids repeat (a new database) while an ended reservation
    still lingers under its name (slurmctld drops it some 20 s after its end)."""
    return f"{RESERVATION_PREFIX}{plan_id}-{int(at)}"


def open_contexts(repo: Repository) -> list[PlanContext]:
    """The guard contexts of the open plans (not finished, guard not released), oldest
    first."""
    out = []
    for plan in repo.unfinished_plans():
        raw = repo.get_value(context_key(plan.plan_id))
        if isinstance(raw, dict):
            ctx = PlanContext.from_json(raw)
            if not ctx.released:
                out.append(ctx)
    return out


def reservation_plan(name: str) -> int | None:
    """The plan id in a guard reservation's name (None for any other name)."""
    tail = name[len(RESERVATION_PREFIX):] if name.startswith(RESERVATION_PREFIX) else ""
    plan, _, made = tail.partition("-")
    return int(plan) if plan.isdigit() and (made == "" or made.isdigit()) else None


@dataclass(frozen=True)
class PlanContext:
    """Everything needed to finish or undo a plan after a restart (stored before each action)."""

    plan_id: int
    beneficiary: int
    nodes: tuple[str, ...]
    victims: tuple[VictimContext, ...]
    held: tuple[int, ...] = ()
    """Pending jobs the guard holds (released at the end)."""
    pinned_from: str | None = None
    """The beneficiary's ReqNodeList before the pin; None when it was not pinned."""
    victims_held: tuple[int, ...] = ()
    """Victims requeued held by phase 2 (released at the end)."""
    signal: str = "USR2"
    asked_at: float | None = None
    released: bool = False
    seen_end: Mapping[int, float] = field(default_factory=dict)
    """Victims seen ended (not running) -> when first seen; watched ``_ACK_SETTLE`` s more."""
    end_states: Mapping[int, str] = field(default_factory=dict)
    """Victims seen ended -> their Slurm state at that look ("" when slurmctld forgot them)."""
    requeue_from: float | None = None
    """When phase 2 (or the undo's requeue) first tried to requeue (its retry window)."""
    requeued_at: float | None = None
    """When phase 2 requeued the victims (the start wait counts from there)."""
    missed: tuple[int, ...] = ()
    """Victims that missed their deadline (in the order seen)."""
    ended: Mapping[int, str] = field(default_factory=dict)
    """Victims that ended without an acknowledgement and are requeued -> their Slurm state."""
    undo: Mapping[str, JsonValue] | None = None
    """An abort or roll-back in progress: ``final``, ``note``, ``settled_at`` (None while asked
    victims are still waited out)."""
    reservation: str | None = None
    """The guard's reservation (stored before it is made); None: the holds fallback."""
    resv_user: str = ""
    """The user the reservation is for (the beneficiary's), to make it again."""
    resv_minutes: int = 0
    """How long the reservation is made for."""

    def victim(self, job_id: int) -> VictimContext:
        """The context of one victim."""
        return next(v for v in self.victims if v.job_id == job_id)

    def to_json(self) -> dict[str, JsonValue]:
        """JSON-ready."""
        return {"plan_id": self.plan_id, "beneficiary": self.beneficiary,
                "nodes": list(self.nodes), "victims": [v.to_json() for v in self.victims],
                "held": list(self.held), "pinned_from": self.pinned_from,
                "victims_held": list(self.victims_held), "signal": self.signal,
                "asked_at": self.asked_at, "released": self.released,
                "seen_end": {str(k): v for k, v in self.seen_end.items()},
                "end_states": {str(k): v for k, v in self.end_states.items()},
                "requeue_from": self.requeue_from, "requeued_at": self.requeued_at,
                "missed": list(self.missed),
                "ended": {str(k): v for k, v in self.ended.items()},
                "undo": dict(self.undo) if self.undo is not None else None,
                "reservation": self.reservation, "resv_user": self.resv_user,
                "resv_minutes": self.resv_minutes}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> PlanContext:
        """Inverse of :meth:`to_json`; ValueError/KeyError/TypeError on a damaged record."""
        def ints(key: str) -> tuple[int, ...]:
            raw = data.get(key) or []
            if not isinstance(raw, list) or not all(isinstance(x, int) for x in raw):
                raise ValueError(f"{key} must be a list of job ids, got {raw!r}")
            return tuple(x for x in raw if isinstance(x, int))

        def opt(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) else None

        def by_job(key: str) -> dict[int, JsonValue]:
            raw = data.get(key) or {}
            if not isinstance(raw, dict):
                raise ValueError(f"{key} must be a mapping of job ids, got {raw!r}")
            return {int(k): v for k, v in raw.items()}

        victims = data["victims"]
        nodes = data.get("nodes") or []
        asked = data.get("asked_at")
        pinned = data.get("pinned_from")
        undo = data.get("undo")
        resv = data.get("reservation")
        minutes = data.get("resv_minutes")
        if not isinstance(victims, list) or not isinstance(nodes, list):
            raise ValueError("victims and nodes must be lists")
        return cls(
            plan_id=int(str(data["plan_id"])), beneficiary=int(str(data["beneficiary"])),
            nodes=tuple(str(n) for n in nodes),
            victims=tuple(VictimContext.from_json(v) for v in victims if isinstance(v, dict)),
            held=ints("held"), pinned_from=pinned if isinstance(pinned, str) else None,
            victims_held=ints("victims_held"), signal=str(data.get("signal") or "USR2"),
            asked_at=float(asked) if isinstance(asked, int | float) else None,
            released=bool(data.get("released")),
            seen_end={k: float(v) for k, v in by_job("seen_end").items()
                      if isinstance(v, int | float)},
            end_states={k: str(v) for k, v in by_job("end_states").items()},
            requeue_from=opt("requeue_from"), requeued_at=opt("requeued_at"),
            missed=ints("missed"), ended={k: str(v) for k, v in by_job("ended").items()},
            undo=dict(undo) if isinstance(undo, dict) else None,
            reservation=resv if isinstance(resv, str) else None,
            resv_user=str(data.get("resv_user") or ""),
            resv_minutes=minutes if isinstance(minutes, int) else 0)


def _class_weight(job: Job) -> int:
    """The weight of the class a job declared (``#HAI --priority``); NORMAL's when none or
    AUTO."""
    name = job_record(job).priority
    try:
        return PriorityClass(name).weight if name else PriorityClass.NORMAL.weight
    except ValueError:
        return PriorityClass.NORMAL.weight


@dataclass
class Guard:
    """Applies and releases the guard of one plan, storing its context before every change."""

    slurm: SlurmClient
    repo: Repository
    context: PlanContext | None = field(default=None)

    def save(self, context: PlanContext, at: float) -> PlanContext:
        """Store ``context`` (write-ahead) and keep it."""
        self.repo.put_value(context_key(context.plan_id), context.to_json(), at=at)
        self.context = context
        return context

    @staticmethod
    def competitors(snap: ClusterSnapshot, beneficiary: int, nodes: Sequence[str],
                    exclude: Sequence[int] = (), shared: Collection[int] = ()
                    ) -> tuple[int, ...]:
        """Pending, not held jobs other than the beneficiary that could start on ``nodes``,
        of a lower declared class than the beneficiary's: jobs of its class or above are left
        free (the planner may preempt for them meanwhile; none outranks the beneficiary's top
        priority and pin with Slurm's main scheduler). Jobs of ``shared`` (held by another
        open plan's guard, or its victims, which it requeues held) count even though they are
        held or still run: this plan keeps them held when that one ends."""
        wanted = set(nodes)
        parts = {p.name for p in snap.partitions if not wanted or wanted & set(p.nodes)}
        skip = {beneficiary, *exclude}
        bene = snap.job(beneficiary)
        floor = _class_weight(bene) if bene is not None else None
        out = []
        later = (j for j in snap.jobs if j.job_id in shared and j.state is not JobState.PENDING)
        for job in (*snap.pending, *later):
            if job.job_id in skip or (job.held and job.job_id not in shared):
                continue
            if floor is not None and _class_weight(job) >= floor:
                continue
            if wanted and not parts & set(job.partition.split(",")):
                continue
            out.append(job.job_id)
        return tuple(out)

    def apply(self, context: PlanContext, snap: ClusterSnapshot, at: float,
              exclude: Sequence[int] = (), minutes: int = 30) -> PlanContext:
        """Reserve the target nodes for the beneficiary (:meth:`_reserve`; ``minutes`` long),
        or, when Slurm refuses, hold the competitors; pin the beneficiary and raise its
        priority (each stored before it is done). ``exclude``: jobs other open plans claim
        (their beneficiaries are never held)."""
        ctx = self.context = context
        bene = snap.job(context.beneficiary)
        if context.nodes and bene is not None and bene.user:
            joined = self._joinable(context)
            ctx = self.save(replace(context, reservation=joined or reservation_name(
                context.plan_id, at), resv_user=bene.user, resv_minutes=max(1, minutes)), at)
            ctx = self._reserve(ctx, at, exists=joined is not None)
        if ctx.reservation is None:
            ctx = self._hold_competitors(ctx, snap, at, exclude)
        if ctx.nodes:
            facts = self.slurm.job_facts([ctx.beneficiary]).get(ctx.beneficiary)
            if facts is not None and facts.pending:
                ctx = self.save(replace(ctx, pinned_from=facts.req_nodes), at)
                self.slurm.set_req_nodes(ctx.beneficiary, ",".join(ctx.nodes))
        try:
            self.slurm.set_priorities({ctx.beneficiary: TOP_PRIORITY})
        except SlurmError as err:  # the reservation (or holds) keep others away; this helps
            log.warning("plan %d: could not raise the beneficiary's priority: %s", ctx.plan_id,
                        err)
        return ctx

    def _joinable(self, ctx: PlanContext) -> str | None:
        """The reservation of another open plan on ``ctx``'s nodes, when exactly one stands
        there: ``ctx`` joins it (Slurm refuses a second reservation on a node, and
        ``Flags=OVERLAP`` would strand the first plan's pinned beneficiary: PREEMPTION.md
        §3b). None: make one of its own (refused where another reservation overlaps: the
        holds fallback)."""
        wanted = set(ctx.nodes)
        names = {c.reservation for c in open_contexts(self.repo)
                 if c.plan_id != ctx.plan_id and c.reservation is not None
                 and wanted & set(c.nodes)}
        return names.pop() if len(names) == 1 else None

    def _peers(self, ctx: PlanContext) -> list[PlanContext]:
        """The other open plans whose guard stands on ``ctx``'s reservation."""
        if ctx.reservation is None:
            return []
        return [c for c in open_contexts(self.repo)
                if c.plan_id != ctx.plan_id and c.reservation == ctx.reservation]

    def _cover(self, name: str, plans: Sequence[PlanContext], at: float | None) -> None:
        """Make reservation ``name`` cover the nodes and users of every plan in ``plans``: made
        when ``at`` is given and Slurm does not list it, else changed. With ``at`` it lasts
        as long as the longest of them needs it from then (never shorter than it already
        does); without (a plan leaves) its end stays."""
        nodes = sorted({n for c in plans for n in c.nodes})
        users = sorted({c.resv_user for c in plans if c.resv_user})
        minutes = max(c.resv_minutes for c in plans)
        listed = [r for r in self.slurm.reservations(name) if r.name == name]
        if not listed:
            if at is not None:
                self.slurm.create_reservation(name, nodes, users, minutes)
            return
        start, end = listed[0].start_time, listed[0].end_time
        if start is None or end is None:   # Slurm printed no times: the plans' own length
            length = minutes
        else:
            if at is not None:
                end = max(end, int(at) + 60 * minutes)
            length = max(1, -(-(end - start) // 60))
        self.slurm.update_reservation(name, nodes, users, length)

    def _reserve(self, ctx: PlanContext, at: float, *, exists: bool = False) -> PlanContext:
        """Make the stored reservation (unless ``exists``) and link the beneficiary to it;
        when Slurm refuses either, forget it (stored) so the holds take over. A reservation
        other open plans stand on too (:meth:`_joinable`) is made, or changed, to cover
        them all."""
        assert ctx.reservation is not None
        peers = self._peers(ctx)
        try:
            if peers:
                self._cover(ctx.reservation, [ctx, *peers], at)
            elif not exists:
                self.slurm.create_reservation(ctx.reservation, ctx.nodes, [ctx.resv_user],
                                              ctx.resv_minutes)
            self.slurm.set_job_reservation(ctx.beneficiary, ctx.reservation)
        except SlurmError as err:
            log.warning("plan %d: no reservation on %s for job %d (%s); holding the "
                        "competitors instead", ctx.plan_id, ",".join(ctx.nodes),
                        ctx.beneficiary, err)
            try:
                self._end_reservation(ctx)   # made but the link refused: take it away
            except SlurmError as again:
                log.warning("plan %d: could not remove %s: %s (recover removes it)",
                            ctx.plan_id, ctx.reservation, again)
            return self.save(replace(ctx, reservation=None), at)
        log.info("plan %d: reservation %s on %s for job %d (user %s, %d min)%s", ctx.plan_id,
                 ctx.reservation, ",".join(ctx.nodes), ctx.beneficiary, ctx.resv_user,
                 ctx.resv_minutes, f", shared with plan(s) {[c.plan_id for c in peers]}"
                 if peers else "")
        return ctx

    def _end_reservation(self, ctx: PlanContext, *, unlink: bool = True,
                         facts: Mapping[int, JobFacts] | None = None) -> None:
        """Unlink a beneficiary that still waits (``unlink``; its state from ``facts`` when
        given, else asked), then end the reservation (deleted, or ended now when the
        beneficiary runs in it: FLEX keeps it running). When other open plans stand on it
        too, it stays and covers just their nodes and users (the last plan ends it)."""
        if ctx.reservation is None:
            return
        if unlink:
            try:
                if facts is None:
                    facts = self.slurm.job_facts([ctx.beneficiary])
                b = facts.get(ctx.beneficiary)
                if b is not None and b.pending and b.reservation == ctx.reservation:
                    self.slurm.set_job_reservation(ctx.beneficiary, "")
            except SlurmError as err:
                log.warning("plan %d: could not unlink job %d from %s: %s", ctx.plan_id,
                            ctx.beneficiary, ctx.reservation, err)
        peers = self._peers(ctx)
        if not peers:
            self.slurm.end_reservation(ctx.reservation)
            return
        self._cover(ctx.reservation, peers, None)
        log.info("plan %d: reservation %s left to plan(s) %s", ctx.plan_id, ctx.reservation,
                 [c.plan_id for c in peers])

    def _held_by_others(self, plan_id: int, *, victims: bool = True) -> set[int]:
        """Jobs the guards of the other open plans hold (their competitors, their victims
        requeued held), and with ``victims`` those they will hold (their other victims, which
        phase 2 requeues held): each of those plans releases what it holds when it ends."""
        return {j for c in open_contexts(self.repo) if c.plan_id != plan_id
                for j in (*c.held, *c.victims_held,
                          *((v.job_id for v in c.victims) if victims else ()))}

    def _hold_competitors(self, ctx: PlanContext, snap: ClusterSnapshot, at: float,
                          exclude: Sequence[int]) -> PlanContext:
        """The holds fallback: hold the competitors not held yet (stored first). A competitor
        another open plan's guard already holds is recorded too, not held again: whichever
        of the two plans ends last releases it (:meth:`release`), so the first one's release
        cannot free it onto this plan's nodes."""
        shared = self._held_by_others(ctx.plan_id)
        new = [j for j in self.competitors(snap, ctx.beneficiary, ctx.nodes,
                                           [*(v.job_id for v in ctx.victims), *exclude], shared)
               if j not in ctx.held and j not in ctx.victims_held]
        if new:
            ctx = self.save(replace(ctx, held=(*ctx.held, *new)), at)
            mine = [j for j in new if j not in shared]
            result = self.slurm.hold(mine) if mine else ActionResult()
            log.info("plan %d: held %d competing pending job(s): %s (skipped: %s; held by "
                     "another plan's guard already: %s)", ctx.plan_id, len(result.done),
                     list(result.done), sorted(result.skipped_ids),
                     sorted(set(new) & shared))
        return ctx

    def check(self, at: float, snap: ClusterSnapshot | None = None,
              exclude: Sequence[int] = (), *, verify: bool = True) -> PlanContext | None:
        """Re-apply what is missing of a standing guard (a slurmctld restart before its state
        save loses reservations, holds, pins, priorities and requeues): a still-pending
        beneficiary that is no longer linked to the reservation is linked again (the reservation
        made again first when it is gone; with ``verify``, the reservation is looked up even when
        the link stands); jobs the guard held, and victims requeued held, that are pending but
        not held are held again; a victim requeued held that runs at its old restart count is
        requeued again; a still-pending beneficiary gets its pin back, and its top priority when
        ``snap`` shows another value. Under the holds fallback, with ``snap``, jobs
        submitted since the guard went up that could use the target nodes are held too (stored
        first; ``exclude``: other open plans' beneficiaries). Idempotent; returns the context."""
        ctx = self.context
        if ctx is None or ctx.released:
            return ctx
        if snap is not None and ctx.reservation is None:
            new = [j for j in self.competitors(snap, ctx.beneficiary, ctx.nodes,
                                               [*(v.job_id for v in ctx.victims), *exclude],
                                               self._held_by_others(ctx.plan_id))
                   if j not in ctx.held and j not in ctx.victims_held]
            if new:
                log.warning("plan %d: held %d job(s) submitted during the plan: %s",
                            ctx.plan_id, len(new), new)
                ctx = self._hold_competitors(ctx, snap, at, exclude)
        held = list(dict.fromkeys([*ctx.held, *ctx.victims_held]))
        facts = self.slurm.job_facts([*held, ctx.beneficiary])
        rehold = [j for j in held if j in facts and facts[j].pending and not facts[j].held]
        if rehold:
            log.warning("plan %d: guard re-applied: %s pending again without the hold",
                        ctx.plan_id, rehold)
            self.slurm.hold(rehold)
        if ctx.requeued_at is not None:
            # A victim requeued held cannot run again while the guard stands: one that runs at
            # the restart count it was asked at is slurmctld's old state (killed before saving
            # the requeue), a ghost holding its GPUs. Requeue it again.
            lost = [v.job_id for v in ctx.victims if v.job_id in ctx.victims_held
                    and v.job_id in facts and facts[v.job_id].running
                    and facts[v.job_id].restart_count == v.restart_count]
            if lost:
                log.warning("plan %d: guard re-applied: victim(s) %s run again at the restart "
                            "count they were requeued from (slurmctld lost the requeue); "
                            "requeued (held) again", ctx.plan_id, lost)
                again = self.slurm.requeue_any(lost, hold=True)
                if len(again) < len(lost):
                    log.warning("plan %d: slurmctld did not requeue %s (refused or forgotten)",
                                ctx.plan_id, sorted(set(lost) - set(again)))
        b = facts.get(ctx.beneficiary)
        if b is None or not b.pending:
            return ctx
        if ctx.reservation is not None:
            ctx = self._check_reservation(ctx, b, at, snap, exclude, verify)
        if ctx.pinned_from is not None and ctx.nodes and \
                set(expand_hostlist(b.req_nodes)) != set(ctx.nodes):
            log.warning("plan %d: guard re-applied: beneficiary %d lost its pin to %s (%r)",
                        ctx.plan_id, ctx.beneficiary, ",".join(ctx.nodes), b.req_nodes)
            self.slurm.set_req_nodes(ctx.beneficiary, ",".join(ctx.nodes))
        job = snap.job(ctx.beneficiary) if snap is not None else None
        if job is not None and job.priority != TOP_PRIORITY and not job.held:
            log.warning("plan %d: guard re-applied: beneficiary %d's priority is %d",
                        ctx.plan_id, ctx.beneficiary, job.priority)
            try:
                self.slurm.set_priorities({ctx.beneficiary: TOP_PRIORITY})
            except SlurmError as err:
                log.warning("plan %d: could not raise the beneficiary's priority: %s",
                            ctx.plan_id, err)
        return ctx

    def _check_reservation(self, ctx: PlanContext, b: JobFacts, at: float,
                           snap: ClusterSnapshot | None, exclude: Sequence[int],
                           verify: bool) -> PlanContext:
        """The reservation half of :meth:`check` for a pending beneficiary ``b``."""
        assert ctx.reservation is not None
        linked = b.reservation == ctx.reservation
        if linked and not verify:
            return ctx
        exists = any(r.name == ctx.reservation
                     for r in self.slurm.reservations(ctx.reservation))
        if linked and exists:
            return ctx
        log.warning("plan %d: guard re-applied: %s", ctx.plan_id,
                    f"beneficiary {ctx.beneficiary} no longer linked to {ctx.reservation}"
                    if exists else f"reservation {ctx.reservation} is gone")
        ctx = self._reserve(ctx, at, exists=exists)
        if ctx.reservation is None and snap is not None:
            ctx = self._hold_competitors(ctx, snap, at, exclude)
        return ctx

    def unpin(self, at: float) -> PlanContext | None:
        """Give a still-pending beneficiary its own node list back while the rest of the guard
        stands (a target node went down: it may start elsewhere); :meth:`check` and
        :meth:`release` leave its node list alone from then on. A reservation would keep it on
        the target nodes, so it is unlinked and the reservation ended (stored as gone: the holds
        fallback guards the target nodes from then on). Done before it is stored: a crash in
        between re-pins at the next :meth:`check` and unpins again."""
        ctx = self.context
        if ctx is None or ctx.released or ctx.pinned_from is None:
            return ctx
        b = self.slurm.job_facts([ctx.beneficiary]).get(ctx.beneficiary)
        if b is not None and b.pending:
            self.slurm.set_req_nodes(ctx.beneficiary, ctx.pinned_from)
        if ctx.reservation is not None:
            try:
                self._end_reservation(ctx)
            except SlurmError as err:
                log.warning("plan %d: could not end %s: %s (recover removes it)", ctx.plan_id,
                            ctx.reservation, err)
        return self.save(replace(ctx, pinned_from=None, reservation=None), at)

    def release(self, at: float, *, keep_pin: bool = False) -> PlanContext | None:
        """Undo the guard: end the reservation, release held jobs and victims, restore the
        pin if B still waits.

        Idempotent (a restarted daemon may call it again); marks the context ``released``.
        """
        ctx = self.context
        if ctx is None or ctx.released:
            return ctx
        ids = [*ctx.held, *ctx.victims_held]
        wanted = ids or ctx.pinned_from is not None or ctx.reservation is not None
        facts = self.slurm.job_facts([*ids, ctx.beneficiary]) if wanted else {}
        self._end_reservation(ctx, facts=facts)   # one read of the beneficiary for both
        # a competitor that started between the snapshot and its hold is held while it runs
        # (Slurm takes the hold: priority 0), and would stay held if requeued later: released
        # too (measured on 22.05: scontrol release restores a running job's priority)
        competitors = set(ctx.held)
        # a competitor another open plan's guard holds too stays held for that plan (it
        # releases it when it ends)
        shared = self._held_by_others(ctx.plan_id, victims=False) if ids else set()
        to_release = [j for j in dict.fromkeys(ids) if j in facts and facts[j].held
                      and j not in shared
                      and (facts[j].pending or (facts[j].running and j in competitors))]
        # A victim requeued held while it could not end yet (its node not responding: it stays
        # COMPLETING until slurmctld sees it end) becomes pending and held later: released then.
        later = [j for j in ctx.victims_held if j in facts and not facts[j].pending
                 and facts[j].state is not JobState.CANCELLED]
        if later:
            remember_release(self.repo, later, at)
        if to_release:
            self.slurm.release(to_release)
        b = facts.get(ctx.beneficiary)
        if ctx.pinned_from is not None and not keep_pin and b is not None \
                and b.state == JobState.PENDING.value:
            self.slurm.set_req_nodes(ctx.beneficiary, ctx.pinned_from)
        if b is not None and not b.pending and (ctx.pinned_from is not None
                                                or ctx.reservation is not None):
            # its pin and reservation link stay (Slurm changes them only while it is pending):
            # running, or completing (Slurm may requeue it: a refused launch), or ended
            # (forgotten at the next sweep)
            remember_unpin(self.repo, ctx.beneficiary,
                           None if keep_pin else ctx.pinned_from, ",".join(ctx.nodes),
                           ctx.reservation, at)
        return self.save(replace(ctx, released=True), at)
