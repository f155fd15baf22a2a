"""Durable, atomic file writes: temp file in the same directory, fsync, ``os.replace``, fsync dir.

A reader sees either the old file or the complete new one, never a mix, and after the function
returns the new file survives a power cut (on file systems that honour fsync). Temp files carry
the prefix :data:`TEMP_PREFIX`; :func:`clean_stale_temps` removes the ones a killed writer left.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

TEMP_PREFIX = ".tmp-"


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (new names, renames) to stable storage."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_path(target: Path) -> Path:
    return target.with_name(f"{TEMP_PREFIX}{target.name}.{os.getpid()}.{secrets.token_hex(4)}")


class HashingWriter:
    """File-like object for ``pickle.dump``: hashes and counts every byte it writes.

    Large immutable ``bytes`` are hashed by a helper thread while this thread writes them (both
    release the GIL), so a save costs about max(hash, write) rather than their sum. Mutable
    buffers are hashed before ``write`` returns, since the caller may reuse them.
    """

    PARALLEL_MIN = 1 << 20
    CHUNK = 16 << 20

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self._hasher: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if isinstance(data, bytes) and len(data) >= self.PARALLEL_MIN:
            if self._hasher is None:
                self._hasher = ThreadPoolExecutor(1, thread_name_prefix="hai-checkpoint-hash")
            view = memoryview(data)
            for start in range(0, len(view), self.CHUNK):
                chunk = view[start:start + self.CHUNK]
                self._last = self._hasher.submit(self._hash.update, chunk)  # in order: 1 worker
                self._write_all(chunk)
        else:
            self._drain()
            self._hash.update(data)
            self._write_all(memoryview(data))
        self.size += len(data)
        return len(data)

    def _write_all(self, view: memoryview) -> None:
        while view:
            written = self._raw.write(view)
            if written is None:  # non-blocking file: not used here, but be exact
                continue
            view = view[written:]

    def _drain(self) -> None:
        if self._last is not None:
            self._last.result()
            self._last = None

    def close(self) -> None:
        """Wait for the hashing thread and stop it."""
        self._drain()
        if self._hasher is not None:
            self._hasher.shutdown()
            self._hasher = None

    def hexdigest(self) -> str:
        self._drain()
        return self._hash.hexdigest()


@dataclass(frozen=True)
class Written:
    """Result of an atomic write: where the file is, its size and sha256."""

    path: Path
    size: int
    sha256: str


@contextmanager
def atomic_writer(target: Path, mode: int = 0o644, *, durable: bool = True
                  ) -> Iterator[HashingWriter]:
    """Yield a hashing writer; on clean exit the temp file is fsynced and renamed over ``target``.

    ``durable=False`` skips the fsync: still atomic for readers, but a power cut may lose the
    file (right for transient status such as the job's phase).

    On an exception the temp file is removed and ``target`` is untouched. The directory itself is
    *not* fsynced here (callers renaming several files fsync it once, see :func:`fsync_dir`).
    Read ``writer.size``/``writer.hexdigest()`` after the block.
    """
    temp = _temp_path(target)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb", buffering=0) as raw:
            os.fchmod(raw.fileno(), mode)  # independent of the umask
            writer = HashingWriter(raw)
            try:
                yield writer
            finally:
                writer.close()
            if durable:
                os.fsync(raw.fileno())
        temp.replace(target)
    except BaseException:
        with suppress(FileNotFoundError):
            temp.unlink()
        raise


def write_atomic(target: Path, data: bytes, mode: int = 0o644, *, sync_dir: bool = True,
                 durable: bool = True) -> Written:
    """Write ``data`` to ``target`` atomically and (unless ``durable=False``) durably."""
    with atomic_writer(target, mode, durable=durable) as writer:
        writer.write(data)
    if sync_dir and durable:
        fsync_dir(target.parent)
    return Written(target, writer.size, writer.hexdigest())


def clean_stale_temps(directory: Path) -> list[Path]:
    """Remove temp files left by killed writers in ``directory``; return what was removed.

    Only one writer may use a directory at a time (one job per checkpoint directory), so every
    temp file present at start belongs to a dead process.
    """
    removed: list[Path] = []
    try:
        names = [p.name for p in directory.iterdir()]
    except FileNotFoundError:
        return removed
    for name in names:
        if name.startswith(TEMP_PREFIX):
            path = directory / name
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed

