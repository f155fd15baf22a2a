"""The few Slurm verbs the preemption executor needs beyond :class:`SlurmClient`.

:class:`SlurmClient` (the adapter) requeues only running jobs, and it has no way to pin a pending
job to nodes. The executor also has to requeue victims that already *exited* after acknowledging
(exit code 75 leaves them FAILED; ``scontrol requeue`` still works on them while slurmctld
remembers the job, ``MinJobAge``), to read the state of finished jobs, and to set and restore a
beneficiary's ``ReqNodeList``. Those verbs live here behind :class:`PreemptionActions`:

* :class:`CliPreemptionActions` runs ``squeue``/``scontrol`` (argument lists, timeouts);
* :class:`FakePreemptionActions` acts on a :class:`~hai_slurm.slurm_plugins.fake.FakeSlurm`, so
  unit tests see one consistent fake cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.fake import FakeSlurm
from hai_slurm.slurm_plugins.parse import job_state
from hai_slurm.slurm_plugins.runner import CommandRunner, SubprocessRunner
from hai_slurm.slurm_plugins.types import JobState

_RUNNING = frozenset({JobState.RUNNING, JobState.SUSPENDED})


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the executor re-reads about one job, finished or not."""

    job_id: int
    state: JobState
    """The base state, read like the adapter reads it (a one-word flag such as CONFIGURING or
    REQUEUED stands for RUNNING or PENDING; see :func:`hai_slurm.slurm_plugins.parse.job_state`).
    """
    restart_count: int
    held: bool
    req_nodes: str
    """The ReqNodeList the job asked for ("" when none)."""
    state_flags: tuple[str, ...] = ()
    """Slurm's words besides the base state (e.g. ``REQUEUED``)."""

    @property
    def running(self) -> bool:
        """Running (or about to): holds its allocation."""
        return self.state in _RUNNING

    @property
    def pending(self) -> bool:
        """Waiting in the queue (held or not)."""
        return self.state is JobState.PENDING

    @property
    def finished(self) -> bool:
        """Ended (any terminal state, or completing): its GPUs are (being) freed."""
        return not self.running and not self.pending


class PreemptionActions(Protocol):
    """Slurm verbs of the executor; harmless races (job gone, already pending) never raise."""

    def facts(self, job_ids: Iterable[int]) -> dict[int, JobFacts]:
        """State of each job slurmctld still knows (forgotten ones are absent)."""
        ...

    def requeue_any(self, job_ids: Sequence[int], *, hold: bool) -> tuple[int, ...]:
        """``scontrol requeue[hold]`` running *or finished* jobs; return the ids requeued.

        Pending jobs are skipped (already requeued, e.g. by RequeueExit); with ``hold`` they are
        held instead, so the result is the same either way.
        """
        ...

    def set_req_nodes(self, job_id: int, nodes: str) -> bool:
        """``scontrol update JobId=ID ReqNodeList=NODES`` ("" clears it); False if not pending."""
        ...


class CliPreemptionActions:
    """:class:`PreemptionActions` through Slurm's commands (``slurm_conf`` like the adapter)."""

    def __init__(self, runner: CommandRunner | None = None, *, slurm_conf: str | None = None,
                 timeout: float = 30.0) -> None:
        self._run: CommandRunner = runner or SubprocessRunner(slurm_conf, timeout=timeout)

    def facts(self, job_ids: Iterable[int]) -> dict[int, JobFacts]:
        """One ``squeue --states=all -O ...`` for up to 200 jobs (finished ones included).

        Only columns the job's owner cannot write (no name, no comment) and ``|`` separators
        that none of them can contain, so a job cannot make the daemon misread its state.
        """
        ids = list(dict.fromkeys(job_ids))
        out: dict[int, JobFacts] = {}
        for i in range(0, len(ids), 200):
            chunk = ids[i:i + 200]
            res = self._run(["squeue", "--noheader", "--states=all",
                             "--jobs=" + ",".join(map(str, chunk)), f"--Format={_FORMAT}"])
            if res.returncode != 0:
                if "invalid job id" in (res.stderr + res.stdout).lower():
                    continue  # every id of the chunk is gone
                raise SlurmError(f"squeue --jobs failed (exit {res.returncode}): "
                                 f"{res.stderr.strip() or res.stdout.strip()}",
                                 command=list(res.argv), returncode=res.returncode,
                                 stderr=res.stderr)
            for line in res.stdout.splitlines():
                f = parse_facts(line)
                if f is not None and f.job_id in chunk:
                    out[f.job_id] = f
        return out

    def requeue_any(self, job_ids: Sequence[int], *, hold: bool) -> tuple[int, ...]:
        """Requeue each job that is running or finished; hold pending ones if ``hold``."""
        facts = self.facts(job_ids)
        done: list[int] = []
        verb = "requeuehold" if hold else "requeue"
        for jid in job_ids:
            f = facts.get(jid)
            if f is None:
                continue
            if f.pending:
                if hold and not f.held:
                    self._scontrol(["hold", str(jid)], jid)
                done.append(jid)
                continue
            if self._scontrol([verb, str(jid)], jid):
                done.append(jid)
        return tuple(done)

    def set_req_nodes(self, job_id: int, nodes: str) -> bool:
        """Pin (or with "" unpin) a pending job to nodes."""
        return self._scontrol(["update", f"JobId={job_id}", f"ReqNodeList={nodes}"], job_id)

    def _scontrol(self, args: list[str], jid: int) -> bool:
        res = self._run(["scontrol", *args])
        if res.returncode == 0:
            return True
        msg = (res.stderr.strip() or res.stdout.strip()).lower()
        harmless = ("invalid job id", "pending execution", "already completing",
                    "no longer pending", "job is not held", "not pending")
        if any(h in msg for h in harmless):
            return False
        raise SlurmError(f"scontrol {' '.join(args)} failed for job {jid} (exit "
                         f"{res.returncode}): {res.stderr.strip() or res.stdout.strip()}",
                         command=list(res.argv), returncode=res.returncode, stderr=res.stderr)


_FORMAT = "JobID:|,State:|,RestartCnt:|,PriorityLong:|,Reason:|,ReqNodes:|"


def parse_facts(line: str) -> JobFacts | None:
    """One line of ``squeue -O`` with :data:`_FORMAT`; None for anything else.

    The State column goes through the adapter's job-state reader; a state word Slurm does not
    have raises SlurmError naming the job (rather than guessing that it finished).
    """
    parts = line.strip().split("|")
    if len(parts) < 7 or not parts[0].isdigit():  # 6 fields, each ending in "|"
        return None
    _, state, restarts, priority, reason, req = parts[:6]
    base, flags = job_state(state, f"squeue State of job {parts[0]}")
    return JobFacts(job_id=int(parts[0]), state=base,
                    restart_count=int(restarts) if restarts.isdigit() else 0,
                    held=priority.strip() == "0" and "held" in reason.lower(),
                    req_nodes="" if req in ("(null)", "") else req, state_flags=flags)


class FakePreemptionActions:
    """:class:`PreemptionActions` on a FakeSlurm (unit tests; same races as the real one)."""

    def __init__(self, fake: FakeSlurm) -> None:
        self.fake = fake
        self.req_nodes: dict[int, str] = {}
        self.calls: list[tuple[str, ...]] = []

    def facts(self, job_ids: Iterable[int]) -> dict[int, JobFacts]:
        """Every job the fake knows, finished ones included."""
        out: dict[int, JobFacts] = {}
        for jid in job_ids:
            j = self.fake.jobs.get(jid)
            if j is not None:
                out[jid] = JobFacts(jid, j.state, j.restart_count, j.held,
                                    self.req_nodes.get(jid, ""), j.flags)
        return out

    def requeue_any(self, job_ids: Sequence[int], *, hold: bool) -> tuple[int, ...]:
        """Like the CLI: running and finished jobs are requeued, pending ones (held)."""
        self.calls.append(("requeuehold" if hold else "requeue", *map(str, job_ids)))
        done = []
        now = self.fake.now
        for jid in job_ids:
            j = self.fake.jobs.get(jid)
            if j is None:
                continue
            if j.state is not JobState.PENDING:
                j.state, j.nodes, j.start_time = JobState.PENDING, (), None
                j.restart_count += 1
                j.submit_time = now
                j.eligible_time = now + self.fake.requeue_delay
                j.reason = "BeginTime" if self.fake.requeue_delay else "Priority"
            if hold and not j.held:
                j.held, j.priority, j.reason = True, 0, "JobHeldAdmin"
            done.append(jid)
        return tuple(done)

    def set_req_nodes(self, job_id: int, nodes: str) -> bool:
        """Remember the pin (the fake's scheduler ignores it)."""
        self.calls.append(("reqnodes", str(job_id), nodes))
        j = self.fake.jobs.get(job_id)
        if j is None or j.state is not JobState.PENDING:
            return False
        self.req_nodes[job_id] = nodes
        return True
