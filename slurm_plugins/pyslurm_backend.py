"""The SlurmClient that talks to slurmctld through pyslurm (Slurm's C API), and how it is chosen.

pyslurm is optional and installed separately (GPL-2.0-only; see the README's "pyslurm backend"):
nothing here imports it at module level, and no pyslurm code is part of hai-slurm.

What goes through pyslurm (one RPC, no process per command):

- the job records of :meth:`PyslurmClient.snapshot` (``pyslurm.Jobs.load()``), read by the
  same parser as ``squeue --json`` (:func:`~.parse.parse_job`): each pyslurm job is turned into
  the fields of a ``squeue --json`` record first, so there is one reader of job states, GPUs,
  sizes. On 22.05, once every job's record was read, a snapshot lists the jobs with the CLI's
  compact ``squeue -O`` instead and reads the record (``Job.load``) only of jobs that are new or
  changed (:mod:`.compact_listing`; at 12,000 jobs the listing costs 0.22 s, ``Jobs.load()`` and
  reading every record 0.4-0.6 s of CPU);
- priority writes, hold, release, admin_comment (``Job.modify``), requeue and requeue-hold
  (``Job.requeue``), signals (``Job.send_signal``), cancel, and :meth:`~PyslurmClient.job_facts`
  (``Job.load``, the job's steps included for ``SignalTarget.WORKLOAD``).

What stays with the CLI backend (:class:`~.cli_backend.CliSlurmClient`, explicitly delegated):

- :meth:`~PyslurmClient.version` (``scontrol version``, once);
- nodes, partitions and QOS of a snapshot: a handful of records read by the CLI's parsers (the
  partition text is the faithful source, see :mod:`.version`; QOS need ``sacctmgr``: pyslurm's
  database API is not used);
- the GPU request of jobs that ask with ``--gpus``/``--gpus-per-task``/``--gpus-per-socket``:
  pyslurm 22.5 exposes only ``tres_per_node``, so a compact ``squeue -O`` fills the others
  for the active jobs without a per-node request. They are kept per job: a snapshot asks only
  for jobs it has not seen (``squeue --jobs``), and for all of them again every
  :data:`~.compact_listing.DETAIL_REFRESH` seconds (a request changed by ``scontrol update`` is
  seen within that long);
- :meth:`~PyslurmClient.set_req_nodes` (its race rules live in the CLI backend), and the
  reservation methods of the preemption guard (create, end, list, link a job: one
  ``scontrol`` call per plan, read from scontrol's messages),
  :meth:`~PyslurmClient.switches` (``scontrol show topology``: no C API in pyslurm);
- any write to an array task whose own id is the array's id: pyslurm addresses jobs by number,
  which slurmctld reads as the whole array; the CLI writes ``ARRAY_TASK`` instead.

One cluster per process: ``import pyslurm`` calls ``slurm_init()``, which reads ``SLURM_CONF``
once. :func:`load_pyslurm` sets ``SLURM_CONF`` before the import and refuses a second, different
slurm.conf in the same process.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import pwd
import re
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.slurm_plugins.cli_backend import (
    _DONE,
    _GONE,
    _HELD,
    _NOT_NOW,
    _PENDING,
    _REFUSED,
    _SIGNAL_RE,
    CHUNK,
    CliSlurmClient,
    _classify,
    _Harmless,
    running_only,
)
from hai_slurm.slurm_plugins.compact_listing import DETAIL_REFRESH, CompactListing, fresh
from hai_slurm.slurm_plugins.parse import job_state, parse_job
from hai_slurm.slurm_plugins.types import (
    ActionResult,
    ClusterSnapshot,
    Job,
    JobFacts,
    JobIds,
    PendingBrief,
    Reservation,
    SignalTarget,
    Skipped,
    SwitchInfo,
    job_id_tuple,
)

log = logging.getLogger(__name__)

NO_PYSLURM_SINCE = SlurmVersion(26, 5)
"""First Slurm release without any pyslurm: its C API changed (job ids became
``slurm_step_id_t`` in ``slurm_load_job``, ``slurm_kill_job``, ``slurm_requeue``, ...)."""

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"

_BOUND: dict[str, str] = {}
"""The slurm.conf this process's pyslurm was initialised with (key ``"conf"``): slurm_init()
runs once per process, so this is process state by nature, not a cache."""

_GPU_FORMAT = "JobID:|,tres-per-job:|,tres-per-task:|,tres-per-socket:|"
"""``squeue -O`` columns for the GPU requests pyslurm 22.5 does not expose."""


# -- choosing and loading pyslurm ----------------------------------------------------------
def pyslurm_series(version: str) -> SlurmVersion:
    """The Slurm series a pyslurm release is for: ``"22.5.3"`` -> 22.05, ``"25.11.0"`` -> 25.11."""
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise ValueError(f"cannot read a pyslurm version from {version!r}")
    return SlurmVersion(int(parts[0]), int(parts[1]))


def installed_pyslurm() -> str | None:
    """pyslurm's installed version (package metadata: nothing is imported), or None."""
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


def conf_path(slurm_conf: str | None) -> str:
    """The slurm.conf pyslurm would read: ``slurm_conf``, else ``$SLURM_CONF``, else Slurm's
    default."""
    return slurm_conf or os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF


def load_pyslurm(slurm_conf: str | None = None) -> Any:
    """Import pyslurm for the cluster of ``slurm_conf`` (set as ``SLURM_CONF`` first).

    Raises SlurmError when the file is missing (libslurm would end the whole process) or when
    this process already initialised pyslurm with another slurm.conf; ImportError comes through
    (pyslurm built against another libslurm).
    """
    conf = conf_path(slurm_conf)
    if not Path(conf).is_file():
        raise SlurmError(f"slurm.conf {conf} does not exist: pyslurm's slurm_init() would end "
                         "the process; set SLURM_CONF or pass slurm_conf")
    bound = _BOUND.get("conf")
    if bound is None and "pyslurm" in sys.modules:
        bound = os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF
    if bound is not None and Path(bound).resolve() != Path(conf).resolve():
        raise SlurmError(f"pyslurm in this process already talks to the cluster of {bound}; it "
                         f"cannot switch to {conf} (slurm_init runs once per process): use the "
                         "CLI backend (backend='cli') for a second cluster")
    os.environ["SLURM_CONF"] = conf
    mod = importlib.import_module("pyslurm")
    _BOUND["conf"] = conf
    return mod


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """Which backend :func:`choose_backend` picked and why (one line for the log)."""

    backend: str
    """``"pyslurm"`` or ``"cli"``."""
    reason: str
    module: Any = None
    """The imported pyslurm module when ``backend`` is ``"pyslurm"``."""


def choose_backend(cluster_version: Callable[[], SlurmVersion], slurm_conf: str | None = None,
                   *, installed: Callable[[], str | None] = installed_pyslurm,
                   load: Callable[[str | None], Any] = load_pyslurm) -> BackendChoice:
    """pyslurm when one built for the running Slurm series imports, else the CLI, with why.

    ``cluster_version`` (``scontrol version``) is only asked when pyslurm is installed, and
    pyslurm is only imported (``load(slurm_conf)``) when its release matches the cluster's.
    """
    have = installed()
    if have is None:
        return BackendChoice("cli", "pyslurm is not installed")
    cluster = cluster_version()
    if cluster >= NO_PYSLURM_SINCE:
        return BackendChoice("cli", f"Slurm {cluster} has no pyslurm (its C API changed in "
                             f"{NO_PYSLURM_SINCE.series}; pyslurm {have} is installed)")
    try:
        series = pyslurm_series(have)
    except ValueError as err:
        return BackendChoice("cli", str(err))
    if (series.major, series.minor) != (cluster.major, cluster.minor):
        return BackendChoice("cli", f"pyslurm {have} is for Slurm {series.series} but the "
                             f"cluster runs Slurm {cluster}: install pyslurm's "
                             f"{cluster.major}.{cluster.minor}.x branch")
    try:
        mod = load(slurm_conf)
    except (ImportError, OSError, SlurmError) as err:
        return BackendChoice("cli", f"pyslurm {have} matches Slurm {cluster} but does not "
                             f"load: {err}")
    return BackendChoice("pyslurm", f"pyslurm {have} matches Slurm {cluster}", mod)


# -- the client ------------------------------------------------------------------------------
def _gres_text(gres: Mapping[str, Any] | None) -> str:
    """pyslurm's GRES dict as Slurm's text (``gpu:2``): ``{"gpu": 2}``, ``{"gpu:a100": 1}``
    (requests), or ``{"gpu": {"count": "2", "indexes": "4-5"}}`` (a job's layout per node)."""
    items = []
    for name, value in (gres or {}).items():
        count = value.get("count", 0) if isinstance(value, Mapping) else value
        items.append(f"{name}:{count}")
    return ",".join(items)


def user_name(uid: int | None, cache: dict[int, str]) -> str:
    """The login of ``uid`` (cached per snapshot); the number itself when the daemon's host
    does not know it, as squeue prints it. pyslurm's own ``user_name`` raises KeyError there,
    and its ``preload_passwd_info`` misses users a directory service does not enumerate."""
    if uid is None:
        return ""
    if uid not in cache:
        try:
            cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            cache[uid] = str(uid)
    return cache[uid]


def job_record(pj: Any, extra_gpus: Mapping[str, str] | None = None,
               users: dict[int, str] | None = None) -> dict[str, Any]:
    """A pyslurm job as the fields of a ``squeue --json`` (v0.0.38) record, for parse_job.

    pyslurm turns Slurm's "unset" into None and leaves out the TRES strings: the allocation is
    rebuilt from the job's resource layout (CPUs, memory and GRES per node) and the request
    from the memory fields, so :func:`~.tres.job_size` measures both backends alike.
    ``extra_gpus`` are the ``tres_per_job``/``_task``/``_socket`` strings from ``squeue``.
    """
    state = pj.state
    running = state not in ("PENDING",) and bool(pj.allocated_nodes)
    gres_detail: list[str] = []
    alloc = ""
    if running:
        layout = pj.get_resource_layout_per_node()
        gres_detail = [_gres_text(v.get("gres")) for v in layout.values()]
        mems = [v.get("memory") for v in layout.values()]
        alloc = f"cpu={pj.cpus}"
        if any(mems):
            alloc += f",mem={sum(m or 0 for m in mems)}M"
    array_id = pj.array_id
    task_id = pj.array_task_id
    tasks = pj.array_tasks_waiting or ""
    if array_id and task_id is None and not tasks:
        task_id = 0          # pyslurm reads task 0 as "unset"
    return {
        "job_id": pj.id, "name": pj.name, "user_id": pj.user_id,
        "user_name": user_name(pj.user_id, {} if users is None else users),
        "account": pj.account, "partition": pj.partition, "qos": pj.qos,
        "job_state": state, "state_reason": pj.state_reason, "priority": pj.priority,
        "submit_time": pj.submit_time, "eligible_time": pj.eligible_time,
        "start_time": pj.start_time, "time_limit": pj.time_limit,   # None: UNLIMITED, as v0.0.38
        "node_count": pj.num_nodes, "nodes": pj.allocated_nodes,
        "tres_per_node": _gres_text(pj.gres_per_node), **(extra_gpus or {}),
        "tasks": pj.ntasks, "sockets_per_node": pj.sockets_per_node,
        "tres_alloc_str": alloc, "gres_detail": gres_detail, "cpus": pj.cpus,
        "memory_per_node": pj.memory_per_node, "memory_per_cpu": pj.memory_per_cpu,
        "restart_cnt": pj.requeue_count, "requeue": pj.is_requeueable,
        "comment": pj.comment, "admin_comment": pj.admin_comment,
        "batch_flag": pj.is_batch_job, "array_job_id": array_id or 0,
        "array_task_id": task_id, "array_task_string": tasks,
        "required_switches": pj.required_switches or 0,
        "maximum_switch_wait_time": pj.max_wait_time_switches or 0,
        "required_nodes": pj.required_nodes or "", "excluded_nodes": pj.excluded_nodes or "",
        "features": pj.constraints or "",
        "shared": pj.resource_sharing,   # NO, USER, MCS, YES, OK (Slurm's job_share_string)
        "resv_name": pj.reservation or "",
    }


def job_facts_of(pj: Any) -> JobFacts:
    """A pyslurm job's facts, read like ``squeue -O State`` (:func:`~.parse.job_state`)."""
    base, _flags = job_state(pj.state, f"pyslurm state of job {pj.id}")
    return JobFacts(job_id=pj.id, state=base, restart_count=pj.requeue_count or 0,
                    held=(pj.priority or 0) == 0 and "held" in (pj.state_reason or "").lower(),
                    req_nodes=pj.required_nodes or "",
                    reservation=getattr(pj, "reservation", None) or "")


def _modifier(desc: Any) -> Callable[[Any], None]:
    """``job.modify(desc)`` as a callable."""
    def modify(job: Any) -> None:
        job.modify(desc)
    return modify


UNREACHABLE = "Unable to contact slurm controller"
"""libslurm's words for an RPC that found no slurmctld to talk to."""


def controller_addresses(conf_text: str) -> tuple[tuple[str, int], ...]:
    """``(address, port)`` of each ``SlurmctldHost`` (its ``(address)`` when given, else the
    name; ``ControlMachine``/``ControlAddr`` of old files) with ``SlurmctldPort`` (the first of
    a range; default 6817), from slurm.conf's text; () when it names none (configless)."""
    hosts: list[str] = []
    port = 6817
    for raw in conf_text.splitlines():
        key, sep, value = raw.split("#", 1)[0].strip().partition("=")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "slurmctldhost" and value:
            m = re.match(r"([^(\s]+)(?:\(([^)\s]+)\))?", value)
            if m:
                hosts.append(m.group(2) or m.group(1))
        elif key in ("controladdr", "controlmachine") and value:
            hosts.append(value)
        elif key == "slurmctldport" and value.split("-")[0].isdigit():
            port = int(value.split("-")[0])
    return tuple(dict.fromkeys((h, port) for h in hosts))


def tcp_probe(addresses: Sequence[tuple[str, int]], timeout: float = 1.0) -> str | None:
    """None when one of ``addresses`` accepts a TCP connection (or none is known), else why
    not."""
    problems = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as err:
            problems.append(f"{host}:{port}: {err.strerror or err}")
        else:
            return None
    return "; ".join(problems) or None


class PyslurmClient:
    """SlurmClient over pyslurm, with the CLI backend for what pyslurm cannot do (module doc).

    Writes are one RPC per job (``slurm_update_job`` and friends take one id through pyslurm),
    about a millisecond each, so :attr:`writes_per_job` is True and ``ActionResult.commands``
    counts RPCs, where the CLI backend batches one command per distinct value.

    ``module`` is the imported pyslurm (default: :func:`load_pyslurm` with ``slurm_conf``);
    ``cli`` the CLI backend for the delegated reads and writes (default: one for the same
    slurm.conf). Refuses Slurm 26.05 and later, and a pyslurm built for another series.
    """

    writes_per_job = True
    """Each write is one RPC per job (the CLI backend batches ids into one command)."""

    def __init__(self, *, slurm_conf: str | None = None, timeout: float = 30.0,
                 module: Any = None, cli: CliSlurmClient | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        conf = conf_path(slurm_conf)
        self._cli = cli or CliSlurmClient(slurm_conf=conf, timeout=timeout, clock=clock)
        cluster = self._cli.version()
        if cluster >= NO_PYSLURM_SINCE:
            raise SlurmError(f"the pyslurm backend cannot run on Slurm {cluster}: no pyslurm "
                             f"exists for {NO_PYSLURM_SINCE.series}'s C API; use the CLI backend")
        self._ps: Any = module if module is not None else load_pyslurm(conf)
        have = str(getattr(self._ps, "__version__", "?"))
        try:
            series = pyslurm_series(have)
        except ValueError:
            series = SlurmVersion(0, 0)
        if (series.major, series.minor) != (cluster.major, cluster.minor):
            raise SlurmError(f"pyslurm {have} does not match Slurm {cluster}: install pyslurm's "
                             f"{cluster.major}.{cluster.minor}.x branch, or use the CLI backend")
        self._clock = clock
        try:
            text = Path(conf).read_text(errors="replace")
        except OSError:
            text = ""
        addresses = controller_addresses(text)
        self.probe: Callable[[], str | None] = lambda: tcp_probe(addresses)
        self._unreachable = False
        self._aliases: frozenset[int] = frozenset()
        """Array tasks whose own id is the array's id (from the latest snapshot): written
        through the CLI, which addresses them as ``ARRAY_TASK``."""
        self._records: frozenset[int] = frozenset()
        """Arrays' own pending records (from the latest snapshot): pyslurm names a job by its
        number, which slurmctld reads as the whole array for a cancel; the CLI writes them
        ``ID_[TASKS]``."""
        self._requests: dict[int, dict[str, str]] = {}
        """The GPU requests ``squeue -O`` gave per job id (see :meth:`_gpu_requests`)."""
        self._requests_at: float | None = None
        """When every active job's request was last read in full."""
        self._parsed: dict[int, tuple[dict[str, Any], Job | None]] = {}
        """The previous snapshot's jobs: id -> (its record, the Job parsed from it); an equal
        record gives the same Job (:func:`~.parse.parse_job` depends on the record alone)."""
        self.listing = CompactListing()
        """Details per job from pyslurm's records, for the compact listing (see :meth:`jobs`)."""

    @property
    def pyslurm_version(self) -> str:
        """The version of the pyslurm in use."""
        return str(getattr(self._ps, "__version__", "?"))

    # -- reads ------------------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        """The cluster's release (the CLI backend's ``scontrol version``, read once)."""
        return self._cli.version()

    def _before_rpc(self) -> None:
        """Once an RPC found slurmctld unreachable, each later one first checks that it accepts
        connections again (one TCP connect, a second at most) and fails at once while it does
        not. A pyslurm call holds the interpreter lock through libslurm's own connect retries
        (35 s here with MessageTimeout=20): no signal handler and no other thread runs
        meanwhile, so a daemon SIGTERMed during an outage would wait out each call. Not probed
        while slurmctld answers (it logs an error for each empty connection)."""
        if not self._unreachable:
            return
        problem = self.probe()
        if problem is not None:
            raise SlurmError(f"slurmctld does not accept connections ({problem}); pyslurm is "
                             "not called until it does")
        self._unreachable = False

    def _rpc_failed(self, message: str) -> None:
        if UNREACHABLE in message:
            self._unreachable = True

    def _load_jobs(self) -> list[Any]:
        self._before_rpc()
        try:
            jobs = self._ps.Jobs.load()
        except self._ps.RPCError as err:
            self._rpc_failed(str(err))
            raise SlurmError(f"pyslurm Jobs.load() failed: {err}") from err
        return [pj for cluster in jobs.data.values() for pj in cluster.values()]

    def jobs(self) -> tuple[Job, ...]:
        """The active jobs.

        Where the compact listing is checked (22.05,
        :meth:`~.cli_backend.CliSlurmClient.compact_listing`): that listing, with the details
        it lacks kept from pyslurm's record of each job, read with ``Job.load`` only for jobs
        new or changed since (:mod:`~.compact_listing`). At 12,000 jobs, ``Jobs.load()`` and
        reading its records took 0.4-0.6 s of CPU a cycle, the compact listing about 0.2 s.
        Else, and every
        :data:`~.compact_listing.DETAIL_REFRESH` seconds: every record from ``Jobs.load()``."""
        now = self._clock()
        if self.listing.usable(now) and self._cli.has_compact_listing():
            jobs = self.listing.jobs(self._cli.compact_listing(), fetch=self._records_of)
            if jobs is not None:
                return jobs
        return self._all_jobs(now)

    def _records_of(self, job_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Full records of ``job_ids`` (:meth:`_load_some`); a job that ended meanwhile is
        left out."""
        users: dict[int, str] = {}
        return [job_record(pj, None, users) for pj in self._load_some(job_ids)]

    def _all_jobs(self, now: float) -> tuple[Job, ...]:
        """Every active job from ``Jobs.load()`` (see :meth:`jobs`); keeps their details."""
        is_active: dict[str, bool] = {}     # one job_state() per distinct state word
        active = []
        for pj in self._load_jobs():
            word = pj.state
            if word not in is_active:
                is_active[word] = job_state(word, f"pyslurm state of job {pj.id}")[0].active
            if is_active[word]:
                active.append(pj)
        extra = self._gpu_requests([pj.id for pj in active if not pj.gres_per_node])
        users: dict[int, str] = {}
        before: dict[int, tuple[dict[str, Any], Job | None]] = self._parsed
        current: dict[int, tuple[dict[str, Any], Job | None]] = {}
        out = []
        for pj in active:
            record = job_record(pj, extra.get(pj.id), users)
            seen = before.get(pj.id)
            job = seen[1] if seen is not None and seen[0] == record else parse_job(record)
            current[pj.id] = (record, job)
            if job is not None:
                out.append(job)
        self._parsed = current
        self.listing.reset((record for record, _ in current.values()), now)
        return tuple(out)

    def _gpu_requests(self, ids: Sequence[int]) -> dict[int, dict[str, str]]:
        """``tres_per_job``/``_task``/``_socket`` of the jobs ``ids``: kept from earlier
        snapshots; the jobs not seen before are read with ``squeue --jobs`` (in chunks), and
        every active job with one ``squeue -O`` when :data:`DETAIL_REFRESH` seconds have passed
        (or a ``--jobs`` read failed: a job may have ended since the listing)."""
        if not ids:
            return {}
        now = self._clock()
        known = fresh(self._requests_at, now, DETAIL_REFRESH)
        missing = [i for i in ids if i not in self._requests] if known else list(ids)
        if missing and known:
            try:
                for at in range(0, len(missing), CHUNK):
                    chunk = ",".join(map(str, missing[at:at + CHUNK]))
                    self._requests.update(self._read_requests([f"--jobs={chunk}"]))
            except SlurmError:
                known = False
        if not known:
            self._requests = self._read_requests([])
            self._requests_at = now
        return self._requests

    def _read_requests(self, select: list[str]) -> dict[int, dict[str, str]]:
        """One ``squeue -O`` of the GPU requests (all active jobs, or those ``select`` names)."""
        argv = ["squeue", "--noheader", *select, f"--Format={_GPU_FORMAT}",
                *self._cli.each_record()]
        out = self._cli.read(argv)
        found: dict[int, dict[str, str]] = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 5 and parts[0].isdigit():
                found[int(parts[0])] = {"tres_per_job": parts[1], "tres_per_task": parts[2],
                                        "tres_per_socket": parts[3]}
        return found

    def snapshot(self) -> ClusterSnapshot:
        """Jobs from pyslurm (or the compact listing, :meth:`jobs`); nodes, partitions and QOS
        from the CLI backend's reads, run beside the job listing where that is a command too
        (``sinfo`` and ``scontrol`` then cost no wall time of their own: 13 ms a cycle)."""
        now = int(self._clock())
        if self._cli.has_compact_listing():
            with ThreadPoolExecutor(1) as pool:
                rest = pool.submit(self._cli.cluster_parts)
                jobs = self.jobs()
                nodes, partitions, qos = rest.result()
        else:
            jobs = self.jobs()
            nodes, partitions, qos = self._cli.cluster_parts()
        # from 25.05 resource_sharing (job_share_string) may no longer tell --exclusive
        jobs = self._cli.with_exclusive(jobs)
        self._aliases = frozenset(j.job_id for j in jobs if j.array_job_id == j.job_id
                                  and j.array_task_id is not None)
        self._records = frozenset(j.job_id for j in jobs if j.array_job_id == j.job_id
                                  and j.array_task_id is None and j.array_tasks)
        return ClusterSnapshot(time=now, version=self.version(), jobs=jobs, nodes=nodes,
                               partitions=partitions, qos=qos)

    def job_facts(self, job_ids: JobIds) -> dict[int, JobFacts]:
        """``Job.load`` per id (few ids) or one ``Jobs.load()`` (more than :data:`CHUNK`);
        finished jobs slurmctld still knows are included, forgotten ones absent."""
        return {pj.id: job_facts_of(pj) for pj in self._load_some(job_id_tuple(job_ids))}

    def _load_some(self, job_ids: Sequence[int]) -> list[Any]:
        """pyslurm's jobs of ``job_ids``: ``Job.load`` per id, or one ``Jobs.load()`` for more
        than :data:`~.cli_backend.CHUNK`; ids slurmctld no longer knows are left out."""
        if len(job_ids) > CHUNK:
            wanted = set(job_ids)
            return [pj for pj in self._load_jobs() if pj.id in wanted]
        return [pj for pj in map(self._load_one, job_ids) if pj is not None]

    def _load_one(self, job_id: int) -> Any:
        """``Job.load(id)``; None when slurmctld no longer knows the id."""
        self._before_rpc()
        try:
            pj = self._ps.Job.load(job_id)
        except self._ps.RPCError as err:
            if _classify(str(err.msg), (_GONE,)) is not None:
                return None
            self._rpc_failed(str(err.msg))
            raise SlurmError(f"pyslurm Job.load({job_id}) failed: {err.msg}") from err
        if pj.id == job_id:
            return pj
        # an array's own id loads every task of it, and pyslurm keeps the first record: find
        # the task that has this id in the full listing
        return next((other for other in self._load_jobs() if other.id == job_id), None)

    def switches(self) -> tuple[SwitchInfo, ...]:
        """Delegated to the CLI backend (``scontrol show topology``; no pyslurm API)."""
        return self._cli.switches()

    # -- writes -----------------------------------------------------------------------------
    def _each(self, ids: tuple[int, ...], action: Callable[[Any], None], what: str,
              harmless: tuple[_Harmless, ...]) -> ActionResult:
        """Run ``action(pyslurm.Job(id))`` per id; Slurm's error words sort races from failures
        with the CLI backend's table, so both backends skip the same cases."""
        done: list[int] = []
        skipped: list[Skipped] = []
        failures: list[str] = []
        for jid in ids:
            self._before_rpc()
            try:
                action(self._ps.Job(jid))
            except self._ps.RPCError as err:
                msg = str(err.msg)
                self._rpc_failed(msg)
                reason = _classify(msg, harmless)
                if reason is None:
                    failures.append(f"job {jid}: {msg} (errno {err.errno})")
                else:
                    skipped.append(Skipped(jid, reason, msg))
            else:
                done.append(jid)
        if failures:
            raise SlurmError(f"{what} failed: " + "; ".join(failures))
        return ActionResult(tuple(done), tuple(skipped), len(ids))

    def _split(self, job_ids: JobIds) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(ids for pyslurm, array-alias ids for the CLI)``."""
        ids = job_id_tuple(job_ids)
        return (tuple(j for j in ids if j not in self._aliases),
                tuple(j for j in ids if j in self._aliases))

    def _via_cli(self, aliased: tuple[int, ...]) -> CliSlurmClient:
        """The CLI backend, told which ids are array aliases (it writes them ``ARRAY_TASK``)
        or arrays' own records (``ID_[TASKS]``)."""
        for jid in aliased:
            if not (self._cli.is_array_alias(jid) or self._cli.is_array_record(jid)):
                self._cli.snapshot()   # refreshes its tables; rare (arrays written whole)
                break
        return self._cli

    def set_priority(self, job_id: int, value: int) -> ActionResult:
        """``Job.modify(priority=VALUE)``."""
        return self.set_priorities({job_id: value})

    def set_priorities(self, priorities: Mapping[int, int]) -> ActionResult:
        """One ``Job.modify`` per job (about 1 ms each: no batching needed). A held job is
        skipped (HELD) as with scontrol: slurmctld refuses it, so the hold stays.

        ``Job.modify`` sends the job's number without an id string, so slurmctld updates that
        one record: an array's own pending record alone, not the tasks split off it nor its
        running ones (checked on 22.05.8), as the CLI backend's ``A_[TASKS]`` does."""
        for jid, value in priorities.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 2:
                raise ValueError(f"priority for job {jid} must be an integer in "
                                 f"[0, 4294967293], got {value!r}")
        result = ActionResult()
        mine, aliased = self._split(priorities.keys())
        by_value: dict[int, list[int]] = {}
        for jid in mine:
            by_value.setdefault(priorities[jid], []).append(jid)
        for value in sorted(by_value):
            result = result.merged(self._each(
                tuple(by_value[value]), _modifier(self._ps.JobSubmitDescription(priority=value)),
                f"pyslurm Job.modify(priority={value})", (_GONE, _DONE, _HELD)))
        if aliased:
            result = result.merged(self._via_cli(aliased).set_priorities(
                {j: priorities[j] for j in aliased}))
        return result

    def signal(self, job_ids: JobIds, signal: str = "USR2", *,
               target: SignalTarget = SignalTarget.FULL) -> ActionResult:
        """``Job.send_signal``: FULL is ``steps="all"``, BATCH ``"batch"``, STEPS
        ``"children"``; WORKLOAD picks STEPS for a job with an srun step, else BATCH.

        A job that already ended counts as done (pyslurm hides ESLURM_ALREADY_DONE)."""
        if not _SIGNAL_RE.fullmatch(signal):
            raise ValueError(f"signal must be a name like USR2 or a number, got {signal!r}")
        mine, aliased = self._split(job_ids)
        result = ActionResult()
        if target is SignalTarget.WORKLOAD:
            stepped = {j for j in mine if self._has_srun_step(j)}
            steps = tuple(j for j in mine if j in stepped)
            shells = tuple(j for j in mine if j not in stepped)
            if steps:
                result = result.merged(self.signal(steps, signal, target=SignalTarget.STEPS))
            if shells:
                result = result.merged(self.signal(shells, signal, target=SignalTarget.BATCH))
        elif mine:
            steps_arg = {SignalTarget.FULL: "all", SignalTarget.BATCH: "batch",
                         SignalTarget.STEPS: "children"}[target]
            name = signal if signal.isdigit() else "SIG" + signal.removeprefix("SIG")
            sig: int | str = int(name) if name.isdigit() else name
            result = self._each(mine, lambda job: job.send_signal(sig, steps=steps_arg),
                                f"pyslurm Job.send_signal({name})", (_GONE, _DONE, _NOT_NOW,
                                                                     _PENDING))
        if aliased:
            result = result.merged(self._via_cli(aliased).signal(aliased, signal, target=target))
        return result

    def _has_srun_step(self, job_id: int) -> bool:
        """True when the job runs a numbered (srun) step now (``Job.load`` loads its steps)."""
        pj = self._load_one(job_id)
        if pj is None:
            return False
        return any(isinstance(step, int) for step in pj.steps)

    def _running_only(self, ids: tuple[int, ...]) -> tuple[tuple[int, ...], list[Skipped]]:
        # slurm_requeue also re-runs jobs that already COMPLETED; never do that by accident.
        return running_only(ids, self.job_facts(ids))

    def _requeue(self, job_ids: JobIds, *, hold: bool) -> ActionResult:
        mine, aliased = self._split(job_ids)
        keep, skipped = self._running_only(mine)
        result = ActionResult(skipped=tuple(skipped))
        if keep:
            result = result.merged(self._each(keep, lambda job: job.requeue(hold=hold),
                                              f"pyslurm Job.requeue(hold={hold})",
                                              (_GONE, _DONE, _PENDING)))
        if aliased:
            cli = self._via_cli(aliased)
            result = result.merged(cli.requeue_hold(aliased) if hold else cli.requeue(aliased))
        return result

    def requeue(self, job_ids: JobIds) -> ActionResult:
        """``Job.requeue()`` for the jobs that are running now (others are skipped)."""
        return self._requeue(job_ids, hold=False)

    def requeue_hold(self, job_ids: JobIds) -> ActionResult:
        """``Job.requeue(hold=True)`` for the jobs that are running now."""
        return self._requeue(job_ids, hold=True)

    def hold(self, job_ids: JobIds) -> ActionResult:
        """``Job.hold()`` (an admin hold, as ``scontrol hold``)."""
        mine, aliased = self._split(job_ids)
        result = self._each(mine, lambda job: job.hold(), "pyslurm Job.hold", (_GONE, _DONE))
        if aliased:
            result = result.merged(self._via_cli(aliased).hold(aliased))
        return result

    def release(self, job_ids: JobIds) -> ActionResult:
        """``Job.release()``."""
        mine, aliased = self._split(job_ids)
        result = self._each(mine, lambda job: job.release(), "pyslurm Job.release",
                            (_GONE, _DONE))
        if aliased:
            result = result.merged(self._via_cli(aliased).release(aliased))
        return result

    def set_admin_comment(self, job_id: int, text: str) -> ActionResult:
        """``Job.modify(admin_comment=TEXT)``."""
        if "\n" in text or "\0" in text:
            raise ValueError("admin_comment must be a single line without NUL bytes")
        mine, aliased = self._split(job_id)
        if aliased:
            return self._via_cli(aliased).set_admin_comment(job_id, text)
        self.listing.forget(job_id)  # its kept admin_comment is stale: read its record again
        desc = self._ps.JobSubmitDescription(admin_comment=text)
        return self._each(mine, lambda job: job.modify(desc), "pyslurm Job.modify(admin_comment)",
                          (_GONE, _DONE))

    def cancel(self, job_ids: JobIds) -> ActionResult:
        """``Job.cancel()``; an array's own record through the CLI (``scancel ID_[TASKS]``):
        ``Job.cancel`` of its number cancels the whole array, split-off and running tasks too
        (22.05.8)."""
        mine, aliased = self._split(job_ids)
        aliased += tuple(j for j in mine if j in self._records)
        mine = tuple(j for j in mine if j not in self._records)
        result = self._each(mine, lambda job: job.cancel(), "pyslurm Job.cancel", (_GONE, _DONE))
        if aliased:
            result = result.merged(self._via_cli(aliased).cancel(aliased))
        return result

    def requeue_any(self, job_ids: JobIds, *, hold: bool) -> tuple[int, ...]:
        """Requeue (``hold``: and hold) running and finished jobs; pending ones count as
        requeued (and are held with ``hold``); forgotten ones, and those Slurm refuses to
        requeue, are left out (as the CLI backend does)."""
        ids = job_id_tuple(job_ids)
        facts = self.job_facts(ids)
        to_requeue = tuple(j for j in ids if j in facts and not facts[j].pending)
        to_hold = tuple(j for j in ids if j in facts and facts[j].pending and hold
                        and not facts[j].held)
        done = {j for j in ids if j in facts and facts[j].pending and j not in to_hold}
        mine, aliased = self._split(to_requeue)
        if mine:
            done.update(self._each(mine, lambda job: job.requeue(hold=hold),
                                   f"pyslurm Job.requeue(hold={hold})",
                                   (_GONE, _PENDING, _REFUSED)).done)
        if aliased:
            done.update(self._via_cli(aliased).requeue_any(aliased, hold=hold))
        if to_hold:
            done.update(self.hold(to_hold).done)
        return tuple(j for j in ids if j in done)

    def set_req_nodes(self, job_id: int, nodes: str) -> ActionResult:
        """Delegated to the CLI backend (``scontrol update ReqNodeList``): its rules for a job
        that started in between are written against scontrol's messages."""
        if job_id in self._aliases:
            self._via_cli((job_id,))
        return self._cli.set_req_nodes(job_id, nodes)

    def split_array_task(self, job_id: int) -> int:
        """Delegated to the CLI backend: it splits the task off with ``JobId=A_T``, an id
        string ``Job.modify`` does not send (it names the record by number)."""
        return self._cli.split_array_task(job_id)

    # -- the urgent path (issue 16) ---------------------------------------------------------
    def pending_briefs(self) -> tuple[PendingBrief, ...]:
        """Delegated to the CLI backend: its one ``squeue --states=PENDING -O`` of eight
        columns. pyslurm's ``Jobs.load()`` would fetch and convert every job's whole record,
        running ones included: the snapshot's cost, which a poll every ``urgent_poll`` seconds
        is meant to avoid."""
        return self._cli.pending_briefs()

    # -- reservations: delegated to the CLI backend -------------------------------------------
    def create_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Delegated to the CLI backend (``scontrol create reservation``): one call per plan,
        and its refusals are read from scontrol's messages."""
        self._cli.create_reservation(name, nodes, users, minutes)

    def update_reservation(self, name: str, nodes: Iterable[str], users: Iterable[str],
                           minutes: int) -> None:
        """Delegated to the CLI backend (``scontrol update ReservationName=``)."""
        self._cli.update_reservation(name, nodes, users, minutes)

    def end_reservation(self, name: str) -> bool:
        """Delegated to the CLI backend (``scontrol delete``, else ``update EndTime=now``)."""
        return self._cli.end_reservation(name)

    def reservations(self, prefix: str = "") -> tuple[Reservation, ...]:
        """Delegated to the CLI backend (``scontrol show reservation``)."""
        return self._cli.reservations(prefix)

    def set_job_reservation(self, job_id: int, name: str) -> ActionResult:
        """Delegated to the CLI backend (``scontrol update Reservation``), like the pin."""
        if job_id in self._aliases or job_id in self._records:
            self._via_cli((job_id,))
        return self._cli.set_job_reservation(job_id, name)
