"""Metric helpers: percentiles, Jain's index, lost GPU time, allocation (all and useful),
fragmentation."""

from __future__ import annotations

from pathlib import Path

import pytest

from hai_slurm.classes import PriorityClass as P
from hai_slurm.priority.planner.testing import gpu_cluster
from hai_slurm.priority.policy.settings import PolicyConfig
from hai_slurm.priority.sim.baselines import HaiPlatform, SlurmMultifactor
from hai_slurm.priority.sim.engine import T0, Engine
from hai_slurm.priority.sim.metrics import jain, percentile, summarize, useful_by
from hai_slurm.priority.sim.trace import Trace, TraceJob, read_generic

DATA = Path(__file__).parent.parent / "data" / "traces"
BOUNDS = {c: p.max_wait for c, p in PolicyConfig().classes.items()}


def test_nearest_rank_percentiles() -> None:
    """p50 of 1..10 is 5, p95 and p99 are 10, p0 is the minimum; empty gives 0."""
    values = [float(v) for v in range(1, 11)]
    assert [percentile(values, p) for p in (0, 50, 95, 99, 100)] == [1, 5, 10, 10, 10]
    assert percentile([], 50) == 0.0


def test_jain_index_is_one_when_use_follows_quota() -> None:
    """Use proportional to quota: 1; one team taking everything of two equal quotas: 0.5."""
    assert jain({"a": 30.0, "b": 10.0}, {"a": 3.0, "b": 1.0}) == pytest.approx(1.0)
    assert jain({"a": 10.0}, {"a": 1.0, "b": 1.0}) == pytest.approx(0.5)


def test_summary_of_the_hai_platform_schedule() -> None:
    """The one-node trace under hai-platform: delays 0/80/120 s, A lost 140 GPU-s x 8 / 8."""
    engine = Engine(read_generic(DATA / "one_node_contention.csv"), gpu_cluster(1, 1),
                    HaiPlatform()).run()
    res = summarize(engine, bounds=BOUNDS, quotas={"t1": 4, "t2": 4})
    assert res["classes"]["LOW"]["queue_delay_s"]["max"] == 0
    assert res["classes"]["HIGH"]["queue_delay_s"]["max"] == 80
    assert res["classes"]["NORMAL"]["queue_delay_s"]["max"] == 120
    assert res["classes"]["LOW"]["gpu_hours_lost"] == pytest.approx(140 * 8 / 3600, rel=1e-5)
    assert res["classes"]["LOW"]["total_wait_s"]["max"] == 150 - 90
    assert res["totals"]["preemptions"] == 1
    assert res["totals"]["allocation_mean"] == pytest.approx(1.0)


def test_service_index_counts_useful_work_done_while_jobs_arrive() -> None:
    """A (LOW, team t1) runs from 0; B (HIGH, t2) arrives at 1000, C (NORMAL, t2) at 1500, the
    last submission. By 1500, under hai-platform A kept 1010 s of its first run (saved at the
    request) and 250 s of its second (1180 + 70 s restart, on to 1500), B did its 100 s: t1
    10,080 GPU-s, t2 800. Under slurm-multifactor A's killed runs kept nothing: t1 0, t2 800,
    and the index over the two equal quotas is 0.5 (one team got all)."""
    jobs = (TraceJob(1, 0, 5000, 8, "t1", P.LOW, 0, "t1"),
            TraceJob(2, 1000, 100, 8, "t2", P.HIGH, 0, "t2"),
            TraceJob(3, 1500, 100, 8, "t2", P.NORMAL, 0, "t2"))
    hp = Engine(Trace(jobs, "t"), gpu_cluster(1, 1), HaiPlatform()).run()
    mf = Engine(Trace(jobs, "t"), gpu_cluster(1, 1), SlurmMultifactor()).run()
    assert [useful_by(j, T0 + 1500) for j in hp.jobs.values()] == [(1010 + 250) * 8, 800, 0]
    assert [useful_by(j, T0 + 1500) for j in mf.jobs.values()] == [0, 800, 0]
    quotas = {"t1": 4, "t2": 4}
    got_hp = summarize(hp, bounds=BOUNDS, quotas=quotas)["totals"]["service_index"]
    assert got_hp == pytest.approx(jain({"t1": 10080.0, "t2": 800.0}, quotas), rel=1e-5)
    assert summarize(mf, bounds=BOUNDS, quotas=quotas)["totals"]["service_index"] == 0.5


def test_useful_allocation_counts_only_progress_kept() -> None:
    """The same three jobs. Both policies hold the node's 8 GPUs all the time until the last
    job starts, so both allocate 1.0. Useful: under hai-platform, by C's start (1580), A kept
    1010 s and 260 s (1250-1510) and B did 100 s: 1370 of 1580 s; under slurm-multifactor
    A's killed runs kept nothing and B did 100 s by C's start (1620): 100 of 1620 s."""
    jobs = (TraceJob(1, 0, 5000, 8, "t1", P.LOW, 0, "t1"),
            TraceJob(2, 1000, 100, 8, "t2", P.HIGH, 0, "t2"),
            TraceJob(3, 1500, 100, 8, "t2", P.NORMAL, 0, "t2"))
    quotas = {"t1": 4, "t2": 4}
    got = {}
    for policy in (HaiPlatform(), SlurmMultifactor()):
        engine = Engine(Trace(jobs, "t"), gpu_cluster(1, 1), policy).run()
        got[type(policy).__name__] = summarize(engine, bounds=BOUNDS, quotas=quotas)["totals"]
    assert [t["allocation_mean"] for t in got.values()] == [1.0, 1.0]
    assert got["HaiPlatform"]["useful_allocation"] == pytest.approx(1370 / 1580, rel=1e-5)
    assert got["SlurmMultifactor"]["useful_allocation"] == pytest.approx(100 / 1620, rel=1e-5)


def test_fragmentation_counts_jobs_split_over_pcie_switches() -> None:
    """1-GPU jobs take GPUs 0, 1, 2 (best fit); a 4-GPU job takes socket 1 (GPUs 4-7, not
    fragmented); job 2 ends and frees GPU 1, so a 2-GPU job gets GPUs 1 and 3 on two PCIe
    switches although a switch could hold it: 1 of 2 multi-GPU starts is fragmented."""
    jobs = [TraceJob(1, 0, 1000, 1, "t", P.NORMAL), TraceJob(2, 0, 100, 1, "t", P.NORMAL),
            TraceJob(3, 0, 1000, 1, "t", P.NORMAL), TraceJob(4, 1, 1000, 4, "t", P.NORMAL),
            TraceJob(5, 200, 100, 2, "t", P.NORMAL)]
    engine = Engine(Trace(tuple(jobs), "t"), gpu_cluster(1, 1), HaiPlatform()).run()
    res = summarize(engine, bounds=BOUNDS, quotas={"t": 8})
    assert res["totals"]["multi_gpu_starts"] == 2
    assert res["totals"]["fragmented_starts"] == 1
