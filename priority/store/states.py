"""The vocabulary of the daemon's stored state: str enums and the legal state transitions.

Pure data and pure functions; the repository enforces these rules when it writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from hai_slurm.errors import StateError


class PlanState(StrEnum):
    """States of a two-phase preemption plan.

    ``planned -> signalled -> all_acked -> requeued -> done`` is the happy path. A victim missing
    its deadline sends a signalled plan to ``aborted`` (policy abort) or ``forced`` (policy force,
    after which the victims are requeued all the same; also when a victim ended without an
    acknowledgement and is requeued from its newest checkpoint). ``rolled_back`` is what an undone
    plan ends in (crash recovery, Slurm failing mid-plan) when the beneficiary did not start; a
    plan whose beneficiary runs on the freed GPUs ends ``done``, from wherever it was (signalled,
    all_acked, forced: the victims had exited before phase 2). ``done``, ``aborted`` and
    ``rolled_back`` are final.
    """

    PLANNED = "planned"
    SIGNALLED = "signalled"
    ALL_ACKED = "all_acked"
    FORCED = "forced"
    REQUEUED = "requeued"
    DONE = "done"
    ABORTED = "aborted"
    ROLLED_BACK = "rolled_back"


class VictimState(StrEnum):
    """State of one victim inside a plan.

    ``chosen`` is written with the plan, before anybody is asked; ``asked`` is written before the
    checkpoint request is sent (write-ahead), so a restarted daemon knows whom it may have asked.
    ``ended`` is a victim that ended during the plan without a trusted acknowledgement (crashed,
    disk full, killed by the request, or its ack not seen yet): it is requeued like an
    acknowledged one and resumes from its newest valid checkpoint; an ack read later moves it to
    ``acked``. ``gone`` is a victim that is not requeued: it completed (Slurm's COMPLETED, exit 0),
    was cancelled, or slurmctld no longer knows it (``MinJobAge`` passed) or refused the requeue.
    """

    CHOSEN = "chosen"
    ASKED = "asked"
    ACKED = "acked"
    MISSED = "missed"
    REQUEUED = "requeued"
    ENDED = "ended"
    GONE = "gone"


PLAN_TRANSITIONS: Mapping[PlanState, frozenset[PlanState]] = {
    PlanState.PLANNED: frozenset({PlanState.SIGNALLED, PlanState.ABORTED, PlanState.ROLLED_BACK}),
    PlanState.SIGNALLED: frozenset(
        {PlanState.ALL_ACKED, PlanState.FORCED, PlanState.ABORTED, PlanState.ROLLED_BACK,
         PlanState.DONE}
    ),
    PlanState.ALL_ACKED: frozenset({PlanState.REQUEUED, PlanState.ROLLED_BACK, PlanState.DONE}),
    PlanState.FORCED: frozenset({PlanState.REQUEUED, PlanState.ROLLED_BACK, PlanState.DONE}),
    PlanState.REQUEUED: frozenset({PlanState.DONE}),
    PlanState.DONE: frozenset(),
    PlanState.ABORTED: frozenset(),
    PlanState.ROLLED_BACK: frozenset(),
}

FINAL_PLAN_STATES: frozenset[PlanState] = frozenset(
    state for state, nexts in PLAN_TRANSITIONS.items() if not nexts
)

VICTIM_TRANSITIONS: Mapping[VictimState, frozenset[VictimState]] = {
    VictimState.CHOSEN: frozenset({VictimState.ASKED, VictimState.GONE}),
    VictimState.ASKED: frozenset(
        {VictimState.ACKED, VictimState.MISSED, VictimState.ENDED, VictimState.GONE}
    ),
    VictimState.MISSED: frozenset(
        {VictimState.ACKED, VictimState.REQUEUED, VictimState.ENDED, VictimState.GONE}
    ),
    VictimState.ENDED: frozenset({VictimState.ACKED, VictimState.REQUEUED, VictimState.GONE}),
    VictimState.ACKED: frozenset({VictimState.REQUEUED, VictimState.GONE}),
    VictimState.REQUEUED: frozenset(),
    VictimState.GONE: frozenset(),
}


def _allowed_text(nexts: frozenset[PlanState] | frozenset[VictimState]) -> str:
    return ", ".join(sorted(str(s) for s in nexts)) or "nothing (final state)"


def check_plan_transition(plan_id: int, current: PlanState, target: PlanState) -> None:
    """Raise :class:`StateError` naming both states unless ``current -> target`` is legal."""
    allowed = PLAN_TRANSITIONS[current]
    if target not in allowed:
        raise StateError(
            f"plan {plan_id}: illegal transition {current} -> {target}; "
            f"from {current} a plan may go to: {_allowed_text(allowed)}"
        )


def check_victim_transition(
    plan_id: int, job_id: int, current: VictimState, target: VictimState
) -> None:
    """Raise :class:`StateError` naming both states unless a victim may go ``current -> target``."""
    allowed = VICTIM_TRANSITIONS[current]
    if target not in allowed:
        raise StateError(
            f"plan {plan_id}, victim job {job_id}: illegal transition {current} -> {target}; "
            f"from {current} a victim may go to: {_allowed_text(allowed)}"
        )
