"""Checkpoint write throughput against `dd ... conv=fsync` of the same size in the same directory.

    .venv/bin/python bench/checkpoint_throughput.py [--size-mb 256] [--repeat 3] [--dir DIR]

For each repeat: `dd if=/dev/zero of=DIR/dd.bin bs=1M count=N conv=fsync` (timed around the
process), then `Checkpointer.save()` of a state holding N MiB of random bytes (timed until durable:
payload, metadata and manifest fsynced, directory fsynced). Prints the medians and the ratio
(target >= 80 %), plus for async saves how long the training loop is blocked.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hai_slurm.checkpoint import Checkpointer


def time_dd(directory: Path, size_mb: int) -> float:
    target = directory / "dd.bin"
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={size_mb}",
                    "conv=fsync"], check=True, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None,
                        help="directory to write in (default: a temp dir under build/)")
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
    return 0 if ratio >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
