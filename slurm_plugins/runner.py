"""Running Slurm's commands: argument lists, a timeout, SLURM_CONF, errors as SlurmError."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hai_slurm.errors import SlurmError


@dataclass(frozen=True, slots=True)
class Completed:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandRunner(Protocol):
    """Runs one command; the CLI backend's only door to the outside world."""

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        """Run ``argv`` and return its result (a non-zero exit code is not raised here)."""
        ...


class SubprocessRunner:
    """Runs Slurm commands with ``subprocess.run`` (never a shell).

    ``slurm_conf`` (or ``$SLURM_CONF``) is exported to every command; ``timeout`` (seconds)
    bounds each one. A missing program or a timeout raises SlurmError naming the command.
    """

    def __init__(self, slurm_conf: str | os.PathLike[str] | None = None, *,
                 timeout: float = 30.0, bin_dir: str | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        base = dict(os.environ if env is None else env)
        conf = os.fspath(slurm_conf) if slurm_conf is not None else base.get("SLURM_CONF")
        if conf:
            base["SLURM_CONF"] = conf
        base.setdefault("LC_ALL", "C")
        self.env = base
        self.timeout = timeout
        self.bin_dir = bin_dir

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        """Run ``argv`` (the program is looked up in ``bin_dir`` or on PATH)."""
        args = list(argv)
        if self.bin_dir and "/" not in args[0]:
            args[0] = str(Path(self.bin_dir) / args[0])
        limit = self.timeout if timeout is None else timeout
        try:
            proc = subprocess.run(args, capture_output=True, text=True, env=self.env,
                                  timeout=limit, check=False)
        except FileNotFoundError as exc:
            raise SlurmError(f"{args[0]} not found: install Slurm's client commands or pass "
                             "bin_dir", command=args) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{' '.join(args)} did not finish within {limit:g} s; is "
                             "slurmctld up and reachable (scontrol ping)?", command=args) from exc
        return Completed(tuple(args), proc.returncode, proc.stdout, proc.stderr)


def check(result: Completed, what: str) -> Completed:
    """Raise SlurmError carrying Slurm's message unless the command succeeded."""
    if result.returncode != 0:
        msg = result.stderr.strip() or result.stdout.strip() or "no message"
        raise SlurmError(f"{what} failed (exit {result.returncode}): {msg}",
                         command=list(result.argv), returncode=result.returncode,
                         stderr=result.stderr)
    return result
