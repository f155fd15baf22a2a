"""Checkpoint files on disk: payload + per-checkpoint metadata + a manifest, written atomically.

Layout of a checkpoint directory (format version :data:`FORMAT_VERSION`)::

    ckpt-00000007-step1200.pkl         the payload (pickle or JSON, see Serializer)
    ckpt-00000007-step1200.meta.json   its metadata: CheckpointInfo as JSON
    manifest.json                      {"kind", "format", "updated", "checkpoints": [info, ...]}

Every file is written with :func:`~hai_slurm.checkpoint.atomic.atomic_writer` (temp file, fsync,
``os.replace``) and the directory is fsynced. The order is payload, metadata, manifest; old
checkpoints beyond ``keep`` are removed only after the new manifest is durable. A damaged manifest
costs nothing: the list is rebuilt from the ``.meta.json`` files. A damaged payload is detected by
its sha256 and size, and loading falls back to the next older checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from hai_slurm.checkpoint.atomic import (
    HashingWriter,
    atomic_writer,
    clean_stale_temps,
    write_atomic,
)
from hai_slurm.checkpoint.protocol import squatted
from hai_slurm.errors import CheckpointError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_KIND = "hai-checkpoint-manifest"
_NAME = re.compile(r"^ckpt-(\d{8})-step(\d+)\.(pkl|json)$")
_META = re.compile(r"^ckpt-(\d{8})-step(\d+)\.meta\.json$")

Log = Callable[[str], None]


class Serializer(StrEnum):
    """How the payload is encoded.

    ``pickle`` takes any picklable object; unpickling runs code chosen by whoever wrote the file.
    ``json`` takes only JSON values (dicts, lists, str, int, float, bool, None; tuples come back
    as lists). Either way the loader refuses payloads owned by another user or sitting in a
    directory others can write: a planted JSON state is as much an injection as a pickle, and
    which serializer applies is read from metadata that is just as plantable.
    """

    PICKLE = "pickle"
    JSON = "json"

    @property
    def suffix(self) -> str:
        return "pkl" if self is Serializer.PICKLE else "json"


@dataclass(frozen=True)
class CheckpointInfo:
    """Metadata of one checkpoint, as stored in the manifest and the ``.meta.json`` file."""

    file: str
    seq: int
    step: int
    size: int
    sha256: str
    time: float
    serializer: str
    format: int
    job_id: str
    restart_count: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> CheckpointInfo:
        """Parse and validate; raises ValueError naming the bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        types: dict[str, tuple[type, ...]] = {
            "file": (str,), "seq": (int,), "step": (int,), "size": (int,), "sha256": (str,),
            "time": (int, float), "serializer": (str,), "format": (int,), "job_id": (str,),
            "restart_count": (int,)}
        for key, allowed in types.items():
            if not isinstance(data.get(key), allowed) or isinstance(data.get(key), bool):
                raise ValueError(f"field {key!r} missing or not {allowed[0].__name__}: "
                                 f"{data.get(key)!r}")
        if data["format"] > FORMAT_VERSION:
            raise ValueError(f"format {data['format']} is newer than this library "
                             f"({FORMAT_VERSION}); upgrade hai-slurm")
        if not _NAME.match(data["file"]):
            raise ValueError(f"file name {data['file']!r} is not a checkpoint name")
        if data["serializer"] not in {s.value for s in Serializer}:
            raise ValueError(f"unknown serializer {data['serializer']!r}")
        return cls(**{k: data[k] for k in types})

    @property
    def meta_name(self) -> str:
        return self.file.rsplit(".", 1)[0] + ".meta.json"


def _dump_json(value: object) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


class CheckpointStore:
    """One job's checkpoint directory. Not thread-safe: one writer at a time (see Checkpointer)."""

    def __init__(self, directory: Path, *, keep: int, log: Log,
                 trust_other_owners: bool = False) -> None:
        if keep < 1:
            raise CheckpointError(f"keep must be >= 1 (how many checkpoints to keep), got {keep}")
        self.directory = directory
        self.keep = keep
        self._log = log
        self._trust_other_owners = trust_other_owners
        self._pruner: threading.Thread | None = None

    # -- reading -------------------------------------------------------------------------------

    def _listdir(self) -> list[str]:
        try:
            return [p.name for p in self.directory.iterdir()]
        except FileNotFoundError:
            return []
        except OSError as err:
            raise CheckpointError(
                f"cannot read checkpoint directory {self.directory}: {err.strerror or err}. "
                f"It must be a directory that uid {os.geteuid()} can read and write "
                f"(check `ls -ld {self.directory}`), or point HAI_CHECKPOINT_DIR elsewhere"
            ) from err

    def _read_manifest(self) -> list[CheckpointInfo] | None:
        path = self.directory / MANIFEST
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            self._log(f"cannot read {path} ({err.strerror}); using the .meta.json files instead")
            return None
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("kind") != MANIFEST_KIND:
                raise ValueError(f"not a {MANIFEST_KIND} document")
            items = doc.get("checkpoints")
            if not isinstance(items, list):
                raise ValueError("field 'checkpoints' missing or not a list")
            return [CheckpointInfo.from_json(item) for item in items]
        except ValueError as err:  # JSONDecodeError is a ValueError
            self._log(f"{path} is damaged ({err}); rebuilding the checkpoint list from the "
                      ".meta.json files")
            return None

    def entries(self) -> list[CheckpointInfo]:
        """Known checkpoints, oldest first: the manifest's plus any complete one it misses."""
        names = self._listdir()
        by_seq: dict[int, CheckpointInfo] = {}
        for info in self._read_manifest() or []:
            by_seq[info.seq] = info
        for name in names:
            match = _META.match(name)
            if not match or int(match.group(1)) in by_seq:
                continue
            try:
                info = CheckpointInfo.from_json(json.loads((self.directory / name).read_bytes()))
            except (OSError, ValueError) as err:
                self._log(f"ignoring {self.directory / name}: {err}")
                continue
            by_seq[info.seq] = info
        return [by_seq[seq] for seq in sorted(by_seq)]

    def _next_seq(self, entries: list[CheckpointInfo]) -> int:
        seqs = [e.seq for e in entries]
        for name in self._listdir():
            match = _NAME.match(name) or _META.match(name)
            if match:
                seqs.append(int(match.group(1)))
        return max(seqs, default=0) + 1

    def _check_owner(self, st: os.stat_result, what: Path) -> str | None:
        if self._trust_other_owners:
            return None
        if st.st_uid != os.geteuid():
            return (f"{what} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}); "
                    "refusing to load a checkpoint someone else may have written "
                    "(pass trust_other_owners=True if you trust it)")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (f"{what} is writable by group or others (mode {stat.filemode(st.st_mode)}); "
                    "refusing to load a checkpoint others could have replaced "
                    f"(`chmod go-w {what}`, or trust_other_owners=True)")
        return None

    def verify(self, info: CheckpointInfo) -> tuple[bytes | None, str]:
        """Read and check one checkpoint: (payload, "") when valid, (None, reason) otherwise."""
        path = self.directory / info.file
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None, "file is missing"
        except OSError as err:
            return None, f"cannot open it ({err.strerror})"
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            # Every serializer: the metadata naming it is as plantable as the payload, and a
            # JSON state written by someone else is as much an injection as a pickle.
            problem = self._check_owner(st, path) or self._check_owner(
                self.directory.stat(), self.directory)
            if problem:
                return None, problem
            if st.st_size != info.size:
                return None, f"size is {st.st_size} bytes, manifest says {info.size} (truncated?)"
            data = handle.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != info.sha256:
            return None, f"sha256 mismatch (manifest {info.sha256[:12]}..., file {digest[:12]}...)"
        return data, ""

    # -- writing -------------------------------------------------------------------------------

    def prepare(self) -> list[Path]:
        """Create the directory if needed (or check that it is yours and nobody else can write it:
        :func:`~hai_slurm.checkpoint.protocol.squatted`); remove stale temp files and orphaned
        payloads."""
        try:
            self.directory.parent.mkdir(parents=True, exist_ok=True)
            self.directory.mkdir(exist_ok=True, mode=0o755)  # not group-writable under umask 002
            problem = None if self._trust_other_owners or not self.directory.is_dir() else (
                squatted(self.directory, "checkpoint directory"))
        except OSError as err:
            raise CheckpointError(
                f"cannot create checkpoint directory {self.directory}: {err.strerror or err}; "
                "choose a directory you can write (HAI_CHECKPOINT_DIR or directory=)") from err
        if problem:  # checked before anything is written or removed there
            raise CheckpointError(f"{problem} (HAI_CHECKPOINT_DIR or directory=; "
                                  "trust_other_owners=True if you trust its owner)")
        names = self._listdir()  # raises a clear CheckpointError if it is not a readable dir
        removed = clean_stale_temps(self.directory)
        known = {e.file for e in self.entries()}
        newest = max((e.seq for e in self.entries()), default=0)
        for name in names:  # payloads whose metadata was pruned (or never written) before a crash
            match = _NAME.match(name)
            if match and name not in known and int(match.group(1)) < newest:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / name).unlink()
                    removed.append(self.directory / name)
        return removed

    def write(self, fill: Callable[[HashingWriter], None], *, step: int, serializer: Serializer,
              job_id: str, restart_count: int, now: float | None = None) -> CheckpointInfo:
        """Write a new checkpoint whose payload ``fill`` streams into the writer; prune old ones."""
        self.wait_pruning()
        entries = self.entries()
        seq = self._next_seq(entries)
        name = f"ckpt-{seq:08d}-step{step}.{serializer.suffix}"
        try:
            with atomic_writer(self.directory / name, 0o600) as writer:
                fill(writer)
            info = CheckpointInfo(
                file=name, seq=seq, step=step, size=writer.size, sha256=writer.hexdigest(),
                time=time.time() if now is None else now, serializer=serializer.value,
                format=FORMAT_VERSION, job_id=job_id, restart_count=restart_count)
            write_atomic(self.directory / info.meta_name, _dump_json(info.to_json()), 0o600,
                         sync_dir=True)
            kept = [*entries, info][-self.keep:]
            manifest = {"kind": MANIFEST_KIND, "format": FORMAT_VERSION, "updated": info.time,
                        "checkpoints": [e.to_json() for e in kept]}
            write_atomic(self.directory / MANIFEST, _dump_json(manifest), 0o644, sync_dir=True)
        except OSError as err:
            raise CheckpointError(
                f"could not write checkpoint {self.directory / name}: {err.strerror or err}. "
                "Older checkpoints are untouched; free space or fix permissions") from err
        old = entries[: max(0, len(entries) + 1 - self.keep)]
        if old:  # unlinking big files takes a while: do it off the save path
            self._pruner = threading.Thread(target=self._remove, args=(old,), daemon=True,
                                            name="hai-checkpoint-prune")
            self._pruner.start()
        return info

    def _remove(self, old: list[CheckpointInfo]) -> None:
        for entry in old:
            for stale in (entry.meta_name, entry.file):  # metadata first: never listed, half gone
                try:
                    (self.directory / stale).unlink()
                except FileNotFoundError:
                    continue
                except OSError as err:
                    self._log(f"cannot remove old checkpoint file {self.directory / stale} "
                              f"({err.strerror}); delete it by hand to free the space")

    def wait_pruning(self) -> None:
        """Wait until checkpoints beyond ``keep`` are removed (done in a background thread)."""
        pruner, self._pruner = self._pruner, None
        if pruner is not None:
            pruner.join()
