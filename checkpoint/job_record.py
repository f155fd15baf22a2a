"""The job's own ``#HAI`` settings, read back from Slurm when its environment lacks them.

job_submit.lua adds ``HAI_CHECKPOINT_DIR`` (from ``#HAI --checkpoint-dir``) and
``HAI_CHECKPOINT_GRACE`` (the recorded grace) to every batch job's environment, on Slurm 22.05,
24.11 and 26.05 alike, so the batch script has them and so do its ``srun`` steps as long as srun
passes the environment on (the default). Some steps do not get them: ``sbatch --export=NONE`` or
``--export=VAR,...`` (srun inherits ``SLURM_EXPORT_ENV`` and passes only those), a launcher that
starts ranks with a clean environment, a job submitted before the plugin set variables. For
those, :func:`with_job_record` reads the ``hai:v1`` record job_submit.lua wrote into the job's
``admin_comment`` (only an administrator or the plugin can write that field, so it is trusted,
and it is still parsed strictly) and fills in what is missing.

Precedence, per setting: an explicit argument (``Checkpointer.from_env(directory=...)``,
``hai-run --grace``) > a variable already in the environment (job_submit.lua's, or the user's own
``export`` / ``sbatch --export=VAR=...``) > the job's record read here > the defaults.

One ``scontrol show job`` per step, not per rank: rank 0 runs it and writes what it found to
``~/.cache/hai-slurm/jobs/<cluster>.<job id>.<restart count>.json`` (the home directory, from the
password database, is the directory every node of a cluster normally shares; ``<cluster>`` is
``SLURM_CLUSTER_NAME``); the other ranks read that file, waiting up to :data:`SHARE_TIMEOUT_S`
for one written at most :data:`SHARE_FRESH_S` before they started. Job ids are reused (a
cluster reinstalled, two clusters of one name sharing home directories, a test bed made anew),
so rank 0 never trusts a file it did not write in this step, and the other ranks never trust an
old one. If rank 0's lookup fails, the file carries the error, so every rank stops with the same
message.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.errors import CheckpointError

ENV_DIR = "HAI_CHECKPOINT_DIR"
ENV_GRACE = "HAI_CHECKPOINT_GRACE"
RECORD_PREFIX = "hai:"
RECORD_V1 = "hai:v1:"
SHARE_TIMEOUT_S = 120.0
SHARE_POLL_S = 0.2
SHARE_FRESH_S = 120.0
"""A rank other than 0 takes rank 0's file only if it was written at most this long before the
rank started looking (srun starts a step's tasks within seconds of each other)."""
STALE_AFTER_S = 14 * 24 * 3600.0
MAX_SHARE_BYTES = 64 * 1024
SCONTROL_TIMEOUT_S = 60.0

_VALUE_RE = re.compile(r"(?:[A-Za-z0-9_./:@+,~-]|%[0-9A-F]{2})*")
_KEY_RE = re.compile(r"[a-z][a-z_]*")
_GRACE_RE = re.compile(r"[0-9]{1,9}")
_ADMIN_LINE_RE = re.compile(r"^ +AdminComment=(.*)$")


@dataclass(frozen=True)
class JobRecord:
    """The settings the job side takes from a ``hai:v1`` record."""

    checkpoint_dir: str | None
    grace: int


#: Runs ``scontrol show job ID`` and returns its standard output (tests pass a fake).
ShowJob = Callable[[str, Mapping[str, str]], str]


def _unsafe(job_id: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"job {job_id}: the hai record in its admin_comment is malformed ({what}); it is written "
        "by job_submit.lua and only administrators can change it: ask one to check the job "
        f"(`scontrol show job {job_id}`), or set {ENV_DIR} in the job script")


def _decode(job_id: str, key: str, value: str) -> str:
    if _VALUE_RE.fullmatch(value) is None:
        raise _unsafe(job_id, f"field {key!r} has characters job_submit.lua never writes")
    raw = bytearray()
    i = 0
    while i < len(value):
        if value[i] == "%":
            raw.append(int(value[i + 1:i + 3], 16))
            i += 3
        else:
            raw.append(ord(value[i]))
            i += 1
    return bytes(raw).decode("utf-8", "surrogateescape")


def parse_record(admin_comment: str, job_id: str) -> JobRecord | None:
    """The job-side settings of the ``hai:v1`` record in ``admin_comment``; ``None`` if it has no
    ``hai:`` segment at all. Strict: anything job_submit.lua would not have written raises
    :class:`CheckpointError` saying what is wrong (several records, another version, a repeated
    or malformed field, a relative or control-character checkpoint directory, a bad grace)."""
    segments = [s.strip() for s in admin_comment.split("|")]
    ours = [s for s in segments if s.startswith(RECORD_PREFIX)]
    if not ours:
        return None
    if len(ours) > 1:
        raise _unsafe(job_id, f"{len(ours)} hai records, job_submit.lua writes one")
    record = ours[0]
    if not record.startswith(RECORD_V1):
        version = record[len(RECORD_PREFIX):].split(":", 1)[0]
        raise CheckpointError(
            f"job {job_id}: its admin_comment holds a hai record of version {version!r}, this "
            "library reads v1; install the hai-slurm version of the cluster in the job's "
            "environment")
    fields: dict[str, str] = {}
    for item in record[len(RECORD_V1):].split(";"):
        key, eq, value = item.partition("=")
        if not eq or _KEY_RE.fullmatch(key) is None:
            raise _unsafe(job_id, f"{item!r} is not a key=value field")
        if key in fields:
            raise _unsafe(job_id, f"field {key!r} given twice")
        fields[key] = _decode(job_id, key, value)
    grace = fields.get("grace")
    if grace is None or _GRACE_RE.fullmatch(grace) is None or int(grace) == 0:
        raise _unsafe(job_id, f"grace {grace!r} is not a whole number of seconds from 1 to "
                              "999999999")
    directory = fields.get("checkpoint_dir")
    if directory is not None:
        if not directory.startswith("/"):
            raise _unsafe(job_id, f"checkpoint_dir {directory!r} is not an absolute path")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in directory):
            raise _unsafe(job_id, f"checkpoint_dir {directory!r} contains a control character")
    return JobRecord(checkpoint_dir=directory, grace=int(grace))


def admin_comment_of(show_job: str, job_id: str) -> str | None:
    """The ``AdminComment`` of ``scontrol show job JOB`` (multi-line form); ``None`` if Slurm
    printed none. Refuses output of another job, and output with more than one
    ``AdminComment=`` line (a user-set field, such as a working directory with a line break,
    imitating one), because it cannot tell which is Slurm's."""
    lines = show_job.splitlines()
    first = lines[0].split() if lines else []
    if not first or first[0] != f"JobId={job_id}":
        raise CheckpointError(
            f"`scontrol show job {job_id}` did not describe job {job_id} (it printed "
            f"{(lines[0] if lines else '')[:80]!r}); set {ENV_DIR} in the job script")
    found = [m.group(1) for line in lines if (m := _ADMIN_LINE_RE.match(line)) is not None]
    if len(found) > 1:
        raise CheckpointError(
            f"`scontrol show job {job_id}` printed {len(found)} AdminComment lines (a field of "
            "the job, such as its comment or working directory, contains a line break that "
            f"imitates one), so the job's settings cannot be told apart; set {ENV_DIR} in the "
            "job script")
    if not found:
        return None
    value = found[0].rstrip(" ")
    return None if value in ("", "(null)") else value


def scontrol_show_job(job_id: str, environ: Mapping[str, str]) -> str:
    """Run ``scontrol show job JOB`` with the job's environment (``SLURM_CONF``); its stdout
    (``job_id``: any name scontrol takes, such as ``ARRAY_TASK``)."""
    exe = shutil.which("scontrol", path=environ.get("PATH") or os.defpath)
    if exe is None:
        raise CheckpointError(
            f"{ENV_DIR} is not in the environment and scontrol is not on PATH to read the job's "
            f"#HAI settings; set {ENV_DIR} in the job script or let srun pass the environment on")
    try:
        proc = subprocess.run([exe, "show", "job", job_id], capture_output=True, text=True,
                              env=dict(environ), timeout=SCONTROL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CheckpointError(
            f"`scontrol show job {job_id}` did not answer within {SCONTROL_TIMEOUT_S:g} s; set "
            f"{ENV_DIR} in the job script") from None
    if proc.returncode != 0:
        raise CheckpointError(f"`scontrol show job {job_id}` failed: "
                              f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def record_name(job_id: str, environ: Mapping[str, str]) -> str:
    """The name ``scontrol show job`` prints this job's record alone for: ``ARRAY_TASK`` for
    an array task, ``JOB+0`` (the leader component) in a heterogeneous job, else the id. The
    bare id of an array's head task (the task started last keeps the array's id) prints every
    task of the array, and a het leader's every component: one AdminComment line each."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    if array.isdigit() and task.isdigit():
        return f"{array}_{task}"
    if environ.get("SLURM_JOB_ID_HET_GROUP_0", "").strip() == job_id:
        return f"{job_id}+0"
    return job_id


def record_from_slurm(job_id: str, environ: Mapping[str, str],
                      show_job: ShowJob = scontrol_show_job) -> JobRecord | None:
    """The job's record, read with one ``scontrol show job`` of its :func:`record_name`;
    ``None`` if it has none."""
    comment = admin_comment_of(show_job(record_name(job_id, environ), environ), job_id)
    return parse_record(comment, job_id) if comment is not None else None


def share_dir() -> Path:
    """``~/.cache/hai-slurm/jobs`` of the current user (home from the password database)."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "hai-slurm" / "jobs"


def _check_private(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CheckpointError(
            f"{what} {path} is not owned by uid {os.getuid()} or is writable by group/others; "
            f"remove it (it only caches a job's #HAI settings) or set {ENV_DIR} in the job script")


def _write_share(path: Path, payload: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(path.parent, path.parent.lstat(), "directory")
    now = time.time()
    for old in path.parent.iterdir():
        with contextlib.suppress(OSError):
            if now - old.lstat().st_mtime > STALE_AFTER_S:
                old.unlink()
    tmp = path.with_name(f".tmp-{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(payload, f)
    tmp.replace(path)


def share_path(job_id: str, restart: int, environ: Mapping[str, str],
               directory: Path | None = None) -> Path:
    """Where rank 0 shares the record of ``job_id``'s run ``restart`` (see the module doc)."""
    cluster = re.sub(r"[^A-Za-z0-9_.-]", "_", environ.get("SLURM_CLUSTER_NAME", "")) or "slurm"
    return (directory or share_dir()) / f"{cluster}.{job_id}.{restart}.json"


def _read_share(path: Path, job_id: str, restart: int,
                not_before: float) -> tuple[bool, JobRecord | None]:
    """(whether a file written since ``not_before`` is there, the shared record); raises rank
    0's error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False, None
    except OSError as err:
        raise CheckpointError(f"cannot read the job's shared settings {path}: "
                              f"{err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path} is not a regular file; remove it")
        _check_private(path, st, "file")
        if st.st_mtime < not_before:  # an earlier job's of the same id, or an earlier step's
            return False, None
        data = f.read(MAX_SHARE_BYTES + 1)
    try:
        doc = json.loads(data) if len(data) <= MAX_SHARE_BYTES else None
    except ValueError:
        doc = None
    ok = (isinstance(doc, dict) and doc.get("version") == 1 and doc.get("job_id") == job_id
          and doc.get("restart_count") == restart)
    if ok and isinstance(doc, dict) and isinstance(doc.get("error"), str):
        raise CheckpointError(f"rank 0 could not read the job's #HAI settings: {doc['error']}")
    if ok and isinstance(doc, dict) and "record" in doc and doc["record"] is None:
        return True, None
    rec = doc.get("record") if isinstance(doc, dict) else None
    if not ok or not isinstance(rec, dict) or set(rec) != {"checkpoint_dir", "grace"}:
        raise CheckpointError(f"{path} is not a settings file of job {job_id} run {restart}; "
                              "remove it")
    directory, grace = rec["checkpoint_dir"], rec["grace"]
    if (not (directory is None or (isinstance(directory, str) and directory.startswith("/")))
            or not isinstance(grace, int) or isinstance(grace, bool) or grace < 1):
        raise CheckpointError(f"{path} holds invalid settings; remove it")
    return True, JobRecord(directory, grace)


def shared_record(job_id: str, restart: int, rank: int, environ: Mapping[str, str], *,
                  show_job: ShowJob = scontrol_show_job, directory: Path | None = None,
                  timeout_s: float = SHARE_TIMEOUT_S, poll_s: float = SHARE_POLL_S,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> JobRecord | None:
    """The job's record with one Slurm query per step (see the module docstring)."""
    path = share_path(job_id, restart, environ, directory)
    if rank == 0:
        payload: dict[str, object] = {"version": 1, "job_id": job_id, "restart_count": restart}
        try:
            record = record_from_slurm(job_id, environ, show_job)
        except CheckpointError as err:
            payload["error"] = str(err)
            with contextlib.suppress(OSError, CheckpointError):
                _write_share(path, payload)
            raise
        payload["record"] = None if record is None else {
            "checkpoint_dir": record.checkpoint_dir, "grace": record.grace}
        try:
            _write_share(path, payload)
        except OSError as err:
            raise CheckpointError(f"cannot share the job's #HAI settings with the other ranks "
                                  f"in {path}: {err.strerror}; set {ENV_DIR} in the job "
                                  "script") from None
        return record
    end = clock() + timeout_s
    not_before = time.time() - SHARE_FRESH_S
    while True:
        there, found = _read_share(path, job_id, restart, not_before)
        if there:
            return found
        if clock() >= end:
            raise CheckpointError(
                f"rank {rank}: {ENV_DIR} is not in this step's environment and rank 0 did not "
                f"share the job's #HAI settings in {path} within {timeout_s:g} s (is the home "
                f"directory shared between nodes? did rank 0 start?); let srun pass the "
                f"environment on (`export SLURM_EXPORT_ENV=ALL` in the job script) or set "
                f"{ENV_DIR} there")
        sleep(poll_s)


def _unset(environ: Mapping[str, str], key: str) -> bool:
    return not environ.get(key, "").strip()


def needs_record(environ: Mapping[str, str]) -> bool:
    """True inside a Slurm job whose environment has no ``HAI_CHECKPOINT_DIR``."""
    return _unset(environ, ENV_DIR) and not _unset(environ, "SLURM_JOB_ID")


def with_job_record(environ: Mapping[str, str], *, rank: int, restart: int,
                    show_job: ShowJob = scontrol_show_job,
                    directory: Path | None = None,
                    timeout_s: float = SHARE_TIMEOUT_S) -> dict[str, str]:
    """``environ`` plus ``HAI_CHECKPOINT_DIR``/``HAI_CHECKPOINT_GRACE`` from the job's record
    for each of them that is unset (nothing is looked up outside Slurm or when the checkpoint
    directory is already set)."""
    out = dict(environ)
    if not needs_record(environ):
        return out
    job_id = environ["SLURM_JOB_ID"].strip()
    if "/" in job_id or job_id in (".", ".."):
        raise CheckpointError(f"job id {job_id!r} from SLURM_JOB_ID cannot name a file")
    record = shared_record(job_id, restart, rank, environ, show_job=show_job,
                           directory=directory, timeout_s=timeout_s)
    if record is None:
        return out
    if record.checkpoint_dir is not None:
        out[ENV_DIR] = record.checkpoint_dir
    if _unset(environ, ENV_GRACE):
        out[ENV_GRACE] = str(record.grace)
    return out
