"""Sharded saves with the user's own save function, across real processes (no torch).

Each rank is a forked process with its own :class:`Checkpointer`; without torch.distributed the
ranks agree through files in the control directory (``RankSync`` over ``FileRendezvous``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.checkpoint import Checkpointer, Part, read_job_report
from hai_slurm.checkpoint.sharded import COMMIT, candidates, part_record_name

CTX = multiprocessing.get_context("fork")
Body = Callable[[Checkpointer, int, Path], None]


def environ(tmp: Path, rank: int, world: int, restart: int = 0) -> dict[str, str]:
    return {"HAI_CHECKPOINT_DIR": str(tmp / "ck"), "SLURM_JOB_ID": "77", "RANK": str(rank),
            "WORLD_SIZE": str(world), "SLURM_RESTART_COUNT": str(restart)}


def _child(body: Body, rank: int, world: int, tmp: Path, restart: int, timeout: float,
           extra: dict[str, str] | None = None) -> None:
    log = (tmp / f"log-{restart}-{rank}.txt").open("a")

    def note(message: str) -> None:
        log.write(message + "\n")
        log.flush()

    try:
        ck = Checkpointer.from_env(environ={**environ(tmp, rank, world, restart),
                                            **(extra or {})}, log=note,
                                   sync_timeout_s=timeout)
        body(ck, rank, tmp)
        ck.close()
    except SystemExit as done:
        os._exit(done.code if isinstance(done.code, int) else 1)
    except BaseException as err:
        note(f"ERROR {type(err).__name__}: {err}")
        os._exit(3)
    os._exit(0)


def run_ranks(tmp: Path, world: int, body: Body, *, restart: int = 0, timeout: float = 20.0,
              watch: Callable[[list[Any]], None] | None = None,
              extra: dict[str, str] | None = None) -> list[int]:
    """Run ``body`` on ``world`` forked ranks (``extra``: more environment); return their exit
    codes."""
    procs = [CTX.Process(target=_child, args=(body, r, world, tmp, restart, timeout, extra))
             for r in range(world)]
    for proc in procs:
        proc.start()
    if watch is not None:
        watch(procs)
    for proc in procs:
        proc.join(timeout=120)
        if proc.is_alive():
            proc.kill()
            pytest.fail(f"rank process {proc.pid} hangs")
    return [int(p.exitcode or 0) for p in procs]


def logs(tmp: Path, restart: int = 0) -> str:
    return "".join(p.read_text() for p in sorted(tmp.glob(f"log-{restart}-*.txt")))


def write_mine(value: object) -> Callable[[Part], None]:
    """A save function: the rank writes its own file into its part directory."""
    def save(part: Part) -> None:
        (part.directory / "state.json").write_text(json.dumps(
            {"rank": part.rank, "step": part.step, "value": value}))
    return save


def read_mine(into: dict[str, Any]) -> Callable[[Part], None]:
    def load(part: Part) -> None:
        into.update(json.loads((part.directory / "state.json").read_text()))
    return load


def test_every_rank_saves_its_part_and_the_commit_lists_them(tmp_path: Path) -> None:
    """4 ranks save at step 3, then a new run of 4 ranks loads each rank's own part and RNG."""
    def save(ck: Checkpointer, rank: int, tmp: Path) -> None:
        random.seed(100 + rank)
        info = ck.save_with(write_mine(rank * 10), step=3)
        assert (info is not None) == (rank == 0)
        (tmp / f"next-{rank}").write_text(repr(random.random()))

    assert run_ranks(tmp_path, 4, save) == [0, 0, 0, 0], logs(tmp_path)
    (path,) = candidates(tmp_path / "ck")
    commit = json.loads((path / COMMIT).read_text())
    assert commit["step"] == 3 and [p["rank"] for p in commit["parts"]] == [0, 1, 2, 3]
    record = json.loads((path / part_record_name(2)).read_text())
    assert [f["path"] for f in record["files"]] == ["rank-00002/state.json"]

    def load(ck: Checkpointer, rank: int, tmp: Path) -> None:
        got: dict[str, Any] = {}
        part = ck.load_with(read_mine(got))
        assert part is not None and part.step == 3 and got["value"] == rank * 10
        assert repr(random.random()) == (tmp / f"next-{rank}").read_text()  # RNG of this rank

    assert run_ranks(tmp_path, 4, load, restart=1) == [0, 0, 0, 0], logs(tmp_path, 1)
    assert "resuming from sharded-step0000000003-run0-0" in logs(tmp_path, 1)


def test_a_rank_dying_before_its_part_is_durable_commits_nothing(tmp_path: Path) -> None:
    """Rank 1 dies inside its save at step 20: rank 0 commits nothing and says why; the next
    run skips the incomplete checkpoint with a message and loads step 10."""
    def body(ck: Checkpointer, rank: int, tmp: Path) -> None:
        ck.save_with(write_mine("ten"), step=10)

        def dies(part: Part) -> None:
            if part.rank == 1:
                (part.directory / "half").write_bytes(b"x" * 1000)
                os._exit(9)  # SIGKILLed mid-write, before its part record
            write_mine("twenty")(part)

        ck.save_with(dies, step=20)

    assert run_ranks(tmp_path, 2, body, timeout=2.0) == [3, 9]
    assert "not committed: rank 1 has no part record" in logs(tmp_path)
    newest = candidates(tmp_path / "ck")[0]
    assert newest.name.startswith("sharded-step0000000020") and not (newest / COMMIT).exists()

    def load(ck: Checkpointer, rank: int, tmp: Path) -> None:
        got: dict[str, Any] = {}
        part = ck.load_with(read_mine(got))
        assert part is not None and part.step == 10 and got["value"] == "ten"

    assert run_ranks(tmp_path, 2, load, restart=1) == [0, 0], logs(tmp_path, 1)
    assert (f"skipping checkpoint {newest.name}: incomplete, never committed (part records "
            "from rank(s) [0])") in logs(tmp_path, 1)


def test_a_damaged_part_is_refused_by_every_rank(tmp_path: Path) -> None:
    """Rank 1's file of the newest checkpoint is altered: all ranks fall back together."""
    def body(ck: Checkpointer, rank: int, tmp: Path) -> None:
        ck.save_with(write_mine("old"), step=5)
        ck.save_with(write_mine("new"), step=6)

    assert run_ranks(tmp_path, 2, body) == [0, 0], logs(tmp_path)
    newest = candidates(tmp_path / "ck")[0]
    victim = newest / "rank-00001" / "state.json"
    victim.write_text(victim.read_text().replace("new", "bad"))

    def load(ck: Checkpointer, rank: int, tmp: Path) -> None:
        got: dict[str, Any] = {}
        part = ck.load_with(read_mine(got))
        assert part is not None and part.step == 5 and got["value"] == "old"

    assert run_ranks(tmp_path, 2, load, restart=1) == [0, 0], logs(tmp_path, 1)
    assert "sha256 mismatch in rank 1's file rank-00001/state.json" in logs(tmp_path, 1)


def test_ranks_seeing_the_request_at_different_steps_save_at_the_same_step(tmp_path: Path
                                                                            ) -> None:
    """Only rank 1 gets USR2, at its step 5; rank 0 runs ahead and learns from the flag file.
    Both save at the same (higher) step, the commit holds that step, both exit 75."""
    def body(ck: Checkpointer, rank: int, tmp: Path) -> None:
        step = 0
        while True:
            step += 1
            time.sleep(0.001 if rank == 0 else 0.02)
            if rank == 1 and step == 5:
                os.kill(os.getpid(), signal.SIGUSR2)
            if ck.requested(step):
                (tmp / f"stopped-{rank}").write_text(str(step))
                ck.save_with(write_mine(rank), step=step)
                ck.acknowledge_and_exit()

    assert run_ranks(tmp_path, 2, body) == [75, 75], logs(tmp_path)
    stops = {int((tmp_path / f"stopped-{r}").read_text()) for r in (0, 1)}
    assert len(stops) == 1 and stops.pop() > 5
    (path,) = candidates(tmp_path / "ck")
    step = json.loads((path / COMMIT).read_text())["step"]
    assert "rank 1 learned of the request at step 5; all ranks stop at step" in logs(tmp_path)
    report = read_job_report(tmp_path / "ck" / ".hai" / "77", "77", os.geteuid())
    assert report.ack is not None and report.ack.step == step and report.ack.checkpoint == path.name


class SlowFlush:
    """A stand-in for ``dcp.async_save``: the files are written when the test says so."""

    def __init__(self, part: Part, release: Path) -> None:
        self.future: Future[None] = Future()
        self._part = part
        self._release = release

    def start(self) -> Future[None]:
        import threading

        def flush() -> None:
            while not self._release.exists():
                time.sleep(0.01)
            (self._part.directory / "state.bin").write_bytes(os.urandom(1 << 16))
            self.future.set_result(None)

        threading.Thread(target=flush, daemon=True).start()
        return self.future


def test_a_requeue_while_an_async_save_flushes_does_not_ack_early(tmp_path: Path) -> None:
    """SIGTERM (a requeue) arrives while the async flush still runs: no ack (phase ``saving``)
    until every part is durable and committed; then ack at that step and exit 75."""
    release = tmp_path / "release"

    def body(ck: Checkpointer, rank: int, tmp: Path) -> None:
        ck.save_with(lambda part: SlowFlush(part, release).start(), step=8)
        (tmp / f"async-{rank}").touch()
        step = 8
        while not ck.requested(step):
            step += 1
            time.sleep(0.01)
        ck.acknowledge_and_exit()

    control = tmp_path / "ck" / ".hai" / "77"

    def watch(procs: list[Any]) -> None:
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"async-{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for proc in procs:
            os.kill(proc.pid, signal.SIGTERM)
        time.sleep(1.0)  # the ranks have seen the request and wait for the flush
        report = read_job_report(control, "77", os.geteuid())
        assert report.ack is None and report.saving, report
        assert not (candidates(tmp_path / "ck")[0] / COMMIT).exists()
        release.touch()

    assert run_ranks(tmp_path, 2, body, watch=watch) == [75, 75], logs(tmp_path)
    (path,) = candidates(tmp_path / "ck")
    commit = json.loads((path / COMMIT).read_text())
    report = read_job_report(control, "77", os.geteuid())
    assert report.ack is not None and report.ack.step == 8 and report.ack.checkpoint == path.name
    assert report.ack.time >= commit["time"]


def test_forked_worker_ignores_the_request(tmp_path: Path) -> None:
    """A process forked after the handler was installed (a DataLoader worker) neither dies of
    USR2 nor flags it; the training process still gets its request."""
    ck = Checkpointer.from_env(environ=environ(tmp_path, 0, 1), log=lambda _m: None)
    try:
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(reader)
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.05)
            os.write(writer, b"1" if ck.listener.pending() else b"0")
            os._exit(0)
        os.close(writer)
        assert os.read(reader, 1) == b"0"
        _pid, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert not ck.requested()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ck.requested()
    finally:
        ck.close()


def test_worker_init_fn_ignores_request_signal_and_sigterm() -> None:
    """``ignore_requests_in_worker`` (for spawned workers) sets SIG_IGN for USR2 and SIGTERM."""
    code = ("import os, signal, time\n"
            "from hai_slurm.checkpoint import ignore_requests_in_worker\n"
            "ignore_requests_in_worker(0)\n"
            "os.kill(os.getpid(), signal.SIGUSR2); os.kill(os.getpid(), signal.SIGTERM)\n"
            "time.sleep(0.05); print('alive')\n")
    import subprocess

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0 and res.stdout.strip() == "alive", res.stderr


def test_a_new_job_in_the_same_directory_never_reuses_a_checkpoint_name(tmp_path: Path) -> None:
    """Two jobs (both run 0) save step 5 into one directory: two checkpoints, both intact."""
    names = []
    for job in ("77", "78"):
        ck = Checkpointer.from_env(environ={**environ(tmp_path, 0, 1), "SLURM_JOB_ID": job},
                                   log=lambda _m: None, install_signals=False)
        info = ck.save_with(write_mine(job), step=5)
        ck.close()
        assert info is not None
        names.append(info.name)
    assert names == ["sharded-step0000000005-run0-0", "sharded-step0000000005-run0-1"]
    assert all((tmp_path / "ck" / n / COMMIT).exists() for n in names)
    assert json.loads((tmp_path / "ck" / names[0] / "rank-00000" / "state.json").read_text())[
        "value"] == "77"


def test_a_damaged_newer_checkpoint_never_makes_a_new_save_pruned(tmp_path: Path) -> None:
    """keep=1: the newest checkpoint (step 200) is damaged, so the next run starts over; its
    save at step 50 is committed and stays, and the run after resumes from it. (Before: prune
    ranked by step, kept the damaged step-200 one and removed each new save at once, so every
    run started over.)"""
    def run(restart: int) -> Checkpointer:
        return Checkpointer.from_env(environ={**environ(tmp_path, 0, 1, restart),
                                              "HAI_CHECKPOINT_KEEP": "1"},
                                     log=lambda _m: None, install_signals=False)
    ck = run(0)
    ck.save_with(write_mine(100), step=100)
    damaged = ck.save_with(write_mine(200), step=200)
    ck.close()
    assert damaged is not None
    (tmp_path / "ck" / damaged.name / "rank-00000" / "state.json").write_text("bit rot")
    ck = run(1)
    assert ck.load_with(read_mine({})) is None   # nothing usable: it starts over
    fresh = ck.save_with(write_mine(50), step=50)
    ck.close()
    assert fresh is not None and (tmp_path / "ck" / fresh.name / COMMIT).exists()
    ck = run(2)
    got: dict[str, Any] = {}
    part = ck.load_with(read_mine(got))
    ck.close()
    assert part is not None and part.step == 50 and got["value"] == 50


def test_a_second_step_of_the_same_run_never_reads_the_first_ones_files(tmp_path: Path
                                                                         ) -> None:
    """Two srun steps of one job (same restart count; SLURM_STEP_ID 0, then 1), two ranks
    without torch.distributed: the second step's collectives are its own, so it saves step 30
    into a new checkpoint and resumes from it next, while the first step's checkpoints stay
    intact. (Before: the second step's rank 1 read the first step's leftover proposal and
    wrote its part into a committed checkpoint; rank 0's commit timed out.)"""
    def first(ck: Checkpointer, rank: int, tmp: Path) -> None:
        ck.load_with(read_mine({}))
        ck.save_with(write_mine(10), step=10)
        ck.save_with(write_mine(20), step=20)

    def second(ck: Checkpointer, rank: int, tmp: Path) -> None:
        ck.load_with(read_mine({}))
        if rank == 0:
            time.sleep(0.5)   # rank 0 reaches the save a little later
        ck.save_with(write_mine(30), step=30)

    assert run_ranks(tmp_path, 2, first, extra={"SLURM_STEP_ID": "0"}) == [0, 0], \
        logs(tmp_path)
    assert run_ranks(tmp_path, 2, second, timeout=5,
                     extra={"SLURM_STEP_ID": "1"}) == [0, 0], logs(tmp_path)
    steps = sorted(int(json.loads((p / COMMIT).read_text())["step"])
                   for p in candidates(tmp_path / "ck") if (p / COMMIT).exists())
    assert steps[-1] == 30, steps
    newest = candidates(tmp_path / "ck")[0]
    for rank in (0, 1):
        mine = json.loads((newest / f"rank-{rank:05d}" / "state.json").read_text())
        assert (mine["step"], mine["value"]) == (30, 30), mine
    assert "ERROR" not in logs(tmp_path), logs(tmp_path)


def test_load_latest_points_at_load_with_for_sharded_checkpoints(tmp_path: Path) -> None:
    """load_latest() (single-state) finds none and says the sharded ones need load_with."""
    messages: list[str] = []
    ck = Checkpointer.from_env(environ=environ(tmp_path, 0, 1), log=messages.append,
                               install_signals=False)
    ck.save_with(write_mine(1), step=2)
    assert ck.load_latest() is None
    ck.close()
    assert any("sharded checkpoints are loaded with load_with(fn)" in m for m in messages)


def test_a_tensor_still_held_after_the_timeout_is_said_on_the_log(tmp_path: Path) -> None:
    """``settle`` gives up after its timeout and says so (the job may still abort at exit)."""
    from hai_slurm.checkpoint.env import job_env_from
    from hai_slurm.checkpoint.ranks import RankSync

    class Held:
        def _use_count(self) -> int:
            return 2

    lines: list[str] = []
    env = job_env_from({"SLURM_JOB_ID": "7"}, directory=tmp_path / "ck")
    sync = RankSync(env, log=lines.append)
    sync._last = Held()
    assert not sync.settle(timeout_s=0.01)
    assert any("still holds the last exchange after 0.01 s" in x for x in lines), lines
    assert sync.settle()  # nothing left to wait for
