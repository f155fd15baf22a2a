"""Bit-identical resume after interruptions, RNG states, and asynchronous saves."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.checkpoint import EXIT_REQUEUE, Checkpointer, Phase, read_job_report
from hai_slurm.checkpoint.atomic import HashingWriter
from hai_slurm.checkpoint.store import CheckpointInfo, CheckpointStore, Serializer
from hai_slurm.errors import CheckpointError

TOTAL = 120


@pytest.fixture(autouse=True)
def _keep_random_state() -> Iterator[None]:
    """These tests reseed Python's global RNG; give it back to the other tests untouched."""
    saved = random.getstate()
    yield
    random.setstate(saved)


def environ(tmp_path: Path, restart: int) -> dict[str, str]:
    return {"HAI_CHECKPOINT_DIR": str(tmp_path / "ck"), "SLURM_JOB_ID": "7",
            "SLURM_RESTART_COUNT": str(restart)}


def python_step(state: dict[str, Any]) -> None:
    """One step of a toy 'training' that consumes Python's RNG (including gauss's cache)."""
    x = random.random()
    g = random.gauss(0.0, 1.0)
    state["w"] = state["w"] * 0.97 + x * g
    state["trace"].append(round(state["w"], 12))


def run(tmp_path: Path | None, restart: int, interrupt_at: int | None,
        step_fn: Callable[[dict[str, Any]], None], seed: Callable[[], None],
        **options: Any) -> tuple[dict[str, Any], float] | None:
    """Train to TOTAL; with ``interrupt_at`` a real SIGUSR2 arrives at that step and we exit."""
    if tmp_path is None:  # the uninterrupted reference: no checkpoints at all
        seed()
        state: dict[str, Any] = {"step": 0, "w": 0.0, "trace": []}
        for step in range(TOTAL):
            step_fn(state)
            state["step"] = step + 1
        return state, random.random()
    with Checkpointer.from_env(environ=environ(tmp_path, restart), save_every_steps=25,
                               **options) as ck:
        loaded = ck.load_latest()
        if loaded is None:
            seed()
            loaded = {"step": 0, "w": 0.0, "trace": []}
        state = loaded
        for step in range(state["step"], TOTAL):
            step_fn(state)
            state["step"] = step + 1
            if state["step"] == interrupt_at:
                os.kill(os.getpid(), signal.SIGUSR2)
            if ck.requested():
                ck.save(state)
                try:
                    ck.acknowledge_and_exit()
                except SystemExit as exc:
                    assert exc.code == EXIT_REQUEUE
                    return None
            if ck.due(state["step"]):
                ck.save(state)
        ck.wait()
        return state, random.random()


def interrupted_twice(tmp_path: Path, step_fn: Callable[[dict[str, Any]], None],
                      seed: Callable[[], None], disturb: Callable[[], None],
                      **options: Any) -> tuple[dict[str, Any], float] | None:
    assert run(tmp_path, 0, 37, step_fn, seed, **options) is None
    disturb()  # a new process would start with fresh generator states
    assert run(tmp_path, 1, 81, step_fn, seed, **options) is None
    disturb()
    return run(tmp_path, 2, None, step_fn, seed, **options)


def test_python_training_interrupted_twice_is_bit_identical(tmp_path: Path) -> None:
    """Two USR2 interruptions and resumes give exactly the uninterrupted result and RNG stream."""
    def seed() -> None:
        random.seed(1234)

    def disturb() -> None:
        random.seed(999)

    reference = run(None, 0, None, python_step, seed)
    resumed = interrupted_twice(tmp_path, python_step, seed, disturb)
    assert resumed is not None and reference is not None
    assert resumed[0]["trace"] == reference[0]["trace"]
    assert resumed[0]["w"] == reference[0]["w"]  # exact float equality, not approx
    assert resumed[1] == reference[1]  # the generator continues identically too
    ack = read_job_report(tmp_path / "ck" / ".hai" / "7", "7", os.geteuid())
    assert ack.phase is not None and ack.phase.phase is Phase.COMPUTING  # the last run finished


def test_async_saves_resume_identically(tmp_path: Path) -> None:
    """The same interrupted training with async saves ends bit-identical as well."""
    def seed() -> None:
        random.seed(5)

    def disturb() -> None:
        random.seed(6)

    reference = run(None, 0, None, python_step, seed)
    resumed = interrupted_twice(tmp_path, python_step, seed, disturb, async_save=True)
    assert resumed == reference


def test_numpy_training_interrupted_twice_is_bit_identical(tmp_path: Path) -> None:
    """numpy's global RNG is saved and restored when numpy is imported."""
    np = pytest.importorskip("numpy")

    def step_fn(state: dict[str, Any]) -> None:
        noise = np.random.standard_normal(4)
        state["w"] = float(state["w"] * 0.9 + noise.sum() + np.random.rand())
        state["trace"].append(state["w"])

    def seed() -> None:
        np.random.seed(42)

    def disturb() -> None:
        np.random.seed(7)

    reference = run(None, 0, None, step_fn, seed)
    reference_next = np.random.rand()
    resumed = interrupted_twice(tmp_path, step_fn, seed, disturb)
    assert resumed is not None and reference is not None
    assert resumed[0]["trace"] == reference[0]["trace"]
    assert np.random.rand() == reference_next  # numpy's stream continues identically


def test_async_save_snapshots_state_at_call_time(tmp_path: Path) -> None:
    """State mutated right after an async save() is not in the checkpoint; bytes equal sync's."""
    env = environ(tmp_path, 0)
    state: dict[str, Any] = {"step": 5, "values": list(range(1000))}
    random.seed(3)
    with Checkpointer.from_env(environ=env, async_save=True, install_signals=False) as ck:
        assert ck.save(state) is None
        state["values"].clear()
        state["step"] = 6
        info_async = ck.wait()
    random.seed(3)
    sync_env = {**env, "HAI_CHECKPOINT_DIR": str(tmp_path / "sync")}
    with Checkpointer.from_env(environ=sync_env, install_signals=False) as ck:
        info_sync = ck.save({"step": 5, "values": list(range(1000))})
    assert info_async is not None and info_sync is not None
    assert info_async.sha256 == info_sync.sha256
    with Checkpointer.from_env(environ=env, install_signals=False) as ck:
        assert ck.load_latest() == {"step": 5, "values": list(range(1000))}


class GatedStore(CheckpointStore):
    """A real store whose write waits for a gate: makes 'a save in progress' deterministic."""

    def __init__(self, directory: Path, gate: threading.Event) -> None:
        super().__init__(directory, keep=3, log=lambda _m: None)
        self.gate = gate

    def write(self, fill: Callable[[HashingWriter], None], *, step: int,
              serializer: Serializer, job_id: str, restart_count: int,
              now: float | None = None) -> CheckpointInfo:
        assert self.gate.wait(10)
        return super().write(fill, step=step, serializer=serializer, job_id=job_id,
                             restart_count=restart_count, now=now)


def test_save_in_progress_is_reported_and_ack_waits(tmp_path: Path) -> None:
    """While an async write runs the phase is 'saving'; acknowledge waits, then acks its sha."""
    env = environ(tmp_path, 0)
    gate = threading.Event()
    store = GatedStore(tmp_path / "ck", gate)
    control = tmp_path / "ck" / ".hai" / "7"
    with Checkpointer.from_env(environ=env, async_save=True, store=store) as ck:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ck.requested()
        ck.save({"step": 11})
        report = read_job_report(control, "7", os.geteuid())
        assert report.saving and not report.acknowledged
        opener = threading.Timer(0.3, gate.set)
        opener.start()
        started = time.monotonic()
        ack = ck.acknowledge()
        waited = time.monotonic() - started
    assert waited >= 0.25
    assert ack is not None and ack.step == 11
    assert ck.last_checkpoint is not None and ack.sha256 == ck.last_checkpoint.sha256
    report = read_job_report(control, "7", os.geteuid())
    assert report.acknowledged and report.ack is not None and report.ack.step == 11
    assert report.phase is not None and report.phase.phase is Phase.SAVED


def test_background_write_error_is_raised_at_next_save(tmp_path: Path) -> None:
    """A failing background write surfaces at the next save(); older checkpoints survive."""
    env = environ(tmp_path, 0)
    directory = tmp_path / "ck"
    with Checkpointer.from_env(environ=env, async_save=True, install_signals=False) as ck:
        ck.save({"step": 1})
        first = ck.wait()
        # Make the manifest's rename fail (works as root, unlike permission bits).
        (directory / "manifest.json").unlink()
        (directory / "manifest.json").mkdir()
        assert ck.save({"step": 2}) is None  # returns at once; the write fails in the background
        with pytest.raises(CheckpointError, match="could not write checkpoint"):
            ck.save({"step": 3})
        (directory / "manifest.json").rmdir()
    assert first is not None and (directory / first.file).exists()
    with Checkpointer.from_env(environ=env, install_signals=False) as ck:
        state = ck.load_latest()
    assert state == {"step": 2}  # payload and metadata of step 2 were complete
