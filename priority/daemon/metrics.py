"""The daemon's Prometheus metrics, in a registry of their own (no module-level state).

Counters continue across restarts: the daemon keeps their totals in the database (named value
:data:`TOTALS_KEY`) and :meth:`DaemonMetrics.restore` starts the Prometheus counters from them, so
a SIGKILLed daemon that comes back reports the same totals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
from prometheus_client import Counter as PromCounter

from hai_slurm.classes import PriorityClass
from hai_slurm.priority.daemon.cycle import Decision
from hai_slurm.priority.planner.types import Outcome
from hai_slurm.priority.store import JsonValue

#: Key of the counter totals in the store's named values.
TOTALS_KEY = "daemon.totals"

#: Names of the persisted totals.
TOTAL_NAMES = ("cycles", "cycles_skipped", "standby_cycles", "slurm_errors", "slurm_writes",
               "promotions", "demotions", "decays", "protections")


@dataclass
class Totals:
    """Running totals of the daemon's counters (what is persisted)."""

    values: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, amount: int = 1) -> None:
        """Count ``amount`` more of ``name``."""
        self.values[name] += amount

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def to_json(self) -> JsonValue:
        """A JSON value for the store."""
        return {name: int(self.values[name]) for name in TOTAL_NAMES}

    @classmethod
    def from_json(cls, value: JsonValue) -> Totals:
        """Totals stored by :meth:`to_json` (unknown or bad entries are dropped)."""
        out = cls()
        if isinstance(value, dict):
            for name in TOTAL_NAMES:
                item = value.get(name)
                if isinstance(item, int) and item > 0:
                    out.values[name] = item
        return out


class DaemonMetrics:
    """Every metric the daemon exports, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "hai_priority_cycle_seconds", "Wall time of one daemon cycle", registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.cycles = PromCounter("hai_priority_cycles", "Cycles by outcome", ["outcome"],
                                  registry=r)
        self.jobs = Gauge("hai_priority_jobs", "Jobs by effective class and state",
                          ["priority_class", "state"], registry=r)
        self.queue_delay = Gauge("hai_priority_queue_delay_seconds",
                                 "Longest wait of the pending jobs of each effective class",
                                 ["priority_class"], registry=r)
        self.queue_delay_mean = Gauge("hai_priority_queue_delay_mean_seconds",
                                      "Mean wait of the pending jobs of each effective class",
                                      ["priority_class"], registry=r)
        self.promotions = PromCounter("hai_priority_promotions", "Jobs promoted by aging",
                                      registry=r)
        self.demotions = PromCounter("hai_priority_demotions", "Jobs demoted by the fairness rule",
                                     registry=r)
        self.decays = PromCounter("hai_priority_decays", "Jobs whose class decayed", registry=r)
        self.protections = PromCounter("hai_priority_protections",
                                       "Team protections granted", registry=r)
        self.protected_teams = Gauge("hai_priority_protected_teams", "Teams protected now",
                                     registry=r)
        self.slurm_errors = PromCounter("hai_priority_slurm_errors",
                                        "Failed Slurm queries or writes", registry=r)
        self.slurm_writes = PromCounter("hai_priority_slurm_writes",
                                        "Priority changes written to Slurm", registry=r)
        self.writes_deferred = Gauge(
            "hai_priority_writes_deferred", "Priority changes the last cycle left for later "
            "cycles (intervals.writes_per_cycle)", registry=r)
        self.leader = Gauge("hai_priority_leader", "1 while this daemon holds the leader lease",
                            registry=r)
        self.verdicts = Gauge("hai_planner_verdicts",
                              "Pending jobs by effective class and the planner's latest verdict",
                              ["priority_class", "verdict"], registry=r)
        self.last_cycle = Gauge("hai_priority_last_cycle_timestamp_seconds",
                                "When the last successful cycle ran (Unix time)", registry=r)
        self.bound_ratio = Gauge("hai_priority_wait_bound_ratio",
                                 "Longest wait of the pending jobs of each class (before aging), "
                                 "as a fraction of that class's bound (max_wait)",
                                 ["priority_class"], registry=r)
        self.past_half_bound = Gauge("hai_priority_jobs_past_half_bound",
                                     "Pending jobs that waited more than half their class's bound, "
                                     "by class before aging",
                                     ["priority_class"], registry=r)
        # --- the urgent path (looks between cycles: see loop.Daemon.look)
        self.urgent_looks = PromCounter(
            "hai_urgent_looks", "Urgent-path looks by outcome (ok; skipped: the snapshot, its "
            "checks or the database failed)", ["outcome"], registry=r)
        self.urgent_look_seconds = Histogram(
            "hai_urgent_look_seconds", "Wall time of one urgent-path look that went through "
            "(snapshot, policy, planner, executor)", registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        # --- preemptions (observed from the store's plans: see plan_metrics.PlanObserver)
        self.plans = PromCounter("hai_preemption_plans", "Preemption plans by final state "
                                 "(done, aborted, rolled_back)", ["outcome"], registry=r)
        self.open_plans = Gauge("hai_preemption_open_plans", "Unfinished preemption plans",
                                registry=r)
        self.oldest_open_plan = Gauge("hai_preemption_oldest_open_plan_seconds",
                                      "Age of the oldest unfinished plan (0 when none)",
                                      registry=r)
        self.preempted = PromCounter("hai_preemption_victims",
                                     "Jobs requeued by a preemption plan, by class and team",
                                     ["priority_class", "team"], registry=r)
        self.preempting = PromCounter("hai_preemption_beneficiaries",
                                      "Jobs a plan that ended done freed GPUs for, by class and "
                                      "team", ["priority_class", "team"], registry=r)
        self.unsaved = PromCounter("hai_preemption_unsaved_victims",
                                   "Victims requeued without an acknowledged checkpoint",
                                   ["team"], registry=r)
        self.lost_gpu_seconds = PromCounter(
            "hai_preemption_lost_gpu_seconds",
            "GPU-seconds victims spent saving, or from the request to a requeue without an "
            "acknowledgement (a lower bound of the work lost)", ["team"], registry=r)
        self.beneficiary_start = Histogram(
            "hai_preemption_beneficiary_start_seconds",
            "From a plan's creation to its beneficiary running", registry=r,
            buckets=(5, 10, 30, 60, 120, 300, 600, 1800, 3600))
        self.resume = Histogram(
            "hai_preemption_resume_seconds", "From a victim's requeue to it running again",
            registry=r, buckets=(10, 30, 60, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600,
                                 24 * 3600))
        # --- shadow mode
        self.shadow = Gauge("hai_priority_shadow",
                            "1 while the daemon runs in shadow mode (writes nothing to Slurm)",
                            registry=r)
        self.shadow_writes = PromCounter("hai_shadow_writes",
                                         "Slurm writes shadow mode would have done, by kind",
                                         ["kind"], registry=r)
        self.shadow_plans = PromCounter("hai_shadow_plans",
                                        "Preemption plans shadow mode would have carried out, "
                                        "by the beneficiary's class and team",
                                        ["priority_class", "team"], registry=r)

    def restore(self, totals: Totals) -> None:
        """Raise the counters to persisted totals (once per process, at its first look at the
        lease: see ``Daemon._take_lead``)."""
        pairs = [("hai_priority_cycles_total", {"outcome": "ok"}, "cycles",
                  self.cycles.labels("ok")),
                 ("hai_priority_cycles_total", {"outcome": "skipped"}, "cycles_skipped",
                  self.cycles.labels("skipped")),
                 ("hai_priority_cycles_total", {"outcome": "standby"}, "standby_cycles",
                  self.cycles.labels("standby"))]
        pairs += [(f"hai_priority_{name}_total", {}, name, counter) for name, counter in (
            ("promotions", self.promotions), ("demotions", self.demotions),
            ("decays", self.decays), ("protections", self.protections),
            ("slurm_errors", self.slurm_errors), ("slurm_writes", self.slurm_writes))]
        for sample_name, labels, name, counter in pairs:
            have = self.registry.get_sample_value(sample_name, labels) or 0.0
            if totals[name] > have:
                counter.inc(totals[name] - have)

    def stand_by(self) -> None:
        """Clear what describes the cluster as the leader saw it (jobs, waits, verdicts, open
        plans): a daemon that lost the lease exported its last figures for good, so alerts
        over every daemon (``max by``) fired on a standby's stale values and sums counted
        jobs twice. The leader gauge and the counters stay."""
        for labelled in (self.jobs, self.queue_delay, self.queue_delay_mean, self.verdicts,
                         self.bound_ratio, self.past_half_bound):
            labelled.clear()
        for gauge in (self.protected_teams, self.writes_deferred, self.open_plans,
                      self.oldest_open_plan):
            gauge.set(0)

    def observe(self, decision: Decision, now: float) -> None:
        """Gauges and counters of one successful cycle."""
        result = decision.result
        # One pass over the pending jobs, keyed by the class itself (an enum's ``.value`` is a
        # property call: 12,000 jobs a cycle).
        waits: dict[PriorityClass, list[float]] = {c: [] for c in PriorityClass}
        ratios: dict[PriorityClass, list[float]] = {c: [] for c in PriorityClass}
        for d in result.pending.values():
            reason = d.reason
            waits[d.effective].append(reason.wait)
            if reason.bound > 0:
                ratios[reason.base].append(reason.wait / reason.bound)
        running = Counter(r.effective for r in result.running.values())
        for cls in PriorityClass:
            self.jobs.labels(cls.value, "pending").set(len(waits[cls]))
            self.jobs.labels(cls.value, "running").set(running[cls])
            w = waits[cls]
            self.queue_delay.labels(cls.value).set(max(w) if w else 0.0)
            self.queue_delay_mean.labels(cls.value).set(sum(w) / len(w) if w else 0.0)
            self.bound_ratio.labels(cls.value).set(max(ratios[cls], default=0.0))
            self.past_half_bound.labels(cls.value).set(sum(1 for x in ratios[cls] if x > 0.5))
        self.last_cycle.set(now)
        self.writes_deferred.set(decision.deferred)
        ch = decision.changes
        self.promotions.inc(len(ch.promotions))
        self.demotions.inc(len(ch.demotions))
        self.decays.inc(len(ch.decays))
        self.protections.inc(len(ch.protections))
        self.protected_teams.set(len(result.protected_teams))

    def observe_verdicts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Pending jobs per class and planner verdict (every combination is set, zeros too)."""
        for cls in PriorityClass:
            for outcome in Outcome:
                self.verdicts.labels(cls.value, outcome.name).set(
                    counts.get((cls.value, outcome.name), 0))

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - scraped remotely
        """Expose ``/metrics`` on ``addr:port`` in a background thread."""
        start_http_server(port, addr=addr, registry=self.registry)


def sample(metrics: DaemonMetrics, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The current value of one sample (for tests and the CLI); 0.0 when absent."""
    value = metrics.registry.get_sample_value(name, dict(labels or {}))
    return 0.0 if value is None else value
