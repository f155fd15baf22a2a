"""PNG figures with matplotlib (Agg backend, no display needed).

* ``delay_cdf.png``: queue-delay CDF per class, one panel per policy;
* ``allocation.png``: GPU allocation rate over time, one line per policy;
* ``lost_gpu_hours.png``: GPU-hours lost to preemption per policy, stacked by victim class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.sim.metrics import CDF_POINTS

_COLORS = {c.value: col for c, col in zip(PriorityClass, (
    "#7f0000", "#d7301f", "#fc8d59", "#fdbb84", "#4393c3", "#2166ac", "#5aae61", "#1b7837"),
    strict=True)}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'hai-slurm[sim]' (or pass "
                          "--no-plots)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "svg.hashsalt": "hai-slurm"})
    return plt


def write_plots(results: Sequence[Mapping[str, Any]], outdir: Path) -> list[Path]:
    """The three figures for ``results`` (one per policy); their paths."""
    plt = _pyplot()
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    meta = {"Software": "hai-slurm simulate"}

    n = len(results)
    cols = min(n, 2)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 0.6, 3.4 * rows), squeeze=False,
                             sharey=True, sharex=True)
    quantiles = [k / (CDF_POINTS - 1) for k in range(CDF_POINTS)]
    panels = [ax for row in axes for ax in row]
    for ax in panels[n:]:
        ax.set_visible(False)
    for ax, res in zip(panels, results, strict=False):
        for cls, values in res["delay_cdf_s"].items():
            jobs = res["classes"][cls]["jobs"]
            ax.step([v + 1 for v in values], quantiles, where="post", color=_COLORS[cls],
                    label=f"{cls} ({jobs})")
        ax.set_xscale("log")
        ax.set_title(f"{res['policy']}: queue delay CDF per class")
        ax.set_xlabel("queue delay + 1 s (log scale)")
        ax.set_ylabel("fraction of jobs")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    paths.append(outdir / "delay_cdf.png")
    fig.savefig(paths[-1], metadata=meta)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.6))
    styles = ("-", "--", ":", "-.")
    for i, res in enumerate(results):
        xs = [p[0] for p in res["allocation"]]
        ys = [100 * p[1] for p in res["allocation"]]
        ax.plot(xs, ys, label=f"{res['policy']} (mean "
                f"{100 * res['totals']['allocation_mean']:.1f} %)", linewidth=1.4,
                linestyle=styles[i % len(styles)])
    ax.set_xlabel("hours since the first submit (until the last job started)")
    ax.set_title("GPU allocation over time")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(outdir / "allocation.png")
    fig.savefig(paths[-1], metadata=meta)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(1.6 * n + 3, 3.6))
    names = [res["policy"] for res in results]
    bottom = [0.0] * n
    ax.bar(names, bottom, color="none")  # the categories, even when nothing was lost
    for cls in PriorityClass:
        vals = [float(res["classes"].get(cls.value, {}).get("gpu_hours_lost", 0.0))
                for res in results]
        if any(vals):
            ax.bar(names, vals, bottom=bottom, color=_COLORS[cls.value], label=cls.value)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, res in enumerate(results):
        t = res["totals"]
        ax.annotate(f"{t['gpu_hours_lost']:.1f} GPU-h\n{t['preemptions']} preemptions",
                    (i, bottom[i]), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("GPU-hours lost to preemption")
    ax.set_title("GPU-hours lost to preemption, by victim class")
    ax.set_ylim(0, max([*bottom, 1.0]) * 1.3)
    if any(bottom):
        ax.legend(title="victim class", fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    paths.append(outdir / "lost_gpu_hours.png")
    fig.savefig(paths[-1], metadata=meta)
    plt.close(fig)
    return paths
