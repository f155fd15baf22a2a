"""Checkpoint requests by signal: flag-only handlers, SIGTERM, grace expiry, ranks, threads."""

from __future__ import annotations

import builtins
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from hai_slurm.checkpoint import Checkpointer, Phase, read_job_report
from hai_slurm.checkpoint.env import job_env_from, parse_signal
from hai_slurm.checkpoint.signals import RequestListener
from hai_slurm.errors import CheckpointError


@pytest.fixture(autouse=True)
def _keep_random_state() -> Iterator[None]:
    """Loading restores Python's global RNG; give it back to the other tests untouched."""
    saved = random.getstate()
    yield
    random.setstate(saved)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HAI_CHECKPOINT_DIR": str(tmp_path / "ck"), "SLURM_JOB_ID": "9", **extra}


def test_handler_sets_flag_and_does_no_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """During signal delivery nothing is opened, written or printed; only the flag is set."""
    control = tmp_path / "ck" / ".hai" / "9"
    with Checkpointer.from_env(environ=environ(tmp_path)) as ck:
        before = {p.name: p.stat().st_mtime_ns for p in control.iterdir()}
        capsys.readouterr()
        calls: list[str] = []

        def spy(name: str, real: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return real(*args, **kwargs)
            return wrapper

        monkeypatch.setattr(builtins, "open", spy("open", builtins.open))
        monkeypatch.setattr(os, "open", spy("os.open", os.open))
        monkeypatch.setattr(os, "write", spy("os.write", os.write))
        monkeypatch.setattr(builtins, "print", spy("print", builtins.print))
        os.kill(os.getpid(), signal.SIGUSR2)
        pending = ck.listener.pending()  # a call: the Python-level handler has run by now
        monkeypatch.undo()
        assert pending is not None and pending.signal is signal.SIGUSR2
        assert calls == []
        assert capsys.readouterr().err == ""
        assert {p.name: p.stat().st_mtime_ns for p in control.iterdir()} == before
        assert ck.requested()  # the step boundary is where the work happens
    assert "checkpoint requested by SIGUSR2" in capsys.readouterr().err


def test_sigterm_triggers_the_save_path_and_never_expires(tmp_path: Path) -> None:
    """Slurm's own preemption (SIGTERM) is a request that outlives the grace time."""
    clock = FakeClock()
    with Checkpointer.from_env(environ=environ(tmp_path), grace_s=5, clock=clock) as ck:
        os.kill(os.getpid(), signal.SIGTERM)
        clock.now += 3600
        assert ck.requested()
        pending = ck.listener.pending()
        assert pending is not None and pending.signal is signal.SIGTERM
        ck.save({"step": 4})
        with pytest.raises(SystemExit) as exc:
            ck.acknowledge_and_exit()
    assert exc.value.code == 75
    report = read_job_report(tmp_path / "ck" / ".hai" / "9", "9", os.geteuid())
    assert report.ack is not None and report.ack.request_signal == "SIGTERM"
    assert report.phase is not None and report.phase.phase is Phase.EXITING


def test_request_expires_after_grace_time(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A USR2 request not seen at a step boundary within the grace time is dropped, with a note."""
    clock = FakeClock()
    with Checkpointer.from_env(environ=environ(tmp_path), grace_s=5, clock=clock) as ck:
        os.kill(os.getpid(), signal.SIGUSR2)
        clock.now += 4
        assert ck.requested()
        clock.now += 2
        assert not ck.requested()
        assert not ck.requested()
    assert "expired: no step boundary within 5 s" in capsys.readouterr().err


def test_a_request_sent_again_counts_from_its_latest_arrival(tmp_path: Path) -> None:
    """A request arrives during a long step (an evaluation) and the scheduler, still waiting,
    sends it again 100 s later: at the next boundary, 5 s after the second arrival, it is a
    request (grace 60 s). (Before: the grace counted from the first arrival, so the fresh
    request was dropped with the old one.)"""
    clock = FakeClock()
    with Checkpointer.from_env(environ=environ(tmp_path), grace_s=60, clock=clock) as ck:
        os.kill(os.getpid(), signal.SIGUSR2)
        clock.now += 100
        os.kill(os.getpid(), signal.SIGUSR2)
        clock.now += 5
        assert ck.requested()


def test_a_sigterm_arriving_while_a_request_expires_is_kept(tmp_path: Path) -> None:
    """The old USR2 request expires at this boundary and Slurm's SIGTERM arrives while the
    expiry is being logged (the log may write to a slow shared file system): the SIGTERM is a
    request at this very boundary. (Before: clearing the expired request wiped it, and the job
    trained on until SIGKILL without saving.)"""
    clock = FakeClock()

    def log(message: str) -> None:
        if "expired" in message:
            os.kill(os.getpid(), signal.SIGTERM)

    with Checkpointer.from_env(environ=environ(tmp_path), grace_s=5, clock=clock,
                               log=log) as ck:
        os.kill(os.getpid(), signal.SIGUSR2)
        clock.now += 10
        assert ck.requested()
        pending = ck.listener.pending()
        assert pending is not None and pending.signal is signal.SIGTERM


def test_configured_signal_and_previous_handler_chained_and_restored(tmp_path: Path) -> None:
    """HAI_CHECKPOINT_SIGNAL picks the signal; an earlier handler still runs and comes back."""
    seen: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    old = signal.signal(signal.SIGHUP, previous)
    try:
        env = environ(tmp_path, HAI_CHECKPOINT_SIGNAL="HUP")
        with Checkpointer.from_env(environ=env) as ck:
            os.kill(os.getpid(), signal.SIGHUP)
            assert ck.requested()
            assert seen == [signal.SIGHUP]
            assert signal.getsignal(signal.SIGHUP) != previous
        assert signal.getsignal(signal.SIGHUP) == previous
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, old)


def test_not_in_main_thread_installs_nothing(tmp_path: Path) -> None:
    """From a worker thread handlers cannot be installed: say so, leave handlers alone."""
    messages: list[str] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            ck = Checkpointer.from_env(environ=environ(tmp_path), log=messages.append)
            assert not ck.listener.installed
            ck.close()
        except BaseException as err:  # handed to the main thread below
            errors.append(err)

    worker = threading.Thread(target=build)
    worker.start()
    worker.join()
    assert errors == []
    assert any("not in the main thread" in m for m in messages)
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


def test_other_ranks_learn_of_the_request_and_do_not_write(tmp_path: Path) -> None:
    """Rank 0 sees USR2; rank 1 (a thread) learns through the control-dir flag file, both agree
    on the step; only rank 0 writes the single-state checkpoint and the ack."""
    base = environ(tmp_path, WORLD_SIZE="2")
    rank0 = Checkpointer.from_env(environ={**base, "RANK": "0"})
    rank1 = Checkpointer.from_env(environ={**base, "RANK": "1"}, install_signals=False)
    seen: dict[str, Any] = {}

    def other_rank() -> None:
        step = 0
        while not rank1.requested(step):  # polls the flag file, at most every 0.2 s
            step += 1
        seen["step"] = step
        seen["saved"] = rank1.save({"step": step})
        seen["ack"] = rank1.acknowledge()

    try:
        assert not rank0.requested(0)
        worker = threading.Thread(target=other_rank)
        worker.start()
        os.kill(os.getpid(), signal.SIGUSR2)
        step = 1  # the first call waits until rank 1 has posted its step (maybe higher)
        while not rank0.requested(step):
            step += 1
        info = rank0.save({"step": step})
        assert info is not None
        assert rank0.acknowledge() is not None
        worker.join(timeout=30)
        assert seen["step"] == step and seen["saved"] is None and seen["ack"] is None
        assert sorted(p.name for p in (tmp_path / "ck").glob("ckpt-*.pkl")) == [info.file]
        assert not rank0.requested(step + 1)
    finally:
        rank0.close()
        rank1.close()


@pytest.mark.parametrize("when", ["clear", "is_set"])
def test_a_signal_at_any_point_of_an_expiry_is_kept(when: str) -> None:
    """SIGTERM arrives while an old USR2 request is being expired, right after the listener's
    event is cleared or right before it is looked at again: expire() keeps it pending either
    way. (Reviewed: one arriving just before the clearing was wiped.)"""
    listener = RequestListener((signal.SIGUSR2, signal.SIGTERM), chain=False)
    listener._handle(signal.SIGUSR2, None)
    judged = listener.latest()
    assert judged is not None
    event = listener._event

    class Racing(threading.Event):
        def clear(self) -> None:
            event.clear()
            if when == "clear":
                listener._handle(signal.SIGTERM, None)

        def is_set(self) -> bool:
            if when == "is_set":
                listener._handle(signal.SIGTERM, None)
            return event.is_set()

        def set(self) -> None:
            event.set()

    listener._event = Racing()
    assert not listener.expire(judged)
    listener._event = event
    pending = listener.pending()
    assert pending is not None and pending.signal is signal.SIGTERM


def test_a_request_another_rank_waits_on_does_not_expire(tmp_path: Path) -> None:
    """Both ranks got the request (file path: no torch.distributed). Rank 1 reaches a boundary
    at once and waits for rank 0 in the step agreement; rank 0's step takes 65 s, past its 60-s
    grace: its request does not expire there, it joins rank 1 and both get True. (Before: rank
    0 expired it and removed the request flag, and rank 1 waited in vain until its timeout.)"""
    base = environ(tmp_path, WORLD_SIZE="2", HAI_CHECKPOINT_GRACE="60")
    clock0 = FakeClock()
    rank0 = Checkpointer.from_env(environ={**base, "RANK": "0"}, clock=clock0,
                                  install_signals=False, sync_timeout_s=10)
    rank1 = Checkpointer.from_env(environ={**base, "RANK": "1"}, install_signals=False,
                                  sync_timeout_s=10)
    got: dict[str, object] = {}

    def other_rank() -> None:
        try:
            got["rank1"] = rank1.requested(5)
        except CheckpointError as err:
            got["rank1"] = str(err)

    try:
        rank0.listener.trigger(signal.SIGUSR2)
        rank1.listener.trigger(signal.SIGUSR2)
        worker = threading.Thread(target=other_rank)
        worker.start()
        deadline = time.monotonic() + 10
        while not rank0._ranks.agreeing():   # rank 1 has posted its step
            assert time.monotonic() < deadline, "rank 1 never posted its step"
            time.sleep(0.02)
        clock0.now += 65
        assert rank0.requested(5)
        worker.join(timeout=30)
        assert got["rank1"] is True
    finally:
        rank0.close()
        rank1.close()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("SLURM_RESTART_COUNT", "two", "SLURM_RESTART_COUNT='two' is not an integer"),
    ("HAI_CHECKPOINT_SIGNAL", "USR9", "HAI_CHECKPOINT_SIGNAL='USR9' is not a signal"),
    ("HAI_CHECKPOINT_SIGNAL", "KILL", "SIGKILL cannot be caught"),
    ("HAI_CHECKPOINT_GRACE", "soon", "HAI_CHECKPOINT_GRACE='soon' is not a number"),
    # a request that never expired (nan, inf) or expired at once (0, -5)
    ("HAI_CHECKPOINT_GRACE", "nan", "HAI_CHECKPOINT_GRACE='nan' is not a number of seconds "
     "above 0"),
    ("HAI_CHECKPOINT_GRACE", "inf", "HAI_CHECKPOINT_GRACE='inf' is not a number"),
    ("HAI_CHECKPOINT_GRACE", "0", "HAI_CHECKPOINT_GRACE='0' is not a number"),
    ("HAI_CHECKPOINT_GRACE", "-5", "HAI_CHECKPOINT_GRACE='-5' is not a number"),
    ("HAI_CHECKPOINT_KEEP", "0", "HAI_CHECKPOINT_KEEP='0' must be >= 1"),
])
def test_bad_environment_is_named(tmp_path: Path, key: str, value: str, message: str) -> None:
    """A malformed variable is reported with its name and value."""
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(")):
        job_env_from(environ(tmp_path, **{key: value}))


def test_environment_defaults_and_missing_directory(tmp_path: Path) -> None:
    """Defaults: USR2, control dir under the checkpoint dir; no directory at all is an error."""
    env = job_env_from(environ(tmp_path, SLURM_PROCID="3", SLURM_NTASKS="4"))
    assert env.request_signal is signal.SIGUSR2 and env.rank == 3 and env.world_size == 4
    assert env.control_dir == tmp_path / "ck" / ".hai" / "9"
    assert parse_signal("12") is signal.SIGUSR2 and parse_signal("sigterm") is signal.SIGTERM
    with pytest.raises(CheckpointError, match="set HAI_CHECKPOINT_DIR"):
        job_env_from({"SLURM_JOB_ID": "1"})
