"""Writing results: stable JSON files and the plain-text table printed on stdout."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hai_slurm.classes import PriorityClass


def dumps(result: Mapping[str, Any]) -> str:
    """``result`` as JSON text: sorted keys, fixed indentation, trailing newline."""
    return json.dumps(result, sort_keys=True, indent=1, ensure_ascii=True) + "\n"


def write_json(result: Mapping[str, Any], path: Path) -> Path:
    """Write ``result`` to ``path`` (directories made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(result), encoding="utf-8")
    return path


def _h(seconds: float) -> str:
    s = float(seconds)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def table(results: Sequence[Mapping[str, Any]]) -> str:
    """Per policy: totals, then one row per class (delay percentiles, loss, bound check)."""
    lines = []
    for res in results:
        t = res["totals"]
        lines.append(
            f"== {res['policy']}: {t['jobs']} jobs ({t['ended']} ended, {t['rejected']} "
            f"rejected), {res['cluster']['gpus']} GPUs, allocation {100 * t['allocation_mean']:.1f}"
            f" % (useful {100 * t['useful_allocation']:.1f} %), preemptions {t['preemptions']}, "
            f"lost {t['gpu_hours_lost']:.1f} GPU-h, "
            f"Jain {t['jain_index']:.3f} (service {t['service_index']:.3f}), fragmented "
            f"{100 * t['fragmentation']:.1f} % of {t['multi_gpu_starts']} multi-GPU starts")
        lines.append(f"{'class':<13}{'jobs':>6}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}"
                     f"{'JCT p50':>9}{'lost GPU-h':>11}{'pre/job':>8}{'worst/bound':>12}")
        for cls in PriorityClass:
            c = res["classes"].get(cls.value)
            if c is None:
                continue
            d = c["queue_delay_s"]
            lines.append(
                f"{cls.value:<13}{c['jobs']:>6}{_h(d['p50']):>8}{_h(d['p95']):>8}"
                f"{_h(d['p99']):>8}{_h(d['max']):>8}{_h(c['jct_s']['p50']):>9}"
                f"{c['gpu_hours_lost']:>11.1f}{c['preemptions_per_job']['mean']:>8.3f}"
                f"{c['worst_over_bound']:>11.2f}x")
        lines.append("")
    return "\n".join(lines)
