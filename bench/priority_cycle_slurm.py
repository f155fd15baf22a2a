"""Benchmark: wall time of full daemon cycles against the real testbed with 1,000 pending jobs.

``--backend cli|pyslurm|both`` picks the SlurmClient (``both``: the same jobs through each, one
after the other, then a table side by side). Per backend it also times the job listing alone
and a priority write per job (200 jobs, 200 distinct values: the CLI's worst case).

A blocker job holds the whole cluster (4 nodes x 8 GPUs); N jobs of mixed classes and two teams
wait behind it. Then, with the real CLI backend and a SQLite store, it times:

* the first cycle (every pending job gets its priority: one ``scontrol update`` per distinct value),
* steady cycles (nothing changed: no write),
* a cycle after one new job arrives (one write),

each split into snapshot (squeue/sinfo/scontrol/sacctmgr), policy+diff, Slurm writes and the
database commit. Uses the testbed in ``--state-dir`` if one is up there, else starts one (and
stops it again). Every job it submits is cancelled at the end.

    .venv/bin/python bench/priority_cycle_slurm.py [--jobs 1000] [--backend cli|pyslurm|both]
        [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hai_slurm.priority.config.loader import DaemonConfig, Intervals
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
        ("first cycle (all priorities written)", "first", "{:.0f} ms"),
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
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--steady", type=int, default=5, help="steady cycles to time")
    parser.add_argument("--backend", choices=("cli", "pyslurm", "both"), default="cli",
                        help="SlurmClient backend(s) to time (default: cli)")
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
        pending = [int(j) for j in jobs[1:]]
        backends = ("cli", "pyslurm") if args.backend == "both" else (args.backend,)
        results = {b: run_backend(b, conf, pending, args.steady,
                                  lambda: jobs.append(sbatch(conf, "HIGH", "team-a")))
                   for b in backends}
        print(f"\n{args.jobs} pending jobs behind a blocker; one testbed, one store per backend")
        print(side_by_side(results))
    finally:
        for i in range(0, len(jobs), 200):
            subprocess.run(["scancel", *jobs[i:i + 200]], timeout=60, check=False,
                           env=dict(os.environ, SLURM_CONF=conf))
        if started:
            local.down(state_dir)


if __name__ == "__main__":
    main()
