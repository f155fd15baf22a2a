"""Benchmark: CPU cost of full daemon cycles on the in-memory FakeSlurm with the SQLite store.

No Slurm needed: ``--running`` (default 2,000) two-GPU jobs fill a fake cluster of
``--running / 4`` nodes x 8 GPUs and ``--jobs`` (default 10,000) one-to-eight-GPU jobs of mixed
classes from 50 teams wait behind them. The daemon is built like ``hai-slurm daemon`` builds it
(:func:`~hai_slurm.priority.daemon.factory.build_daemon`: planner and executor on, unless
``--no-preempt``), with a SQLite file store, a fake clock and a 30 s interval. It prints, for

* the first cycle (every job stored; ``writes_per_cycle`` of the pending jobs' priorities
  written), then the catch-up cycles that write the rest,
* steady cycles (30 s apart, nothing new), their median,
* a cycle after one new job arrives (its write),

wall and CPU time (``time.process_time``), split into the fake's snapshot (what a real
backend replaces), the rest of the cycle ("daemon": policy, planner, glue, store), and the
priority writes, and the writes and stored rows of each cycle. ``--profile`` prints a cProfile
of the steady cycles (cumulative, top 35) and ``--calls`` the total function calls per steady
cycle: on a machine shared with other work, compare CPU times and call counts, not wall times.
The process's collector thresholds are set as ``hai-slurm daemon`` sets them
(:func:`~hai_slurm.priority.daemon.factory.tune_gc`) unless ``--python-gc``.

    .venv/bin/python bench/daemon_cycle.py [--jobs 10000] [--running 2000] [--steady 5]
        [--no-preempt] [--python-gc] [--profile] [--calls]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from hai_slurm.classes import ClassOrigin
from hai_slurm.priority.clock import FakeClock
from hai_slurm.priority.config.loader import DaemonConfig, Intervals
from hai_slurm.priority.daemon.factory import build_daemon, tune_gc
from hai_slurm.priority.daemon.loop import CycleReport, Daemon
from hai_slurm.slurm_plugins.directives import HaiJobInfo, format_admin_comment
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import ActionResult, ClusterSnapshot, JobState

T0 = 1_800_000_000
CLASSES = ("HIGH", "ABOVE_NORMAL", "NORMAL", "NORMAL", "UNDER_NORMAL", "BELOW_NORMAL", "LOW")


def record(cls: str, team: str, *, preemptible: bool = True) -> str:
    """The admin_comment job_submit.lua would write."""
    return format_admin_comment(HaiJobInfo(priority=cls, job_class=cls, team=team,
                                           preemptible=preemptible, grace=60,
                                           source=ClassOrigin.DIRECTIVE))


class Timed:
    """The fake, with its snapshots' and priority writes' CPU and wall time kept."""

    def __init__(self, inner: FakeSlurm) -> None:
        self.inner = inner
        self.snap_cpu = self.snap_wall = self.write_cpu = self.write_wall = 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def snapshot(self) -> ClusterSnapshot:
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            return self.inner.snapshot()
        finally:
            self.snap_cpu += time.process_time() - c0
            self.snap_wall += time.perf_counter() - t0

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            return self.inner.set_priorities(priorities)
        finally:
            self.write_cpu += time.process_time() - c0
            self.write_wall += time.perf_counter() - t0


def cluster(jobs: int, running: int, seed: int) -> FakeSlurm:
    rnd = random.Random(seed)
    nodes = [FakeNode(f"n{i:04d}", gpus=8, cpus=64, memory_mb=512_000)
             for i in range(max(1, running // 4))]
    fake = FakeSlurm(nodes, now=T0 - 7200)
    teams = [f"team{i:02d}" for i in range(50)]
    for i in range(running):
        team = teams[i % len(teams)]
        fake.submit(user=f"u{i % 20}", account=team, gpus_per_node=2,
                    admin_comment=record(rnd.choice(CLASSES), team, preemptible=False),
                    now=T0 - 3600 + i % 600)
    fake.schedule(T0 - 2900)
    for _ in range(jobs):
        team = rnd.choice(teams)
        fake.submit(user=f"u{rnd.randrange(20)}", account=team,
                    gpus_per_node=rnd.choice((1, 1, 2, 4, 8)),
                    admin_comment=record(rnd.choice(CLASSES), team),
                    now=T0 - rnd.randrange(3000))
    fake.advance(T0)
    return fake


class TimedPlanner:
    """The daemon's planner, with the CPU time of its passes kept."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.cpu = 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def plan(self, view: object) -> object:
        c0 = time.process_time()
        try:
            return self.inner.plan(view)  # type: ignore[attr-defined]
        finally:
            self.cpu += time.process_time() - c0


class Figures:
    def __init__(self, name: str, wall: float, cpu: float, snap: Timed,
                 report: CycleReport, snap_before: tuple[float, float, float, float],
                 planner_cpu: float) -> None:
        self.name = name
        self.wall, self.cpu = wall, cpu
        self.snap_cpu = snap.snap_cpu - snap_before[0]
        self.snap_wall = snap.snap_wall - snap_before[1]
        self.write_cpu = snap.write_cpu - snap_before[2]
        self.write_wall = snap.write_wall - snap_before[3]
        self.planner_cpu = planner_cpu
        self.writes = report.writes
        self.rows = len(report.decision.jobs) if report.decision else 0
        self.deferred = report.decision.deferred if report.decision else 0

    def line(self) -> str:
        rest = self.cpu - self.snap_cpu - self.write_cpu - self.planner_cpu
        return (f"{self.name:<18} wall {self.wall:6.3f} s  CPU {self.cpu:6.3f} s = snapshot "
                f"{self.snap_cpu:5.3f} + planner {self.planner_cpu:5.3f} + daemon {rest:5.3f} "
                f"+ writes {self.write_cpu:5.3f}; "
                f"{self.writes:>6} written, {self.rows:>6} rows stored")


def run(daemon: Daemon, timed: Timed, clock: FakeClock, fake: FakeSlurm, name: str,
        profile: cProfile.Profile | None = None) -> Figures:
    before = (timed.snap_cpu, timed.snap_wall, timed.write_cpu, timed.write_wall)
    planner = daemon.planner if isinstance(daemon.planner, TimedPlanner) else None
    planned = planner.cpu if planner is not None else 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    if profile is not None:
        profile.enable()
    report = daemon.run_once()
    if profile is not None:
        profile.disable()
    figures = Figures(name, time.perf_counter() - t0, time.process_time() - c0, timed, report,
                      before, (planner.cpu - planned) if planner is not None else 0.0)
    if report.outcome.value != "ok":
        raise SystemExit(f"{name}: cycle {report.outcome.value}: {report.reason}")
    clock.advance(30)
    fake.advance(int(clock.now))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--steady", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-preempt", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--python-gc", action="store_true",
                        help="keep Python's collector thresholds (hai-slurm daemon raises them)")
    parser.add_argument("--calls", action="store_true",
                        help="count function calls per steady cycle (cProfile)")
    args = parser.parse_args()

    if not args.python_gc:
        tune_gc()  # as ``hai-slurm daemon`` does
    fake = cluster(args.jobs, args.running, args.seed)
    timed = Timed(fake)
    clock = FakeClock(float(T0))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = DaemonConfig(intervals=Intervals(cycle=30.0, urgent_poll=0.0), state_dir=tmp,
                           database_url=f"sqlite:///{Path(tmp)}/hai-slurm.db", metrics_port=0)
        daemon = build_daemon(cfg, slurm=timed, preempt=not args.no_preempt, switches=(),
                              clock=clock, owner="bench")  # type: ignore[arg-type]
        if daemon.planner is not None:
            daemon.planner = TimedPlanner(daemon.planner)  # type: ignore[assignment]
        running = sum(1 for j in fake.jobs.values() if j.state is JobState.RUNNING)
        print(f"{args.jobs} pending, {running} running, {len(fake.nodes)} nodes x 8 GPUs; "
              f"planner {'off' if args.no_preempt else 'on'}")
        rows = [run(daemon, timed, clock, fake, "first")]
        while rows[-1].deferred:  # the writes the budget left (writes_per_cycle)
            rows.append(run(daemon, timed, clock, fake, f"catch-up {len(rows)}"))
        steady = [run(daemon, timed, clock, fake, f"steady {i + 1}")
                  for i in range(args.steady)]
        rows += steady
        fake.submit(user="u1", account="team07", gpus_per_node=2,
                    admin_comment=record("NORMAL", "team07"))
        rows.append(run(daemon, timed, clock, fake, "after one new job"))
        for r in rows:
            print(r.line())
        med = statistics.median(r.cpu for r in steady)
        med_snap = statistics.median(r.snap_cpu for r in steady)
        med_plan = statistics.median(r.planner_cpu for r in steady)
        print(f"steady median: CPU {med:.3f} s, of which the fake's snapshot {med_snap:.3f} s "
              f"and the planner {med_plan:.3f} s (the rest: {med - med_snap - med_plan:.3f} s); "
              "wall "
              f"{statistics.median(r.wall for r in steady):.3f} s")
        new = rows[-1]
        print(f"after one new job: CPU {new.cpu:.3f} s (outside the snapshot and the planner: "
              f"{new.cpu - new.snap_cpu - new.planner_cpu:.3f} s), {new.writes} written")
        if args.profile or args.calls:  # more steady cycles, profiled (cProfile slows them)
            profile = cProfile.Profile()
            for i in range(args.steady):
                run(daemon, timed, clock, fake, f"profiled {i + 1}", profile)
            stats = pstats.Stats(profile)
            calls = stats.total_calls  # type: ignore[attr-defined]
            print(f"function calls per steady cycle: {calls / args.steady:,.0f}")
            if args.profile:
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(35)
                print(out.getvalue())
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
                print(out.getvalue())


if __name__ == "__main__":
    main()
