"""``hai-slurm demo``: checkpoint-then-requeue preemption end to end on the local testbed.

1. brings the local testbed up (daemon preemption mode, accounting on) unless it already runs;
2. starts the priority daemon in this process, built like ``hai-slurm daemon`` builds it
   (policy, planner and two-phase executor) with the testbed's cluster description as its
   topology, SQLite under the work dir and a 1 s cycle;
3. fills the testbed with two teams' toy training jobs (:mod:`hai_slurm.priority.demo.toy_train`),
   then submits an urgent 16-GPU job;
4. the daemon plans, the victims save and are requeued, the urgent job runs, the victims resume
   and finish — printed as a timeline with the figures: urgent submit -> start, steps lost per
   victim, time until each victim runs again, and whether each result is bit-identical to an
   uninterrupted run.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hai_slurm.errors import TestbedError

FIRST_TRY_NAME = "priority/examples/first-try.toml"
FIRST_TRY = Path(str(files("hai_slurm.priority") / "examples" / "first-try.toml"))
"""The daemon file of the demo and of a first try: the defaults plus three settings, explained."""

if TYPE_CHECKING:
    from hai_slurm.priority.daemon.loop import Daemon
    from hai_slurm.priority.demo.scenario import ToyJob
    from hai_slurm.priority.store import Plan
    from hai_slurm.priority.store.repository import Repository
    from hai_slurm.slurm_plugins.types import SlurmClient
    from hai_slurm.testbed.local import TestbedState


@dataclass
class _Watch:
    """State changes of the demo's jobs, stamped relative to the urgent job's submission."""

    names: dict[int, str]
    last: dict[int, str]
    lines: list[tuple[float, str]]
    seen: dict[tuple[int, str, int], float]


def _stamp(t: float) -> str:
    return f"{t:+7.2f} s"


def _bring_up(state_dir: Path, echo: Callable[[str], None]) -> TestbedState:
    from hai_slurm.testbed import local
    from hai_slurm.testbed.shape import ClusterShape, PreemptionMode

    state = local.load_state(state_dir.resolve())
    if state is not None and local.healthy(state):
        if state.shape.preemption is not PreemptionMode.DAEMON or not state.shape.accounting:
            raise TestbedError(f"the testbed in {state_dir} runs with preemption "
                               f"{state.shape.preemption.value}; the demo needs the daemon mode "
                               f"with accounting: hai-slurm testbed down --state-dir {state_dir}")
        echo(f"using the testbed already up in {state_dir}")
        return state
    echo(f"starting the local testbed in {state_dir} (4 nodes x 8 GPUs, 2 leaf switches)")
    local.up(ClusterShape(), state_dir=state_dir, echo=lambda m: echo(f"  {m}"))
    state = local.load_state(state_dir.resolve())
    assert state is not None
    return state


@click.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/tmp/hai-slurm-testbed"), envvar="HAI_TESTBED_STATE_DIR",
              show_default=True, help="The testbed's state dir (reused if a testbed runs there).")
@click.option("--steps", default=400, show_default=True, help="Training steps per team job.")
@click.option("--step-seconds", default=0.05, show_default=True)
@click.option("--warmup", default=12.0, show_default=True,
              help="Seconds the team jobs train before the urgent job arrives.")
@click.option("--down", "tear_down", is_flag=True, help="Stop the testbed at the end.")
def demo(state_dir: Path, steps: int, step_seconds: float, warmup: float,
         tear_down: bool) -> None:
    """Two teams fill the testbed, an urgent job arrives; watch it preempt with 0 steps lost."""
    from hai_slurm.priority.demo.scenario import submit_toy
    from hai_slurm.slurm_plugins.adapter import CliSlurmClient
    from hai_slurm.testbed import local

    echo = click.echo
    state = _bring_up(state_dir, echo)
    shape = state.shape
    if shape.nodes != 4 or shape.gpus_per_node != 8 or shape.leaf_switch_count != 2:
        raise TestbedError("the demo is written for the default testbed shape (4 nodes x 8 GPUs "
                           "under 2 leaf switches); start one with `hai-slurm testbed up`")
    os.environ["SLURM_CONF"] = state.slurm_conf
    work = state_dir.resolve() / "demo" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    slurm = CliSlurmClient(slurm_conf=state.slurm_conf)
    end = time.monotonic() + 30  # jobs that are just completing are waited for
    while (busy := [j.job_id for j in slurm.snapshot().jobs]) and time.monotonic() < end:
        time.sleep(0.5)
    if busy:
        raise TestbedError(f"the testbed is busy (jobs {busy}); wait for them or scancel them "
                           "first, so the demo's figures are its own")

    daemon_dir = work / "daemon"
    from hai_slurm.testbed.services import redis_url

    daemon, thread, repo = start_daemon(state, daemon_dir, slurm,
                                        redis_url(state_dir.resolve(), state.ports.redis))
    echo(f"daemon running with {FIRST_TRY_NAME} (cycle {daemon.interval:g} s, database "
         f"{daemon_dir / 'hai-slurm.db'}, "
         f"Redis port {state.ports.redis})")

    teams = [("a1", "team-a", "LOW"), ("a2", "team-a", "LOW"),
             ("b1", "team-b", "NORMAL"), ("b2", "team-b", "NORMAL")]
    jobs = {name: submit_toy(slurm, work, name, steps=steps, step_seconds=step_seconds,
                             priority=cls, account=team, sbatch_args=["-N1", "--gres=gpu:8"],
                             train_args=["--save-every", "100"], grace=30)
            for name, team, cls in teams}
    echo("submitted 4 team jobs, 8 GPUs each: " + ", ".join(
        f"{n} = job {j.job_id} ({t}, {c})" for (n, t, c), j in zip(teams, jobs.values(),
                                                                    strict=True)))
    watch = _Watch({j.job_id: n for n, j in jobs.items()}, {}, [], {})
    try:
        _observe(slurm, watch, until=lambda: all(
            watch.last.get(j.job_id) == "RUNNING" for j in jobs.values()), timeout=60)
        echo(f"all 4 running; training for {warmup:g} s before the urgent job arrives")
        time.sleep(warmup)
        urgent = submit_toy(slurm, work, "urgent", steps=60, step_seconds=step_seconds,
                            priority="HIGH", account="team-b",
                            sbatch_args=["-N2", "--gres=gpu:8"])
        t_submit = time.time()
        watch.names[urgent.job_id] = "urgent"
        echo(f"urgent job {urgent.job_id} submitted (team-b, HIGH, 16 GPUs on 2 nodes)")
        all_ids = [*watch.names]
        _observe(slurm, watch, until=lambda: all(
            watch.last.get(j) == "COMPLETED" for j in all_ids),
            timeout=steps * step_seconds * 3 + 120)
    finally:
        daemon.request_stop()
        thread.join(30)
    _report(echo, watch, t_submit, urgent.job_id, jobs, repo.history(limit=10), steps)
    if tear_down:
        local.down(state_dir)
        echo("testbed stopped")
    else:
        echo(f"\nthe testbed is still up: hai-slurm testbed down --state-dir {state_dir}")
    echo(f"files: {work}\nplans: hai-slurm preempt history --state-dir {daemon_dir}")


def start_daemon(state: TestbedState, daemon_dir: Path, slurm: SlurmClient,
                 redis: str) -> tuple[Daemon, threading.Thread, Repository]:
    """The priority daemon as ``hai-slurm daemon`` builds it (planner and executor included,
    :func:`~hai_slurm.priority.daemon.factory.build_daemon`), cycling every second in a thread.

    Its cluster description is the testbed's own (:func:`hai_slurm.testbed.describe.
    cluster_description` of the testbed's shape: the value its slurm.conf, gres.conf and
    topology.conf were generated from), SQLite under ``daemon_dir``, the testbed's Redis for
    checkpoint messages (``redis``: its URL, password included). Every policy, planner and
    executor setting is the shipped default or from ``priority/examples/first-try.toml``, the
    file the README's quick start names.
    """
    from hai_slurm.priority.config.loader import load_config
    from hai_slurm.priority.daemon.factory import build_daemon
    from hai_slurm.testbed.describe import cluster_description

    daemon_dir.mkdir(parents=True, exist_ok=True)
    cfg = replace(load_config(FIRST_TRY),
                  state_dir=str(daemon_dir),
                  database_url=f"sqlite:///{daemon_dir / 'hai-slurm.db'}",
                  redis_url=redis, metrics_port=0,
                  description=cluster_description(state.shape))
    daemon = build_daemon(cfg, slurm=slurm,
                          owner=f"demo@{socket.gethostname()}:{os.getpid()}")
    thread = threading.Thread(target=daemon.run, name="hai-daemon", daemon=True)
    thread.start()
    return daemon, thread, daemon.repository


def _observe(slurm: SlurmClient, watch: _Watch, *, until: Callable[[], bool],
             timeout: float) -> None:
    """Record every state change of the watched jobs (epoch times) until ``until()``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        facts = slurm.job_facts(list(watch.names))
        now = time.time()
        for jid, f in facts.items():
            if watch.last.get(jid) != f.state:
                watch.last[jid] = f.state
                restart = f" (restart {f.restart_count})" if f.restart_count else ""
                watch.lines.append((now, f"{watch.names[jid]:<6} job {jid:<4} {f.state}{restart}"))
                watch.seen.setdefault((jid, f.state, f.restart_count), now)
        if until():
            return
        time.sleep(0.1)
    raise TestbedError(f"the demo did not finish within {timeout:.0f} s; see the jobs with "
                       "squeue and the daemon's database with hai-slurm preempt history")


def _report(echo: Callable[[str], None], watch: _Watch, t_submit: float, urgent: int,
            jobs: dict[str, ToyJob], plans: list[Plan], steps: int) -> None:
    """Print the timeline (job states and plan steps merged) and the figures."""
    from hai_slurm.priority.cli.preempt import format_plan
    from hai_slurm.priority.demo.scenario import steps_lost, toy_runs
    from hai_slurm.priority.demo.toy_train import reference

    lines = [(t - t_submit, text) for t, text in watch.lines]
    for plan in plans:
        for s in plan.steps:
            note = f": {s.note}" if s.note else ""
            lines.append((s.at - t_submit, f"plan {plan.plan_id} {s.to_state.value}{note}"))
    echo("\ntimeline (seconds after the urgent job's submission):")
    for t, text in sorted(lines, key=lambda x: x[0]):
        echo(f"  {_stamp(t)}  {text}")
    seen = {key: t - t_submit for key, t in watch.seen.items()}
    start = seen.get((urgent, "RUNNING", 0))
    echo("\nfigures:")
    echo(f"  urgent job: submit -> start {start:.2f} s" if start is not None
         else "  urgent job: never seen running")
    ref = reference(steps)
    for name, job in jobs.items():
        runs = toy_runs(job)
        if len(runs) < 2:
            echo(f"  {name} (job {job.job_id}): not preempted; ran "
                 f"{runs[-1].last_step if runs else 0} steps")
            continue
        again = seen.get((job.job_id, "RUNNING", 1), 0.0)
        ran = seen.get((job.job_id, "RUNNING", 0), 0.0)
        stopped = min((t for (j, st, r), t in seen.items() if j == job.job_id and t > ran
                       and (r >= 1 or st != "RUNNING")), default=0.0)
        same = job.result.exists() and json.loads(job.result.read_text()) == ref
        echo(f"  {name} (job {job.job_id}): stopped at step {runs[0].last_step}, resumed at "
             f"step {runs[1].start_step}: steps lost {steps_lost(runs)}; stopped "
             f"{_stamp(stopped)}, running again {_stamp(again)} ({again - stopped:.1f} s "
             f"later); result bit-identical to an uninterrupted run: {'yes' if same else 'NO'}")
    for plan in plans:
        echo("")
        for line in format_plan(plan):
            echo(line)
