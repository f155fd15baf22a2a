"""Making every rank learn of a checkpoint request that only some ranks received.

Slurm's ``scancel --signal=USR2 --full`` already reaches every task, so usually all ranks see the
signal themselves. As a second path:

- if ``torch.distributed`` is imported and initialized, :meth:`RankSync.exchange` all-reduces the
  flag (MAX) across ranks — a collective, so every rank must call ``requested()`` equally often
  (once per step, as the training loop does);
- otherwise a rank that saw the request creates ``<control dir>/request.<restart count>`` and the
  other ranks look for that file (at most every ``poll_s`` seconds). A rank that knows of the
  request then posts its step to the others (:class:`FileRendezvous`) and waits for theirs; all
  ranks stop at the highest step posted, so a rank that learned late does not save at another step
  than the others. The control directory must then be on a file system all nodes share (the
  checkpoint directory usually is).

:meth:`RankSync.gather` (values of all ranks) and :meth:`RankSync.finish` (the exit barrier, then
``destroy_process_group``) use torch.distributed when it is initialized and the files otherwise.

A gloo collective returns to Python before its worker thread has dropped the work, which still
holds the tensor; dropping it needs the GIL. If the interpreter finalizes in that window (a
collective right before exit, as the exit barrier and the last step's exchange are), the worker
thread is killed inside ``take_gil`` and the process aborts ("terminate called without an active
exception"), whatever the exit code was to be: about once in five runs of the two-rank recipe
test on a loaded CI machine. A lone all_reduce leaves its tensor held in about one of four
returns, for up to ~4 ms. So :meth:`RankSync.settle` waits (releasing the GIL) until the last
collective's tensor is ours alone, and :meth:`RankSync.finish` and ``Checkpointer.close`` call it.
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
from hai_slurm.checkpoint.rendezvous import FileRendezvous
from hai_slurm.errors import CheckpointError


def _torch_distributed() -> Any | None:
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


class RankSync:
    """Share one boolean ("a checkpoint was requested") among the ranks of a job."""

    def __init__(self, env: JobEnv, *, log: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.2,
                 timeout_s: float = 300.0) -> None:
        self._env = env
        self._log = log
        self._clock = clock
        self._poll_s = poll_s
        self.timeout_s = timeout_s
        self._published = False
        self._last_poll = float("-inf")
        self._stop_at: int | None = None
        self._last: Any = None  # the tensor of this rank's last all_reduce (see settle)
        self.flag_path: Path = env.control_dir / f"{REQUEST_FLAG_PREFIX}{env.restart_count}"
        self.files = FileRendezvous(env.control_dir, rank=env.rank, world_size=env.world_size,
                                    restart_count=env.restart_count, launch=env.launch,
                                    clock=clock)

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
        self.files.clear_stale()

    @property
    def stopping(self) -> bool:
        """The ranks have agreed on a step to stop at (file path): the request cannot expire."""
        return self._stop_at is not None

    def agreeing(self) -> bool:
        """Another rank has posted its step for a request and waits for this one (file path):
        a request this rank saw long ago must not expire then, or that rank waits in vain."""
        if self._env.world_size <= 1 or _torch_distributed() is not None:
            return False
        return self.files.posted("stop")

    def exchange(self, local: bool, step: int) -> bool:
        """True once this or any other rank has a pending request, at the same step on all ranks.

        ``step`` is this rank's step boundary (the file path compares it across ranks).
        """
        if self._env.world_size <= 1:
            return local
        dist = _torch_distributed()
        if dist is not None:
            return self._all_reduce(dist, local)
        if self._stop_at is not None:
            return step >= self._stop_at
        if local:
            if not self._published:
                self._publish()
        else:
            now = self._clock()
            if now - self._last_poll < self._poll_s:
                return False
            self._last_poll = now
            if not self.flag_path.exists():
                return False
        steps = self.files.gather("stop", step, timeout_s=self.timeout_s)
        self._stop_at = max(int(s) for s in steps)
        if self._stop_at > step:
            self._log(f"rank {self._env.rank} learned of the request at step {step}; all ranks "
                      f"stop at step {self._stop_at} (the highest step a rank had reached)")
        return step >= self._stop_at

    def gather(self, label: str, value: Any) -> list[Any]:
        """Every rank's (JSON-able) ``value``, in rank order: a collective, as in torch."""
        if self._env.world_size <= 1:
            return [value]
        dist = _torch_distributed()
        if dist is not None:
            out: list[Any] = [None] * self._env.world_size
            dist.all_gather_object(out, value)
            return out
        return self.files.gather(label, value, timeout_s=self.timeout_s)

    def finish(self, ok: bool) -> bool:
        """The exit barrier: True if every rank is ``ok`` (False if a rank is gone); then destroy
        torch's process group. Waits up to twice the timeout: a save's commit may take one."""
        dist = _torch_distributed()
        try:
            if dist is not None:
                every = self._all_reduce(dist, ok, op=dist.ReduceOp.MIN)
                self.settle()
            else:
                every = all(bool(v) for v in self.files.gather("exit", ok,
                                                                timeout_s=2 * self.timeout_s))
        except (CheckpointError, RuntimeError) as err:  # torch raises RuntimeError for a dead peer
            self._log(f"rank {self._env.rank}: exit barrier failed: {err}")
            every = False
        finally:
            if dist is not None:
                dist.destroy_process_group()
        return every

    def settle(self, timeout_s: float = 1.0) -> bool:
        """Wait until no collective's worker still holds this rank's last all_reduce tensor
        (see the module's docstring), sleeping so the worker can take the GIL. True if none does
        (or there was none); False after ``timeout_s`` (said on the job's log: an exit now may
        still abort the process), or where torch cannot tell."""
        flag, self._last = self._last, None
        use_count = getattr(flag, "_use_count", None)
        if flag is None or use_count is None:
            return flag is None
        deadline = time.monotonic() + timeout_s  # real time, not a test clock: torch waits
        while use_count() > 1:
            if time.monotonic() >= deadline:
                self._log(f"rank {self._env.rank}: torch's collective worker still holds the "
                          f"last exchange after {timeout_s:g} s; exiting now may abort it")
                return False
            time.sleep(0.0005)
        return True

    def _all_reduce(self, dist: Any, local: bool, *, op: Any = None) -> bool:
        torch = sys.modules["torch"]
        device = (torch.device("cuda", torch.cuda.current_device())
                  if dist.get_backend() == "nccl" else torch.device("cpu"))
        flag = torch.tensor([1 if local else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX if op is None else op)
        self._last = flag
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
        """The request expired on this rank: remove the flag file (if this rank made it)."""
        if self._published or (self._env.rank == 0 and self._env.world_size > 1):
            with contextlib.suppress(OSError):
                self.flag_path.unlink()
        self._published = False
        self._stop_at = None

    def handled(self) -> None:
        """The request was handled on every rank (a collective on the file path): forget it."""
        self.withdraw()
        if self._env.world_size > 1 and _torch_distributed() is None:
            self.files.barrier("handled", timeout_s=2 * self.timeout_s)  # flag gone for all
