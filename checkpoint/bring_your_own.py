"""The user's own save and load functions on every rank, with our sync, commit and checks.

:class:`ShardedSaves` is what :meth:`Checkpointer.save_with` and :meth:`Checkpointer.load_with`
run. A save calls ``fn(part)`` on every rank (``part`` says where this rank writes, see
:class:`~hai_slurm.checkpoint.sharded.Part`). If ``fn`` returns a future (``dcp.async_save``'s
``Future`` or ``AsyncSaveResponse``, anything with ``result()``), training goes on while a
background thread waits for it; then the rank's part is fsynced, hashed and recorded, and rank 0
commits once every rank's part is durable. The ack (``Checkpointer.acknowledge``) waits for that
thread, so it is never written before the commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hai_slurm.checkpoint import rng, sharded
from hai_slurm.checkpoint.env import JobEnv
from hai_slurm.checkpoint.protocol import Phase
from hai_slurm.checkpoint.ranks import RankSync
from hai_slurm.checkpoint.sharded import Part, ShardedInfo, SharedFiles
from hai_slurm.errors import CheckpointError

Publish = Callable[[Phase, "int | None"], None]


def flush_of(result: object) -> Callable[[], object] | None:
    """The wait of an asynchronous save's result (None for a synchronous save)."""
    upload = getattr(result, "upload_completion", None)  # dcp.AsyncSaveResponse
    target = upload if upload is not None else result
    wait = getattr(target, "result", None)
    return wait if callable(wait) else None


class ShardedSaves:
    """Sharded saves and loads of one job on one rank."""

    def __init__(self, env: JobEnv, ranks: RankSync, *, publish: Publish,
                 log: Callable[[str], None], committed: Callable[[ShardedInfo], None]) -> None:
        self._env = env
        self._ranks = ranks
        self._publish = publish
        self._log = log
        self._committed = committed
        self._thread: threading.Thread | None = None
        self._result: ShardedInfo | None = None
        self._error: BaseException | None = None
        self.resumed_from: ShardedInfo | None = None

    # -- saving --------------------------------------------------------------------------------

    def save(self, fn: Callable[[Part], object], step: int, shared: SharedFiles
             ) -> ShardedInfo | None:
        """Run ``fn`` on this rank; sync: finish and return the commit (rank 0) or None."""
        self.wait()
        env = self._env
        proposal = (sharded.fresh_name(env.checkpoint_dir, step, env.restart_count)
                    if env.rank == 0 else None)
        path = env.checkpoint_dir / str(self._ranks.gather("save", proposal)[0])
        part = Part(path, path / sharded.part_dir_name(env.rank), env.rank, env.world_size, step)
        try:
            part.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(f"cannot create {part.directory}: {err.strerror or err}; "
                                  "choose a checkpoint directory you can write") from err
        states = rng.capture()
        self._publish(Phase.SAVING, step)
        try:
            flush = flush_of(fn(part))
        except BaseException:
            self._publish(Phase.COMPUTING, step)
            raise
        if flush is None:
            return self._finish(part, shared, states)
        self._thread = threading.Thread(target=self._background, args=(flush, part, shared,
                                                                        states),
                                        name=f"hai-checkpoint-flush-{step}", daemon=False)
        self._thread.start()
        return None

    def _finish(self, part: Part, shared: SharedFiles, states: dict[str, Any]
                ) -> ShardedInfo | None:
        try:
            sharded.write_part(part, shared, run=self._env.restart_count, rng=states)
            if part.rank != 0:
                return None
            info = sharded.commit(part.checkpoint, step=part.step, world_size=part.world_size,
                                  run=self._env.restart_count, timeout_s=self._ranks.timeout_s)
        except OSError as err:
            self._publish(Phase.COMPUTING, part.step)
            raise CheckpointError(f"could not write checkpoint part {part.directory}: "
                                  f"{err.strerror or err}") from err
        except BaseException:
            self._publish(Phase.COMPUTING, part.step)
            raise
        self._committed(info)
        # never the checkpoint just committed: prune ranks by step, and a newer-step one the
        # resume skipped as damaged would otherwise outrank every save of this run (keep=1
        # removed each one at once and every run started over)
        protect = {info.name, *((self.resumed_from.name,) if self.resumed_from else ())}
        for name in sharded.prune(self._env.checkpoint_dir, self._env.keep, protect=protect,
                                  log=self._log):
            self._log(f"removed old checkpoint {name}")
        return info

    def _background(self, flush: Callable[[], object], part: Part, shared: SharedFiles,
                    states: dict[str, Any]) -> None:
        try:
            flush()
            self._result = self._finish(part, shared, states)
        except BaseException as err:
            self._error = err
            self._publish(Phase.COMPUTING, part.step)

    def wait(self) -> ShardedInfo | None:
        """Wait for an asynchronous save's flush and commit; re-raise its error here."""
        thread, self._thread = self._thread, None
        if thread is None:
            return None
        thread.join()
        error, self._error = self._error, None
        if error is not None:
            if isinstance(error, CheckpointError):
                raise error
            raise CheckpointError(f"asynchronous checkpoint save failed: {error}") from error
        result, self._result = self._result, None
        return result

    # -- loading -------------------------------------------------------------------------------

    def load(self, fn: Callable[[Part], object]) -> Part | None:
        """Every rank: ``fn(part)`` on the newest checkpoint that every rank finds intact."""
        env = self._env
        listed = [p.name for p in sharded.candidates(env.checkpoint_dir)] if env.rank == 0 else []
        paths = [env.checkpoint_dir / n for n in self._ranks.gather("list", listed)[0]]
        for path in paths:  # rank 0's list on every rank: the same number of rounds everywhere
            info, own, reason = sharded.verify(path, env.rank)
            verdicts = self._ranks.gather("load", reason)
            refused = [(r, v) for r, v in enumerate(verdicts) if v]
            if info is None or refused:
                why = reason or "; ".join(f"rank {r}: {v}" for r, v in refused)
                if env.rank == 0 or reason:
                    self._log(f"skipping checkpoint {path.name}: {why}; trying an older one")
                continue
            if info.world_size != env.world_size:
                self._log(f"checkpoint {path.name} was written by {info.world_size} ranks, this "
                          f"run has {env.world_size}: your load function must reshard (DCP does)")
            for note in rng.restore(own.get("rng") or {}):
                self._log(note)
            part = Part(path, path / sharded.part_dir_name(env.rank), env.rank, env.world_size,
                        info.step)
            fn(part)
            self.resumed_from = info
            self._committed(info)
            if env.rank == 0:
                self._log(f"resuming from {path.name} (step {info.step}, {info.world_size} "
                          "ranks)")
            return part
        if env.rank == 0:
            what = f"no complete one among {len(paths)}" if paths else "none yet"
            self._log(f"sharded checkpoints in {env.checkpoint_dir}: {what}; starting fresh")
        return None
