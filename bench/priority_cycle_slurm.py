"""Benchmark: wall time of full daemon cycles against the real testbed with 1,000 pending jobs.

A blocker job holds the whole cluster (4 nodes x 8 GPUs); N jobs of mixed classes and two teams
wait behind it. Then, with the real CLI backend and a SQLite store, it times:

* the first cycle (every pending job gets its priority: one ``scontrol update`` per distinct value),
* steady cycles (nothing changed: no write),
* a cycle after one new job arrives (one write),

each split into snapshot (squeue/sinfo/scontrol/sacctmgr), policy+diff, Slurm writes and the
database commit. Uses the testbed in ``--state-dir`` if one is up there, else starts one (and
stops it again). Every job it submits is cancelled at the end.

    .venv/bin/python bench/priority_cycle_slurm.py [--jobs 1000] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hai_slurm.priority.config.loader import DaemonConfig, Intervals
from hai_slurm.priority.daemon.loop import CycleReport, Daemon, Outcome, open_store
from hai_slurm.slurm_plugins.adapter import make_client
from hai_slurm.slurm_plugins.types import ActionResult, ClusterSnapshot, SlurmClient
from hai_slurm.testbed import local
from hai_slurm.testbed.layout import Ports
from hai_slurm.testbed.shape import ClusterShape

CLASSES = ("HIGH", "ABOVE_NORMAL", "NORMAL", "NORMAL", "UNDER_NORMAL", "BELOW_NORMAL", "LOW")


class Timed:
    """A SlurmClient wrapper that times snapshots and priority writes."""

    def __init__(self, inner: SlurmClient) -> None:
        self.inner = inner
        self.snapshot_s = 0.0
        self.write_s = 0.0
        self.commands = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def snapshot(self) -> ClusterSnapshot:
        t0 = time.perf_counter()
        try:
            return self.inner.snapshot()
        finally:
            self.snapshot_s = time.perf_counter() - t0

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        t0 = time.perf_counter()
        try:
            result = self.inner.set_priorities(priorities)
            self.commands += result.commands
            return result
        finally:
            self.write_s += time.perf_counter() - t0


def sbatch(slurm_conf: str, cls: str, team: str, seconds: int = 1) -> str:
    script = f"#!/bin/bash\n#HAI --priority={cls}\nsleep {seconds}\n"
    res = subprocess.run(["sbatch", "--parsable", f"--account={team}", "-N4", "--gres=gpu:8",
                          "--output=/dev/null", "--chdir=/tmp"], input=script, text=True,
                         capture_output=True, timeout=60, check=True,
                         env=dict(os.environ, SLURM_CONF=slurm_conf))
    return res.stdout.strip().split(";")[0]


def cycle(d: Daemon, timed: Timed) -> tuple[CycleReport, str]:
    timed.snapshot_s = timed.write_s = 0.0
    timed.commands = 0
    t0 = time.perf_counter()
    rep = d.run_once()
    total = time.perf_counter() - t0
    if rep.outcome is not Outcome.OK:
        raise SystemExit(f"cycle failed: {rep.reason}")
    rest = total - timed.snapshot_s - timed.write_s
    return rep, (f"{total * 1000:8.0f} ms  (snapshot {timed.snapshot_s * 1000:.0f} ms, writes "
                 f"{timed.write_s * 1000:.0f} ms in {timed.commands} commands, policy+store "
                 f"{rest * 1000:.0f} ms; {rep.writes} priorities written)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--steady", type=int, default=5, help="steady cycles to time")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp/hai-slurm-testbed-bench-daemon"))
    args = parser.parse_args()
    state_dir = args.state_dir.resolve()
    started = local.up(ClusterShape(), state_dir=state_dir,
                       ports=Ports(19817, 19819, 19806, 19379, 19901), echo=print)
    state = local.load_state(state_dir)
    assert state is not None
    conf = state.slurm_conf
    os.environ["SLURM_CONF"] = conf
    jobs: list[str] = []
    try:
        jobs.append(sbatch(conf, "NORMAL", "team-b", 3600))  # the blocker
        time.sleep(2)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            jobs += pool.map(lambda i: sbatch(conf, CLASSES[i % len(CLASSES)],
                                              ("team-a", "team-b")[i % 2]), range(args.jobs))
        print(f"submitted {args.jobs} pending jobs in {time.perf_counter() - t0:.1f} s")
        with tempfile.TemporaryDirectory() as tmp:
            cfg = DaemonConfig(intervals=Intervals(cycle=30), state_dir=tmp,
                               database_url=f"sqlite:///{tmp}/hai-slurm.db", metrics_port=0)
            repo, lock = open_store(cfg)
            timed = Timed(make_client())
            d = Daemon(timed, repo, lock, config=cfg, owner="bench")
            rep, line = cycle(d, timed)
            pending = len(rep.decision.inputs.pending) if rep.decision else 0
            print(f"first cycle ({pending} pending):   {line}")
            steady = []
            for _ in range(args.steady):
                rep, line = cycle(d, timed)
                steady.append(rep.seconds)
                print(f"steady cycle:                {line}")
            print(f"steady median: {statistics.median(steady) * 1000:.0f} ms")
            jobs.append(sbatch(conf, "HIGH", "team-a"))
            rep, line = cycle(d, timed)
            print(f"after one new job:           {line}")
    finally:
        for i in range(0, len(jobs), 200):
            subprocess.run(["scancel", *jobs[i:i + 200]], timeout=60, check=False,
                           env=dict(os.environ, SLURM_CONF=conf))
        if started:
            local.down(state_dir)


if __name__ == "__main__":
    main()
