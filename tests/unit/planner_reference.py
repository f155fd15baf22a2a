"""The planner's plain search, as it was before the incremental index: every waiting job's
candidates rebuilt from every running job and a full victim search (reference for tests)."""

from __future__ import annotations

from hai_slurm.priority.planner.search import _Pass, _plan
from hai_slurm.priority.planner.types import PlannerConfig, PlanningResult, PlanSnapshot
from hai_slurm.priority.planner.victims import Option, search


class ReferencePass(_Pass):
    """A pass whose victim search walks every running job and every node each time."""

    def options(self, nodes: int, per: int, rank: int, *, cross: bool,
                allowed: frozenset[str] | None = None, waive_protection: bool = False
                ) -> tuple[list[Option], dict[str, int]]:
        by_node, by_id, excluded = self.eligible(rank, waive_protection)
        found = search(self.view, nodes, per, by_node, by_id,
                       self.config.max_candidates_per_node, cross_leaf=cross, allowed=allowed)
        return found, excluded


def reference_plan(snapshot: PlanSnapshot, *, config: PlannerConfig,
                   now: float) -> PlanningResult:
    """What plan_preemptions returns, computed the plain way."""
    return _plan(snapshot, config, now, ReferencePass)
