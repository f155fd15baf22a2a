"""The local-process testbed: every daemon a plain process, every file under one state directory.

``up`` starts munged, MariaDB + slurmdbd (with accounting), slurmctld, one ``slurmd -N`` per node
and Redis, and returns only once every node is idle and a GPU job across all nodes has completed.
The PIDs (with their start times) go to ``STATE_DIR/testbed.json``; ``down`` stops exactly those.
Kept between runs for speed: the munge key and the MariaDB datadir. Nothing outside the state
directory is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path

from hai_slurm.errors import HaiSlurmError, TestbedError

from . import health, procs, services
from .layout import Ports, local_layout
from .render import SECRET_FILES, render_configs
from .shape import ClusterShape
from .waiting import LocalRunner

DEFAULT_STATE_DIR = Path("/var/tmp/hai-slurm-testbed")
"""Default state directory (also taken from ``HAI_TESTBED_STATE_DIR``)."""

STATE_FILE = "testbed.json"
DOCKER_STATE_FILE = "docker-testbed.json"
"""The Docker mode's record in the same state dir (``docker_mode.STATE_FILE``), so ``down``
without ``--docker`` can find it without importing the Docker SDK."""

Echo = Callable[[str], None]

# program -> Debian package that provides it
_PROGRAMS = {"munged": "munge", "mungekey": "munge", "munge": "munge", "slurmctld": "slurmctld",
             "slurmd": "slurmd", "sbatch": "slurm-client", "scontrol": "slurm-client",
             "sinfo": "slurm-client", "redis-server": "redis-server"}
_ACCOUNTING_PROGRAMS = {"slurmdbd": "slurmdbd", "sacctmgr": "slurm-client",
                        "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server",
                        "mariadb": "mariadb-client", "mariadb-admin": "mariadb-client"}
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin"])
_LUA_PLUGIN_GLOBS = ("usr/lib/*/slurm-wlm/job_submit_lua.so", "usr/lib/slurm/job_submit_lua.so",
                     "usr/lib64/slurm/job_submit_lua.so")


def find_programs(shape: ClusterShape) -> dict[str, str]:
    """Absolute paths of the programs the shape needs; missing ones name the apt-get command."""
    wanted = dict(_PROGRAMS) | (_ACCOUNTING_PROGRAMS if shape.accounting else {})
    found = {name: shutil.which(name, path=_SEARCH_PATH) for name in wanted}
    missing = sorted(name for name, path in found.items() if path is None)
    root = Path("/")
    plugin_dirs = [*root.glob("usr/lib/*/slurm-wlm"), *root.glob("usr/lib*/slurm")]
    lua_missing = bool(plugin_dirs) and not any(any(root.glob(g)) for g in _LUA_PLUGIN_GLOBS)
    if missing or lua_missing:
        pkgs = sorted({wanted[name] for name in missing}
                      | ({"slurm-wlm-basic-plugins"} if lua_missing else set()))
        what = ", ".join(missing + (["job_submit_lua.so"] if lua_missing else []))
        raise TestbedError(f"missing programs for the testbed: {what}. Install them with: "
                           f"apt-get install -y {' '.join(pkgs)}")
    return {name: path for name, path in found.items() if path is not None}


def require_root() -> None:
    """The local testbed runs munged, slurmctld and slurmd as root."""
    if os.geteuid() != 0:
        raise TestbedError("the local testbed starts (and stops) munged, slurmctld and slurmd "
                           "as root; run the same command as root (log in as root, or "
                           "sudo $(command -v hai-slurm) ... where sudo is installed)")


@dataclass(frozen=True)
class TestbedState:
    """What ``testbed.json`` records about a running (or half-started) testbed."""

    __test__ = False  # not a pytest test class despite the name

    shape: ClusterShape
    ports: Ports
    slurm_conf: str
    processes: tuple[procs.ProcRecord, ...]
    ready: bool

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {"mode": "local", "shape": self.shape.to_json(), "ports": vars(self.ports),
                "slurm_conf": self.slurm_conf, "ready": self.ready,
                "processes": [p.to_json() for p in self.processes]}


def load_state(state_dir: Path) -> TestbedState | None:
    """The recorded testbed in ``state_dir``, or None when there is none."""
    path = state_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise TestbedError(f"{path} is unreadable ({err}); stop leftover daemons by hand and "
                           "remove it") from None
    try:
        return TestbedState(
            shape=ClusterShape.from_json(data["shape"]), ports=Ports(**data["ports"]),
            slurm_conf=str(data["slurm_conf"]), ready=bool(data.get("ready")),
            processes=_records(data))
    except (KeyError, TypeError, ValueError, AttributeError, HaiSlurmError) as err:
        raise TestbedError(f"{path} is not a testbed record this hai-slurm reads ({err!r}): "
                           f"written by another version, or damaged; `hai-slurm testbed down "
                           f"--state-dir {state_dir}` stops the processes it lists") from None


def _records(data: object) -> tuple[procs.ProcRecord, ...]:
    """The processes a ``testbed.json`` document lists (KeyError/TypeError when it has none)."""
    assert isinstance(data, dict), "not a JSON object"
    return tuple(procs.ProcRecord.from_json(p) for p in data["processes"])


def _recorded_processes(state_dir: Path) -> tuple[procs.ProcRecord, ...]:
    """Only the processes of a record :func:`load_state` cannot read (for :func:`down`)."""
    try:
        return _records(json.loads((state_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AssertionError, AttributeError) as err:
        raise TestbedError(f"{state_dir / STATE_FILE} lists no processes it can read ({err!r}); "
                           "stop leftover daemons by hand and remove it") from None


def _save(state_dir: Path, state: TestbedState) -> None:
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=1))
    tmp.replace(state_dir / STATE_FILE)


def slurm_conf_path(state_dir: Path) -> str:
    """The slurm.conf of the testbed in ``state_dir`` (error if none is up)."""
    state = load_state(state_dir)
    if state is None:
        raise TestbedError(f"no testbed in {state_dir}; start one with: hai-slurm testbed up "
                           f"--state-dir {state_dir}")
    return state.slurm_conf


def problem(state: TestbedState) -> str | None:
    """Why the recorded testbed cannot run jobs, or None when it can (see :func:`healthy`)."""
    if not state.ready:
        return "it did not finish starting"
    dead = [p.name for p in state.processes if not procs.is_alive(p)]
    if dead:
        return f"{', '.join(dead)} no longer run(s)"
    return health.nodes_problem(LocalRunner(state.slurm_conf), state.shape.node_names)


def healthy(state: TestbedState) -> bool:
    """All recorded daemons alive, the controller answers and every node can run jobs."""
    return problem(state) is None


def _broken(state: TestbedState) -> bool:
    """Half started, or a recorded daemon died: nothing left worth keeping."""
    return not state.ready or not all(procs.is_alive(p) for p in state.processes)


def _prepare(state_dir: Path, shape: ClusterShape, ctx: services.Ctx) -> None:
    # the last start's logs stay one start longer (log.prev/): a testbed replaced because a
    # daemon died keeps the evidence of why
    shutil.rmtree(state_dir / "log.prev", ignore_errors=True)
    if (state_dir / "log").is_dir():
        (state_dir / "log").rename(state_dir / "log.prev")
    for sub in ("run", "spool", "ctld", "log", "etc"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)
    for sub in ("run", "spool", "ctld", "log", "etc", "dev"):
        (state_dir / sub).mkdir(parents=True, exist_ok=True)
    dev = state_dir / "dev"
    for gpu in range(shape.gpus_per_node):
        link = dev / f"nvidia{gpu}"
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    etc = state_dir / "etc"
    for name, text in render_configs(shape, ctx.layout).items():
        if name in SECRET_FILES:  # created 0600, never briefly readable with the password in it
            fd = os.open(etc / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(text)
        else:
            (etc / name).write_text(text)
    plugins = resources.files("hai_slurm.slurm_plugins")
    for name in ("job_submit.lua", "hai_entitlements.lua"):
        src = plugins / name
        if src.is_file():
            (etc / name).write_text(src.read_text())
        elif name == "job_submit.lua":
            raise TestbedError("hai_slurm/slurm_plugins/job_submit.lua is missing from the "
                               "installed package; reinstall: pip install -e '.[all]'")


def up(shape: ClusterShape, *, state_dir: Path = DEFAULT_STATE_DIR, ports: Ports | None = None,
       echo: Echo = lambda _msg: None) -> bool:
    """Bring the testbed up; return False if it was already up and healthy (nothing done).

    A testbed recorded in ``state_dir`` that is half started or lost a daemon is stopped and
    started afresh, on its recorded ports unless ``ports`` are given. One whose daemons all run
    but that cannot take jobs (a node down or drained, slurmctld not answering) is left alone
    with an error that says why: its jobs and logs may be someone's work.

    Raises :class:`TestbedError` with the relevant log lines if any step fails; whatever was
    started by then is stopped again.
    """
    require_root()
    bins = find_programs(shape)
    state_dir = _usable_dir(state_dir)
    with _locked(state_dir), _signals_interrupt() as interrupts:
        return _up(shape, state_dir, ports, bins, echo, interrupts)


def _usable_dir(state_dir: Path) -> Path:
    """``state_dir`` resolved and made; a path Slurm's files cannot name, or one that cannot
    be made, is a :class:`TestbedError` naming ``--state-dir``."""
    state_dir = state_dir.resolve()
    if any(c.isspace() or c in "#=," for c in str(state_dir)):
        raise TestbedError(f"--state-dir {str(state_dir)!r}: slurm.conf names files under it, "
                           "so it may hold no spaces, '#', '=' or ','; choose another")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TestbedError(f"--state-dir {state_dir}: cannot make it ({err.strerror or err}); "
                           "choose a writable directory") from None
    return state_dir


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """One ``up`` or ``down`` at a time per state dir (a second one meanwhile took the first's
    half-started daemons for a broken testbed and stopped them)."""
    fd = os.open(state_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TestbedError(f"another `hai-slurm testbed up` or `down` is working on "
                               f"{state_dir}; wait for it to end") from None
        yield
    finally:
        os.close(fd)


class _Interrupts:
    """SIGTERM and SIGHUP (a CI job's timeout) raise :class:`TestbedError` while ``up`` runs,
    and SIGINT raises KeyboardInterrupt, so its clean-up stops what it started.

    Inside :meth:`held` (a daemon being started and recorded) a signal waits until the block
    ends: raised between the fork and the record, it left a daemon that the clean-up could not
    know of running on its port."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending: int | None = None
        self.came_up = False
        """Set once the testbed is up and recorded: a signal then stops only ``up`` itself."""

    def handle(self, signum: int, _frame: object) -> None:
        if self._depth:
            self._pending = self._pending or signum
            return
        self._raise(signum)

    def _raise(self, signum: int) -> None:
        if self.came_up:
            raise TestbedError(f"interrupted by {signal.Signals(signum).name} after the testbed "
                               "came up; it runs (`hai-slurm testbed down` stops it)")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise TestbedError(f"interrupted by {signal.Signals(signum).name}; stopped what was "
                           "started")

    @contextlib.contextmanager
    def held(self, *, drop: bool = False) -> Iterator[None]:
        """Hold signals for the block. One that came meanwhile is raised where the outermost
        block ends, unless that block raised (its error goes on: it says why ``up`` stopped,
        and the clean-up runs anyway) or ``drop`` (the clean-up's own block, run while an
        error is already on its way out)."""
        self._depth += 1
        signum: int | None = None
        ended = False
        try:
            yield
            ended = True
        finally:
            self._depth -= 1
            if not self._depth:
                signum, self._pending = self._pending, None
        if ended and not drop and signum is not None:
            self._raise(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[_Interrupts]:
    """Install :class:`_Interrupts` (in the main thread only) and put the old handlers back."""
    interrupts = _Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    # a signal set to be ignored stays ignored (``nohup hai-slurm testbed up &``); SIGINT only
    # where Python's own handler would raise KeyboardInterrupt
    before = {sig: signal.signal(sig, interrupts.handle)
              for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
              if signal.getsignal(sig) is not signal.SIG_IGN
              and (sig != signal.SIGINT or signal.getsignal(sig) is signal.default_int_handler)}
    try:
        yield interrupts
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _up(shape: ClusterShape, state_dir: Path, ports: Ports | None, bins: dict[str, str],
        echo: Echo, interrupts: _Interrupts) -> bool:
    old = load_state(state_dir)
    if old is not None:
        why = problem(old)
        if why is None:
            if old.shape != shape:
                raise TestbedError(f"a testbed with another shape is already up in {state_dir}; "
                                   f"stop it first: hai-slurm testbed down --state-dir "
                                   f"{state_dir}")
            echo(f"testbed already up in {state_dir}")
            return False
        if not _broken(old):  # its daemons run: its jobs and logs are not ours to throw away
            raise TestbedError(
                f"the testbed in {state_dir} is running but cannot take jobs: {why}. Look at "
                f"it with `hai-slurm testbed status --state-dir {state_dir}`, or start it "
                f"afresh (its jobs are lost): hai-slurm testbed down --state-dir {state_dir}")
        echo(f"a previous testbed there is incomplete ({why}); stopping what is left of it "
             "(its logs move to log.prev/)")
        _down(state_dir, old.processes, old, echo=lambda _m: None)
    ports = ports or (old.ports if old is not None else Ports())
    procs.check_ports(ports.wanted(shape))
    layout = local_layout(shape, ports, state_dir, socket.gethostname(),
                          services.storage_password(state_dir) if shape.accounting else "",
                          services.slurm_version(bins["slurmctld"]))
    env = {**os.environ, "SLURM_CONF": layout.slurm_conf, procs.MARK: str(state_dir)}
    ctx = services.Ctx(state_dir, shape, ports, layout, env, bins)
    _prepare(state_dir, shape, ctx)
    started: list[procs.ProcRecord] = []
    t0 = time.monotonic()

    def launch(start: Callable[[], procs.ProcRecord]) -> procs.ProcRecord:
        with interrupts.held():  # started and recorded before a signal may stop `up`
            rec = start()
            started.append(rec)
        _save(state_dir, TestbedState(shape, ports, layout.slurm_conf, tuple(started), False))
        return rec

    def step(msg: str) -> None:
        echo(f"{time.monotonic() - t0:6.2f} s  {msg}")

    try:
        redis = launch(partial(services.start_redis, ctx))
        munge = launch(partial(services.start_munge, ctx))
        db = None
        if shape.accounting:
            services.init_mariadb(ctx)
            db = launch(partial(services.start_mariadb, ctx))
        services.wait_ready(munge, lambda: services.munge_ready(ctx), timeout=15,
                            what="munge socket", logs=[ctx.log("munged")])
        step("munged ready")
        if db is not None:
            services.wait_ready(db, lambda: services.mariadb_ready(ctx), timeout=60,
                                what="mariadb ping", logs=[ctx.path("log", "mariadb.log")])
            services.setup_database(ctx)
            step("mariadb ready")
            dbd = launch(partial(services.start_slurmdbd, ctx))
            services.wait_ready(dbd, lambda: services.slurmdbd_ready(ctx), timeout=90,
                                what="sacctmgr show cluster",
                                logs=[layout.slurmdbd_log_file, ctx.log("slurmdbd")])
            changes = services.setup_accounting(ctx)
            step(f"slurmdbd ready; accounting set up ({changes} change(s))")
        ctld = launch(partial(services.start_slurmctld, ctx))
        services.wait_ready(ctld, lambda: services.slurmctld_ready(ctx), timeout=30,
                            what="scontrol ping", logs=[layout.slurmctld_log_file,
                                                        ctx.log("slurmctld")])
        step("slurmctld ready")
        for node in shape.node_names:
            launch(partial(services.start_slurmd, ctx, node))
        slurmd_logs = [ctx.path("log", f"slurmd-{n}.log") for n in shape.node_names]

        def node_logs() -> list[str]:
            return services.logs_of(layout.slurmctld_log_file, *slurmd_logs)

        health.wait_nodes_idle(ctx.run, shape.node_names, timeout=30, logs=node_logs)
        step(f"{shape.nodes} nodes idle")
        services.wait_ready(redis, lambda: services.redis_ready(
                                ports.redis, services.redis_password(state_dir)), timeout=10,
                            what="redis PING", logs=[ctx.log("redis")])
        lines = health.run_gpu_smoke_job(ctx.run, shape, f"{layout.log_dir}/smoke-%j.out",
                                         timeout=60, logs=node_logs)
        step(f"GPU job done: {'; '.join(lines)}")
        with interrupts.held():   # recorded as ready before a signal may stop `up`
            _save(state_dir, TestbedState(shape, ports, layout.slurm_conf, tuple(started), True))
        # within the clean-up's reach: a signal before this line stops everything, as its
        # message says; one after it says the testbed runs, and it is left running
        interrupts.came_up = True
    except BaseException:
        if interrupts.came_up:
            raise
        with interrupts.held(drop=True):  # a SIGTERM neither cuts it short nor hides why
            _stop_records(started)
            (state_dir / STATE_FILE).unlink(missing_ok=True)
        raise
    return True


_STOP_ORDER = ("slurmd-", "slurmctld", "slurmdbd", "")


def _stop_records(records: list[procs.ProcRecord] | tuple[procs.ProcRecord, ...]) -> list[int]:
    """Stop the records in dependency order, then job processes left by slurmd; return survivors."""
    marked_before = _job_leftovers(records)
    survivors: list[int] = []
    remaining = list(records)
    for prefix in _STOP_ORDER:
        group = [r for r in remaining if r.name.startswith(prefix)]
        remaining = [r for r in remaining if r not in group]
        survivors += procs.stop({r.pid: r.start_ticks for r in group})
    leftovers = marked_before | _job_leftovers(records)
    survivors += procs.stop(dict.fromkeys(leftovers), timeout=5)
    return survivors


def _job_leftovers(records: list[procs.ProcRecord] | tuple[procs.ProcRecord, ...]) -> set[int]:
    """slurmstepd processes of this testbed's slurmd (and their children), found by /proc."""
    if not any(r.name.startswith("slurmd-") for r in records):
        return set()
    stepds = procs.marked({str(Path(r.log).parent.parent) for r in records}, "slurmstepd")
    return stepds | procs.descendants(stepds)


def down(state_dir: Path = DEFAULT_STATE_DIR, *, echo: Echo = lambda _msg: None) -> list[str]:
    """Stop everything the testbed in ``state_dir`` started; return the names stopped.

    Nothing up: returns [] quietly. Raises :class:`TestbedError` naming any PID that survived
    SIGKILL. Keeps the munge key, the MariaDB datadir, etc/ and log/ (for post-mortems).
    """
    state_dir = state_dir.resolve()
    if not (state_dir / STATE_FILE).exists():
        return []
    require_root()
    with _locked(state_dir):
        try:
            state = load_state(state_dir)
        except TestbedError:   # another version's record: its processes are enough to stop
            state = None
            records = _recorded_processes(state_dir)
        else:
            if state is None:
                return []
            records = state.processes
        return _down(state_dir, records, state, echo)


def _down(state_dir: Path, records: tuple[procs.ProcRecord, ...], state: TestbedState | None,
          echo: Echo) -> list[str]:
    alive = [p for p in records if procs.is_alive(p)]
    ctld = next((p for p in alive if p.name == "slurmctld"), None)
    if ctld is not None and state is not None:
        LocalRunner(state.slurm_conf)(["scancel", "--full", f"--partition={state.shape.partition}"],
                                      timeout=10)
    survivors = _stop_records(records)
    if survivors:
        raise TestbedError(f"processes still alive after SIGKILL: {survivors}")
    for sub in ("run", "spool", "ctld"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)
    for sock in (state_dir / "munge" / "munge.socket", state_dir / "munge" / "munge.socket.lock",
                 state_dir / "mariadb" / "mysqld.sock"):
        sock.unlink(missing_ok=True)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    for rec in alive:
        echo(f"stopped {rec.name} (pid {rec.pid})")
    return [r.name for r in alive]


def stop_component(state_dir: Path, name: str) -> procs.ProcRecord:
    """Stop one recorded daemon (e.g. ``"slurmctld"``) and leave the rest running.

    For tests of what clients do while a component is down; :func:`start_component` brings it
    back with the same command line. slurmctld saves its state on SIGTERM and recovers it on
    start, so jobs survive. Returns the stopped record.
    """
    state_dir = state_dir.resolve()
    state = load_state(state_dir)
    if state is None:
        raise TestbedError(f"no testbed in {state_dir}")
    rec = next((p for p in state.processes if p.name == name), None)
    if rec is None:
        names = ", ".join(p.name for p in state.processes)
        raise TestbedError(f"the testbed in {state_dir} has no component {name!r} (has {names})")
    if procs.stop({rec.pid: rec.start_ticks}):
        raise TestbedError(f"{name} (pid {rec.pid}) survived SIGKILL")
    return rec


def start_component(state_dir: Path, name: str, *, timeout: float = 30.0) -> procs.ProcRecord:
    """Start a component stopped by :func:`stop_component` again and wait until it is ready.

    slurmctld counts as ready when ``scontrol ping`` says UP; other components when they still
    run after a short moment. The new PID replaces the old one in ``testbed.json``, so ``down``
    and ``healthy`` keep working.
    """
    state_dir = state_dir.resolve()
    state = load_state(state_dir)
    if state is None:
        raise TestbedError(f"no testbed in {state_dir}")
    old = next((p for p in state.processes if p.name == name), None)
    if old is None:
        raise TestbedError(f"the testbed in {state_dir} has no component {name!r}")
    if procs.is_alive(old):
        return old
    env = {**os.environ, "SLURM_CONF": state.slurm_conf, procs.MARK: str(state_dir)}
    rec = procs.start(name, old.argv, Path(old.log), env=env, cwd=state_dir)
    _save(state_dir, TestbedState(state.shape, state.ports, state.slurm_conf,
                                  tuple(rec if p.name == name else p for p in state.processes),
                                  state.ready))
    run = LocalRunner(state.slurm_conf)
    deadline = time.monotonic() + timeout
    settle = time.monotonic() + 1.0
    while True:
        if not procs.is_alive(rec):
            raise TestbedError(f"{name} exited right after its restart",
                               log_lines=services.log_tail(rec.log))
        if name == "slurmctld":
            res = run(["scontrol", "ping"], timeout=10)
            if res.returncode == 0 and "UP" in res.stdout:
                return rec
        elif time.monotonic() >= settle:
            return rec
        if time.monotonic() >= deadline:
            raise TestbedError(f"{name} did not become ready within {timeout:g} s of its restart",
                               log_lines=services.log_tail(rec.log))
        time.sleep(0.1)
