"""Making every rank learn of a checkpoint request that only some ranks received.

Slurm's ``scancel --signal=USR2 --full`` already reaches every task, so usually all ranks see the
signal themselves. As a second path:

- if ``torch.distributed`` is imported and initialized, :meth:`RankSync.exchange` all-reduces the
  flag (MAX) across ranks — a collective, so every rank must call ``requested()`` equally often
  (once per step, as the training loop does);
- otherwise a rank that saw the request creates ``<control dir>/request.<restart count>`` and the
  other ranks look for that file (at most every ``poll_s`` seconds). The control directory must then
  be on a file system all nodes share (the checkpoint directory usually is).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hai_slurm.checkpoint.env import JobEnv
from hai_slurm.checkpoint.protocol import REQUEST_FLAG_PREFIX


def _torch_distributed() -> Any | None:
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


class RankSync:
    """Share one boolean ("a checkpoint was requested") among the ranks of a job."""

    def __init__(self, env: JobEnv, *, log: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.2) -> None:
        self._env = env
        self._log = log
        self._clock = clock
        self._poll_s = poll_s
        self._published = False
        self._last_poll = float("-inf")
        self.flag_path: Path = env.control_dir / f"{REQUEST_FLAG_PREFIX}{env.restart_count}"

    def clear_stale_flags(self) -> None:
        """Remove flag files of earlier runs of this job (rank 0, at start)."""
        try:
            names = [p.name for p in self._env.control_dir.iterdir()]
        except OSError:
            return
        for name in names:
            if name.startswith(REQUEST_FLAG_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    (self._env.control_dir / name).unlink()

    def exchange(self, local: bool) -> bool:
        """True if this or any other rank has a pending request."""
        if self._env.world_size <= 1:
            return local
        dist = _torch_distributed()
        if dist is not None:
            return self._all_reduce(dist, local)
        if local:
            if not self._published:
                self._publish()
            return True
        now = self._clock()
        if now - self._last_poll < self._poll_s:
            return False
        self._last_poll = now
        return self.flag_path.exists()

    def _all_reduce(self, dist: Any, local: bool) -> bool:
        torch = sys.modules["torch"]
        device = (torch.device("cuda", torch.cuda.current_device())
                  if dist.get_backend() == "nccl" else torch.device("cpu"))
        flag = torch.tensor([1 if local else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _publish(self) -> None:
        try:
            self.flag_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.flag_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            self._published = True
            return
        except OSError as err:
            self._log(f"cannot create request flag {self.flag_path} ({err.strerror}): other "
                      "ranks learn of this request only from their own signal")
            return
        os.close(fd)
        self._published = True

    def withdraw(self) -> None:
        """The request was handled or expired: remove the flag file (if this rank made it)."""
        if self._published or (self._env.rank == 0 and self._env.world_size > 1):
            with contextlib.suppress(OSError):
                self.flag_path.unlink()
        self._published = False
