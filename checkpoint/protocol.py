"""The job <-> daemon protocol: phase and acknowledgement files in a per-job control directory.

Job side: :func:`prepare_control_dir`, :func:`write_phase`, :func:`write_ack`, :func:`clear_ack`.
Daemon side: :func:`read_job_report`, which accepts a file only if it and its directory belong to
the job's owner and nobody else can write them — so another user cannot acknowledge (and get
requeued early) someone else's job. See ``PROTOCOL.md`` next to this module for the full contract.
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from hai_slurm.checkpoint.atomic import clean_stale_temps, fsync_dir, write_atomic
from hai_slurm.errors import CheckpointError

PROTOCOL_VERSION = 1
PHASE_FILE = "phase.json"
ACK_FILE = "ack.json"
REQUEST_FLAG_PREFIX = "request."  # request.<restart_count>: a rank saw a request (cross-rank)
CHILD_MARKER = "child-saved.json"  # hai-run: the wrapped child writes this after saving
EXIT_REQUEUE = 75  # exit code after an acknowledged save (EX_TEMPFAIL); slurm.conf RequeueExit=75
MAX_FILE_BYTES = 64 * 1024


class Phase(StrEnum):
    """What the job is doing; the daemon must not interrupt ``saving``."""

    COMPUTING = "computing"
    SAVING = "saving"
    SAVED = "saved"
    EXITING = "exiting"


@dataclass(frozen=True)
class LastCheckpoint:
    """The newest checkpoint the job has written durably (for lost-work estimates)."""

    step: int
    sha256: str
    file: str
    time: float


@dataclass(frozen=True)
class PhaseRecord:
    """Content of ``phase.json``."""

    job_id: str
    restart_count: int
    phase: Phase
    step: int | None
    time: float
    pid: int
    host: str
    last_checkpoint: LastCheckpoint | None = None
    request_signal: str | None = None
    source: str = "library"
    save_seconds: float | None = None
    """How long this run's newest durable save took (wall seconds, from the start of the save to
    the checkpoint being durable), as the job measured it: the daemon's estimate of what saving
    on request costs this job (never above its grace). None: no save measured in this run."""
    restart_seconds: float | None = None
    """How long this run took from its process start to its first step boundary, as the job
    measured it: the daemon's estimate of what restarting costs this job (never above the
    configured ``restart_cost``). None: not measured yet (or by ``hai-run``)."""


@dataclass(frozen=True)
class Ack:
    """Content of ``ack.json``: the job saved at ``step`` and may be requeued now."""

    job_id: str
    restart_count: int
    step: int | None
    sha256: str | None
    checkpoint: str | None
    time: float
    exit_code: int
    request_signal: str | None
    source: str = "library"


@dataclass(frozen=True)
class JobReport:
    """What the daemon learned from a control directory; ``problems`` says what was refused."""

    job_id: str
    phase: PhaseRecord | None
    ack: Ack | None
    problems: tuple[str, ...] = ()
    denied: bool = False
    """The reader may not open the control directory (EACCES: a home directory of mode 0700
    above it, say): nothing the job writes there will ever be seen by this reader."""

    @property
    def acknowledged(self) -> bool:
        return self.ack is not None

    @property
    def saving(self) -> bool:
        return self.phase is not None and self.phase.phase is Phase.SAVING


def control_dir_of(checkpoint_dir: str | os.PathLike[str], job_id: int | str) -> Path:
    """Where a job's control directory is under its checkpoint directory (unless the job sets
    ``HAI_CONTROL_DIR``): the place the daemon reads its phase and acknowledgement."""
    return Path(checkpoint_dir) / ".hai" / str(job_id)


# -- job side ----------------------------------------------------------------------------------

def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def squatted(path: Path, what: str, *, others_may_own: bool = False) -> str | None:
    """Why the existing directory ``path`` cannot be trusted with this job's files, or None.

    It must be owned by this user (or root, with ``others_may_own``, for a shared parent such as
    ``/tmp``), and nobody else may write it, except a sticky directory (where others cannot
    rename or remove our entries). A directory another user created could have its contents
    replaced or removed behind the job's back: silent loss of work on reload, a refusal to
    start, or an acknowledgement the daemon will not trust.
    """
    st = path.stat()
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} {path} is not a directory"
    if st.st_uid != me and not (others_may_own and st.st_uid == 0):
        return (f"{what} {path} belongs to {_who(st.st_uid)}, not to you ({_who(me)}): another "
                "user created it and could replace or remove what this job writes there; remove "
                "it (ask its owner) or choose another directory")
    if st.st_mode & 0o022 and not (others_may_own and st.st_mode & stat.S_ISVTX):
        return (f"{what} {path} is writable by group or others (mode "
                f"{stat.filemode(st.st_mode)}), so they could replace what this job writes "
                f"there; run `chmod go-w {path}` or choose another directory")
    return None


def _own_dir(path: Path) -> None:
    """Create ``path`` (mode 0755) or make sure it is ours; go-w it if it is ours."""
    path.mkdir(exist_ok=True, mode=0o755)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o022:
        path.chmod(stat.S_IMODE(st.st_mode) & ~0o022)  # ours, made under a lax umask


def prepare_control_dir(path: Path) -> None:
    """Create the control directory (mode 0755), or check it is ours and not writable by others.

    Its parent (``<checkpoint dir>/.hai`` by default) is checked too: a ``.hai`` another user
    created would let them swap the control directory (see :func:`squatted`).
    """
    try:
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.name == ".hai":
            _own_dir(path.parent)
        else:
            path.parent.mkdir(exist_ok=True)
        parent_problem = squatted(path.parent, "control directory parent",
                                  others_may_own=path.parent.name != ".hai")
        if parent_problem:
            raise CheckpointError(parent_problem + " (or set HAI_CONTROL_DIR)")
        path.mkdir(exist_ok=True, mode=0o755)
        st = os.lstat(path)
    except OSError as err:
        raise CheckpointError(
            f"cannot create control directory {path}: {err.strerror or err}; set HAI_CONTROL_DIR "
            "to a directory you can write, or fix the checkpoint directory's permissions") from err
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise CheckpointError(
            f"control directory {path} must be a real directory owned by you (uid {os.geteuid()}), "
            f"found owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}; remove it or set "
            "HAI_CONTROL_DIR")
    if st.st_mode & 0o022:
        path.chmod(stat.S_IMODE(st.st_mode) & ~0o022)
    clean_stale_temps(path)  # phase/ack temp files of a killed run


def _dump(record: object) -> bytes:
    return (json.dumps({"version": PROTOCOL_VERSION, **_plain(record)}, sort_keys=True)
            + "\n").encode()


def _plain(record: object) -> dict[str, Any]:
    data = asdict(record)  # type: ignore[call-overload]
    return {k: (v.value if isinstance(v, StrEnum) else v) for k, v in data.items()}


def write_phase(control_dir: Path, record: PhaseRecord) -> None:
    """Publish the job's phase atomically (readers see the old or the new file, never half).

    Not fsynced: the phase is transient, and the save path must not pay for it.
    """
    write_atomic(control_dir / PHASE_FILE, _dump(record), 0o644, durable=False)


def write_ack(control_dir: Path, ack: Ack) -> None:
    """Publish the acknowledgement atomically and durably."""
    write_atomic(control_dir / ACK_FILE, _dump(ack), 0o644)


def clear_ack(control_dir: Path) -> None:
    """Remove an acknowledgement left by an earlier run of the same job."""
    try:
        (control_dir / ACK_FILE).unlink()
    except FileNotFoundError:
        return
    fsync_dir(control_dir)


def make_phase(job_id: str, restart_count: int, phase: Phase, step: int | None, *,
               last: LastCheckpoint | None = None, request_signal: str | None = None,
               source: str = "library", save_seconds: float | None = None,
               restart_seconds: float | None = None) -> PhaseRecord:
    """A phase record stamped with the current time, pid and host."""
    return PhaseRecord(job_id=job_id, restart_count=restart_count, phase=phase, step=step,
                       time=time.time(), pid=os.getpid(), host=socket.gethostname(),
                       last_checkpoint=last, request_signal=request_signal, source=source,
                       save_seconds=save_seconds, restart_seconds=restart_seconds)


# -- daemon side -------------------------------------------------------------------------------

def _owner_problem(st: os.stat_result, what: str, expected_uid: int) -> str | None:
    if st.st_uid != expected_uid:
        return f"{what} is owned by uid {st.st_uid}, not by the job's owner uid {expected_uid}"
    if st.st_mode & 0o022:
        return f"{what} is writable by group or others (mode {stat.filemode(st.st_mode)})"
    return None


def _read_owned(dir_fd: int, name: str, expected_uid: int) -> tuple[dict[str, Any] | None, str]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        return None, ""
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None, f"{name} is a symbolic link; refused"
        return None, f"{name} cannot be opened ({err.strerror})"
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, f"{name} is not a regular file; refused"
        problem = _owner_problem(st, name, expected_uid)
        if problem:
            return None, problem + "; refused"
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        return None, f"{name} is larger than {MAX_FILE_BYTES} bytes; refused"
    try:
        doc = json.loads(raw)
    except ValueError as err:
        return None, f"{name} is not valid JSON ({err})"
    if not isinstance(doc, dict):
        return None, f"{name} is not a JSON object"
    version = doc.get("version")
    if not isinstance(version, int) or version < 1 or version > PROTOCOL_VERSION:
        return None, (f"{name} has protocol version {version!r}; this reader knows "
                      f"1..{PROTOCOL_VERSION}")
    return doc, ""


def _opt(doc: dict[str, Any], key: str, kind: type) -> Any:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {key!r} is not {kind.__name__}: {value!r}")
    return value


def _opt_seconds(doc: dict[str, Any], key: str) -> float | None:
    """An optional duration: a finite number >= 0, or None."""
    value = doc.get(key)
    if value is None:
        return None
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value) or value < 0):
        raise ValueError(f"field {key!r} is not a number of seconds >= 0: {value!r}")
    return float(value)


def _req(doc: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {key!r} missing or of the wrong type: {value!r}")
    return value


def _parse_phase(doc: dict[str, Any]) -> PhaseRecord:
    last_doc = doc.get("last_checkpoint")
    last = None
    if isinstance(last_doc, dict):
        last = LastCheckpoint(step=_req(last_doc, "step", int),
                              sha256=_req(last_doc, "sha256", str),
                              file=_req(last_doc, "file", str),
                              time=float(_req(last_doc, "time", (int, float))))
    try:
        phase = Phase(_req(doc, "phase", str))
    except ValueError:
        raise ValueError(f"unknown phase {doc.get('phase')!r}") from None
    return PhaseRecord(
        job_id=_req(doc, "job_id", str), restart_count=_req(doc, "restart_count", int),
        phase=phase, step=_opt(doc, "step", int), time=float(_req(doc, "time", (int, float))),
        pid=_req(doc, "pid", int), host=_req(doc, "host", str), last_checkpoint=last,
        request_signal=_opt(doc, "request_signal", str), source=str(doc.get("source", "library")),
        save_seconds=_opt_seconds(doc, "save_seconds"),
        restart_seconds=_opt_seconds(doc, "restart_seconds"))


def _parse_ack(doc: dict[str, Any]) -> Ack:
    return Ack(
        job_id=_req(doc, "job_id", str), restart_count=_req(doc, "restart_count", int),
        step=_opt(doc, "step", int), sha256=_opt(doc, "sha256", str),
        checkpoint=_opt(doc, "checkpoint", str), time=float(_req(doc, "time", (int, float))),
        exit_code=_req(doc, "exit_code", int), request_signal=_opt(doc, "request_signal", str),
        source=str(doc.get("source", "library")))


def read_job_report(control_dir: str | os.PathLike[str], job_id: str, expected_uid: int, *,
                    restart_count: int | None = None, not_before: float | None = None) -> JobReport:
    """Read a job's phase and acknowledgement, trusting only files its owner wrote.

    ``expected_uid`` comes from Slurm (the job's UserId), never from the files. A record is refused
    (and the reason added to ``problems``) when the directory or file is not owned by that uid, is
    writable by group/others, is a symlink or not a regular file, is malformed, names another job,
    another ``restart_count`` (when given) or, for the ack, is older than ``not_before`` (epoch s).
    Never raises for what the job wrote; a missing directory is a problem, not an error.
    """
    problems: list[str] = []
    path = Path(control_dir)
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        reason = ("is a symbolic link or not a directory" if err.errno in (errno.ELOOP,
                  errno.ENOTDIR) else err.strerror or str(err))
        return JobReport(job_id, None, None, (f"control directory {path}: {reason}",),
                         denied=err.errno in (errno.EACCES, errno.EPERM))
    try:
        problem = _owner_problem(os.fstat(dir_fd), f"control directory {path}", expected_uid)
        if problem:
            return JobReport(job_id, None, None, (problem + "; nothing in it is trusted",))
        phase_doc, why = _read_owned(dir_fd, PHASE_FILE, expected_uid)
        ack_doc, why_ack = _read_owned(dir_fd, ACK_FILE, expected_uid)
    finally:
        os.close(dir_fd)
    problems += [p for p in (why, why_ack) if p]
    phase: PhaseRecord | None = None
    ack: Ack | None = None
    if phase_doc is not None:
        try:
            phase = _parse_phase(phase_doc)
        except ValueError as err:
            problems.append(f"{PHASE_FILE}: {err}")
    if ack_doc is not None:
        try:
            ack = _parse_ack(ack_doc)
        except ValueError as err:
            problems.append(f"{ACK_FILE}: {err}")
    for name, rec in ((PHASE_FILE, phase), (ACK_FILE, ack)):
        if rec is None:
            continue
        if rec.job_id != job_id:
            problems.append(f"{name} is for job {rec.job_id}, not {job_id}; refused")
        elif restart_count is not None and rec.restart_count != restart_count:
            problems.append(f"{name} is from run {rec.restart_count} of the job, expected "
                            f"{restart_count} (stale); refused")
        else:
            continue
        if name == PHASE_FILE:
            phase = None
        else:
            ack = None
    if ack is not None and not_before is not None and ack.time < not_before:
        problems.append(f"{ACK_FILE} was written at {ack.time:.3f}, before the request at "
                        f"{not_before:.3f} (stale); refused")
        ack = None
    return JobReport(job_id, phase, ack, tuple(problems))


ReportReader = Callable[..., JobReport]
"""What reads a job's control directory: :func:`read_job_report` (tests pass their own)."""
