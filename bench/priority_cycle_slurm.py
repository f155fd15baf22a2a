"""Benchmark: wall time of full daemon cycles against the real testbed (default 1,000 pending jobs).

A blocker job holds every GPU of the cluster (4 nodes x 8 GPUs, one CPU per node); ``--jobs`` GPU
jobs of mixed classes and two teams wait behind it, and ``--running`` one-CPU jobs run beside it
(the testbed's nodes claim enough cores for them: ``SlurmdParameters=config_overrides``). Then,
with the ``--backend`` SlurmClient (``cli`` default, ``pyslurm``), a SQLite store and the default
30 s interval, it times:

* the first cycle (every pending job's priority is due; it writes ``writes_per_cycle`` of
  them, the top of the queue, and the cycles after it the rest, timed too),
* steady cycles (nothing changed: no write), and their median,
* a cycle after one new job arrives (one write),

with the CPU time the cycle cost (the bench's own process, and the Slurm commands it ran; the
time slurmctld spends is not in it), because on a shared machine the wall time mostly measures
the load,

each split into snapshot (squeue/sinfo/scontrol/sacctmgr), policy+diff, Slurm writes and the
database commit, and prints the RPCs the daemon's cycles sent to slurmctld (``sdiag`` counts
before and after, per second of the 30 s interval). Uses the testbed in ``--state-dir`` if one is
up there, else starts one (and stops it again). Every job it submits is cancelled at the end,
unless ``--keep``: then the next run with the same ``--state-dir`` reuses them (the queue is
topped up to ``--jobs``/``--running``), which saves minutes of sbatch at 10,000 jobs.

``--backend both`` runs the same pending jobs through each backend in turn (no ``--running``
figures, no burst) and prints a table side by side, with the job listing alone and a priority
write per job (200 jobs, 200 distinct values: the CLI's worst case).

    .venv/bin/python bench/priority_cycle_slurm.py [--jobs 1000] [--running 0]
        [--backend cli|pyslurm|both] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hai_slurm.priority.config.loader import DaemonConfig, Intervals
from hai_slurm.priority.daemon.factory import tune_gc
from hai_slurm.priority.daemon.loop import CycleReport, Daemon, Outcome, open_store
from hai_slurm.slurm_plugins.adapter import CliSlurmClient, make_client
from hai_slurm.slurm_plugins.parse import parse_jobs
from hai_slurm.slurm_plugins.pyslurm_backend import PyslurmClient
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
        self.json_snapshots = 0

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


NAME = "hai-bench"
"""Job name of every job the bench submits (how ``--keep`` finds them again)."""


def sbatch(slurm_conf: str, cls: str, team: str, seconds: int = 1, *,
           shape: tuple[str, ...] = ("-N4", "--gres=gpu:8"), kind: str = "pending") -> str:
    script = f"#!/bin/bash\n#HAI --priority={cls}\nsleep {seconds}\n"
    res = subprocess.run(["sbatch", "--parsable", f"--account={team}", *shape,
                          f"--job-name={NAME}-{kind}", "--output=/dev/null", "--chdir=/tmp"],
                         input=script, text=True, capture_output=True, timeout=120,
                         check=False, env=dict(os.environ, SLURM_CONF=slurm_conf))
    if res.returncode != 0:
        raise SystemExit(f"sbatch refused a job: {res.stderr.strip()}")
    return res.stdout.strip().split(";")[0]


def existing(slurm_conf: str) -> dict[str, list[str]]:
    """The bench's jobs already in the queue, by kind (blocker, pending, running)."""
    out = subprocess.run(["squeue", "--noheader", f"--name={NAME}-blocker,{NAME}-pending,"
                          f"{NAME}-running", "--Format=JobID:|,Name:|"], text=True,
                         capture_output=True, timeout=120, check=True,
                         env=dict(os.environ, SLURM_CONF=slurm_conf)).stdout
    kinds: dict[str, list[str]] = {"blocker": [], "pending": [], "running": []}
    for line in out.splitlines():
        job, _, name = line.strip().rstrip("|").partition("|")
        kind = name.removeprefix(f"{NAME}-")
        if kind in kinds:
            kinds[kind].append(job)
    return kinds


def sdiag_counts(slurm_conf: str) -> dict[str, int]:
    """RPC counts by message type from ``sdiag``."""
    out = subprocess.run(["sdiag"], text=True, capture_output=True, timeout=60, check=True,
                         env=dict(os.environ, SLURM_CONF=slurm_conf)).stdout
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s+(REQUEST_\w+|MESSAGE_\w+)\s+\(\s*\d+\)\s+count:(\d+)",
                                 out, re.MULTILINE)}


def rpc_line(before: dict[str, int], after: dict[str, int], cycles: int, interval: float) -> str:
    """RPCs the cycles sent between two ``sdiag`` readings, per cycle and per second."""
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    diff = {k: v for k, v in diff.items() if v > 0}
    total = sum(diff.values())
    top = ", ".join(f"{k.removeprefix('REQUEST_')} {v}" for k, v in
                    sorted(diff.items(), key=lambda kv: -kv[1])[:6])
    return (f"{total / cycles:.0f} RPCs per cycle = {total / cycles / interval:.2f} RPC/s at the "
            f"{interval:.0f} s interval ({top})")


def cycle(d: Daemon, timed: Timed) -> tuple[CycleReport, str]:
    timed.snapshot_s = timed.write_s = 0.0
    timed.commands = 0
    cpu0, kids0 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rep = d.run_once()
    total = time.perf_counter() - t0
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ours = time.process_time() - cpu0
    kids = kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime
    if rep.outcome is not Outcome.OK:
        raise SystemExit(f"cycle failed: {rep.reason}")
    rest = total - timed.snapshot_s - timed.write_s
    json_before = timed.json_snapshots
    timed.json_snapshots = int(getattr(timed.inner, "json_snapshots", 0))
    how = ("pyslurm" if not hasattr(timed.inner, "json_snapshots") else
           "squeue --json" if timed.json_snapshots > json_before else "squeue -O")
    return rep, (f"{total * 1000:8.0f} ms  (snapshot {timed.snapshot_s * 1000:.0f} ms by {how}, "
                 f"writes {timed.write_s * 1000:.0f} ms in {timed.commands} commands, policy+store "
                 f"{rest * 1000:.0f} ms; {rep.writes} priorities written; CPU: bench "
                 f"{ours * 1000:.0f} ms + Slurm commands {kids * 1000:.0f} ms)")


def catch_up(d: Daemon, timed: Timed, rep: CycleReport, label: str) -> list[float]:
    """The cycles after a first one that left writes for later (``writes_per_cycle``), until
    none is left: their wall times, each printed."""
    times = []
    while rep.decision is not None and rep.decision.deferred:
        left = rep.decision.deferred
        rep, line = cycle(d, timed)
        times.append(rep.seconds)
        print(f"{label}catch-up cycle ({left} were left): {line}")
    return times


def client_for(backend: str, conf: str) -> SlurmClient:
    """The backend's client (``make_client``: pyslurm raises, saying why, where it is unusable)."""
    return make_client(backend, slurm_conf=conf)


def listing_ms(client: SlurmClient, repeat: int = 5) -> float:
    """Median time of the job listing alone: ``squeue --json`` + parse, or pyslurm's."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        if isinstance(client, PyslurmClient):
            client.jobs()
        else:
            assert isinstance(client, CliSlurmClient)
            parse_jobs(client._json(client.plan.jobs))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def write_ms_per_job(client: SlurmClient, job_ids: list[int]) -> float:
    """Priority write per job: one distinct value each (the CLI's worst case: a command each)."""
    t0 = time.perf_counter()
    client.set_priorities({j: 10_000 + i for i, j in enumerate(job_ids)})
    return (time.perf_counter() - t0) * 1000 / max(len(job_ids), 1)


def run_backend(backend: str, conf: str, pending: list[int], steady_n: int,
                new_job: Callable[[], None]) -> dict[str, float]:
    """Every figure of one backend (the jobs' priorities are reset first, so the first cycle
    writes them all, whichever backend ran before)."""
    client = client_for(backend, conf)
    CliSlurmClient(slurm_conf=conf).set_priorities({j: 1 for j in pending})
    figures = {"listing": listing_ms(client),
               "write": write_ms_per_job(client, pending[:200])}
    CliSlurmClient(slurm_conf=conf).set_priorities({j: 1 for j in pending[:200]})
    with tempfile.TemporaryDirectory() as tmp:
        cfg = DaemonConfig(intervals=Intervals(cycle=30), state_dir=tmp,
                           database_url=f"sqlite:///{tmp}/hai-slurm.db", metrics_port=0)
        repo, lock = open_store(cfg)
        timed = Timed(client)
        d = Daemon(timed, repo, lock, config=cfg, owner="bench")
        rep, line = cycle(d, timed)
        figures["first"] = rep.seconds * 1000
        n = len(rep.decision.inputs.pending) if rep.decision else 0
        print(f"[{backend}] first cycle ({n} pending):   {line}")
        later = catch_up(d, timed, rep, f"[{backend}] ")
        figures["catch_up"] = len(later)
        figures["catch_up_max"] = max(later, default=0.0) * 1000
        steady = []
        for _ in range(steady_n):
            rep, line = cycle(d, timed)
            steady.append(rep.seconds)
            print(f"[{backend}] steady cycle:                {line}")
        figures["steady"] = statistics.median(steady) * 1000
        figures["snapshot"] = timed.snapshot_s * 1000
        new_job()
        rep, line = cycle(d, timed)
        figures["after_one"] = rep.seconds * 1000
        print(f"[{backend}] after one new job:           {line}")
    print(f"[{backend}] job listing {figures['listing']:.1f} ms, priority write "
          f"{figures['write']:.2f} ms per job, steady median {figures['steady']:.0f} ms")
    return figures


ROWS = (("job listing (median of 5)", "listing", "{:.1f} ms"),
        ("priority write, per job (200 distinct values)", "write", "{:.2f} ms"),
        ("first cycle (at most writes_per_cycle priorities written)", "first", "{:.0f} ms"),
        ("cycles until every priority is written, after the first", "catch_up", "{:.0f}"),
        ("  the slowest of them", "catch_up_max", "{:.0f} ms"),
        ("steady cycle (median)", "steady", "{:.0f} ms"),
        ("  of which snapshot (last steady)", "snapshot", "{:.0f} ms"),
        ("cycle after one new job", "after_one", "{:.0f} ms"))


def side_by_side(results: Mapping[str, Mapping[str, float]]) -> str:
    """A Markdown table, one column per backend."""
    names = list(results)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, key, fmt in ROWS:
        lines.append(f"| {label} | " + " | ".join(fmt.format(results[b][key]) for b in names)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="pending jobs")
    parser.add_argument("--running", type=int, default=0, help="running one-CPU jobs")
    parser.add_argument("--steady", type=int, default=5, help="steady cycles to time")
    parser.add_argument("--backend", choices=("cli", "pyslurm", "both"), default="cli",
                        help="SlurmClient backend(s) to time (default: cli)")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp/hai-slurm-testbed-bench-daemon"))
    parser.add_argument("--port-base", type=int, default=19800,
                        help="testbed ports: slurmctld BASE+17, slurmdbd +19, MariaDB +6, "
                             "Redis -421, slurmd +101..")
    parser.add_argument("--burst", type=int, default=0,
                        help="at the end, sbatch this many more jobs (4 at a time) while the "
                             "daemon cycles back to back, and count refusals")
    parser.add_argument("--site-scheduling", action="store_true",
                        help="the generated slurm.conf's SchedulerParameters (Slurm's 60-s main "
                        "pass, backfill every 10 s) instead of the testbed's 1-s passes; needs "
                        "its own --state-dir")
    parser.add_argument("--keep", action="store_true",
                        help="leave the jobs (and the testbed) for the next run")
    args = parser.parse_args()
    tune_gc()  # as ``hai-slurm daemon`` does
    state_dir = args.state_dir.resolve()
    b = args.port_base
    # Cores for the running jobs beside the blocker's one CPU per node (4 nodes, 2 sockets).
    cores = 8
    while cores * 8 < args.running + 8:
        cores *= 2
    shape = ClusterShape(cores_per_socket=cores, site_scheduling=args.site_scheduling)
    started = local.up(shape, state_dir=state_dir,
                       ports=Ports(b + 17, b + 19, b + 6, b - 421, b + 101), echo=print)
    state = local.load_state(state_dir)
    assert state is not None
    conf = state.slurm_conf
    os.environ["SLURM_CONF"] = conf
    jobs: list[str] = []
    interval = 30.0
    try:
        have = existing(conf)
        jobs += have["blocker"] + have["pending"] + have["running"]
        if not have["blocker"]:  # every GPU, one CPU per node
            jobs.append(sbatch(conf, "NORMAL", "team-b", 36000, kind="blocker",
                               shape=("-N4", "--gres=gpu:8", "--ntasks-per-node=1")))
            time.sleep(2)
        t0 = time.perf_counter()
        more_run = max(0, args.running - len(have["running"]))
        more_pend = max(0, args.jobs - len(have["pending"]))
        with ThreadPoolExecutor(4) as pool:
            jobs += pool.map(lambda i: sbatch(conf, CLASSES[i % len(CLASSES)],
                                              ("team-a", "team-b")[i % 2], 36000,
                                              kind="running", shape=("-n1", "--mem=100")),
                             range(more_run))
            # Before the queue: with a site's scheduling (a 60-s main pass looking at the
            # first 100 jobs, backfill at 500), one-CPU jobs queued behind 10,000 GPU jobs
            # of higher priority may never start.
            wait_running(conf, args.running)
            jobs += pool.map(lambda i: sbatch(conf, CLASSES[i % len(CLASSES)],
                                              ("team-a", "team-b")[i % 2]), range(more_pend))
        print(f"submitted {more_run} running and {more_pend} pending jobs in "
              f"{time.perf_counter() - t0:.1f} s (reused {len(have['running'])} running, "
              f"{len(have['pending'])} pending)")
        wait_running(conf, args.running)
        if args.backend == "both":
            pending = [int(j) for j in existing(conf)["pending"]]
            results = {b: run_backend(b, conf, pending, args.steady,
                                      lambda: jobs.append(sbatch(conf, "HIGH", "team-a")))
                       for b in ("cli", "pyslurm")}
            print(f"\n{len(pending)} pending jobs behind a blocker; one testbed, one store per "
                  "backend")
            print(side_by_side(results))
            return
        with tempfile.TemporaryDirectory() as tmp:
            cfg = DaemonConfig(intervals=Intervals(cycle=interval), state_dir=tmp,
                               database_url=f"sqlite:///{tmp}/hai-slurm.db", metrics_port=0)
            repo, lock = open_store(cfg)
            timed = Timed(client_for(args.backend, conf))
            d = Daemon(timed, repo, lock, config=cfg, owner="bench")
            before = sdiag_counts(conf)
            rep, line = cycle(d, timed)
            after = sdiag_counts(conf)
            dec = rep.decision
            pending = len(dec.inputs.pending) if dec else 0
            running = len(dec.inputs.running) if dec else 0
            print(f"first cycle ({pending} pending, {running} running): {line}")
            print(f"  first cycle RPCs: {rpc_line(before, after, 1, interval)}")
            later = catch_up(d, timed, rep, "")
            if later:
                print(f"every priority written after {len(later)} more cycles (slowest "
                      f"{max(later) * 1000:.0f} ms)")
            steady = []
            before = sdiag_counts(conf)
            for _ in range(args.steady):
                rep, line = cycle(d, timed)
                steady.append(rep.seconds)
                print(f"steady cycle:                {line}")
            after = sdiag_counts(conf)
            print(f"steady median: {statistics.median(steady) * 1000:.0f} ms")
            print(f"  steady RPCs (sdiag counts the bench's own 2 sdiag calls too): "
                  f"{rpc_line(before, after, args.steady, interval)}")
            jobs.append(sbatch(conf, "HIGH", "team-a"))
            before = sdiag_counts(conf)
            rep, line = cycle(d, timed)
            after = sdiag_counts(conf)
            print(f"after one new job:           {line}")
            print(f"  one-change RPCs: {rpc_line(before, after, 1, interval)}")
            if args.burst:
                burst = Burst(conf, args.burst)
                burst.start()
                while burst.is_alive():
                    rep, line = cycle(d, timed)
                    print(f"cycle during the burst:      {line}")
                burst.join()
                jobs += burst.ids
                print(f"  burst of {args.burst} sbatch beside the cycles: {burst.report()}")
    finally:
        if not args.keep:
            for i in range(0, len(jobs), 500):
                subprocess.run(["scancel", *jobs[i:i + 500]], timeout=120, check=False,
                               env=dict(os.environ, SLURM_CONF=conf))
            if started:
                local.down(state_dir)


class Burst(threading.Thread):
    """Submits ``count`` jobs, 4 at a time, beside the daemon; counts refusals and latency."""

    def __init__(self, slurm_conf: str, count: int) -> None:
        super().__init__(daemon=True)
        self.conf, self.count = slurm_conf, count
        self.ids: list[str] = []
        self.refused: list[str] = []
        self.seconds: list[float] = []

    def one(self, i: int) -> None:
        t0 = time.perf_counter()
        script = f"#!/bin/bash\n#HAI --priority={CLASSES[i % len(CLASSES)]}\nsleep 1\n"
        res = subprocess.run(["sbatch", "--parsable", f"--account={('team-a', 'team-b')[i % 2]}",
                              "-N4", "--gres=gpu:8", f"--job-name={NAME}-pending",
                              "--output=/dev/null", "--chdir=/tmp"], input=script, text=True,
                             capture_output=True, timeout=120, check=False,
                             env=dict(os.environ, SLURM_CONF=self.conf))
        self.seconds.append(time.perf_counter() - t0)
        if res.returncode == 0:
            self.ids.append(res.stdout.strip().split(";")[0])
        else:
            self.refused.append(res.stderr.strip())

    def run(self) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(self.one, range(self.count)))

    def report(self) -> str:
        lat = sorted(self.seconds)
        p95 = lat[int(len(lat) * 0.95)] if lat else 0.0
        why = f" (first: {self.refused[0]})" if self.refused else ""
        return (f"{len(self.ids)} accepted, {len(self.refused)} refused{why}; sbatch median "
                f"{statistics.median(lat) if lat else 0:.2f} s, p95 {p95:.2f} s")


def wait_running(slurm_conf: str, want: int, timeout: float = 600.0) -> None:
    """Until ``want`` of the bench's running jobs run (slurmd starts them in a burst)."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "--noheader", "--states=RUNNING",
                              f"--name={NAME}-running", "--Format=JobID"], text=True,
                             capture_output=True, timeout=120, check=True,
                             env=dict(os.environ, SLURM_CONF=slurm_conf)).stdout
        n = len(out.split())
        if n >= want:
            return
        time.sleep(5)
    raise SystemExit(f"only {n} of {want} running jobs started within {timeout:.0f} s")


if __name__ == "__main__":
    main()
