#!/usr/bin/env python3
"""Benchmark: submit -> plan of a new HIGH job with the urgent path on and off, on the testbed.

    .venv/bin/python bench/urgent_path.py [--state-dir DIR] [--port-base 19700] [--trials 2]
        [--cycle 30] [--queue 1000] [--keep-up]

Each trial: four LOW team-a toy jobs (8 GPUs each) fill the 4 x 8 GPUs; the daemon (built as
``hai-slurm daemon`` builds it, in a thread, SQLite, the testbed's cluster description) runs its
first cycle; right after it a HIGH team-b job asks for 8 GPUs on one node. The figure is the
time from the ``sbatch`` to the plan's creation in the store. With ``[intervals] urgent_poll =
1s`` (the default) the plan comes from an urgent look; with ``urgent_poll = 0`` from the next
cycle (``--cycle`` s, default the shipped 30 s). The planner settings let the first look plan
(``min_run_time`` 5 s, ``restart_cost`` 10 s, ``benefit_threshold`` 0.1), so the figure
measures the path, not the benefit test. Also printed: the cost of one poll
(``pending_briefs``, one ``squeue``) against a full snapshot, with ``--queue`` held jobs
pending (0: the empty queue), and the RPCs a poll sends to slurmctld (``sdiag``).
Nothing is pass/fail: the figures are printed as measured.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from hai_slurm.priority.config.loader import DaemonConfig, parse_config
from hai_slurm.priority.daemon.factory import build_daemon
from hai_slurm.priority.daemon.loop import Daemon
from hai_slurm.priority.demo.scenario import submit_toy
from hai_slurm.slurm_plugins.adapter import CliSlurmClient
from hai_slurm.slurm_plugins.runner import SubprocessRunner
from hai_slurm.testbed import local
from hai_slurm.testbed.describe import cluster_description
from hai_slurm.testbed.layout import Ports
from hai_slurm.testbed.shape import ClusterShape


def _config(work: Path, state: local.TestbedState, redis: str, *, cycle: float,
            urgent_poll: float) -> DaemonConfig:
    cfg = parse_config(f"""
[intervals]
cycle = "{cycle:g}s"
urgent_poll = "{urgent_poll:g}s"
[planner]
min_run_time = "5s"
restart_cost = "10s"
benefit_threshold = 0.1
""")
    work.mkdir(parents=True, exist_ok=True)
    return replace(cfg, state_dir=str(work), database_url=f"sqlite:///{work / 'hai-slurm.db'}",
                   redis_url=redis, metrics_port=0, description=cluster_description(state.shape))


def _wait(what: str, ok: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > end:
            raise RuntimeError(f"{what} within {timeout:g} s")
        time.sleep(0.1)


def trial(state: local.TestbedState, redis: str, work: Path, *, cycle: float,
          urgent_poll: float) -> tuple[float | None, int]:
    """One trial: sbatch -> plan seconds (None: no plan within 2 cycles) and looks made."""
    run = SubprocessRunner(state.slurm_conf)
    slurm = CliSlurmClient(run)
    cfg = _config(work / "daemon", state, redis, cycle=cycle, urgent_poll=urgent_poll)
    lows = [submit_toy(slurm, work, f"low{i}", steps=100000, step_seconds=0.05,
                       priority="LOW", account="team-a", sbatch_args=["-N1", "--gres=gpu:8"])
            for i in range(4)]
    daemon: Daemon | None = None
    thread: threading.Thread | None = None
    try:
        _wait("the LOW jobs did not all start", lambda: all(
            f.running for f in slurm.job_facts([j.job_id for j in lows]).values()), 60)
        time.sleep(6)  # past min_run_time
        daemon = build_daemon(cfg, slurm=slurm,
                              owner=f"bench@{socket.gethostname()}:{os.getpid()}")
        thread = threading.Thread(target=daemon.run, name="hai-daemon", daemon=True)
        thread.start()
        d = daemon
        _wait("the daemon's first cycle did not end", lambda: d._last_cycle is not None, 60)
        sbatch = time.time()
        high = submit_toy(slurm, work, "urgent", steps=40, step_seconds=0.05, priority="HIGH",
                          account="team-b", sbatch_args=["-N1", "--gres=gpu:8"])
        end = time.monotonic() + 2 * cycle + 10
        seconds: float | None = None
        while time.monotonic() < end and seconds is None:
            plans = [p for p in d.repository.history()
                     if high.job_id in {b.job_id for b in p.beneficiaries}]
            if plans:
                seconds = plans[0].created_at - sbatch
            time.sleep(0.05)
        d.request_stop()
        if thread is not None:
            thread.join(60)
        return seconds, d.urgent_looks  # read once the daemon stopped: no look in flight
    finally:
        if daemon is not None:
            daemon.request_stop()
        if thread is not None:
            thread.join(60)
        run(["scancel", "--user=root"])
        _wait("jobs still active after scancel",
              lambda: not slurm.snapshot().jobs, 60)


def _rpcs(run: SubprocessRunner) -> int:
    """slurmctld's count of REQUEST_JOB_INFO RPCs so far (``sdiag``)."""
    out = run(["sdiag"]).stdout
    m = re.search(r"REQUEST_JOB_INFO\s+\(\s*\d+\)\s+count:(\d+)", out)
    return int(m.group(1)) if m else -1


def poll_cost(state: local.TestbedState, queue: int, repeat: int = 20
              ) -> tuple[float, float, int]:
    """Median seconds of pending_briefs() and of snapshot() with ``queue`` held jobs pending,
    and the REQUEST_JOB_INFO RPCs of one poll."""
    run = SubprocessRunner(state.slurm_conf)
    slurm = CliSlurmClient(run)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: run(["sbatch", "--hold", "--job-name", f"q{i}",
                                     "--output=/dev/null", "--wrap", "true"]), range(queue)))
    try:
        slurm.snapshot()
        before = _rpcs(run)
        briefs = []
        for _ in range(repeat):
            t = time.perf_counter()
            got = slurm.pending_briefs()
            briefs.append(time.perf_counter() - t)
        rpcs = round((_rpcs(run) - before) / repeat)  # sdiag itself sends STATS_INFO
        assert len(got) >= queue, (len(got), queue)
        snaps = []
        for _ in range(repeat):
            t = time.perf_counter()
            slurm.snapshot()
            snaps.append(time.perf_counter() - t)
    finally:
        run(["scancel", "--user=root"])
    return statistics.median(briefs), statistics.median(snaps), rpcs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", type=Path, default=Path("/var/tmp/hai-slurm-bench-urgent"))
    p.add_argument("--port-base", type=int, default=19700)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--cycle", type=float, default=30.0)
    p.add_argument("--queue", type=int, default=1000,
                   help="held jobs pending while one poll's cost is measured")
    p.add_argument("--skip-trials", action="store_true", help="only the poll's cost")
    p.add_argument("--keep-up", action="store_true")
    args = p.parse_args()
    base = args.port_base
    ports = Ports(slurmctld=base + 17, slurmdbd=base + 19, mariadb=base + 6, redis=base + 79,
                  slurmd_base=base + 31)
    work = args.state_dir.resolve() / "bench" / time.strftime("%Y%m%d-%H%M%S")
    from hai_slurm.testbed.services import redis_url

    results: dict[str, list[tuple[float | None, int]]] = {"on": [], "off": []}
    try:
        state = local.load_state(args.state_dir.resolve())
        if state is None or not local.healthy(state):
            local.down(args.state_dir)
            local.up(ClusterShape(), state_dir=args.state_dir, ports=ports)
            state = local.load_state(args.state_dir.resolve())
        assert state is not None
        redis = redis_url(args.state_dir.resolve(), state.ports.redis)
        for i in range(0 if args.skip_trials else args.trials):
            for label, poll in (("on", 1.0), ("off", 0.0)):
                got = trial(state, redis, work / f"{label}{i}", cycle=args.cycle,
                            urgent_poll=poll)
                results[label].append(got)
                print(f"trial {i} urgent_poll={poll:g}s: sbatch -> plan "
                      f"{'none' if got[0] is None else f'{got[0]:.2f} s'}, {got[1]} urgent "
                      "look(s)", flush=True)
        brief_s, snap_s, rpcs = poll_cost(state, args.queue)
    finally:
        if not args.keep_up:
            local.down(args.state_dir)
    if not args.skip_trials:
        print(f"\nsbatch -> plan of a HIGH job needing preemption, cycle {args.cycle:g} s "
              f"({args.trials} trial(s) each):")
    for label, poll in (("on", "1 s"), ("off", "0 (off)")) if not args.skip_trials else ():
        secs = [s for s, _ in results[label] if s is not None]
        fig = (f"median {statistics.median(secs):.2f} s, max {max(secs):.2f} s"
               if secs else "no plan")
        print(f"  urgent_poll {poll:<8} {fig}  (each: "
              f"{', '.join('-' if s is None else f'{s:.2f}' for s, _ in results[label])})")
    print(f"\nwith {args.queue} jobs pending: one poll (pending_briefs, 1 squeue) "
          f"{brief_s * 1000:.1f} ms, {rpcs} REQUEST_JOB_INFO RPC(s); a full snapshot "
          f"{snap_s * 1000:.1f} ms (medians of 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
