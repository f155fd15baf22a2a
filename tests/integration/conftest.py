"""Fixtures for tests on the real local Slurm testbed.

``testbed`` (session)
    A running :class:`Testbed` (4 nodes x 8 fake GPUs, accounting on, ``--preemption daemon``).
    Brought up once per session in ``/var/tmp/hai-slurm-testbed-pytest-K`` on ports from
    ``17000 + 100*K`` (slot K, see :func:`claim_slot`) and torn down at the end. If
    ``HAI_TESTBED_STATE_DIR`` names the state dir of a running testbed (``hai-slurm testbed up
    --state-dir DIR``), that one is reused and left running. The fixture
    exports ``SLURM_CONF`` in ``os.environ`` for the whole session, so plain ``subprocess`` calls of
    sbatch/squeue/scontrol reach the testbed.

``submit`` (function)
    A :class:`Submitter`: ``submit(script)`` or ``submit(wrap="cmd")`` runs sbatch (extra sbatch
    arguments in ``args``), returns the job id as a string, and remembers it. When the test ends,
    every remembered job is cancelled and the fixture waits until Slurm reports each one ended.
    Helpers: ``submit.wait(job, "RUNNING")``, ``submit.info(job)``, ``submit.output(job)``.

Every test in this folder is marked ``integration``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mariadb_support import mariadb_server, mariadb_url  # noqa: F401  (fixtures for every module)

from hai_slurm.testbed import health, local, procs
from hai_slurm.testbed.layout import Ports
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.testbed.waiting import (
    LocalRunner,
    Runner,
    check,
    show_job,
    wait_for,
    wait_job_gone,
    wait_job_state,
)

SLOTS = 8


@contextmanager
def claim_slot(name: str, port_base: int) -> Iterator[tuple[Path, Ports]]:
    """A state dir and ports no other pytest session on this machine uses at the same time.

    Slot ``k`` (the first of :data:`SLOTS` whose lock file we can ``flock``) gets
    ``/var/tmp/NAME-k`` and ports ``port_base + 100*k + ...``; the lock is held until the block
    ends, so concurrent sessions (several people or helpers on one machine) never share a testbed.
    """
    for slot in range(SLOTS):
        fd = os.open(f"/var/tmp/{name}-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        base = port_base + 100 * slot
        try:
            yield Path(f"/var/tmp/{name}-{slot}"), Ports(
                slurmctld=base + 17, slurmdbd=base + 19, mariadb=base + 6, redis=base + 79,
                slurmd_base=base + 31)
        finally:
            os.close(fd)
        return
    pytest.fail(f"all {SLOTS} testbed slots /var/tmp/{name}-* are in use by other sessions")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as ``integration``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@dataclass(frozen=True)
class Testbed:
    """A running local testbed: where it lives, its shape, and a runner for Slurm clients."""

    __test__ = False

    state_dir: Path
    shape: ClusterShape
    slurm_conf: str
    ports: Ports
    started_here: bool

    @property
    def run(self) -> Runner:
        """Runs Slurm client commands against this testbed (returns a Result, never raises)."""
        return LocalRunner(self.slurm_conf)

    @property
    def redis_url(self) -> str:
        """The testbed Redis's URL, password included (the file holding it must be 0600)."""
        from hai_slurm.testbed.services import redis_url

        return redis_url(self.state_dir, self.ports.redis)


def bring_up(state_dir: Path, shape: ClusterShape, ports: Ports) -> Testbed:
    """Start (or find running) a testbed; ``started_here`` says whether teardown should stop it."""
    local.up(shape, state_dir=state_dir, ports=ports)
    state = local.load_state(state_dir.resolve())
    assert state is not None
    return Testbed(state_dir.resolve(), state.shape, state.slurm_conf, state.ports, True)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """The session's running testbed (see the module docstring)."""
    reuse = os.environ.get("HAI_TESTBED_STATE_DIR")
    if reuse:
        state = local.load_state(Path(reuse).resolve())
        if state is None or not local.healthy(state):
            pytest.fail(f"HAI_TESTBED_STATE_DIR={reuse} holds no healthy testbed; start one with "
                        f"`hai-slurm testbed up --state-dir {reuse}` or unset the variable")
        bed = Testbed(Path(reuse).resolve(), state.shape, state.slurm_conf, state.ports, False)
        yield from _with_slurm_conf(bed)
        return
    with claim_slot("hai-slurm-testbed-pytest", 17000) as (state_dir, ports):
        bed = bring_up(state_dir, ClusterShape(), ports)
        try:
            yield from _with_slurm_conf(bed)
        finally:
            local.down(bed.state_dir)


_SESSION_BED: list[Testbed] = []
"""The session testbed while it is up (set by :func:`_with_slurm_conf`): the guard checks it
after every test from then on, also those that reach it through a module fixture's
``request.getfixturevalue("testbed")`` (not in their fixture closure)."""


@pytest.fixture(autouse=True)
def _testbed_left_usable(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test once the session testbed is up (the test's other fixtures torn down, its
    jobs ended), no node may still be completing a job (within 2 min), and every node must
    still take jobs. If one cannot (drained after a kill that failed, its slurmd gone) for
    30 s, the test errors with Slurm's reason and the nodes' log tails, and the testbed is
    repaired (nodes resumed, a dead daemon's testbed restarted), so one broken node costs one
    test, not every later test that needs the whole cluster."""
    yield
    if not _SESSION_BED or _UNREPAIRED:
        return
    bed = _SESSION_BED[0]
    # a node still completing this test's jobs is settled first: one that never completes is
    # drained by Slurm (UnkillableStepTimeout), which the check below then sees, here and not
    # in the middle of the next test
    why = wait_for_settled(bed, timeout=SETTLE_SECONDS) or wait_for_usable(bed, timeout=30)
    if why is None:
        return
    nodes = unusable_nodes(bed)
    evidence = testbed_evidence(bed, nodes)
    try:
        repaired = repair(bed, nodes)
    except Exception as err:  # reported with the evidence, never lost
        repaired = f"the repair failed: {type(err).__name__}: {err}"
    if wait_for_usable(bed, timeout=0) is not None:
        _UNREPAIRED.append(request.node.nodeid)   # later tests fail on their own, no retry
        repaired = f"NOT repaired ({repaired}); no further check or repair this session"
    else:
        repaired = f"repaired for the tests after it: {repaired}"
    pytest.fail(f"this test left the testbed unable to take jobs: {why}\n{evidence}\n"
                f"{repaired}", pytrace=False)


_UNREPAIRED: list[str] = []
"""The test after which the session testbed could not be repaired (then no more checks)."""


def wait_for_usable(bed: Testbed, *, timeout: float) -> str | None:
    """None once the testbed can take jobs, else its problem after ``timeout`` seconds."""
    why: str | None = None

    def usable() -> bool:
        nonlocal why
        state = local.load_state(bed.state_dir)
        why = local.problem(state) if state is not None else "its record is gone"
        return why is None

    try:
        wait_for(usable, timeout=timeout, interval=1.0, describe=lambda: why or "")
    except TimeoutError:
        return why
    return None


SETTLE_SECONDS = 120.0
"""How long the guard waits for nodes completing jobs: Slurm's KillWait (30 s) and
UnkillableStepTimeout (60 s, after which it drains the node) with room to spare."""


def wait_for_settled(bed: Testbed, *, timeout: float) -> str | None:
    """None once no node of the testbed is completing a job (or slurmctld does not answer:
    :func:`wait_for_usable` says so), else which nodes still are after ``timeout`` seconds."""
    busy: list[str] = []

    def settled() -> bool:
        res = bed.run(health.SINFO_NODES, timeout=10)
        busy[:] = [] if res.returncode != 0 else [
            parts[0] for parts in map(str.split, res.stdout.splitlines())
            if len(parts) >= 2 and health.base_state(parts[1]) == "comp"]
        return not busy

    try:
        wait_for(settled, timeout=timeout, interval=1.0, describe=lambda: ", ".join(busy))
    except TimeoutError:
        return f"node(s) {', '.join(busy)} still completing a job after {timeout:g} s"
    return None


def unusable_nodes(bed: Testbed) -> list[str]:
    """The nodes that cannot take jobs now (all of them if slurmctld does not answer)."""
    res = bed.run(health.SINFO_NODES, timeout=10)
    if res.returncode != 0:
        return list(bed.shape.node_names)
    lines = res.stdout.splitlines()
    return [n for n in bed.shape.node_names
            if health.node_problem("\n".join(x for x in lines if x.split()[:1] == [n]), (n,))]


def testbed_evidence(bed: Testbed, nodes: Sequence[str]) -> str:
    """Slurm's view of the nodes and the end of the logs of slurmctld, of ``nodes``' slurmd
    and of any daemon that died, for a failure message."""
    res = bed.run(["sinfo", "-N", "-o", "%N %T %E %H"], timeout=10)
    lines = [(res.stdout + res.stderr).strip()]
    state = local.load_state(bed.state_dir)
    dead = [Path(p.log) for p in state.processes if not procs.is_alive(p)] if state else []
    logs = [bed.state_dir / "log" / f"{name}.log"
            for name in ["slurmctld", *(f"slurmd-{n}" for n in nodes)]]
    for log in dict.fromkeys([*logs, *dead]):
        tail = log.read_text(errors="replace").splitlines()[-20:] if log.exists() else []
        lines += [f"--- {log.name} (last {len(tail)} lines)", *tail]
    return "\n".join(lines)


def repair(bed: Testbed, nodes: Sequence[str]) -> str:
    """Make the testbed take jobs again (``nodes`` resumed; failing that, or with a daemon
    dead, one this session started is started afresh on its ports); say what was done."""
    state = local.load_state(bed.state_dir)
    done = []
    if state is not None and all(procs.is_alive(p) for p in state.processes):
        for node in nodes:
            bed.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=10)
        done.append(f"resumed {', '.join(nodes) or 'no node'}")
        if wait_for_usable(bed, timeout=30) is None:
            return "; ".join(done)
    if not bed.started_here:
        return "; ".join([*done, "not restarted: this session did not start it "
                                 "(HAI_TESTBED_STATE_DIR)"])
    local.down(bed.state_dir)
    local.up(bed.shape, state_dir=bed.state_dir, ports=bed.ports)
    return "; ".join([*done, "the testbed was started afresh on its ports"])


def _with_slurm_conf(bed: Testbed) -> Iterator[Testbed]:
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = bed.slurm_conf
    _SESSION_BED.append(bed)
    try:
        yield bed
    finally:
        _SESSION_BED.clear()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


@dataclass
class Submitter:
    """Submits jobs to a testbed and remembers them for cleanup (the ``submit`` fixture)."""

    run: Runner
    workdir: Path
    jobs: list[str] = field(default_factory=list)

    def __call__(self, script: str | None = None, *, wrap: str | None = None,
                 args: Sequence[str] = ()) -> str:
        """sbatch ``script`` (text, written to a file) or ``--wrap``; return the job id.

        Output goes to ``WORKDIR/<jobid>.out`` unless ``args`` sets ``--output``.
        """
        if (script is None) == (wrap is None):
            raise ValueError("give exactly one of script or wrap")
        argv = ["sbatch", "--parsable", f"--chdir={self.workdir}"]
        if not any(a.startswith(("--output", "-o")) for a in args):
            argv.append(f"--output={self.workdir}/%j.out")
        argv += list(args)
        if wrap is not None:
            argv.append(f"--wrap={wrap}")
        else:
            path = self.workdir / f"job-{len(self.jobs)}.sh"
            path.write_text(script or "")
            argv.append(str(path))
        job_id = check(self.run, argv).strip().split(";")[0]
        self.jobs.append(job_id)
        return job_id

    def wait(self, job_id: str, states: str | Sequence[str], timeout: float = 30) -> dict[str, str]:
        """Wait until the job is in one of ``states``; return its ``scontrol show job`` fields."""
        return wait_job_state(self.run, job_id, states, timeout=timeout)

    def info(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` fields of the job (empty dict once Slurm forgot it)."""
        return show_job(self.run, job_id) or {}

    def output(self, job_id: str) -> str:
        """The job's default output file ("" while it does not exist yet)."""
        path = self.workdir / f"{job_id}.out"
        return path.read_text() if path.exists() else ""

    def cleanup(self) -> None:
        """Cancel every submitted job and wait until each has ended."""
        if self.jobs:
            self.run(["scancel", "--full", *self.jobs], timeout=30)
            self.run(["scancel", *self.jobs], timeout=30)
        for job_id in self.jobs:
            wait_job_gone(self.run, job_id, timeout=60)


@pytest.fixture
def submit(testbed: Testbed, tmp_path: Path) -> Iterator[Submitter]:
    """Submit jobs to the session testbed; all of them are cancelled and drained afterwards."""
    sub = Submitter(testbed.run, tmp_path)
    try:
        yield sub
    finally:
        sub.cleanup()
