"""Values of the preemption executor: what to do (:class:`ExecutionRequest`), how (settings), and
what happened (:class:`ExecutionResult`). Pure data; :mod:`.executor` acts on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hai_slurm.errors import ConfigError
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import PlanState
from hai_slurm.priority.store.records import JsonValue


@dataclass(frozen=True, slots=True)
class ExecutionRequest:
    """Preempt ``victims`` so that ``beneficiary`` starts, on ``nodes`` if given.

    ``deadlines`` is each victim's checkpoint deadline in seconds after it is asked (its
    ``#HAI --grace``, capped by its class's ``grace_cap``); ``on_miss`` what happens if one
    misses it. ``lost_work`` (GPU-seconds, the planner's estimate) is only recorded.
    """

    beneficiary: int
    victims: tuple[int, ...]
    nodes: tuple[str, ...] = ()
    deadlines: Mapping[int, float] = field(default_factory=dict)
    on_miss: DeadlineAction = DeadlineAction.FORCE
    reason: str = ""
    lost_work: float = 0.0

    def __post_init__(self) -> None:
        if not self.victims:
            raise ConfigError("a preemption needs at least one victim", key="victims", value=())
        if self.beneficiary in self.victims:
            raise ConfigError("the beneficiary cannot be its own victim", key="victims",
                              value=self.beneficiary)
        if len(set(self.victims)) != len(self.victims):
            raise ConfigError("a victim is listed twice", key="victims", value=self.victims)
        for jid, seconds in self.deadlines.items():
            if jid not in self.victims:
                raise ConfigError(f"deadline given for job {jid}, which is not a victim",
                                  key="deadlines", value=jid)
            if not seconds > 0:
                raise ConfigError(f"deadline of victim {jid} must be > 0 seconds, got {seconds!r}",
                                  key="deadlines", value=seconds)
        object.__setattr__(self, "deadlines", MappingProxyType(dict(self.deadlines)))

    def deadline(self, job_id: int, default: float) -> float:
        """Seconds victim ``job_id`` gets to checkpoint."""
        return self.deadlines.get(job_id, default)


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    """How the executor waits.

    * ``poll``: seconds between two looks at the victims' control directories;
    * ``state_poll``: seconds between two Slurm state queries while waiting;
    * ``default_deadline``: a victim's deadline when the request names none;
    * ``saving_extension``: how much longer a victim whose phase is ``saving`` at its deadline
      is waited for (a save in progress is not interrupted);
    * ``start_timeout``: how long, after the requeue, the executor waits for the beneficiary to
      start before it releases the other jobs anyway;
    * ``clock_skew``: acknowledgements written up to this many seconds before the request are
      still accepted (the job's node clock may lag the daemon's);
    * ``signal``: the checkpoint request signal (the job library's default, USR2);
    * ``late_ack_window``: how long victims that missed an aborted plan are still watched, so
      one that acknowledges and exits late is requeued
      (:mod:`~hai_slurm.priority.executor.late_acks`);
    * ``resend_after``: a victim that can acknowledge but shows no sign of the request this
      many seconds after it (or half its deadline, if sooner) is asked once more (0: never).
      A request sent while a job step is listed but its task has not started yet reaches no
      process; without a second request such a victim is requeued at its deadline and loses
      the work since its last checkpoint. A second request is harmless to a job that did hear
      the first one (the library's handler only sets a flag; ``hai-run`` forwards a request
      once).
    """

    poll: float = 0.1
    state_poll: float = 0.5
    default_deadline: float = 60.0
    saving_extension: float = 60.0
    start_timeout: float = 60.0
    clock_skew: float = 2.0
    signal: str = "USR2"
    late_ack_window: float = 600.0
    resend_after: float = 5.0

    def __post_init__(self) -> None:
        for name in ("poll", "state_poll", "default_deadline", "start_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"must be > 0 seconds, got {getattr(self, name)!r}",
                                  source="executor settings", key=name,
                                  value=getattr(self, name))
        for name in ("saving_extension", "clock_skew", "late_ack_window", "resend_after"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0 seconds, got {getattr(self, name)!r}",
                                  source="executor settings", key=name,
                                  value=getattr(self, name))


@dataclass(frozen=True, slots=True)
class VictimContext:
    """What the executor must remember about a victim to finish a plan after a restart."""

    job_id: int
    uid: int
    control_dir: str | None
    restart_count: int
    deadline: float

    def to_json(self) -> dict[str, JsonValue]:
        """JSON-ready."""
        return {"job_id": self.job_id, "uid": self.uid, "control_dir": self.control_dir,
                "restart_count": self.restart_count, "deadline": self.deadline}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> VictimContext:
        """Inverse of :meth:`to_json`."""
        ctl = data.get("control_dir")
        return cls(job_id=_int(data["job_id"]), uid=_int(data["uid"]),
                   control_dir=ctl if isinstance(ctl, str) else None,
                   restart_count=_int(data["restart_count"]),
                   deadline=float(_num(data["deadline"])))


def _int(value: JsonValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _num(value: JsonValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """How a plan ended (or where it stopped), with the figures the demo and bench print."""

    plan_id: int
    state: PlanState
    note: str
    requeued: tuple[int, ...] = ()
    missed: tuple[int, ...] = ()
    ack_steps: Mapping[int, int | None] = field(default_factory=dict)
    ack_seconds: Mapping[int, float] = field(default_factory=dict)
    """Seconds from the request to each victim's acknowledgement."""
    beneficiary_started: bool = False
    seconds: float = 0.0
