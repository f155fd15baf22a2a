"""Benchmark of the pure preemption planner on a large synthetic cluster.

500 nodes x 8 GPUs (25 leaf switches of 20 nodes), 2,000 running and 10,000 pending jobs of every
class. Prints the median time of one planning pass with the default limits (4 plans, 64 victim
searches a cycle, growing with the queue by ``plans_per_pending``: 500 plans and 8,000 searches
at 10,000 pending; each line prints the limits it ran with), with the limits lifted (at least 64
plans, unlimited searches), and with the
default limits and the pending jobs of HIGH and above marked as overriding protection (as the
daemon marks them, ``Waiting.overrides_protection``, a second victim index; it also marks jobs
past their class bound, which this snapshot leaves unmarked), what the passes
decided, and the peak memory of one pass. Wall and CPU times are both printed: on a
shared machine the wall time includes waiting for a CPU; the calibration line at the end is a
fixed loop timed the same way, to compare runs made under different loads.

    .venv/bin/python bench/planner.py [--runs 7] [--seed 1] [--partitions 0] [--profile]
                                      [--with-free]

The timed region is the pass itself: the previous pass's result is freed after the timer
stops (``--with-free``: with the next pass, as before the fifth speed-up; about 5 % more).

With ``--partitions N``: the nodes are dealt into N partitions (every N-th node, so each spans
every leaf switch) and each pending job may use one of them (``Waiting.allowed``, as the daemon
sets it from a job's partition, --nodelist, --exclude and --constraint).

With ``--profile``: cProfile around 3 passes (after a warm-up pass) instead, the functions
that take the most time (see priority/planner/README.md).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
import tracemalloc
from collections import Counter
from dataclasses import replace

from hai_slurm.conf.topology import Level
from hai_slurm.priority.planner.search import plan_preemptions
from hai_slurm.priority.planner.testing import NOW, synthetic_snapshot
from hai_slurm.priority.planner.types import PlannerConfig, PlanningResult, PlanSnapshot
from hai_slurm.priority.policy.ladder import RANK, URGENT_FROM


def _timed(snap: PlanSnapshot, config: PlannerConfig, runs: int, *, with_free: bool = False
           ) -> tuple[list[float], list[float], PlanningResult]:
    """Wall and CPU milliseconds of ``runs`` passes (after one warm-up pass), and the result.

    The previous pass's result is freed after the timer stops (the caller's cost, when it
    drops the result), unless ``with_free``: then freeing it is timed with the next pass, as
    a loop that rebinds one name does (figures before the fifth speed-up were taken so)."""
    times, cpu = [], []
    result = plan_preemptions(snap, config=config, now=NOW)
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        new = plan_preemptions(snap, config=config, now=NOW)
        if with_free:
            result = new   # frees the previous result inside the timed region
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        result = new   # frees it here otherwise, after the timer
    return times, cpu, result


def _limits(config: PlannerConfig, snap: PlanSnapshot) -> str:
    """The plan and search limits of a pass over ``snap`` ("500 plans, 8000 searches")."""
    plans, searches = config.limits(len(snap.pending))
    return f"{plans} plans, {searches if searches < 1_000_000 else 'unlimited'} searches"


def _profile(snap: PlanSnapshot) -> None:
    config = PlannerConfig()
    plan_preemptions(snap, config=config, now=NOW)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3):
        plan_preemptions(snap, config=config, now=NOW)
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)


def _partitioned(snap: PlanSnapshot, count: int) -> PlanSnapshot:
    """``snap`` with its nodes dealt into ``count`` partitions, pending job i in partition
    i mod ``count`` (0: unchanged)."""
    if count <= 0:
        return snap
    nodes = [c.id for c in snap.topology.cells_at(Level.NODE)]
    parts = [frozenset(nodes[i::count]) for i in range(count)]
    return replace(snap, pending=tuple(replace(w, allowed=parts[i % count])
                                       for i, w in enumerate(snap.pending)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=0,
                        help="deal the nodes into N partitions, one per pending job (0: none)")
    parser.add_argument("--profile", action="store_true",
                        help="profile 3 passes with cProfile instead of timing them")
    parser.add_argument("--with-free", action="store_true",
                        help="time freeing the previous pass's result with the next pass")
    args = parser.parse_args()
    if args.profile:
        _profile(_partitioned(synthetic_snapshot(args.seed), args.partitions))
        return
    t0 = time.perf_counter()
    snap = _partitioned(synthetic_snapshot(args.seed), args.partitions)
    build = (time.perf_counter() - t0) * 1000
    busy = sum(len(h.gpus) for h in snap.running)
    total = len(snap.topology.gpus)
    parts = f", in {args.partitions} partitions" if args.partitions else ""
    print(f"workload: {len(snap.running)} running jobs on {busy} of {total} GPUs "
          f"(500 nodes x 8, 25 leaves{parts}), {len(snap.pending)} pending; built in "
          f"{build:.0f} ms")
    default = PlannerConfig()
    lifted = replace(default, max_plans=64, max_searches=1_000_000)
    urgent = replace(snap, pending=tuple(
        replace(w, overrides_protection=RANK[w.effective] >= RANK[URGENT_FROM])
        for w in snap.pending))
    for name, config, s in (
            (f"default limits ({_limits(default, snap)})", default, snap),
            (f"lifted limits ({_limits(lifted, snap)})", lifted, snap),
            ("default limits, urgent jobs overriding protection as the daemon sets them",
             default, urgent)):
        times, cpu, result = _timed(s, config, args.runs, with_free=args.with_free)
        outcomes = Counter(d.outcome.name for d in result.decisions.values())
        victims = sum(len(p.victims) for p in result.plans)
        print(f"{name}: median {statistics.median(times):.0f} ms, min {min(times):.0f} ms, "
              f"max {max(times):.0f} ms over {args.runs} passes (CPU: median "
              f"{statistics.median(cpu):.0f} ms, min {min(cpu):.0f} ms)")
        print(f"  {len(result.plans)} plans, {victims} victims; decisions: "
              + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    tracemalloc.start()
    plan_preemptions(snap, config=default, now=NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    stale = replace(snap, taken_at=NOW - 3600)
    t0 = time.perf_counter()
    refused = plan_preemptions(stale, config=default, now=NOW)
    print(f"peak memory of one pass (default limits): {peak / 2**20:.1f} MiB traced")
    print(f"stale snapshot: refused in {(time.perf_counter() - t0) * 1000:.0f} ms "
          f"({refused.refused})")
    t0 = time.process_time()
    for _ in range(5):
        dict.fromkeys(range(200_000))
    print(f"load average now {os.getloadavg()[0]:.1f} (2 cores shared: wall times include "
          "waiting for a CPU); calibration: 5 x dict.fromkeys(range(200,000)) took "
          f"{(time.process_time() - t0) * 1000:.0f} ms CPU (compare it between runs: it "
          "scales with the machine and its load)")


if __name__ == "__main__":
    main()
