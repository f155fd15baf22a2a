"""Benchmark of the pure priority policy: one cycle on a large synthetic cluster.

10,000 pending and 2,000 running jobs, 500 nodes x 8 GPUs, 50 teams. Prints the median time per
cycle, peak memory (tracemalloc peak during one cycle, and the process's max RSS), and how many
Slurm writes a cycle makes after one job changes (a new job arrives; one starts; 30 s pass).

    .venv/bin/python bench/priority_cycle.py [--cycles 15] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
import tracemalloc
from dataclasses import replace

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.scoring import diff_priorities
from hai_slurm.priority.policy.state import PendingJob, PolicyResult, RunningJob
from hai_slurm.priority.policy.testing import NOW, pending_job, synthetic_cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cycles", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    w = synthetic_cluster(args.seed)

    def cycle(pending: list[PendingJob], now: float, prev: PolicyResult | None) -> PolicyResult:
        return compute_priorities(pending, w.running, config=w.config, cluster=w.cluster,
                                  events=w.events, state=prev.state if prev else None, now=now)

    first = cycle(w.pending, NOW, None)
    times, cpu = [], []
    for _ in range(args.cycles):
        t0, c0 = time.perf_counter(), time.process_time()
        cycle(w.pending, NOW, first)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    tracemalloc.start()
    cycle(w.pending, NOW, first)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def writes(pending: list[PendingJob], now: float = NOW,
               running: list[RunningJob] | None = None) -> int:
        result = compute_priorities(pending, w.running if running is None else running,
                                    config=w.config, cluster=w.cluster, events=w.events,
                                    state=first.state, now=now)
        return len(diff_priorities(first.priorities, result.priorities))

    new = pending_job(999_999, PriorityClass.NORMAL, team="team07", submit=NOW, gpus=2)
    new_low = replace(new, job_id=999_998, requested=PriorityClass.LOW)
    new_high = replace(new, job_id=999_997, requested=PriorityClass.HIGH)
    oldest_high = min((j for j in w.pending
                       if first.pending[j.job_id].effective is PriorityClass.HIGH),
                      key=lambda j: j.original_submit)

    print(f"workload: {len(w.pending)} pending, {len(w.running)} running, "
          f"{w.cluster.gpus} GPUs (500 nodes x 8), 50 teams, {len(w.events)} fairness events")
    print(f"cycle time: median {statistics.median(times):.1f} ms, min {min(times):.1f} ms, "
          f"max {max(times):.1f} ms over {args.cycles} cycles (target: median <= 100 ms)")
    print(f"cpu time: median {statistics.median(cpu):.1f} ms per cycle (wall time above includes "
          f"waiting for a CPU; load average now {os.getloadavg()[0]:.1f})")
    print(f"peak memory: {peak / 2**20:.1f} MiB traced during one cycle; process max RSS "
          f"{rss_mb:.0f} MiB (target: <= 300 MB)")
    print(f"writes after one new NORMAL (fair-share) job: {writes([*w.pending, new])} (target: 1)")
    print(f"writes after one new LOW (round-robin) job: {writes([*w.pending, new_low])} "
          "(target: 1)")
    print(f"writes after one new HIGH (FCFS) job: {writes([*w.pending, new_high])} (target: 1)")
    print("writes after the oldest HIGH job left the queue: "
          f"{writes([j for j in w.pending if j is not oldest_high])} (target: 0)")
    ended = w.running[0]
    print(f"writes after one running job ended ({ended.resources.gpus} GPUs of {ended.team}): "
          f"{writes(w.pending, running=w.running[1:])} (the team's fair-share jobs move when its "
          "share crosses a step)")
    print(f"writes after 30 s with no job change: {writes(w.pending, NOW + 30)} "
          "(aging promotions and compensation steps that fell due)")


if __name__ == "__main__":
    main()
