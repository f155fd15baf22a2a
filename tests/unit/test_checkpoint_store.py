"""Atomic, durable checkpoint files: manifest, keep-last-N, temp cleanup, damaged files."""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.checkpoint import Checkpointer
from hai_slurm.checkpoint.atomic import TEMP_PREFIX, atomic_writer
from hai_slurm.checkpoint.store import MANIFEST
from hai_slurm.errors import CheckpointError


@pytest.fixture(autouse=True)
def _keep_random_state() -> Iterator[None]:
    """Loading restores Python's global RNG; give it back to the other tests untouched."""
    saved = random.getstate()
    yield
    random.setstate(saved)


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HAI_CHECKPOINT_DIR": str(tmp_path / "ck"), "SLURM_JOB_ID": "42", **extra}


def ckpt(tmp_path: Path, **options: Any) -> Checkpointer:
    return Checkpointer.from_env(environ=env_for(tmp_path), install_signals=False, **options)


def payloads(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".pkl"))


def test_save_writes_payload_metadata_and_manifest(tmp_path: Path) -> None:
    """A save leaves a payload whose size and sha256 the manifest and .meta.json record."""
    with ckpt(tmp_path) as ck:
        info = ck.save({"step": 7, "w": [1.5, 2.5]})
    assert info is not None
    directory = tmp_path / "ck"
    payload = (directory / info.file).read_bytes()  # hashed here, not by the library
    size, digest = len(payload), hashlib.sha256(payload).hexdigest()
    manifest = json.loads((directory / MANIFEST).read_text())
    assert manifest["format"] == 1
    [entry] = manifest["checkpoints"]
    assert entry["file"] == info.file and entry["step"] == 7
    assert (entry["size"], entry["sha256"]) == (size, digest)
    meta = json.loads((directory / info.meta_name).read_text())
    assert meta == entry
    assert not [p for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_keep_last_n_removes_the_oldest(tmp_path: Path) -> None:
    """With keep=2 only the two newest checkpoints stay on disk and in the manifest."""
    with Checkpointer.from_env(environ=env_for(tmp_path), keep=2, install_signals=False) as ck:
        for step in (10, 20, 30, 40):
            ck.save({"step": step})
    directory = tmp_path / "ck"
    assert payloads(directory) == ["ckpt-00000003-step30.pkl", "ckpt-00000004-step40.pkl"]
    steps = [e["step"] for e in json.loads((directory / MANIFEST).read_text())["checkpoints"]]
    assert steps == [30, 40]
    assert len([p for p in directory.iterdir() if p.name.endswith(".meta.json")]) == 2


def test_stale_temp_files_are_removed_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    """Temp files left by a killed writer disappear when the next run starts, and it says so."""
    directory = tmp_path / "ck"
    directory.mkdir()
    stale = directory / f"{TEMP_PREFIX}ckpt-00000001-step5.pkl.999.abcd"
    stale.write_bytes(b"half a checkpoint")
    with ckpt(tmp_path):
        pass
    assert not stale.exists()
    assert f"removed {stale.name}, left in" in capsys.readouterr().err


def test_failed_write_leaves_target_and_no_temp(tmp_path: Path) -> None:
    """An exception while writing leaves the old file intact and no temp file behind."""
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_writer(target) as writer:
        writer.write(b"new, half")
        raise RuntimeError("disk on fire")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_corrupted_newest_falls_back_and_says_so(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A flipped byte in the newest checkpoint: resume from the previous one, naming both."""
    with ckpt(tmp_path) as ck:
        ck.save({"step": 100, "tag": "old"})
        newest = ck.save({"step": 200, "tag": "new"})
    assert newest is not None
    path = tmp_path / "ck" / newest.file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    capsys.readouterr()
    with ckpt(tmp_path) as ck:
        state = ck.load_latest()
    err = capsys.readouterr().err
    assert state == {"step": 100, "tag": "old"}
    assert f"skipping checkpoint {newest.file} (step 200): sha256 mismatch" in err
    assert "resuming from ckpt-00000001-step100.pkl (step 100" in err


def test_truncated_newest_checkpoint_is_skipped(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A payload cut short is detected by its size before anything is unpickled."""
    with ckpt(tmp_path) as ck:
        ck.save({"step": 1})
        newest = ck.save({"step": 2, "blob": b"x" * 10000})
    assert newest is not None
    path = tmp_path / "ck" / newest.file
    os.truncate(path, 100)
    with ckpt(tmp_path) as ck:
        assert ck.load_latest() == {"step": 1}
    assert "size is 100 bytes, manifest says" in capsys.readouterr().err


def test_truncated_manifest_loses_nothing(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A manifest cut in half is reported; the list is rebuilt from .meta.json files."""
    with ckpt(tmp_path) as ck:
        ck.save({"step": 1})
        ck.save({"step": 2})
    manifest = tmp_path / "ck" / MANIFEST
    raw = manifest.read_bytes()
    manifest.write_bytes(raw[: len(raw) // 2])
    with ckpt(tmp_path) as ck:
        assert ck.load_latest() == {"step": 2}
        ck.save({"step": 3})  # and saving after that still keeps the older ones listed
    assert "manifest.json is damaged" in capsys.readouterr().err
    steps = [e["step"] for e in json.loads(manifest.read_text())["checkpoints"]]
    assert steps == [1, 2, 3]


def test_all_damaged_means_fresh_start_with_a_note(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """If no checkpoint verifies, load_latest returns None and explains why."""
    with ckpt(tmp_path) as ck:
        info = ck.save({"step": 1})
    assert info is not None
    (tmp_path / "ck" / info.file).write_bytes(b"garbage")
    with ckpt(tmp_path) as ck:
        assert ck.load_latest() is None
    err = capsys.readouterr().err
    assert "no valid checkpoint among 1" in err and "starting fresh" in err


def test_empty_directory_is_a_fresh_start(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """No checkpoint yet: None and a note, not an error."""
    with ckpt(tmp_path) as ck:
        assert ck.load_latest() is None
    assert "no checkpoint in" in capsys.readouterr().err


def test_unreadable_directory_is_an_actionable_error(tmp_path: Path) -> None:
    """A checkpoint 'directory' that is a file: CheckpointError naming it and what to do."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    env = {"HAI_CHECKPOINT_DIR": str(not_a_dir), "SLURM_JOB_ID": "1",
           "HAI_CONTROL_DIR": str(tmp_path / "ctl")}
    with pytest.raises(CheckpointError, match=r"checkpoint directory .*file.*HAI_CHECKPOINT_DIR"):
        Checkpointer.from_env(environ=env, install_signals=False)


def test_pickle_written_by_another_user_is_refused(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Unpickling runs code: a payload owned by another uid is skipped, the older own one used."""
    with ckpt(tmp_path) as ck:
        ck.save({"step": 1})
        newest = ck.save({"step": 2})
    assert newest is not None
    os.chown(tmp_path / "ck" / newest.file, 12345, -1)
    with ckpt(tmp_path) as ck:
        assert ck.load_latest() == {"step": 1}
    assert "owned by uid 12345" in capsys.readouterr().err
    with ckpt(tmp_path, trust_other_owners=True) as ck:
        assert ck.load_latest() == {"step": 2}


def test_json_serializer_round_trip(tmp_path: Path) -> None:
    """serializer='json' stores JSON values and needs no trust in the file's writer."""
    with ckpt(tmp_path, serializer="json") as ck:
        info = ck.save({"step": 3, "w": [0.1, 0.2]})
    assert info is not None and info.file.endswith(".json")
    json.loads((tmp_path / "ck" / info.file).read_text())  # plain JSON on disk
    with ckpt(tmp_path, serializer="json") as ck:
        assert ck.load_latest() == {"step": 3, "w": [0.1, 0.2]}


def test_save_needs_a_step(tmp_path: Path) -> None:
    """A state without a step and no step= argument is refused with a hint."""
    with ckpt(tmp_path) as ck, pytest.raises(CheckpointError, match="pass step=N"):
        ck.save([1, 2, 3])


def test_orphaned_payload_is_removed_at_start(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A payload whose metadata never made it (crash mid-save/prune) is cleaned up at start."""
    with ckpt(tmp_path) as ck:
        ck.save({"step": 1})
        ck.save({"step": 2})
    orphan = tmp_path / "ck" / "ckpt-00000001-step0.pkl"
    (tmp_path / "ck" / "ckpt-00000001-step1.meta.json").unlink()
    (tmp_path / "ck" / "ckpt-00000001-step1.pkl").rename(orphan)
    with ckpt(tmp_path) as ck:
        assert ck.load_latest() == {"step": 2}
    assert not orphan.exists()
    assert "removed ckpt-00000001-step0.pkl" in capsys.readouterr().err


def test_unserializable_state_is_a_clear_error(tmp_path: Path) -> None:
    """A state pickle cannot handle: CheckpointError, phase back to computing, nothing written."""
    with ckpt(tmp_path) as ck:
        ck.save({"step": 1})
        with pytest.raises(CheckpointError, match="cannot serialize the state with pickle"):
            ck.save({"step": 2, "f": lambda: None})
    with ckpt(tmp_path, serializer="json") as ck, pytest.raises(
            CheckpointError, match="cannot serialize the state with json"):
        ck.save({"step": 3, "s": {1, 2}})
    assert payloads(tmp_path / "ck") == ["ckpt-00000001-step1.pkl"]
    phase = json.loads((tmp_path / "ck" / ".hai" / "42" / "phase.json").read_text())
    assert phase["phase"] == "computing"


def test_json_written_by_another_user_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The owner check covers every serializer: a JSON state owned by another uid is skipped."""
    with ckpt(tmp_path, serializer="json") as ck:
        ck.save({"step": 1})
        newest = ck.save({"step": 2})
    assert newest is not None
    os.chown(tmp_path / "ck" / newest.file, 12345, -1)
    with ckpt(tmp_path, serializer="json") as ck:
        assert ck.load_latest() == {"step": 1}
    assert "owned by uid 12345" in capsys.readouterr().err


def test_json_in_a_group_writable_directory_is_refused(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A directory others can write lets them plant JSON as much as pickle: nothing is loaded
    from it (the metadata saying "json" is as plantable as the payload)."""
    with ckpt(tmp_path, serializer="json") as ck:
        ck.save({"step": 1})
    (tmp_path / "ck").chmod(0o775)
    ck = Checkpointer(Checkpointer.from_env(environ=env_for(tmp_path, SLURM_PROCID="1"),
                                            install_signals=False).env, install_signals=False)
    with ck:
        assert ck.load_latest() is None
    assert "writable by group or others" in capsys.readouterr().err


def test_checkpoint_dir_of_another_user_is_refused_before_writing(tmp_path: Path) -> None:
    """A squatted checkpoint dir: a CheckpointError naming it and its owner, nothing written."""
    squat = tmp_path / "ck"
    squat.mkdir(mode=0o777)
    squat.chmod(0o777)
    os.chown(squat, 12345, 12345)
    with pytest.raises(CheckpointError, match=r"checkpoint directory .*ck belongs to uid 12345"):
        ckpt(tmp_path)
    assert list(squat.iterdir()) == []


def test_group_writable_checkpoint_dir_is_refused_with_the_chmod(tmp_path: Path) -> None:
    """Our own directory that others may write: refused, with the command that fixes it."""
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck").chmod(0o777)
    with pytest.raises(CheckpointError, match=r"writable by group or others .*chmod go-w"):
        ckpt(tmp_path)
    (tmp_path / "ck").chmod(0o755)
    with ckpt(tmp_path) as ck:
        assert ck.save({"step": 1}) is not None


def test_checkpoint_dir_made_under_a_lax_umask_is_not_group_writable(tmp_path: Path) -> None:
    """umask 002 (common on shared clusters) does not leave the library's own dirs writable."""
    old = os.umask(0o002)
    try:
        with ckpt(tmp_path) as ck:
            ck.save({"step": 1})
    finally:
        os.umask(old)
    for directory in (tmp_path / "ck", tmp_path / "ck" / ".hai", tmp_path / "ck" / ".hai" / "42"):
        assert directory.stat().st_mode & 0o022 == 0, directory


def test_squatted_hai_parent_is_refused(tmp_path: Path) -> None:
    """A `.hai` another user created in the checkpoint dir: refused, naming `.hai` and owner."""
    (tmp_path / "ck").mkdir()
    hai = tmp_path / "ck" / ".hai"
    hai.mkdir()
    hai.chmod(0o777)
    os.chown(hai, 12345, 12345)
    with pytest.raises(CheckpointError, match=r"control directory parent .*\.hai belongs to uid "
                                              r"12345"):
        ckpt(tmp_path)


def test_json_job_never_unpickles_even_when_trusting_other_owners(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The serializer comes from the checkpoint's metadata: a job that saves JSON (and so may
    have chosen trust_other_owners) does not unpickle a pickle checkpoint found beside its own."""
    with ckpt(tmp_path, serializer="json") as ck:
        ck.save({"step": 1})
    with ckpt(tmp_path) as ck:  # a pickle checkpoint, newer, in the same directory
        ck.save({"step": 2})
    with ckpt(tmp_path, serializer="json", trust_other_owners=True) as ck:
        assert ck.load_latest() == {"step": 1}
    assert "refusing to unpickle" in capsys.readouterr().err
