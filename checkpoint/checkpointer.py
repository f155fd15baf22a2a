"""The training loop's API: load, save (sync or async), react to checkpoint requests, acknowledge.

Typical use (see the package docstring)::

    ck = Checkpointer.from_env()
    state = ck.load_latest() or fresh_state()
    for step in range(state["step"], total):
        train_one_step(state)
        if ck.requested():
            ck.save(state, step=step + 1)
            ck.acknowledge_and_exit()          # exit code 75: safe to requeue
        if ck.due(step + 1):
            ck.save(state, step=step + 1)

Sharded, multi-rank jobs save with their own framework instead: ``ck.save_with(fn, step=...)`` and
``ck.load_with(fn)`` (see ``bring_your_own.py`` and ``RECIPES.md``).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from hai_slurm.checkpoint import protocol, rng, sharded
from hai_slurm.checkpoint.atomic import HashingWriter
from hai_slurm.checkpoint.bring_your_own import ShardedSaves
from hai_slurm.checkpoint.env import JobEnv, job_env_from, rank_from, restart_count_from
from hai_slurm.checkpoint.job_record import needs_record, with_job_record
from hai_slurm.checkpoint.protocol import Ack, LastCheckpoint, Phase
from hai_slurm.checkpoint.ranks import RankSync
from hai_slurm.checkpoint.sharded import NONE, Part, ShardedInfo, SharedFiles
from hai_slurm.checkpoint.signals import RequestListener
from hai_slurm.checkpoint.store import CheckpointInfo, CheckpointStore, Serializer
from hai_slurm.errors import CheckpointError

ENVELOPE_KEY = "hai_checkpoint"


def _stderr(message: str) -> None:
    print(f"hai-checkpoint: {message}", file=sys.stderr, flush=True)


def _step_of(state: object) -> int | None:
    value = state.get("step") if isinstance(state, Mapping) else getattr(state, "step", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None where that cannot be read."""
    try:
        stat = Path("/proc/self/stat").read_bytes()
        uptime = float(Path("/proc/uptime").read_bytes().split()[0])
        # field 22 (starttime, clock ticks after boot) counts from the last ")": the command
        # name in parentheses may hold spaces
        started = int(stat[stat.rindex(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


class Checkpointer:
    """Checkpoints of one job. :meth:`save` writes one state from rank 0; :meth:`save_with` runs
    the user's save on every rank and commits when every rank's part is durable.

    While it exists (until :meth:`close`), the request signal and SIGTERM no longer stop the
    process by themselves: they set a flag that :meth:`requested` reports, so call it at every
    step boundary. Slurm follows an ignored SIGTERM with SIGKILL after its grace/kill wait.
    """

    def __init__(self, env: JobEnv, *, serializer: Serializer | str = Serializer.PICKLE,
                 async_save: bool = False, save_every_steps: int | None = None,
                 save_every_s: float | None = None, install_signals: bool = True,
                 chain_signals: bool = True, trust_other_owners: bool = False,
                 log: Callable[[str], None] = _stderr,
                 clock: Callable[[], float] = time.monotonic,
                 store: CheckpointStore | None = None, sync_timeout_s: float = 300.0,
                 process_age: Callable[[], float | None] | None = None) -> None:
        self.env = env
        self.serializer = Serializer(serializer)
        self.async_save = async_save
        self.save_every_steps = save_every_steps
        self.save_every_s = save_every_s
        self._log = log
        self._clock = clock
        self.store = store or CheckpointStore(env.checkpoint_dir, keep=env.keep, log=log,
                                              trust_other_owners=trust_other_owners)
        self.listener = RequestListener((env.request_signal, signal.SIGTERM), chain=chain_signals,
                                        clock=clock)
        self.last_checkpoint: CheckpointInfo | None = None
        self.resumed_from: CheckpointInfo | None = None
        self._saved_this_run = False
        self._last_save_time = clock()
        self.save_seconds: float | None = None
        """How long this run's newest durable save took (published in ``phase.json``: the
        daemon's estimate of what saving on request costs this job)."""
        self._sharded_started: float | None = None
        age = (process_age or _process_age)()
        self._began = clock() - (age if age is not None and age >= 0 else 0.0)
        """When this process started, on ``clock`` (when it cannot be told: now)."""
        self.restart_seconds: float | None = None
        """How long this run took from its process start to its first step boundary (imports,
        model, data and checkpoint loading): what restarting costs this job, published in
        ``phase.json`` for the daemon."""
        self._announced = False
        self._phase_lock = threading.Lock()
        self._phase_failed = False
        self._thread: threading.Thread | None = None
        self._thread_result: CheckpointInfo | None = None
        self._thread_error: BaseException | None = None
        self._ranks = RankSync(env, log=log, clock=clock, timeout_s=sync_timeout_s)
        self._boundaries = 0
        self.last_sharded: ShardedInfo | None = None
        self._sharded = ShardedSaves(env, self._ranks, publish=self._publish, log=log,
                                     committed=self._on_sharded)
        if self.is_writer:
            removed = self.store.prepare()
            for path in removed:
                log(f"removed {path.name}, left in {path.parent} by an interrupted save")
            protocol.prepare_control_dir(env.control_dir)
            protocol.clear_ack(env.control_dir)
            self._ranks.clear_stale_flags()
            self._publish(Phase.COMPUTING, None)
        if install_signals and not self.listener.install():
            log("not in the main thread: signal handlers not installed; create the Checkpointer "
                "in the main thread to receive checkpoint requests")

    @classmethod
    def from_env(cls, directory: str | os.PathLike[str] | None = None, *,
                 environ: Mapping[str, str] | None = None,
                 control_dir: str | os.PathLike[str] | None = None,
                 request_signal: signal.Signals | str | None = None, grace_s: float | None = None,
                 keep: int | None = None, **options: Any) -> Checkpointer:
        """Build from Slurm's and our environment variables (see ``hai_slurm.checkpoint.env``).

        Inside a Slurm job whose environment lacks ``HAI_CHECKPOINT_DIR`` (and no ``directory``
        is given), the job's ``#HAI`` settings are read back from Slurm first (one ``scontrol
        show job`` per run, by rank 0; see :mod:`~hai_slurm.checkpoint.job_record`).
        """
        environ = os.environ if environ is None else environ
        if directory is None and needs_record(environ):
            environ = with_job_record(environ, rank=rank_from(environ),
                                      restart=restart_count_from(environ))
        env = job_env_from(environ, directory=directory,
                           control_dir=control_dir, request_signal=request_signal,
                           grace_s=grace_s, keep=keep)
        return cls(env, **options)

    @property
    def is_writer(self) -> bool:
        return self.env.rank == 0

    # -- phase reporting -----------------------------------------------------------------------

    def _last(self) -> LastCheckpoint | None:
        info, shard = self.last_checkpoint, self.last_sharded
        if shard is not None and (info is None or shard.time >= info.time):
            return LastCheckpoint(shard.step, shard.sha256, shard.name, shard.time)
        if info is None:
            return None
        return LastCheckpoint(info.step, info.sha256, info.file, info.time)

    def _on_sharded(self, info: ShardedInfo) -> None:
        self.last_sharded = info
        self._saved_this_run = True
        self._last_save_time = self._clock()
        if self._sharded_started is not None:
            self.save_seconds = max(0.0, self._last_save_time - self._sharded_started)
            self._sharded_started = None
        self._publish(Phase.SAVED if self.listener.pending() else Phase.COMPUTING, info.step)

    def _publish(self, phase: Phase, step: int | None) -> None:
        if not self.is_writer:
            return
        pending = self.listener.pending()
        record = protocol.make_phase(self.env.job_id, self.env.restart_count, phase, step,
                                     last=self._last(),
                                     request_signal=pending.signal.name if pending else None,
                                     save_seconds=self.save_seconds,
                                     restart_seconds=self.restart_seconds)
        with self._phase_lock:
            try:
                protocol.write_phase(self.env.control_dir, record)
            except OSError as err:
                if not self._phase_failed:
                    self._log(f"cannot publish phase to {self.env.control_dir} ({err.strerror}); "
                              "the scheduler will not see save progress")
                self._phase_failed = True

    # -- loading -------------------------------------------------------------------------------

    def _decode(self, info: CheckpointInfo, data: bytes) -> dict[str, Any]:
        if info.serializer == Serializer.PICKLE.value:
            if self.serializer is not Serializer.PICKLE:  # the metadata says pickle; we don't
                raise ValueError("it is a pickle, and this job saves with serializer='json': "
                                 "refusing to unpickle (pass serializer='pickle' to load it)")
            envelope = pickle.loads(data)  # noqa: S301 - own, checksummed, owner-checked file
        else:
            envelope = json.loads(data)
        if not isinstance(envelope, dict) or ENVELOPE_KEY not in envelope:
            raise ValueError("payload is not a hai checkpoint envelope")
        return envelope

    def load_latest(self) -> Any | None:
        """Return the newest valid checkpoint's state (restoring RNG states), or None.

        Damaged checkpoints are skipped with a note on stderr saying which and why. Raises
        :class:`CheckpointError` only when the directory itself cannot be read.

        With several ranks every rank gets rank 0's RNG states (:meth:`save` keeps only
        those): ranks that draw differently (per-rank seeds, dropout, augmentation) resume
        bit-exactly with :meth:`save_with` and :meth:`load_with`, which keep each rank's.
        """
        entries = self.store.entries()
        if not entries:
            if sharded.candidates(self.env.checkpoint_dir):
                self._log(f"no single-state checkpoint in {self.env.checkpoint_dir}: starting "
                          "fresh (its sharded checkpoints are loaded with load_with(fn))")
            else:
                self._log(f"no checkpoint in {self.env.checkpoint_dir} yet: starting fresh")
            return None
        for info in reversed(entries):
            data, reason = self.store.verify(info)
            if data is not None:
                try:
                    envelope = self._decode(info, data)
                except Exception as err:
                    reason = f"cannot decode it ({type(err).__name__}: {err})"
                else:
                    for note in rng.restore(envelope.get("rng") or {}):
                        self._log(note)
                    self.last_checkpoint = self.resumed_from = info
                    self._log(f"resuming from {info.file} (step {info.step}, run "
                              f"{info.restart_count} of job {info.job_id})")
                    self._publish(Phase.COMPUTING, info.step)
                    return envelope["state"]
            self._log(f"skipping checkpoint {info.file} (step {info.step}): {reason}; "
                      "trying an older one")
        self._log(f"no valid checkpoint among {len(entries)} in {self.env.checkpoint_dir}: "
                  "starting fresh")
        return None

    # -- requests ------------------------------------------------------------------------------

    def requested(self, step: int | None = None) -> bool:
        """Was a checkpoint requested (on any rank)? Call it at every step boundary, on every rank.

        Every rank gets True at the same step boundary (``step``, else the number of calls so far:
        pass the step if ranks may call this unequally often), so they can save together.
        A request by the checkpoint signal expires after the grace time (the scheduler has given
        up by then, so saving and exiting would only lose the allocation); SIGTERM never expires.
        """
        self._boundaries += 1
        if self.restart_seconds is None:   # the first step boundary of this run
            self.restart_seconds = max(0.0, self._clock() - self._began)
            if self._thread is None and self._sharded_started is None:
                self._publish(Phase.COMPUTING, step)   # (a save in flight publishes it later)
        pending, latest = self.listener.pending(), self.listener.latest()
        if pending is not None and latest is not None and pending.signal != signal.SIGTERM \
                and not self._ranks.stopping \
                and self._clock() - latest.at_monotonic > self.env.grace_s \
                and not self._ranks.agreeing():
            if self.listener.expire(latest):
                self._log(f"checkpoint request by {pending.signal.name} expired: no step "
                          f"boundary within {self.env.grace_s:g} s of its last arrival; "
                          "continuing (the scheduler did not wait)")
                self._ranks.withdraw()
                self._announced = False
            pending = self.listener.pending()   # one that came meanwhile stays
        agreed = self._ranks.exchange(pending is not None,
                                      self._boundaries if step is None else step)
        if agreed and pending is None:
            self.listener.trigger(self.env.request_signal)
            pending = self.listener.pending()
        if agreed and pending is not None and not self._announced:
            self._announced = True
            self._log(f"checkpoint requested by {pending.signal.name} (rank {self.env.rank}); "
                      "saving at this step boundary")
        return agreed

    def due(self, step: int) -> bool:
        """Is a periodic save due (every ``save_every_steps`` steps or ``save_every_s`` seconds)?"""
        if self.save_every_steps and step > 0 and step % self.save_every_steps == 0:
            return True
        return bool(self.save_every_s and self._clock() - self._last_save_time >= self.save_every_s)

    # -- saving --------------------------------------------------------------------------------

    def _envelope(self, state: object, step: int) -> dict[str, Any]:
        return {ENVELOPE_KEY: 1, "step": step, "rng": rng.capture(), "state": state}

    def _encode_to(self, envelope: dict[str, Any], writer: HashingWriter) -> None:
        if self.serializer is Serializer.PICKLE:
            pickle.dump(envelope, writer, protocol=pickle.HIGHEST_PROTOCOL)
        else:
            writer.write(json.dumps(envelope).encode())

    def _encode(self, envelope: dict[str, Any]) -> bytes:
        if self.serializer is Serializer.PICKLE:
            return pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)
        return json.dumps(envelope).encode()

    def _write(self, fill: Callable[[HashingWriter], None], step: int,
               started: float) -> CheckpointInfo:
        """Write the checkpoint (``started``: when its save began, by this clock)."""
        info = self.store.write(fill, step=step, serializer=self.serializer,
                                job_id=self.env.job_id, restart_count=self.env.restart_count)
        self.last_checkpoint = info
        self._saved_this_run = True
        self._last_save_time = self._clock()
        self.save_seconds = max(0.0, self._last_save_time - started)
        pending = self.listener.pending()
        self._publish(Phase.SAVED if pending else Phase.COMPUTING, step)
        return info

    def save(self, state: object, step: int | None = None) -> CheckpointInfo | None:
        """Save ``state`` (with RNG states) as the newest checkpoint; only rank 0 writes (its
        state and its RNG states: see :meth:`load_latest` for several ranks).

        Synchronous: returns the new checkpoint's info once it is durable. Asynchronous
        (``async_save=True``): the state is serialized here, in the caller's thread, so training
        may change it right after; a background thread writes it and this returns None. An error of
        the previous background write is raised here (or by :meth:`wait`/acknowledge).
        """
        step = step if step is not None else _step_of(state)
        if step is None:
            raise CheckpointError("save() needs the step: pass step=N, or give the state a 'step' "
                                  "key or attribute")
        if not self.is_writer:
            return None
        self.wait()
        started = self._clock()
        envelope = self._envelope(state, step)
        try:
            if not self.async_save:
                self._publish(Phase.SAVING, step)
                return self._write(lambda writer: self._encode_to(envelope, writer), step,
                                   started)
            payload = self._encode(envelope)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as err:
            self._publish(Phase.COMPUTING, step)
            raise CheckpointError(
                f"cannot serialize the state with {self.serializer.value} "
                f"({type(err).__name__}: {err}); make it serializable (or choose the other "
                "serializer). Older checkpoints are untouched") from err
        except BaseException:
            self._publish(Phase.COMPUTING, step)
            raise
        self._publish(Phase.SAVING, step)
        self._thread = threading.Thread(target=self._background, args=(payload, step, started),
                                        name=f"hai-checkpoint-save-{step}", daemon=False)
        self._thread.start()
        return None

    def _background(self, payload: bytes, step: int, started: float) -> None:
        def fill(writer: HashingWriter) -> None:
            writer.write(payload)

        try:
            self._thread_result = self._write(fill, step, started)
        except BaseException as err:
            self._thread_error = err
            self._publish(Phase.COMPUTING, step)

    def save_with(self, fn: Callable[[Part], object], step: int, *,
                  shared_files: SharedFiles = NONE) -> ShardedInfo | None:
        """Every rank: run the user's save ``fn(part)``, then sync and commit (see RECIPES.md).

        ``part.directory`` is this rank's own directory, ``part.checkpoint`` the directory of this
        checkpoint shared by all ranks (give DCP that one, with ``shared_files=DCP_FILES`` so each
        rank's DCP files count as its part). If ``fn`` returns a future (``dcp.async_save``), this
        returns at once and a background thread waits for the flush; :meth:`wait`,
        :meth:`acknowledge` and the next save wait for it. Rank 0 returns the commit of a
        synchronous save, other ranks None. Raises CheckpointError if a rank's part is not
        durable within ``sync_timeout_s``: then nothing is committed.
        """
        self.wait()
        self._sharded_started = self._clock()
        return self._sharded.save(fn, step, shared_files)

    def load_with(self, fn: Callable[[Part], object]) -> Part | None:
        """Every rank: ``fn(part)`` on the newest committed checkpoint all ranks find intact.

        Incomplete or damaged ones are skipped with a note saying why. This rank's RNG states
        are restored. Returns the part loaded (``part.step``), or None: start fresh.
        """
        return self._sharded.load(fn)

    def wait(self) -> CheckpointInfo | ShardedInfo | None:
        """Wait for a background save; re-raise its error here. Returns its info (None if none)."""
        shard = self._sharded.wait()
        single = self._wait_single()
        return shard if shard is not None else single

    def _wait_single(self) -> CheckpointInfo | None:
        thread, self._thread = self._thread, None
        if thread is None:
            return None
        thread.join()
        error, self._thread_error = self._thread_error, None
        if error is not None:
            if isinstance(error, CheckpointError):
                raise error
            raise CheckpointError(f"background checkpoint save failed: {error}") from error
        return self._thread_result

    # -- acknowledging -------------------------------------------------------------------------

    def acknowledge(self) -> Ack | None:
        """Tell the scheduler the job is saved and may be requeued (rank 0 writes ``ack.json``).

        Waits for a background save (and, for :meth:`save_with`, its commit) first, so the ack
        never comes before the checkpoint is complete. The request is cleared, so training could
        go on. Call it on every rank (with several ranks it is a collective).
        """
        ack, error = None, None
        try:
            self.wait()
            if self.is_writer:
                ack = self._write_ack()
        except CheckpointError as err:
            error = err  # the request stays pending: the next boundary may try again
        if error is None:
            self.listener.clear()
            self._announced = False
        try:
            self._ranks.handled()
        except CheckpointError as err:
            error = error or err
        if error is not None:
            raise error
        return ack

    def _write_ack(self) -> Ack:
        pending = self.listener.pending()
        if not self._saved_this_run:
            self._log("acknowledging without a checkpoint written in this run: work since "
                      "the last checkpoint will be lost")
        last = self._last()
        ack = Ack(job_id=self.env.job_id, restart_count=self.env.restart_count,
                  step=last.step if last else None, sha256=last.sha256 if last else None,
                  checkpoint=last.file if last else None, time=time.time(),
                  exit_code=protocol.EXIT_REQUEUE,
                  request_signal=pending.signal.name if pending else None)
        try:
            protocol.write_ack(self.env.control_dir, ack)
        except OSError as err:
            raise CheckpointError(
                f"cannot write the acknowledgement to {self.env.control_dir}: "
                f"{err.strerror or err}; the scheduler will not requeue this job") from err
        self._publish(Phase.SAVED, ack.step)
        self._log(f"acknowledged checkpoint at step {ack.step} ({ack.checkpoint})")
        return ack

    def acknowledge_and_exit(self) -> NoReturn:
        """Acknowledge, publish phase ``exiting``, exit with ``EXIT_REQUEUE`` (75).

        With several ranks, every rank calls it: after the ack the ranks meet at a barrier (so
        none exits while another still saves or sits in a collective), torch's process group is
        destroyed, and all exit 75 — or all exit 1 if any rank's save failed (no ack then).
        """
        if self.env.world_size <= 1:
            ack = self.acknowledge()
            self._publish(Phase.EXITING, ack.step if ack else None)
            self.close()
            sys.exit(protocol.EXIT_REQUEUE)
        ack, ok = None, True
        try:
            ack = self.acknowledge()
        except CheckpointError as err:
            self._log(f"rank {self.env.rank}: {err}")
            ok = False
        every = self._ranks.finish(ok)
        if every:
            self._publish(Phase.EXITING, ack.step if ack else None)
        elif ok:
            self._log(f"rank {self.env.rank}: another rank's save failed; exiting 1, not 75")
        self.close()
        sys.exit(protocol.EXIT_REQUEUE if every else 1)

    def close(self) -> None:
        """Wait for a pending save and restore the previous signal handlers; let torch's worker
        threads drop the last request exchange (see :mod:`hai_slurm.checkpoint.ranks`), so that
        an exit right after ``close`` cannot abort the process."""
        try:
            self.wait()
            self.store.wait_pruning()
        finally:
            self.listener.uninstall()
            self._ranks.settle()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
