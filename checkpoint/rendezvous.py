"""Collectives of the ranks of one job over files, for jobs without ``torch.distributed``.

:class:`FileRendezvous` gathers one small JSON value from every rank: rank ``r`` writes
``<control dir>/sync.<restart count>[.<launch>]/<name>/<r>.json`` atomically and waits until all
``world_size`` files are there, then reads them. Every rank must call the same collectives in the
same order (like torch's), so the name of a call is ``<label>-<counter>``. The control directory
must then be on a file system all nodes share (as for the request flag, see ``ranks.py``). The
launch (``SLURM_STEP_ID`` or torchrun's run id) keeps two steps of one run apart: a second
``srun`` in the same job would otherwise read the first one's leftover files as its own.

A rank that does not answer within the timeout raises :class:`CheckpointError` naming the ranks
still missing: a dead rank is reported, never waited for forever.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hai_slurm.checkpoint.atomic import write_atomic
from hai_slurm.errors import CheckpointError

SYNC_PREFIX = "sync."


class FileRendezvous:
    """Gather/barrier among ``world_size`` ranks through files in ``control_dir``."""

    def __init__(self, control_dir: Path, *, rank: int, world_size: int, restart_count: int,
                 launch: str = "", poll_s: float = 0.01,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = control_dir / (f"{SYNC_PREFIX}{restart_count}"
                                   + (f".{launch}" if launch else ""))
        self._restart = str(restart_count)
        self._rank = rank
        self._world = world_size
        self._poll_s = poll_s
        self._clock = clock
        self._counter = 0
        self._previous: Path | None = None

    def clear_stale(self) -> None:
        """Remove the files of earlier runs of this job (rank 0, at start); those of other
        steps of this run are left (a step may run beside this one)."""
        parent = self.root.parent
        with contextlib.suppress(OSError):
            for path in parent.iterdir():
                run = path.name[len(SYNC_PREFIX):].split(".", 1)[0]
                if path.name.startswith(SYNC_PREFIX) and run != self._restart:
                    shutil.rmtree(path, ignore_errors=True)

    def gather(self, label: str, value: Any, *, timeout_s: float) -> list[Any]:
        """Every rank's ``value`` (JSON), in rank order. Raises CheckpointError on timeout."""
        self._counter += 1
        folder = self.root / f"{label}-{self._counter}"
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{self._rank}.json", json.dumps(value).encode(), 0o644,
                     durable=False)
        deadline = self._clock() + timeout_s
        values: dict[int, Any] = {}
        while True:
            for rank in range(self._world):
                if rank in values:
                    continue
                try:
                    values[rank] = json.loads((folder / f"{rank}.json").read_bytes())
                except FileNotFoundError:
                    continue
            if len(values) == self._world:
                break
            if self._clock() > deadline:
                missing = sorted(set(range(self._world)) - set(values))
                raise CheckpointError(
                    f"rank(s) {missing} of {self._world} did not reach '{label}' within "
                    f"{timeout_s:g} s (files in {folder}); a rank died or hangs, or the control "
                    "directory is not on a file system all nodes share")
            time.sleep(self._poll_s)
        if self._rank == 0 and self._previous is not None:
            # Every rank wrote this call's file, so every rank has finished reading the last one.
            shutil.rmtree(self._previous, ignore_errors=True)
        self._previous = folder
        return [values[r] for r in range(self._world)]

    def posted(self, label: str) -> bool:
        """Another rank already waits in the next collective, if it is ``label``."""
        folder = self.root / f"{label}-{self._counter + 1}"
        try:
            return any(p.name != f"{self._rank}.json" and p.name.endswith(".json")
                       for p in folder.iterdir())
        except OSError:
            return False

    def barrier(self, label: str, *, timeout_s: float) -> None:
        """Return once every rank has reached this call."""
        self.gather(label, None, timeout_s=timeout_s)
