"""Sharded checkpoints on disk: one directory per save, one part per rank, a commit record.

Layout (format :data:`SHARDED_FORMAT`), inside the checkpoint directory::

    sharded-step0000001200-run1-0/      one checkpoint: step 1200, run 1 of the job, n = 0
      rank-00003/                       rank 3's own part directory (e.g. torch.save writes here)
      __3_0.distcp  .metadata           files written into the checkpoint itself (e.g. DCP's)
      .hai-part-00003.json              rank 3's part record: its files with size and sha256
      .hai-commit.json                  the commit: every part record's sha256; written last

A rank's part is every file under its part directory plus the files of the checkpoint directory
it owns by :class:`SharedFiles` patterns. The rank fsyncs them, hashes them and writes its part
record (atomic, durable). Rank 0 waits for every rank's record, checks the files they list exist
with their sizes, then writes the commit record (atomic, durable, directory fsynced). Without the
commit record a checkpoint does not exist for :func:`verify`: a rank that died before its part was
durable leaves an incomplete directory that loading skips, saying why.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hai_slurm.checkpoint.atomic import fsync_dir, write_atomic
from hai_slurm.errors import CheckpointError

SHARDED_FORMAT = 1
COMMIT = ".hai-commit.json"
COMMIT_KIND = "hai-sharded-checkpoint"
PART_KIND = "hai-checkpoint-part"
_DIR = re.compile(r"^sharded-step(\d{10})-run(\d+)-(\d+)$")
_CHUNK = 8 << 20


def part_record_name(rank: int) -> str:
    return f".hai-part-{rank:05d}.json"


def part_dir_name(rank: int) -> str:
    return f"rank-{rank:05d}"


def checkpoint_name(step: int, run: int, n: int) -> str:
    """``sharded-step<step>-run<restart count>-<n>``."""
    return f"sharded-step{step:010d}-run{run}-{n}"


def fresh_name(directory: Path, step: int, run: int) -> str:
    """A name no directory has yet: ``n`` is one more than any other of this run's (rank 0
    chooses it and the ranks use rank 0's, so a job that reuses the directory never writes into
    an older checkpoint of the same step and run)."""
    used = [int(m.group(3)) for p in candidates(directory)
            if (m := _DIR.match(p.name)) and int(m.group(2)) == run]
    return checkpoint_name(step, run, max(used, default=-1) + 1)


@dataclass(frozen=True)
class SharedFiles:
    """Which files directly in the checkpoint directory belong to which rank's part.

    ``per_rank`` patterns (``fnmatch``, ``{rank}`` replaced) are owned by that rank, ``rank0``
    patterns by rank 0 (a coordinator's file such as DCP's ``.metadata``).
    """

    per_rank: tuple[str, ...] = ()
    rank0: tuple[str, ...] = ()

    def patterns(self, rank: int) -> list[str]:
        own = [p.replace("{rank}", str(rank)) for p in self.per_rank]
        return own + list(self.rank0) if rank == 0 else own


NONE = SharedFiles()
DCP_FILES = SharedFiles(per_rank=("__{rank}_*", "__{rank}.metadata"), rank0=(".metadata",))


@dataclass(frozen=True)
class Part:
    """What the user's save or load function gets: where this rank's part goes."""

    checkpoint: Path   # the checkpoint directory of this save, shared by all ranks (DCP's path)
    directory: Path    # this rank's own part directory inside it
    rank: int
    world_size: int
    step: int


@dataclass(frozen=True)
class ShardedInfo:
    """A committed sharded checkpoint."""

    name: str
    step: int
    world_size: int
    sha256: str        # of the commit record
    time: float


def _hash_file(path: Path, *, sync: bool) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb", buffering=0) as handle:
        if sync:  # whoever wrote it, it is durable before it is listed
            os.fsync(handle.fileno())
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def part_files(checkpoint: Path, rank: int, shared: SharedFiles) -> list[str]:
    """The rank's files, as paths relative to the checkpoint directory, sorted."""
    found: list[str] = []
    own = checkpoint / part_dir_name(rank)
    for root, _dirs, files in os.walk(own):
        found += [str((Path(root) / f).relative_to(checkpoint)) for f in files]
    patterns = shared.patterns(rank)
    if patterns:
        for entry in checkpoint.iterdir():
            if any(fnmatch.fnmatchcase(entry.name, p) for p in patterns) and entry.is_file():
                found.append(entry.name)
    return sorted(set(found))


def write_part(part: Part, shared: SharedFiles, *, run: int, rng: dict[str, Any]) -> Path:
    """fsync and hash the rank's files, fsync their directories, write the part record."""
    files = []
    for rel in part_files(part.checkpoint, part.rank, shared):
        size, sha = _hash_file(part.checkpoint / rel, sync=True)
        files.append({"path": rel, "size": size, "sha256": sha})
    own = part.directory
    for root, _dirs, _files in os.walk(own):
        fsync_dir(Path(root))
    record = {"kind": PART_KIND, "format": SHARDED_FORMAT, "rank": part.rank,
              "world_size": part.world_size, "step": part.step, "run": run,
              "time": time.time(), "files": files, "rng": rng}
    path = part.checkpoint / part_record_name(part.rank)
    write_atomic(path, _dump(record), 0o644, sync_dir=True)
    return path


def _dump(value: object) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


def _read_json(path: Path) -> Any:
    return json.loads(path.read_bytes())


def _check_part(checkpoint: Path, rank: int, step: int, world: int) -> tuple[str, str]:
    """(sha256 of rank's part record, "") if present and consistent, else ("", reason)."""
    path = checkpoint / part_record_name(rank)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "", f"rank {rank} has no part record (its save did not finish)"
    try:
        doc = json.loads(raw)
        if doc.get("kind") != PART_KIND or doc.get("rank") != rank:
            raise ValueError("not a part record of this rank")
        if doc.get("step") != step or doc.get("world_size") != world:
            raise ValueError(f"step {doc.get('step')}/world {doc.get('world_size')}, expected "
                             f"{step}/{world}")
        for item in doc["files"]:
            st = (checkpoint / item["path"]).stat()
            if st.st_size != item["size"]:
                raise ValueError(f"{item['path']} has {st.st_size} bytes, record says "
                                 f"{item['size']}")
    except FileNotFoundError as err:
        return "", f"rank {rank}'s file {Path(err.filename).name} is missing"
    except (ValueError, KeyError, TypeError) as err:
        return "", f"rank {rank}'s part record is damaged ({err})"
    return hashlib.sha256(raw).hexdigest(), ""


def commit(checkpoint: Path, *, step: int, world_size: int, run: int, timeout_s: float,
           poll_s: float = 0.01, clock: Callable[[], float] = time.monotonic) -> ShardedInfo:
    """Rank 0: wait for every rank's part record, then write the commit record durably.

    Raises CheckpointError (and writes nothing) if a part is missing after ``timeout_s``.
    """
    deadline = clock() + timeout_s
    parts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    while True:
        for rank in range(world_size):
            if rank not in parts:
                sha, reasons[rank] = _check_part(checkpoint, rank, step, world_size)
                if sha:
                    parts[rank] = sha
        if len(parts) == world_size:
            break
        if clock() > deadline:
            why = "; ".join(reasons[r] for r in sorted(set(range(world_size)) - set(parts)))
            raise CheckpointError(
                f"checkpoint {checkpoint.name} not committed: {why} within {timeout_s:g} s. "
                "The previous checkpoint stays the newest")
        time.sleep(poll_s)
    now = time.time()
    record = {"kind": COMMIT_KIND, "format": SHARDED_FORMAT, "step": step, "run": run,
              "world_size": world_size, "time": now,
              "parts": [{"rank": r, "sha256": parts[r]} for r in range(world_size)]}
    data = _dump(record)
    write_atomic(checkpoint / COMMIT, data, 0o644, sync_dir=True)
    fsync_dir(checkpoint.parent)
    return ShardedInfo(checkpoint.name, step, world_size, hashlib.sha256(data).hexdigest(), now)


def candidates(directory: Path) -> list[Path]:
    """Sharded checkpoint directories, newest first (highest step, then run, then save)."""
    try:
        names = [p.name for p in directory.iterdir()]
    except FileNotFoundError:
        return []
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint directory {directory}: "
                              f"{err.strerror or err}") from err
    keyed = [(tuple(int(g) for g in m.groups()), n) for n in names if (m := _DIR.match(n))]
    return [directory / n for _k, n in sorted(keyed, reverse=True)]


def verify(checkpoint: Path, rank: int) -> tuple[ShardedInfo | None, dict[str, Any], str]:
    """Check a checkpoint for this rank: commit record, every part record, this rank's sha256s.

    Returns (info, this rank's part record or {}, "") when usable, else (None, {}, reason).
    """
    try:
        raw = (checkpoint / COMMIT).read_bytes()
    except FileNotFoundError:
        present = sorted(int(p.name[10:15]) for p in checkpoint.glob(".hai-part-*.json"))
        return None, {}, (f"incomplete, never committed (part records from rank(s) {present}); "
                          "a rank died or was killed while saving")
    try:
        doc = json.loads(raw)
        if doc.get("kind") != COMMIT_KIND:
            raise ValueError(f"not a {COMMIT_KIND} record")
        if doc.get("format", 0) > SHARDED_FORMAT:
            raise ValueError(f"format {doc.get('format')} is newer than this library")
        step, world = int(doc["step"]), int(doc["world_size"])
        expected = {int(p["rank"]): str(p["sha256"]) for p in doc["parts"]}
    except (ValueError, KeyError, TypeError) as err:
        return None, {}, f"commit record is damaged ({err})"
    for r in range(world):
        sha, reason = _check_part(checkpoint, r, step, world)
        if not sha:
            return None, {}, reason
        if sha != expected.get(r):
            return None, {}, f"rank {r}'s part record changed after the commit"
    own: dict[str, Any] = {}
    if rank < world:
        own = _read_json(checkpoint / part_record_name(rank))
        for item in own["files"]:
            _size, sha = _hash_file(checkpoint / item["path"], sync=False)
            if sha != item["sha256"]:
                return None, {}, (f"sha256 mismatch in rank {rank}'s file {item['path']} "
                                  f"(record {item['sha256'][:12]}..., file {sha[:12]}...)")
    info = ShardedInfo(checkpoint.name, step, world, hashlib.sha256(raw).hexdigest(),
                       float(doc.get("time", 0.0)))
    return info, own, ""


def is_committed(checkpoint: Path) -> bool:
    return (checkpoint / COMMIT).exists()


def prune(directory: Path, keep: int, *, protect: Iterable[str] = (),
          log: Callable[[str], None]) -> list[str]:
    """Rank 0, after a commit: keep the ``keep`` newest committed checkpoints, and remove older
    committed or incomplete ones (an incomplete one newer than the newest commit may still be
    being written, so it stays). Returns the names removed."""
    keep_names = set(protect)
    removed: list[str] = []
    committed = 0
    for path in candidates(directory):
        if is_committed(path):
            committed += 1
            if committed <= keep or path.name in keep_names:
                continue
        elif committed == 0 or path.name in keep_names:
            continue
        try:
            with contextlib.suppress(FileNotFoundError):
                (path / COMMIT).unlink()  # first: never listed as complete while half gone
            shutil.rmtree(path)
        except OSError as err:
            log(f"cannot remove old checkpoint {path} ({err.strerror}); delete it by hand")
            continue
        removed.append(path.name)
    return removed
