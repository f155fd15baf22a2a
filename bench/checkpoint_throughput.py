"""Checkpoint write throughput against `dd ... conv=fsync` of the same size in the same directory.

    .venv/bin/python bench/checkpoint_throughput.py [--size-mb 256] [--repeat 3] [--dir DIR]
        [--ranks 4] [--shard-mb 64]

For each repeat: `dd if=/dev/zero of=DIR/dd.bin bs=1M count=N conv=fsync` (timed around the
process), then `Checkpointer.save()` of a state holding N MiB of random bytes (timed until durable:
payload, metadata and manifest fsynced, directory fsynced). Prints the medians and the ratio
(target >= 80 %), plus for async saves how long the training loop is blocked.

Sharded: ``--ranks`` local processes (4) agree through the control directory as ranks of one job
without torch.distributed would. Against ``--ranks`` concurrent ``dd`` processes of ``--shard-mb``
each, it times ``save_with`` of a function writing ``--shard-mb`` per rank into its part directory
(rank 0's view: from the common start until the commit is durable, which includes every rank's
fsync and sha256 of its part). Then the same save returning a future that a thread fulfils after
writing (as ``dcp.async_save`` does, after a staging copy into a buffer allocated once, in the
caller's thread): "training blocked" is how long ``save_with`` held the caller (staging
included), with save_with's own part shown apart; target <= 5 % of the sync save's time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from hai_slurm.checkpoint import Checkpointer, Part


def time_dd(directory: Path, size_mb: int) -> float:
    target = directory / "dd.bin"
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={size_mb}",
                    "conv=fsync"], check=True, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def time_dd_parallel(directory: Path, size_mb: int, ranks: int) -> float:
    started = time.perf_counter()
    procs = [subprocess.Popen(["dd", "if=/dev/zero", f"of={directory}/dd{r}.bin", "bs=1M",
                               f"count={size_mb}", "conv=fsync"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for r in range(ranks)]
    if any(p.wait(timeout=600) for p in procs):
        raise RuntimeError("dd failed")
    elapsed = time.perf_counter() - started
    for r in range(ranks):
        (directory / f"dd{r}.bin").unlink()
    return elapsed


def _rank(rank: int, ranks: int, directory: Path, shard_mb: int, rounds: int, barrier: Barrier,
          results: Any) -> None:
    env = {"HAI_CHECKPOINT_DIR": str(directory / "sharded"), "SLURM_JOB_ID": "bench",
           "RANK": str(rank), "WORLD_SIZE": str(ranks)}
    blob = os.urandom(shard_mb << 20)

    def write(part: Part, data: bytes | bytearray) -> None:
        with (part.directory / "shard.bin").open("wb") as out:
            out.write(data)

    staging: list[float] = []
    staged = bytearray(len(blob))  # a staging buffer allocated once and reused, like a stager's

    def flush_later(part: Part) -> Future[None]:
        began = time.perf_counter()
        staged[:] = blob  # the staging copy dcp.async_save makes before it returns
        staging.append(time.perf_counter() - began)
        done: Future[None] = Future()

        def run() -> None:
            write(part, staged)
            done.set_result(None)

        threading.Thread(target=run, daemon=True).start()
        return done

    ck = Checkpointer.from_env(environ=env, keep=2 * rounds + 2, install_signals=False,
                               log=lambda _m: None)
    for step in range(rounds):
        barrier.wait()  # the parent has timed dd; start together
        started = time.perf_counter()
        ck.save_with(lambda part: write(part, blob), step=2 * step)
        sync_s = time.perf_counter() - started
        barrier.wait()
        started = time.perf_counter()
        ck.save_with(flush_later, step=2 * step + 1)
        blocked_s = time.perf_counter() - started
        ck.wait()
        total_s = time.perf_counter() - started
        results.put((rank, step, sync_s, blocked_s, total_s, staging[-1]))
        barrier.wait()
    ck.close()


def sharded(directory: Path, ranks: int, shard_mb: int, repeat: int) -> list[str]:
    """Figures of sharded saves across ``ranks`` processes (see the module docstring)."""
    ctx = multiprocessing.get_context("fork")
    rounds = repeat + 1
    barrier, results = ctx.Barrier(ranks + 1), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, ranks, directory, shard_mb, rounds, barrier,
                                             results)) for r in range(ranks)]
    for proc in procs:
        proc.start()
    dd_s: list[float] = []
    rows: list[tuple[int, int, float, float, float, float]] = []
    for _ in range(rounds):
        dd_s.append(time_dd_parallel(directory, shard_mb, ranks))
        barrier.wait()
        barrier.wait()
        barrier.wait()
        rows += [results.get(timeout=600) for _ in range(ranks)]
    for proc in procs:
        proc.join(timeout=60)
    dd_s = dd_s[1:]  # round 0 warms up
    zero = [r for r in rows if r[0] == 0 and r[1] > 0]
    sync = statistics.median(r[2] for r in zero)
    total = statistics.median(r[4] for r in zero)
    later = [r for r in rows if r[1] > 0]
    blocked = statistics.median(r[3] for r in later)
    ours = statistics.median(r[3] - r[5] for r in later)
    dd = statistics.median(dd_s)
    mib = ranks * shard_mb
    return [
        f"sharded: {ranks} processes x {shard_mb} MiB = {mib} MiB, median of {repeat}",
        f"dd x{ranks} conv=fsync   {dd:7.3f} s  {mib / dd:8.1f} MiB/s",
        f"save_with sync    {sync:7.3f} s  {mib / sync:8.1f} MiB/s  (until the commit is durable)",
        f"ratio sync/dd     {dd / sync:7.1%}",
        f"save_with async   {total:7.3f} s until committed; training blocked {blocked:.4f} s "
        f"= {blocked / sync:.1%} of the sync save (target <= 5 %), of which save_with's own "
        f"{ours * 1000:.1f} ms = {ours / sync:.1%} (the rest is the staging copy)",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None,
                        help="directory to write in (default: a temp dir under build/)")
    parser.add_argument("--ranks", type=int, default=4, help="processes of the sharded save")
    parser.add_argument("--shard-mb", type=int, default=64, help="MiB each rank writes")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent / "build"
    root.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-", dir=args.dir or root) as name:
        directory = Path(name)
        env = {"HAI_CHECKPOINT_DIR": str(directory), "SLURM_JOB_ID": "bench"}
        blob = os.urandom(args.size_mb << 20)
        size = args.size_mb << 20
        dd_s: list[float] = []
        sync_s: list[float] = []
        async_block_s: list[float] = []
        async_total_s: list[float] = []
        saved = random.getstate()
        with Checkpointer.from_env(environ=env, keep=1, install_signals=False,
                                   log=lambda _m: None) as ck, \
                Checkpointer.from_env(environ={**env, "HAI_CHECKPOINT_DIR": str(directory / "a")},
                                      keep=1, install_signals=False, async_save=True,
                                      log=lambda _m: None) as ack:
            for i in range(args.repeat + 1):  # round 0 warms the file system up, not counted
                if i == 1:
                    for series in (dd_s, sync_s, async_block_s, async_total_s):
                        series.clear()
                dd_s.append(time_dd(directory, args.size_mb))
                started = time.perf_counter()
                info = ck.save({"step": i, "blob": blob})
                sync_s.append(time.perf_counter() - started)
                assert info is not None and info.size >= size
                started = time.perf_counter()
                ack.save({"step": i, "blob": blob})
                async_block_s.append(time.perf_counter() - started)
                ack.wait()
                async_total_s.append(time.perf_counter() - started)
        random.setstate(saved)
        shard_lines = sharded(directory, args.ranks, args.shard_mb, args.repeat)
    dd, sync, block, total = (statistics.median(v) for v in (dd_s, sync_s, async_block_s,
                                                              async_total_s))
    mib = args.size_mb

    def spread(values: list[float]) -> str:
        return f"(min {min(values):.3f} s, max {max(values):.3f} s)"

    print(f"directory        {args.dir or root}  (size {mib} MiB, median of {args.repeat})")
    print(f"dd conv=fsync    {dd:7.3f} s  {mib / dd:8.1f} MiB/s  {spread(dd_s)}")
    print(f"checkpoint sync  {sync:7.3f} s  {mib / sync:8.1f} MiB/s  {spread(sync_s)}")
    print(f"checkpoint async {total:7.3f} s  {mib / total:8.1f} MiB/s  {spread(async_total_s)}, "
          f"training blocked {block:.3f} s")
    ratio = dd / sync
    print(f"ratio sync/dd    {ratio:7.1%}  (target >= 80 %)")
    print()
    for line in shard_lines:
        print(line)
    return 0 if ratio >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
