"""Save times as jobs measure them: the library publishes its newest save's duration in
``phase.json``; the daemon reads it back, bounded and trusting only the job owner's files."""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.checkpoint import Checkpointer, JobReport, Phase, read_job_report
from hai_slurm.checkpoint.protocol import (
    PHASE_FILE,
    control_dir_of,
    make_phase,
    prepare_control_dir,
    write_phase,
)
from hai_slurm.priority.daemon.save_times import Measured, SaveSource, SaveTimes


@pytest.fixture(autouse=True)
def _keep_random_state() -> Iterator[None]:
    """Saving captures Python's global RNG state; give it back to the other tests untouched."""
    saved = random.getstate()
    yield
    random.setstate(saved)


class Clock:
    """A monotonic clock the test (and a slow state) moves by hand."""

    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class SlowToSave:
    """A state whose pickling takes ``seconds`` on ``clock`` (the save's serialization)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def __getstate__(self) -> dict[str, Any]:
        self.clock.now += self.seconds
        return {"seconds": self.seconds}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.seconds = state["seconds"]


def _environ(tmp_path: Path) -> dict[str, str]:
    return {"SLURM_JOB_ID": "31", "SLURM_PROCID": "0", "SLURM_RESTART_COUNT": "0",
            "HAI_CHECKPOINT_DIR": str(tmp_path / "ck")}


def _phase(tmp_path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        (control_dir_of(tmp_path / "ck", 31) / PHASE_FILE).read_text())
    return doc


@pytest.mark.parametrize("async_save", [False, True])
def test_the_library_publishes_how_long_its_newest_save_took(tmp_path: Path,
                                                             async_save: bool) -> None:
    """No save yet: no figure. A save whose serialization takes 12 s on the job's clock
    publishes 12 s (synchronous and background saves alike); the next, of 3 s, replaces it."""
    clock = Clock()
    with Checkpointer.from_env(environ=_environ(tmp_path), clock=clock,
                               async_save=async_save) as ck:
        assert ck.load_latest() is None
        ck.save({"step": 1, "w": SlowToSave(clock, 12.0)})
        ck.wait()
        assert ck.save_seconds == 12.0
        assert _phase(tmp_path)["save_seconds"] == 12.0
        ck.save({"step": 2, "w": SlowToSave(clock, 3.0)})
        ck.wait()
    report = read_job_report(control_dir_of(tmp_path / "ck", 31), "31", os.geteuid())
    assert report.problems == ()
    assert report.phase is not None and report.phase.save_seconds == 3.0


def test_the_library_publishes_its_restart_at_the_first_step_boundary(tmp_path: Path) -> None:
    """The process started 30 s before the Checkpointer (its imports, as the process age says);
    loading takes 5 s more: the first step boundary publishes a 35-s restart, once per run."""
    clock = Clock()
    with Checkpointer.from_env(environ=_environ(tmp_path), clock=clock,
                               process_age=lambda: 30.0) as ck:
        assert "restart_seconds" not in _phase(tmp_path) or \
            _phase(tmp_path)["restart_seconds"] is None
        ck.load_latest()
        clock.now += 5.0
        assert not ck.requested(0)
        assert ck.restart_seconds == 35.0
        assert _phase(tmp_path)["restart_seconds"] == 35.0
        clock.now += 100.0
        assert not ck.requested(1)
        assert ck.restart_seconds == 35.0


def test_the_first_boundary_does_not_hide_a_save_in_flight(tmp_path: Path) -> None:
    """A background save started before the first step boundary: that boundary measures the
    restart but leaves the phase ``saving`` (a ``computing`` there would let the daemon
    interrupt the save); the save's completion publishes the restart with it."""
    clock = Clock()
    release = threading.Event()
    with Checkpointer.from_env(environ=_environ(tmp_path), clock=clock, async_save=True,
                               process_age=lambda: 2.0) as ck:
        real_write = ck.store.write

        def slow_write(*args: Any, **kwargs: Any) -> Any:
            release.wait(10)
            return real_write(*args, **kwargs)

        ck.store.write = slow_write  # type: ignore[method-assign]
        ck.save({"step": 0})
        assert _phase(tmp_path)["phase"] == "saving"
        assert not ck.requested(0)
        assert ck.restart_seconds == 2.0
        assert _phase(tmp_path)["phase"] == "saving"
        release.set()
        ck.wait()
        assert _phase(tmp_path)["restart_seconds"] == 2.0


@pytest.mark.parametrize("bad", [-1, "12", True, [3], float("nan"), float("inf")])
def test_a_malformed_save_time_is_refused_with_the_reason(tmp_path: Path, bad: object) -> None:
    """save_seconds must be a number of seconds >= 0; anything else refuses the phase record
    and says why (as for every other field)."""
    ctl = tmp_path / "ctl"
    prepare_control_dir(ctl)
    write_phase(ctl, make_phase("5", 0, Phase.COMPUTING, 3))
    doc = json.loads((ctl / PHASE_FILE).read_text())
    doc["save_seconds"] = bad
    (ctl / PHASE_FILE).write_text(json.dumps(doc))
    report = read_job_report(ctl, "5", os.geteuid())
    assert report.phase is None
    assert any("save_seconds" in p and "seconds >= 0" in p for p in report.problems), \
        report.problems


def _jobs(tmp_path: Path, saves: dict[int, float | None]) -> list[SaveSource]:
    """Running jobs with a checkpoint directory each; a phase.json with ``saves[job]``."""
    out = []
    for jid, seconds in saves.items():
        ck = tmp_path / f"ck{jid}"
        ctl = control_dir_of(ck, jid)
        prepare_control_dir(ctl)
        write_phase(ctl, make_phase(str(jid), 0, Phase.COMPUTING, 1, save_seconds=seconds))
        out.append(SaveSource(jid, str(ck), os.geteuid()))
    return out


def _saves(got: dict[int, Measured]) -> dict[int, float | None]:
    return {j: m.save for j, m in got.items()}


def test_save_times_are_read_a_few_at_a_time_and_kept(tmp_path: Path) -> None:
    """At most ``reads_per_pass`` files a pass, never-read jobs first; a figure is kept until
    ``refresh`` has passed, then read again; a job that published none has none."""
    jobs = _jobs(tmp_path, {1: 4.0, 2: 9.0, 3: None, 4: 2.5})
    times = SaveTimes(refresh=300.0, reads_per_pass=2)
    assert _saves(times.update(jobs, 1000.0)) == {1: 4.0, 2: 9.0}
    assert _saves(times.update(jobs, 1001.0)) == {1: 4.0, 2: 9.0, 4: 2.5}
    assert times.reads == 4
    assert _saves(times.update(jobs, 1002.0)) == {1: 4.0, 2: 9.0, 4: 2.5}
    assert times.reads == 4  # nothing due
    write_phase(jobs[0].control_dir, make_phase("1", 0, Phase.COMPUTING, 2, save_seconds=6.0,
                                                restart_seconds=40.0))
    assert times.update(jobs, 1299.0)[1] == (4.0, None)
    assert times.update(jobs, 1300.0)[1] == (6.0, 40.0)


def test_a_new_run_without_a_save_keeps_the_jobs_last_figure(tmp_path: Path) -> None:
    """After a requeue the job's first phase.json has no save yet: the figure its previous run
    measured stands, beside the new run's restart. A job that stops running is forgotten."""
    jobs = _jobs(tmp_path, {7: 15.0})
    times = SaveTimes(refresh=10.0)
    assert times.update(jobs, 0.0) == {7: (15.0, None)}
    write_phase(jobs[0].control_dir, make_phase("7", 1, Phase.COMPUTING, 0, restart_seconds=3.0))
    assert times.update(jobs, 20.0) == {7: (15.0, 3.0)}
    assert times.update([], 21.0) == {}
    assert times.update(jobs, 22.0) == {7: (None, 3.0)}  # read again from scratch


def test_save_times_trust_only_the_owner(tmp_path: Path) -> None:
    """The uid comes from Slurm: a file read for another uid (a job of someone else pointing at
    this directory) gives no figure, and a missing directory is no error."""
    (job,) = _jobs(tmp_path, {3: 1.0})
    seen: list[JobReport] = []

    def reader(*args: Any, **kwargs: Any) -> JobReport:
        seen.append(read_job_report(*args, **kwargs))
        return seen[-1]

    times = SaveTimes(reader)
    assert times.update([SaveSource(3, job.checkpoint_dir, os.geteuid() + 1)], 0.0) == {}
    assert seen[-1].problems and "owned by" in seen[-1].problems[0]
    assert times.update([SaveSource(4, str(tmp_path / "none"), os.geteuid())], 0.0) == {}
    assert seen[-1].phase is None and seen[-1].problems
