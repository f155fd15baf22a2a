"""A :class:`~.types.SlurmClient` for ``hai-slurm daemon --shadow``: reads pass through to the real
backend, writes are logged and recorded, never done.

Every method of the protocol is classified in :data:`READS` or :data:`WRITES` (a unit test fails
when the protocol grows a method that is in neither), so a new write cannot slip through to Slurm
unnoticed. A write returns an :class:`~.types.ActionResult` with nothing done, as if every job had
been skipped silently: the daemon then believes nothing changed in Slurm — which is true — and
the next snapshot shows Slurm as it really is, so shadow mode never sees a job held, requeued or
re-prioritised because it "did" that itself.

Priority writes repeat every cycle in shadow mode (Slurm keeps its own values), so each job's
would-be priority is logged when it first appears or changes, not every cycle.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    JobFacts,
    JobIds,
    PendingBrief,
    Reservation,
    SignalTarget,
    SlurmClient,
    SwitchInfo,
    job_id_tuple,
)

log = logging.getLogger("hai_slurm.priority.shadow")

READS = frozenset({"version", "snapshot", "job_facts", "switches", "pending_briefs",
                   "reservations"})
"""Protocol methods passed through to the real backend."""
WRITES = frozenset({"set_priority", "set_priorities", "signal", "requeue", "requeue_hold", "hold",
                    "release", "set_admin_comment", "cancel", "requeue_any", "set_req_nodes",
                    "create_reservation", "update_reservation", "end_reservation",
                    "set_job_reservation", "split_array_task"})
"""Protocol methods that are recorded and logged instead of done."""


@dataclass(frozen=True, slots=True)
class WouldWrite:
    """One write the shadow daemon did not do."""

    kind: str
    """The protocol method (``set_priorities``, ``signal``, ``requeue_any``, ...)."""
    job_ids: tuple[int, ...]
    detail: str
    """What it would have changed, in words (the value, the signal, the nodes)."""


class ShadowSlurm:
    """Wraps a real client; see the module docstring. ``on_write`` sees every would-be write."""

    def __init__(self, inner: SlurmClient, *,
                 on_write: Callable[[WouldWrite], None] | None = None,
                 keep: int = 1000) -> None:
        self.inner = inner
        self.on_write = on_write
        self.recent: deque[WouldWrite] = deque(maxlen=keep)
        """The newest would-be writes (for tests and ``status``)."""
        self.counts: dict[str, int] = {}
        """Would-be writes per kind since start (jobs for priorities, calls otherwise)."""
        self._priorities: dict[int, int] = {}

    # ------------------------------------------------------------------------------ reads
    def version(self) -> SlurmVersion:
        """The real cluster's release."""
        return self.inner.version()

    def snapshot(self) -> ClusterSnapshot:
        """The real snapshot (and forget would-be priorities of jobs no longer active)."""
        snap = self.inner.snapshot()
        active = {j.job_id for j in snap.jobs}
        self._priorities = {j: p for j, p in self._priorities.items() if j in active}
        return snap

    def job_facts(self, job_ids: JobIds) -> dict[int, JobFacts]:
        """The real jobs' facts."""
        return self.inner.job_facts(job_ids)

    def switches(self) -> tuple[SwitchInfo, ...]:
        """The real topology."""
        return self.inner.switches()

    # ----------------------------------------------------------------------------- writes
    def _record(self, kind: str, job_ids: tuple[int, ...], detail: str, *,
                quiet: bool = False) -> None:
        write = WouldWrite(kind, job_ids, detail)
        self.recent.append(write)
        self.counts[kind] = self.counts.get(kind, 0) + (len(job_ids) if kind == "set_priorities"
                                                        else 1)
        if self.on_write is not None:
            self.on_write(write)
        if not quiet:
            log.warning("shadow: would %s job(s) %s: %s (not done)", kind,
                        ",".join(map(str, job_ids)), detail)

    def set_priority(self, job_id: int, value: int) -> ActionResult:
        """Logged, not done."""
        return self.set_priorities({job_id: value})

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        """Logged (each job when its would-be value first appears or changes), not done."""
        if not priorities:
            return ActionResult()
        changed = {j: p for j, p in priorities.items() if self._priorities.get(j) != p}
        self._priorities.update(priorities)
        for value in sorted(set(changed.values()), reverse=True):
            ids = tuple(sorted(j for j, p in changed.items() if p == value))
            log.info("shadow: would set Priority=%d on job(s) %s (not done)", value,
                     ",".join(map(str, ids)))
        self._record("set_priorities", tuple(sorted(priorities)),
                     f"{len(priorities)} priorities, {len(changed)} new or changed", quiet=True)
        return ActionResult()

    def signal(self, job_ids: JobIds, signal: str = "USR2", *,
               target: SignalTarget = SignalTarget.FULL) -> ActionResult:
        """Logged, not done."""
        self._record("signal", job_id_tuple(job_ids), f"SIG{signal} to {target.value}")
        return ActionResult()

    def requeue(self, job_ids: JobIds) -> ActionResult:
        """Logged, not done."""
        self._record("requeue", job_id_tuple(job_ids), "scontrol requeue")
        return ActionResult()

    def requeue_hold(self, job_ids: JobIds) -> ActionResult:
        """Logged, not done."""
        self._record("requeue_hold", job_id_tuple(job_ids), "scontrol requeuehold")
        return ActionResult()

    def hold(self, job_ids: JobIds) -> ActionResult:
        """Logged, not done."""
        self._record("hold", job_id_tuple(job_ids), "scontrol hold")
        return ActionResult()

    def release(self, job_ids: JobIds) -> ActionResult:
        """Logged, not done."""
        self._record("release", job_id_tuple(job_ids), "scontrol release")
        return ActionResult()

    def set_admin_comment(self, job_id: int, text: str) -> ActionResult:
        """Logged, not done."""
        self._record("set_admin_comment", (job_id,), f"AdminComment={text!r}")
        return ActionResult()

    def cancel(self, job_ids: JobIds) -> ActionResult:
        """Logged, not done."""
        self._record("cancel", job_id_tuple(job_ids), "scancel")
        return ActionResult()

    def requeue_any(self, job_ids: JobIds, *, hold: bool) -> tuple[int, ...]:
        """Logged, not done: nothing was requeued."""
        self._record("requeue_any", job_id_tuple(job_ids),
                     "scontrol requeuehold" if hold else "scontrol requeue")
        return ()

    def set_req_nodes(self, job_id: int, nodes: str) -> ActionResult:
        """Logged, not done."""
        self._record("set_req_nodes", (job_id,), f"ReqNodeList={nodes!r}")
        return ActionResult()

    def split_array_task(self, job_id: int) -> int:
        """Logged, not done: the record stays whole (its own id is returned)."""
        self._record("split_array_task", (job_id,), "scontrol update JobId=A_T (first task)")
        return job_id

    # ------------------------------------------------------------------ the urgent path (reads)
    def pending_briefs(self) -> tuple[PendingBrief, ...]:
        """The real pending jobs in brief."""
        return self.inner.pending_briefs()

    # -- reservations ----------------------------------------------------------------------
    def create_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Logged, not done."""
        self._record("create_reservation", (), f"reservation {name} on {','.join(nodes)} for "
                     f"{','.join(users)}, {minutes} min")

    def update_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Logged, not done."""
        self._record("update_reservation", (), f"reservation {name} now on {','.join(nodes)} "
                     f"for {','.join(users)}, {minutes} min")

    def end_reservation(self, name: str) -> bool:
        """Logged, not done (nothing was removed)."""
        self._record("end_reservation", (), f"reservation {name}")
        return False

    def reservations(self, prefix: str = "") -> tuple[Reservation, ...]:
        """The real reservations."""
        return self.inner.reservations(prefix)

    def set_job_reservation(self, job_id: int, name: str) -> ActionResult:
        """Logged, not done."""
        self._record("set_job_reservation", (job_id,), f"Reservation={name!r}")
        return ActionResult()
