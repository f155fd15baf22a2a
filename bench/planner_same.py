"""Same plans before and after a planner change: a digest of every pass over a fixed set of inputs.

Runs the planner over bench/planner.py's snapshot (500 x 8 GPUs, 2,000 running, 10,000 pending;
seeds 1-3) and over generated scenarios (small and wide clusters, multi-node jobs, few and
many leaves; several passes in a row at later times on one topology, as the daemon and the
simulator make them), each with the default, lifted, fixed and ``min_run_time`` 0 limits, and
prints one SHA-256 per scenario of the whole result's ``repr`` (plans, victims, placements,
reasons, passed-over sets and every decision in the order made), then one over all of them.

    .venv/bin/python bench/planner_same.py [--code DIR] [--save DIR] [--quick]

``--code DIR`` runs the planner package found in DIR instead of the installed one (a copy of
``priority/planner`` at an earlier commit: ``git archive <commit> priority/planner | tar -x -C
/tmp/x`` then ``--code /tmp/x/priority/planner``), so both run on the same machine and inputs;
equal digests mean equal plans. ``--save DIR`` writes each result's ``repr`` there (to diff
when digests differ). ``--quick`` leaves out the two larger seeds of the big snapshot.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--code", type=Path, help="a planner package directory to run instead")
    parser.add_argument("--save", type=Path, help="write each result's repr into this folder")
    parser.add_argument("--quick", action="store_true", help="only seed 1 of the big snapshot")
    args = parser.parse_args()
    if args.code is not None:
        # before any planner module is imported: the package's modules come from DIR
        import hai_slurm.priority.planner as package

        package.__path__[:] = [str(args.code.resolve())]
    from dataclasses import replace

    from hai_slurm.priority.planner.search import plan_preemptions
    from hai_slurm.priority.planner.testing import NOW, synthetic_snapshot
    from hai_slurm.priority.planner.types import PlannerConfig, PlanSnapshot

    default = PlannerConfig()
    configs = {
        "default": default,
        "lifted": replace(default, max_plans=64, max_searches=1_000_000),
        "fixed": replace(default, plans_per_pending=0.0),
        "young": replace(default, min_run_time=0.0, max_candidates_per_node=4),
        "strict": replace(default, allow_cross_leaf=False, benefit_threshold=3.0),
    }
    scenarios: list[tuple[str, PlanSnapshot, tuple[str, ...], int]] = []
    for seed in (1,) if args.quick else (1, 2, 3):
        scenarios.append((f"big{seed}", synthetic_snapshot(seed), tuple(configs), 1))
    for seed in range(4, 10):
        scenarios.append((f"small{seed}", synthetic_snapshot(
            seed, leaves=5, nodes_per_leaf=6, running=180, pending=400, teams=6),
            tuple(configs), 3))
    for seed in range(10, 14):
        scenarios.append((f"wide{seed}", synthetic_snapshot(
            seed, leaves=12, nodes_per_leaf=3, running=220, pending=300, teams=5),
            tuple(configs), 3))
    for seed in range(14, 16):
        scenarios.append((f"oneleaf{seed}", synthetic_snapshot(
            seed, leaves=1, nodes_per_leaf=40, running=300, pending=1_500, teams=8),
            tuple(configs), 2))
    for seed in range(16, 18):
        scenarios.append((f"mid{seed}", synthetic_snapshot(
            seed, leaves=10, nodes_per_leaf=12, running=500, pending=3_000, teams=20),
            ("default", "lifted", "young"), 2))
    total = hashlib.sha256()
    started = time.process_time()
    for name, snap, names, passes in scenarios:
        for cname in names:
            digest = hashlib.sha256()
            for k in range(passes):   # later passes: 20 s apart, as successive cycles
                now = NOW + 20.0 * k
                result = plan_preemptions(replace(snap, taken_at=now), config=configs[cname],
                                          now=now)
                text = repr(result)
                digest.update(text.encode())
                if args.save is not None:
                    args.save.mkdir(parents=True, exist_ok=True)
                    (args.save / f"{name}-{cname}-{k}.txt").write_text(text)
            total.update(digest.digest())
            print(f"{name:<10} {cname:<8} {digest.hexdigest()[:16]}", flush=True)
    print(f"all {total.hexdigest()}  ({time.process_time() - started:.1f} s CPU)")
    sys.exit(0)


if __name__ == "__main__":
    main()
