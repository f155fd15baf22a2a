"""``testbed status``: each component running or not, the nodes, and the QOS (or why none)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import procs
from .local import load_state, problem
from .waiting import LocalRunner


@dataclass(frozen=True)
class ComponentStatus:
    """One daemon of the testbed."""

    name: str
    pid: int
    running: bool


@dataclass(frozen=True)
class Status:
    """What ``status`` reports; ``up`` is False when nothing is recorded in the state dir."""

    state_dir: Path
    up: bool
    components: tuple[ComponentStatus, ...] = ()
    details: tuple[str, ...] = ()
    problem: str | None = None
    """Why the testbed cannot take jobs although its components run (a node drained or down,
    slurmctld not answering, start-up unfinished); None when it can."""

    @property
    def all_running(self) -> bool:
        """Every recorded component runs."""
        return self.up and all(c.running for c in self.components)

    @property
    def usable(self) -> bool:
        """Every component runs and the testbed can take jobs (``status`` exits 0)."""
        return self.all_running and self.problem is None

    def lines(self) -> list[str]:
        """Human-readable report."""
        if not self.up:
            return [f"no testbed in {self.state_dir}"]
        out = [f"testbed in {self.state_dir}:"]
        out += [f"  {c.name:<12} {'running' if c.running else 'NOT running':<12} pid {c.pid}"
                for c in self.components]
        out += list(self.details)
        if self.problem is not None:
            out.append(f"  cannot take jobs: {self.problem}")
        return out


def local_status(state_dir: Path) -> Status:
    """Status of the local testbed in ``state_dir``."""
    state_dir = state_dir.resolve()
    state = load_state(state_dir)
    if state is None:
        return Status(state_dir, up=False)
    comps = tuple(ComponentStatus(p.name, p.pid, procs.is_alive(p)) for p in state.processes)
    run = LocalRunner(state.slurm_conf)
    details = [f"  SLURM_CONF={state.slurm_conf}",
               f"  shape: {state.shape.nodes} nodes x {state.shape.gpus_per_node} GPUs, "
               f"preemption {state.shape.preemption.value}, "
               f"accounting {'on' if state.shape.accounting else 'off'}",
               f"  redis: 127.0.0.1:{state.ports.redis} (password in "
               f"{state_dir / 'redis' / 'password'}, mode 0600)"]
    if not state.ready:
        details.append("  (start-up did not finish)")
    if any(c.name == "slurmctld" and c.running for c in comps):
        res = run(["sinfo", "-N", "-o", "%N %T %G"], timeout=10)
        details += ["  " + ln for ln in (res.stdout or res.stderr).splitlines()]
    else:
        details.append("  slurmctld is not running: no node information")
    if not state.shape.accounting:
        details.append("  QOS: none (accounting is off, and QOS cannot exist without it; "
                       "jobs asking for --qos are rejected)")
    elif any(c.name == "slurmdbd" and c.running for c in comps):
        res = run(["sacctmgr", "-n", "-P", "show", "qos",
                   "format=name,priority,preempt,preemptmode,gracetime"], timeout=10)
        details.append("  QOS (name|priority|preempt|mode|grace):")
        details += ["    " + ln for ln in (res.stdout or res.stderr).splitlines()]
    return Status(state_dir, up=True, components=comps, details=tuple(details),
                  problem=problem(state))
