"""The three baselines: fifo, slurm-multifactor and hai-platform.

* ``fifo``: every job has the same priority, so Slurm starts them in submit order; no preemption.
* ``slurm-multifactor``: Slurm's priority/multifactor with only the age and QOS factors
  (``weight_qos * class weight / 50 + weight_age * min(1, age / max_age)``, age since the
  submit time, which a requeue resets), recomputed every ``PriorityCalcPeriod``; preempt/qos with
  ``PreemptMode=REQUEUE``: a pending job that does not fit preempts running jobs of lower classes
  at once; they get SIGTERM, are killed after GraceTime and keep only their last periodic
  checkpoint.
* ``hai-platform``: strict class order (FCFS inside a class); a job still waiting 10 s after it
  became eligible preempts lower-class jobs, which checkpoint and are requeued; no fairness, no
  minimum run time, no compensation.

Victims (both preempting baselines, :func:`pick_victims`): on the node(s) where the fewest GPUs
must be freed, the lowest classes first, then the most recently started (least work lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hai_slurm.priority.policy.ladder import RANK
from hai_slurm.priority.sim.engine import T0, Engine, Mode, SimJob

#: Priority band per class rank for hai-platform's strict order (about 3 years of seconds).
BAND = 100_000_000


class _Base:
    """Shared plumbing: the engine, and jobs whose preemption is in flight."""

    name = "base"
    mode = Mode.CHECKPOINT
    cycle: int | None = None
    max_beneficiaries = 32   # pending jobs examined per step (Slurm's queue depth, bounded)

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.inflight: dict[int, int] = {}   # beneficiary -> until when its plan is in flight

    def attach(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def eng(self) -> Engine:
        assert self.engine is not None, "attach() first"
        return self.engine

    def submit_args(self, job: SimJob) -> dict[str, str | int]:
        return {"qos": job.trace.cls.qos, "priority": 1}

    def on_step(self, now: int) -> None:
        return None

    def on_cycle(self, now: int) -> None:
        return None

    # -- preemption shared by slurm-multifactor and hai-platform -------------------------------
    def _ready(self, job: SimJob, now: int) -> bool:
        return True

    def preempt_for_waiting(self, now: int) -> None:
        """Preempt lower-class jobs for the highest pending jobs that do not fit."""
        eng = self.eng
        slurm = eng.slurm
        self.inflight = {b: t for b, t in self.inflight.items() if t > now}
        pending = [eng.by_slurm[j] for j in slurm.pending_ids()]
        if not pending:
            return
        jobs = slurm.jobs
        pending.sort(key=lambda j: (-jobs[j.slurm_id].priority, jobs[j.slurm_id].submit_time,
                                    j.slurm_id))
        index: _NodeIndex | None = None
        examined = 0
        failed: list[tuple[int, int, int]] = []   # (rank, nodes, per node) that found no victims
        for job in pending:
            if examined >= self.max_beneficiaries:
                break
            fj = jobs[job.slurm_id]
            if job.slurm_id in self.inflight or fj.eligible_time > now or RANK[job.trace.cls] == 0:
                continue
            if not self._ready(job, now):
                continue
            examined += 1
            rank = RANK[job.trace.cls]
            if any(r >= rank and n == job.nodes and p <= job.per_node for r, n, p in failed):
                continue
            if index is None:
                index = _NodeIndex(eng)
            got = pick_victims(index, job)
            if got is None:
                failed.append((rank, job.nodes, job.per_node))
                continue
            victims, nodes = got
            delay = max(eng.victim_wait(eng.by_slurm[v]) for v in victims)
            eng.preempt(victims, job.slurm_id, nodes=nodes, delay=delay)
            self.inflight[job.slurm_id] = now + delay + eng.costs.requeue_delay + 1


class _NodeIndex:
    """Free GPUs and preemptible running jobs per node, updated as victims are claimed."""

    def __init__(self, eng: Engine) -> None:
        view = eng.slurm.view
        self.order = {n: layout.order for n, layout in view.nodes.items()}
        self.free = {n: view.free(n).bit_count() for n in view.nodes}
        self.on: dict[str, list[tuple[int, int, SimJob]]] = {}
        for jid, masks in eng.slurm.placed.items():
            job = eng.by_slurm[jid]
            if job.signalled is not None:
                continue
            for node, mask in masks:
                self.on.setdefault(node, []).append((mask.bit_count(), jid, job))
        self.claimed: set[int] = set()


def pick_victims(index: _NodeIndex, job: SimJob) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """Victims and nodes that let ``job`` start (see the module docstring), or None."""
    rank = RANK[job.trace.cls]
    options: list[tuple[tuple[int, int, int, int], str, list[int]]] = []
    for node, free in index.free.items():
        if free >= job.per_node:
            options.append(((0, 0, 0, index.order[node]), node, []))
            continue
        cands = sorted(
            ((RANK[v.trace.cls], -(v.run_start or 0), -jid, g)
             for g, jid, v in index.on.get(node, ()) if RANK[v.trace.cls] < rank
             and jid not in index.claimed and v.trace.preemptible),
            key=lambda c: c[:3])
        have, chosen, worst = free, [], 0
        for vrank, _, negid, g in cands:
            if have >= job.per_node:
                break
            have += g
            chosen.append(-negid)
            worst = max(worst, vrank + 1)
        if have >= job.per_node:
            options.append(((worst, have - free, len(chosen), index.order[node]), node, chosen))
    if len(options) < job.nodes:
        return None
    options.sort(key=lambda o: o[0])
    picked = options[:job.nodes]
    victims = sorted({v for _, _, vs in picked for v in vs})
    if not victims:
        return None  # it fits already: Slurm will start it, nothing to preempt
    for _, node, vs in picked:
        index.free[node] = max(0, index.free[node] - job.per_node)
        index.claimed.update(vs)
    return tuple(victims), tuple(sorted(n for _, n, _ in picked))


class Fifo(_Base):
    """First in, first out; no preemption."""

    name = "fifo"


@dataclass(frozen=True, slots=True)
class MultifactorConfig:
    """Slurm multifactor settings used by the baseline (Slurm's names in the docs)."""

    weight_qos: int = 10_000        # PriorityWeightQOS
    weight_age: int = 1_000         # PriorityWeightAge
    max_age: int = 7 * 86_400       # PriorityMaxAge
    calc_period: int = 300          # PriorityCalcPeriod


class SlurmMultifactor(_Base):
    """Slurm's multifactor priority and native QOS preemption (kill + requeue after GraceTime)."""

    name = "slurm-multifactor"
    mode = Mode.KILL

    def __init__(self, config: MultifactorConfig = MultifactorConfig()) -> None:
        super().__init__()
        self.config = config
        self.cycle = config.calc_period

    def priority(self, job: SimJob, submit_time: int, now: int) -> int:
        c = self.config
        age = min(1.0, max(0, now - submit_time) / c.max_age) if c.max_age else 1.0
        return max(1, round(c.weight_qos * job.trace.cls.weight / 50 + c.weight_age * age))

    def submit_args(self, job: SimJob) -> dict[str, str | int]:
        return {"qos": job.trace.cls.qos, "priority": self.priority(job, self.eng.now,
                                                                    self.eng.now)}

    def on_cycle(self, now: int) -> None:
        eng = self.eng
        jobs = eng.slurm.jobs
        wanted: Mapping[int, int] = {
            j: self.priority(eng.by_slurm[j], jobs[j].submit_time, now)
            for j in eng.slurm.pending_ids()}
        changed = {j: p for j, p in wanted.items() if jobs[j].priority != p}
        if changed:
            eng.slurm.set_priorities(changed)

    def on_step(self, now: int) -> None:
        self.preempt_for_waiting(now)


class HaiPlatform(_Base):
    """hai-platform: strict class order, preempt after a fixed 10 s wait, checkpoint first."""

    name = "hai-platform"
    mode = Mode.CHECKPOINT
    wait = 10

    def submit_args(self, job: SimJob) -> dict[str, str | int]:
        eng = self.eng
        offset = min(BAND - 1, max(0, eng.now - T0))
        self.eng.wake(eng.now + self.wait)
        return {"qos": job.trace.cls.qos,
                "priority": 1 + RANK[job.trace.cls] * BAND + (BAND - 1 - offset)}

    def _ready(self, job: SimJob, now: int) -> bool:
        fj = self.eng.slurm.jobs[job.slurm_id]
        since = max(fj.submit_time, fj.eligible_time)
        if now - since >= self.wait:
            return True
        self.eng.wake(since + self.wait)
        return False

    def on_step(self, now: int) -> None:
        self.preempt_for_waiting(now)
