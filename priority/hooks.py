"""The place in a daemon cycle where preemption planning and execution plug in.

After the cycle has decided and written priorities (except to jobs an open plan claims), the
daemon hands a :class:`CycleView` to an optional :class:`Planner` (which proposes a plan, or
None) and passes that plan to an optional :class:`Executor`. Whatever fairness events, credits
or audit lines the executor returns in :class:`CycleExtras` are committed in the same
transaction as the rest of the cycle. Plans themselves go through
:class:`~hai_slurm.priority.store.Repository` (each step its own transaction), so the
executor receives the repository in the view.

Both are skipped, like every write, when the snapshot failed or the daemon is not the leader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.priority.policy.state import FairnessEvent, PendingJob, PolicyResult, RunningJob
from hai_slurm.priority.store import CreditEntry, TrackedJob
from hai_slurm.priority.store.records import AuditEntry
from hai_slurm.priority.store.repository import Repository
from hai_slurm.slurm_plugins.types import ClusterSnapshot, SlurmClient


@dataclass(frozen=True)
class Claims:
    """The jobs open plans hold on to (see :meth:`PreemptionExecutor.claims`)."""

    beneficiaries: frozenset[int] = frozenset()
    """Beneficiaries of open plans: pinned, at the top priority; not planned again."""
    victims: frozenset[int] = frozenset()
    """Victims of open plans, and victims that missed an aborted plan and still run at the same
    restart count: not chosen again until they have been requeued."""
    held: frozenset[int] = frozenset()
    """Jobs a standing guard holds (the policy never writes held jobs anyway)."""
    closed: frozenset[str] = frozenset()
    """Nodes a standing guard's reservation closes to every job but its beneficiary: the
    planner neither fits other jobs there nor frees GPUs there for them."""

    @property
    def jobs(self) -> frozenset[int]:
        """Every claimed job."""
        return self.beneficiaries | self.victims | self.held


@dataclass(frozen=True)
class CycleView:
    """Everything one cycle saw and decided, for the planner and executor."""

    now: float
    snapshot: ClusterSnapshot
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...]
    result: PolicyResult
    tracked: Mapping[int, TrackedJob]
    config: PolicyConfig
    slurm: SlurmClient
    repository: Repository
    claims: Claims = Claims()
    """Jobs the executor's open plans hold on to: the planner leaves them alone."""
    focus: frozenset[int] | None = None
    """The pending jobs this pass plans for (an urgent look of the daemon's urgent path);
    None: every pending job (a cycle)."""


@dataclass(frozen=True)
class CycleExtras:
    """What an executor wants committed with the cycle."""

    events: tuple[FairnessEvent, ...] = ()
    credits: tuple[CreditEntry, ...] = ()
    audit: tuple[AuditEntry, ...] = ()


class Planner(Protocol):
    """Chooses preemptions from a cycle's view; returns a plan object or None."""

    def plan(self, view: CycleView) -> object | None:
        """A plan for the executor, or None when nothing should be preempted."""
        ...


class Executor(Protocol):
    """Carries out (a step of) plans; ``plan`` is what the planner returned (may be None).

    An executor whose plans span cycles may also offer ``claims() -> Claims`` (the daemon then
    leaves the claimed jobs' priorities alone and shows them to the planner),
    ``has_open_plans() -> bool``, ``poll_interval`` and ``reconcile()`` (the daemon steps open
    plans every ``poll_interval`` s between its cycles), and ``ack_interval`` and
    ``acks_due() -> bool`` (in between, every ``ack_interval`` s, the daemon asks whether a
    plan has all the acks it waits for, and steps the plans at once if so); the daemon looks
    these up with ``getattr``, so an executor without them works as before.
    """

    def execute(self, plan: object | None, view: CycleView) -> CycleExtras:
        """Advance plans; return what must be committed with the cycle."""
        ...
