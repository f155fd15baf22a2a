"""Checks that make `up` trustworthy: every node idle, and a GPU job across all nodes ran.

Both work through a :class:`~.waiting.Runner`, so the Docker mode uses them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from hai_slurm.errors import SlurmError, TestbedError

from .shape import ClusterShape
from .waiting import Runner, check, show_job, show_nodes, wait_for, wait_job_state

SMOKE_COMMAND = 'srun bash -c "echo \\$SLURMD_NODENAME \\$CUDA_VISIBLE_DEVICES"'
"""The smoke job: one task per node printing its node name and its GPUs."""

_BAD_FLAGS = ("INVAL", "DRAIN", "FAIL")

_UNUSABLE = frozenset({"down", "drain", "drng", "drained", "fail", "failg", "unk", "inval",
                       "npc", "boot"})
"""``sinfo %t`` base states of a node that cannot run jobs (or soon will not)."""

SINFO_NODES = ["sinfo", "-h", "-N", "-o", "%N %t %E"]
"""The node listing :func:`node_problem` reads (name, compact state, Slurm's reason)."""


def base_state(compact: str) -> str:
    """A compact ``sinfo %t`` state without its flag suffixes: ``drain*`` -> ``drain``."""
    return compact.rstrip("*~#!%$@^-")


def nodes_problem(run: Runner, expected: tuple[str, ...]) -> str | None:
    """Why the nodes cannot run jobs (:func:`node_problem` of one ``sinfo`` through ``run``,
    or that slurmctld did not answer it), or None: the check of ``up``, ``status`` and the
    health of both modes."""
    res = run(SINFO_NODES, timeout=10)
    if res.returncode != 0:
        last = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"slurmctld does not answer sinfo ({last[0]})"
    return node_problem(res.stdout, expected)


def node_problem(sinfo_out: str, expected: tuple[str, ...]) -> str | None:
    """Why the nodes in ``sinfo -h -N -o "%N %t %E"`` output cannot run jobs, or None if
    they can.

    Busy, reserved (``resv``, ``maint``) and backfill-planned (``plnd``, a ``-`` suffix) nodes
    are usable; down, drained, failed, unknown and not-responding (``*`` suffix) ones are not
    (named with Slurm's reason), and so is a listing that misses one of the ``expected`` nodes.
    """
    states: dict[str, tuple[str, str]] = {}
    for line in sinfo_out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            reason = parts[2].strip() if len(parts) == 3 else ""
            states[parts[0]] = (parts[1], "" if reason == "none" else reason)
    bad = {name: st for name, st in states.items()
           if "*" in st[0] or base_state(st[0]) in _UNUSABLE}
    missing = [name for name in expected if name not in states]
    if not bad and not missing:
        return None
    parts = [f"node {name} is {st}" + (f" ({why})" if why else "")
             for name, (st, why) in sorted(bad.items())]
    if missing:
        parts.append("sinfo does not list " + ", ".join(missing))
    return "; ".join(parts)


def wait_nodes_idle(run: Runner, names: tuple[str, ...], *, timeout: float,
                    logs: Callable[[], list[str]]) -> None:
    """Wait until every node is plainly IDLE; fail at once on INVAL/DRAIN with Slurm's reason."""
    last: dict[str, tuple[str, str]] = {}

    def poll() -> bool:
        nonlocal last
        try:
            nodes = show_nodes(run)
        except SlurmError:
            return False
        last = {n.get("NodeName", "?"): (n.get("State", "?"), n.get("Reason", ""))
                for n in nodes}
        bad = {name: st for name, st in last.items() if any(f in st[0] for f in _BAD_FLAGS)}
        if bad:
            raise TestbedError("node(s) unusable: " + _describe(bad), log_lines=logs())
        return all(last.get(name, ("?", ""))[0] == "IDLE" for name in names)

    try:
        wait_for(poll, timeout=timeout, interval=0.1, describe=lambda: _describe(last))
    except TimeoutError as err:
        raise TestbedError(f"not every node became IDLE within {timeout:g} s: {err}",
                           log_lines=logs()) from None


def _describe(states: dict[str, tuple[str, str]]) -> str:
    if not states:
        return "slurmctld reported no nodes"
    return ", ".join(f"{name} {st}" + (f" (reason: {why})" if why and why != "none" else "")
                     for name, (st, why) in sorted(states.items()))


def run_gpu_smoke_job(run: Runner, shape: ClusterShape, output: str, *, timeout: float,
                      logs: Callable[[], list[str]]) -> list[str]:
    """Run a job on every node with all GPUs; return its ``node gpu-list`` lines, sorted.

    ``output`` is sbatch's ``-o`` path (``%j`` allowed), read back with ``cat`` through ``run``.
    Fails unless each node printed exactly one line listing ``gpus_per_node`` devices.
    """
    argv = ["sbatch", "--parsable", f"--nodes={shape.nodes}", "--ntasks-per-node=1",
            f"--gres=gpu:{shape.gpus_per_node}", f"--partition={shape.partition}",
            "--job-name=hai-testbed-smoke", f"--output={output}", f"--wrap={SMOKE_COMMAND}"]
    try:
        job_id = check(run, argv).strip().split(";")[0]
        wait_job_state(run, job_id, "COMPLETED", timeout=timeout)
    except (SlurmError, TimeoutError) as err:
        raise TestbedError(f"the first GPU job failed: {err}", log_lines=logs()) from None
    path = output.replace("%j", job_id)
    res = run(["cat", path], timeout=10)
    lines = sorted(ln.strip() for ln in res.stdout.splitlines() if ln.strip())
    problems = _smoke_problems(shape, lines)
    if problems:
        info = show_job(run, job_id) or {}
        raise TestbedError(f"the first GPU job {job_id} ran but its output is wrong: {problems} "
                           f"(job state {info.get('JobState', '?')})",
                           log_lines=[f"{path}: {ln}" for ln in lines] or logs())
    return lines


def _smoke_problems(shape: ClusterShape, lines: list[str]) -> str:
    seen: dict[str, list[str]] = {}
    for line in lines:
        node, _, gpus = line.partition(" ")
        seen[node] = [g for g in gpus.split(",") if g]
    if sorted(seen) != sorted(shape.node_names) or len(lines) != shape.nodes:
        return f"expected one line per node {', '.join(shape.node_names)}, got {lines}"
    short = {n: g for n, g in seen.items() if len(g) != shape.gpus_per_node}
    if short:
        return f"expected {shape.gpus_per_node} GPUs per node, got {short}"
    return ""
