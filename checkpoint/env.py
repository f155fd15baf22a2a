"""What a job learns from its environment: ids, rank, directories, signal and grace time.

Pure: :func:`job_env_from` takes the environment as a mapping, so tests pass a dict.
Variables (set by Slurm, by ``job_submit.lua`` from ``#HAI`` directives, or by the user; where a
Slurm job's environment has no ``HAI_CHECKPOINT_DIR``, ``Checkpointer.from_env()`` and ``hai-run``
first fill it and ``HAI_CHECKPOINT_GRACE`` in from the job's own record, see
:mod:`~hai_slurm.checkpoint.job_record`):

==========================  ==================================================================
``HAI_CHECKPOINT_DIR``      where checkpoints go (else the ``directory`` argument)
``HAI_CONTROL_DIR``         per-job control directory (else ``<checkpoint dir>/.hai/<job id>``)
``HAI_CHECKPOINT_SIGNAL``   checkpoint request signal, ``USR2`` (default), ``SIGUSR2`` or a number
``HAI_CHECKPOINT_GRACE``    seconds a request stays valid without a step boundary (default 60)
``HAI_CHECKPOINT_KEEP``     how many checkpoints to keep (default 3)
``SLURM_JOB_ID``            job id (an array task's own id too, not ``<array>_<task>``)
``SLURM_RESTART_COUNT``     how often Slurm requeued the job (0 when unset)
``RANK`` / ``SLURM_PROCID`` global rank (``RANK`` wins: torchrun sets it)
``WORLD_SIZE`` / ``SLURM_NTASKS``  number of ranks
==========================  ==================================================================
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.checkpoint.protocol import control_dir_of
from hai_slurm.errors import CheckpointError

DEFAULT_SIGNAL = signal.SIGUSR2
DEFAULT_GRACE_S = 60.0
DEFAULT_KEEP = 3
LOCAL_JOB_ID = "local"


@dataclass(frozen=True)
class JobEnv:
    """The job's identity and checkpoint settings, read once at start."""

    checkpoint_dir: Path
    control_dir: Path
    job_id: str
    restart_count: int
    rank: int
    world_size: int
    request_signal: signal.Signals
    grace_s: float
    keep: int
    launch: str = ""
    """Which launch of the job this process belongs to (``SLURM_STEP_ID``, else torchrun's
    ``TORCHELASTIC_RUN_ID``; "" when neither is set): two steps of one job share its restart
    count, so the ranks' file collectives are kept apart by it."""


def parse_signal(text: str, *, source: str = "HAI_CHECKPOINT_SIGNAL") -> signal.Signals:
    """Turn ``USR2``, ``SIGUSR2`` or ``12`` into a signal; refuse SIGKILL/SIGSTOP and unknowns."""
    value = text.strip()
    try:
        sig = signal.Signals(int(value)) if value.isdigit() else signal.Signals[
            value.upper() if value.upper().startswith("SIG") else "SIG" + value.upper()]
    except (KeyError, ValueError):
        raise CheckpointError(
            f"{source}={text!r} is not a signal name or number; use e.g. USR2 (the default)"
        ) from None
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        raise CheckpointError(f"{source}={text!r}: {sig.name} cannot be caught; use USR2")
    return sig


def _int(environ: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = environ.get(key, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise CheckpointError(f"environment {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise CheckpointError(f"environment {key}={raw!r} must be >= {minimum}")
    return value


def _first_int(environ: Mapping[str, str], keys: tuple[str, ...], default: int,
               minimum: int) -> int:
    for key in keys:
        if environ.get(key, "").strip():
            return _int(environ, key, default, minimum)
    return default


def launch_from(environ: Mapping[str, str]) -> str:
    """``SLURM_STEP_ID``, else ``TORCHELASTIC_RUN_ID``, as a file-name-safe word ("" if
    neither is set)."""
    for key in ("SLURM_STEP_ID", "TORCHELASTIC_RUN_ID"):
        raw = environ.get(key, "").strip()
        if raw:
            return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_"
                           for c in raw)[:64]
    return ""


_SECONDS_RE = re.compile(r"[0-9]+(?:\.[0-9]*)?")
_BLANKS = " \t\n\v\f\r"


def parse_seconds(text: str) -> float | None:
    """``text`` as a plain decimal number of seconds (ASCII digits, an optional fraction,
    blanks around), else None: the one grammar of ``HAI_CHECKPOINT_GRACE`` for the job side,
    hai-run and job_submit's check (which reads it the same way in Lua)."""
    stripped = text.strip(_BLANKS)
    return float(stripped) if _SECONDS_RE.fullmatch(stripped) else None


def grace_from(environ: Mapping[str, str]) -> float:
    """``HAI_CHECKPOINT_GRACE`` (seconds a request stays valid), else the default; a value
    that is not a decimal number above 0 is an error naming the variable."""
    raw = environ.get("HAI_CHECKPOINT_GRACE", "").strip()
    if not raw:
        return DEFAULT_GRACE_S
    value = parse_seconds(raw)
    if value is None or not value > 0:
        raise CheckpointError(f"environment HAI_CHECKPOINT_GRACE={raw!r} is not a number of "
                              "seconds above 0 (job_submit.lua sets it from #HAI --grace, e.g. "
                              "120); unset it or give one")
    return value


def rank_from(environ: Mapping[str, str]) -> int:
    """The global rank: ``RANK`` (torchrun), else ``SLURM_PROCID``, else 0."""
    return _first_int(environ, ("RANK", "SLURM_PROCID"), 0, 0)


def restart_count_from(environ: Mapping[str, str]) -> int:
    """How often Slurm requeued the job (``SLURM_RESTART_COUNT``, 0 when unset)."""
    return _int(environ, "SLURM_RESTART_COUNT", 0, 0)


def job_id_from(environ: Mapping[str, str]) -> str:
    """Slurm's own id of the job (``SLURM_JOB_ID``), ``local`` outside Slurm.

    An array task has its own id too (``SLURM_JOB_ID``; ``SLURM_ARRAY_JOB_ID``_
    ``SLURM_ARRAY_TASK_ID`` is only its display name): that is the id the daemon reads from
    ``squeue --json`` and addresses, and it stays the same across requeues, so the control
    directory ``.hai/<id>`` and the ``job_id`` in phase.json/ack.json use it for every job."""
    return environ.get("SLURM_JOB_ID", "").strip() or LOCAL_JOB_ID


def job_env_from(
    environ: Mapping[str, str], *, directory: str | os.PathLike[str] | None = None,
    control_dir: str | os.PathLike[str] | None = None,
    request_signal: signal.Signals | str | None = None, grace_s: float | None = None,
    keep: int | None = None,
) -> JobEnv:
    """Read the job's settings; explicit arguments override the environment.

    Raises :class:`CheckpointError` naming the variable when a value is malformed or when no
    checkpoint directory is known.
    """
    env_dir = environ.get("HAI_CHECKPOINT_DIR", "").strip()
    chosen = Path(directory) if directory is not None else (Path(env_dir) if env_dir else None)
    if chosen is None:
        raise CheckpointError(
            "no checkpoint directory: set HAI_CHECKPOINT_DIR (e.g. with `#HAI --checkpoint-dir`) "
            "or pass directory= to Checkpointer.from_env()")
    job_id = job_id_from(environ)
    if "/" in job_id or job_id in (".", ".."):
        raise CheckpointError(f"job id {job_id!r} from SLURM_JOB_ID cannot name a directory")
    env_control = environ.get("HAI_CONTROL_DIR", "").strip()
    if control_dir is not None:
        ctl = Path(control_dir)
    elif env_control:
        ctl = Path(env_control)
    else:
        ctl = control_dir_of(chosen, job_id)
    if isinstance(request_signal, signal.Signals):
        sig = request_signal
    elif request_signal is not None:
        sig = parse_signal(request_signal, source="request_signal")
    elif environ.get("HAI_CHECKPOINT_SIGNAL", "").strip():
        sig = parse_signal(environ["HAI_CHECKPOINT_SIGNAL"])
    else:
        sig = DEFAULT_SIGNAL
    if grace_s is None:
        grace_s = grace_from(environ)
    elif not (math.isfinite(grace_s) and grace_s > 0):
        raise CheckpointError(f"grace time must be a finite number of seconds above 0, got "
                              f"{grace_s}")
    return JobEnv(
        checkpoint_dir=chosen, control_dir=ctl, job_id=job_id,
        restart_count=restart_count_from(environ),
        rank=rank_from(environ),
        world_size=_first_int(environ, ("WORLD_SIZE", "SLURM_NTASKS"), 1, 1),
        request_signal=sig, grace_s=grace_s, launch=launch_from(environ),
        keep=keep if keep is not None else _int(environ, "HAI_CHECKPOINT_KEEP", DEFAULT_KEEP, 1),
    )
