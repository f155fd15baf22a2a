"""Results of one run, per class and per team, as plain JSON-ready values.

Definitions (all times seconds unless the key says ``_h`` for hours):

* queue delay: first start - submit; total wait: end - submit - time spent running (includes
  the waits after requeues); JCT: end - submit;
* GPU-hours lost: per job, GPU time held minus GPU time of useful work (work redone after a kill,
  checkpoint writing, restart overhead), charged to the victim's class and team;
* allocation rate: GPUs in use / GPUs of the cluster, time-weighted from the first submit until
  the last job has started (arrivals and the queue draining; a few months-long jobs would
  otherwise stretch the average over an idle tail); the series averages ``bins`` equal slices;
* useful allocation: the same mean over the same window, of GPUs doing useful work (progress
  kept): work later lost to a kill, checkpoint writing and restarts count as allocated but
  not as useful. With the same window, a policy that loses more work has a higher allocation
  for the same useful work (``priority/sim/README.md``);
* fragmentation: starts of multi-GPU jobs whose GPUs span a higher level than the smallest cell
  of the cluster that could hold them (e.g. 2 GPUs over two PCIe switches, a multi-node job over
  two leaf switches);
* Jain's index over teams of x = (team share of GPU-hours used) / (team share of the quotas);
  when every job ends, a team's GPU-hours used are its work plus its lost work, so this index
  differs between policies only by where their lost work falls (``priority/sim/README.md``);
* service index: the same index over the GPU-hours of *useful* work (progress kept) each team
  got done by the last submission, a window the same for every policy: how the GPUs were
  shared while jobs arrived;
* worst wait against the bound: the largest total wait in a class divided by that class's
  ``max_wait`` (the same bounds for every policy, from the daemon configuration).

Percentiles use the nearest-rank method; every float is rounded (6 significant digits) so the
JSON is byte-identical for the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.sim.engine import T0, Engine, SimJob

CDF_POINTS = 101
#: The "top classes" of the comparison: this class and the ones above it.
TOP_FROM = PriorityClass.HIGH


def r(value: float) -> float:
    """``value`` rounded to 6 significant digits (stable JSON)."""
    if value == 0 or not math.isfinite(value):
        return 0.0 if not math.isfinite(value) else float(value)
    return float(f"{value:.6g}")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (0 when empty)."""
    if not values:
        return 0.0
    k = max(0, math.ceil(p / 100 * len(values)) - 1)
    return values[min(k, len(values) - 1)]


def _dist(values: Iterable[float]) -> dict[str, float]:
    v = sorted(values)
    return {"p50": r(percentile(v, 50)), "p95": r(percentile(v, 95)),
            "p99": r(percentile(v, 99)), "max": r(v[-1] if v else 0.0),
            "mean": r(sum(v) / len(v) if v else 0.0)}


def job_facts(job: SimJob) -> dict[str, float] | None:
    """Delay, total wait, JCT, lost GPU-seconds of an ended job (None if it never ended)."""
    if job.end is None or job.first_start is None:
        return None
    submit = T0 + job.trace.submit
    ran = job.held_gpu_s / job.gpus
    return {"delay": job.first_start - submit, "wait": job.end - submit - ran,
            "jct": job.end - submit, "lost": job.held_gpu_s - job.gpus * job.trace.duration}


def jain(shares: Mapping[str, float], quotas: Mapping[str, float]) -> float:
    """Jain's index of ``share / quota share`` over the teams with a quota."""
    total_q = sum(q for q in quotas.values() if q > 0)
    total_s = sum(shares.values())
    if total_q <= 0 or total_s <= 0:
        return 1.0
    xs = [(shares.get(t, 0.0) / total_s) / (q / total_q) for t, q in sorted(quotas.items())
          if q > 0]
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if sq else 1.0


def useful_by(job: SimJob, until: int) -> int:
    """GPU-seconds of ``job``'s useful work (progress kept) done before ``until``."""
    done = sum(min(kept, max(0, until - start - overhead)) for start, overhead, kept in job.kept)
    if job.run_start is not None:   # still running when the run stopped
        done += min(job.remaining, max(0, until - job.run_start - job.overhead))
    return done * job.gpus


def allocation_series(engine: Engine, start: int, end: int, bins: int) -> tuple[float,
                                                                                 list[list[float]]]:
    """(time-weighted mean allocation rate, [[hours since start, rate], ...] per bin)."""
    total = engine.slurm.total_gpus
    points = engine.allocation
    span = max(1, end - start)
    width = span / bins
    acc = [0.0] * bins
    area = 0.0
    for i, (t, used) in enumerate(points):
        t_next = points[i + 1][0] if i + 1 < len(points) else end
        a, b = float(max(t, start)), float(min(t_next, end))
        if b <= a or used == 0:
            continue
        area += (b - a) * used
        k = int((a - start) // width)
        while a < b and k < bins:
            edge = min(b, start + (k + 1) * width)
            acc[k] += (edge - a) * used
            a, k = edge, k + 1
    series = [[r((k + 0.5) * width / 3600), r(acc[k] / (width * total))] for k in range(bins)]
    return area / (span * total), series


def summarize(engine: Engine, *, bounds: Mapping[PriorityClass, float],
              quotas: Mapping[str, int], bins: int = 200) -> dict[str, Any]:
    """Every metric of one run (see the module docstring) as a JSON-ready dict."""
    facts: dict[int, dict[str, float]] = {}
    for tid, job in engine.jobs.items():
        f = job_facts(job)
        if f is not None:
            facts[tid] = f
    jobs = list(engine.jobs.values())
    start = T0 + min((j.trace.submit for j in jobs), default=0)
    end = max((j.end or engine.now for j in jobs), default=start)
    busy_until = max([T0 + j.trace.submit for j in jobs]
                     + [j.first_start for j in jobs if j.first_start is not None], default=start)
    window_end = max(busy_until, start + 1)
    mean_alloc, series = allocation_series(engine, start, window_end, bins)
    useful_alloc = sum(useful_by(j, window_end) for j in jobs) / (
        (window_end - start) * engine.slurm.total_gpus)
    min_level = engine.slurm.min_level
    multi = [(lv, j) for j in jobs if j.gpus > 1 for lv in j.levels]
    fragmented = sum(lv > (min_level[j.per_node] if j.nodes == 1 else 4) for lv, j in multi)

    def group(selected: list[SimJob], bound: float | None) -> dict[str, Any]:
        fs = [facts[j.trace.job_id] for j in selected if j.trace.job_id in facts]
        pre = [j.preemptions for j in selected]
        out: dict[str, Any] = {
            "jobs": len(selected), "ended": len(fs),
            "queue_delay_s": _dist(f["delay"] for f in fs),
            "total_wait_s": _dist(f["wait"] for f in fs),
            "jct_s": _dist(f["jct"] for f in fs),
            "gpu_hours_used": r(sum(j.held_gpu_s for j in selected) / 3600),
            "gpu_hours_lost": r(sum(f["lost"] for f in fs) / 3600),
            "preemptions": sum(pre),
            "preemptions_per_job": {"mean": r(sum(pre) / len(pre) if pre else 0.0),
                                    "max": max(pre, default=0)},
        }
        if bound is not None:
            worst = max((f["wait"] for f in fs), default=0.0)
            out.update(bound_s=r(bound), worst_wait_s=r(worst),
                       worst_over_bound=r(worst / bound if bound else 0.0),
                       jobs_past_bound=sum(f["wait"] > bound for f in fs))
        return out

    classes = {c.value: group([j for j in jobs if j.trace.cls is c], bounds.get(c))
               for c in PriorityClass if any(j.trace.cls is c for j in jobs)}
    teams = sorted({j.trace.team for j in jobs})
    team_out = {t: group([j for j in jobs if j.trace.team == t], None) for t in teams}
    used = {t: float(team_out[t]["gpu_hours_used"]) for t in teams}
    last_submit = T0 + max((j.trace.submit for j in jobs), default=0)
    served: dict[str, float] = dict.fromkeys(teams, 0.0)
    for j in jobs:
        served[j.trace.team] += useful_by(j, last_submit)
    for t in teams:
        team_out[t]["quota_gpus"] = quotas.get(t, 0)
    delays: dict[str, list[float]] = {c: [] for c in classes}
    for j in jobs:
        if j.trace.job_id in facts and j.trace.cls.value in delays:
            delays[j.trace.cls.value].append(facts[j.trace.job_id]["delay"])
    cdf = {c: [r(percentile(ds, 100 * k / (CDF_POINTS - 1))) for k in range(CDF_POINTS)]
           for c, ds in ((c, sorted(delays[c])) for c in classes)}
    all_lost = sum(f["lost"] for f in facts.values())
    return {
        "totals": {
            "jobs": len(jobs), "ended": len(facts), "rejected": len(engine.rejected),
            "events": engine.events_handled, "cycles": engine.cycles,
            "preemptions": len(engine.preemptions),
            "gpu_hours_used": r(sum(j.held_gpu_s for j in jobs) / 3600),
            "gpu_hours_lost": r(all_lost / 3600),
            "allocation_mean": r(mean_alloc), "useful_allocation": r(useful_alloc),
            "makespan_h": r((end - start) / 3600),
            "multi_gpu_starts": len(multi), "fragmented_starts": fragmented,
            "fragmentation": r(fragmented / len(multi) if multi else 0.0),
            "jain_index": r(jain(used, {t: float(quotas.get(t, 0)) for t in teams})),
            "service_index": r(jain(served, {t: float(quotas.get(t, 0)) for t in teams})),
            "queue_delay_s": _dist(f["delay"] for f in facts.values()),
            "top_classes_queue_delay_s": _dist(
                facts[j.trace.job_id]["delay"] for j in jobs
                if j.trace.cls.weight >= TOP_FROM.weight and j.trace.job_id in facts),
        },
        "classes": classes,
        "teams": team_out,
        "allocation": series,
        "delay_cdf_s": cdf,
    }
