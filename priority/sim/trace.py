"""Traces: the jobs a simulation replays, read from CSV files (generic or Alibaba v2023).

A :class:`TraceJob` is what the simulator needs of a job: submit time and duration (seconds,
relative to the trace start), GPUs in total, nodes (0: as few as hold it), team, user and
priority class. Readers return a :class:`Trace` with the jobs in submit order (ties: input order)
and a count of every row they left out, by reason.

Bad rows either stop the read with a :class:`~hai_slurm.errors.ConfigError` naming the file,
line, column and value (the default), or are skipped and counted (``skip_bad=True``).

**Generic CSV** (header required, any column order, extra columns ignored)::

    submit,duration,gpus,nodes,team,class[,user][,id][,saves]

``saves`` (``1``/``0``, ``yes``/``no``, ``true``/``false``; empty or absent: yes) says whether the
job saves when asked (:attr:`TraceJob.saves`).

**Alibaba GPU trace v2023** (``openb_pod_list_*.csv``): see :func:`read_alibaba` for the
mapping of its columns, QoS and (absent) teams.
"""

from __future__ import annotations

import csv
import io
import math
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.description import decode_utf8
from hai_slurm.errors import ConfigError
from hai_slurm.priority.policy.ladder import parse_class


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. Times are integer seconds from the trace start."""

    job_id: int
    submit: int
    duration: int
    gpus: int
    team: str
    cls: PriorityClass
    nodes: int = 0
    user: str = ""
    name: str = ""
    saves: bool = True
    """The job saves when asked (``#HAI --checkpoint-dir``: it acknowledges a request). False:
    asked to give way, it is requeued without a save, losing the work since its last periodic
    checkpoint (:class:`~hai_slurm.priority.sim.costs.CostModel`'s ``no_save_stop``)."""
    preemptible: bool = True
    """False: the job said ``#HAI --preemptible=no`` (its record): no policy takes it."""


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs in submit order, where they came from, and how many rows were left out and why."""

    jobs: tuple[TraceJob, ...]
    source: str
    skipped: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def teams(self) -> tuple[str, ...]:
        """Every team of the trace, sorted."""
        return tuple(sorted({j.team for j in self.jobs}))


GENERIC_COLUMNS = ("submit", "duration", "gpus", "nodes", "team", "class")

#: Alibaba v2023 QoS -> our class. Kubernetes "Guaranteed" pods (requests == limits, the
#: strongest promise) are VERY_HIGH; latency-sensitive "LS" pods (online serving, interactive
#: work that must not queue) HIGH; "Burstable" pods NORMAL; best-effort "BE" pods LOW.
ALIBABA_QOS: Mapping[str, PriorityClass] = MappingProxyType({
    "Guaranteed": PriorityClass.VERY_HIGH,
    "LS": PriorityClass.HIGH,
    "Burstable": PriorityClass.NORMAL,
    "BE": PriorityClass.LOW,
})
ALIBABA_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos",
                   "creation_time", "deletion_time", "scheduled_time")


class _Rows:
    """Reads a CSV with a header; turns a bad value into an error or a counted skip."""

    def __init__(self, path: Path, required: Iterable[str], skip_bad: bool) -> None:
        self.path, self.skip_bad = path, skip_bad
        self.skipped: dict[str, int] = {}
        self.required = tuple(required)

    def rows(self) -> Iterable[tuple[int, dict[str, str]]]:
        reader = csv.reader(io.StringIO(_read_text(self.path), newline=""))
        try:
            yield from self._rows(reader)
        except csv.Error as err:
            raise ConfigError(f"line {reader.line_num}: not CSV ({err})",
                              source=str(self.path)) from None

    def _rows(self, reader: Any) -> Iterable[tuple[int, dict[str, str]]]:
        header = next(reader, None)
        if header is None:
            raise ConfigError("the trace is empty (a header line is required)",
                              source=str(self.path))
        names = [h.strip() for h in header]
        missing = [c for c in self.required if c not in names]
        if missing:
            raise ConfigError(
                f"line 1: header lacks column(s) {', '.join(missing)}; it has "
                f"{', '.join(names)}; required: {', '.join(self.required)}",
                source=str(self.path))
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(names):
                self.bad(line, None, row, f"has {len(row)} fields, the header {len(names)}")
                continue
            yield line, {n: c.strip() for n, c in zip(names, row, strict=True)}

    def bad(self, line: int, column: str | None, value: object, why: str) -> None:
        """A malformed row: raise (default) or count it as skipped."""
        if self.skip_bad:
            self.skipped["malformed"] = self.skipped.get("malformed", 0) + 1
            return
        where = f"line {line}" + (f", column {column!r}" if column else "")
        raise ConfigError(f"{where}: {why} (got {value!r}); fix the row or pass --skip-bad "
                          "to skip malformed rows", source=str(self.path), key=column,
                          value=value)

    def skip(self, reason: str) -> None:
        """A well-formed row the simulator cannot use (always skipped, counted by reason)."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


class _BadValueError(Exception):
    def __init__(self, column: str, value: str, why: str) -> None:
        super().__init__(why)
        self.column, self.value, self.why = column, value, why


def _int(row: Mapping[str, str], column: str, low: int = 0, *, empty: int | None = None) -> int:
    text = row[column]
    if text == "" and empty is not None:
        return empty
    try:
        value = float(text)
    except ValueError:
        raise _BadValueError(column, text, "expected a number") from None
    if not math.isfinite(value) or (value != int(value) and column not in ("submit", "duration")):
        raise _BadValueError(column, text, "expected a whole number")
    number = round(value)
    if number < low:
        raise _BadValueError(column, text, f"must be >= {low}")
    return number


def with_saves(trace: Trace, saves: bool) -> Trace:
    """``trace`` with every job saving on request (``saves``) or none, and a note saying so (a
    what-if: as if every job used ``#HAI --checkpoint-dir``, or none did)."""
    note = ("every job taken to save on request (--saves all)" if saves else
            "no job taken to save on request (--saves none)")
    return replace(trace, jobs=tuple(replace(j, saves=saves) for j in trace.jobs),
                   notes=(*trace.notes, note))


_YES, _NO = ("1", "yes", "true", ""), ("0", "no", "false")


def _saves(row: Mapping[str, str]) -> bool:
    text = row.get("saves", "")
    if text.lower() in _YES:
        return True
    if text.lower() in _NO:
        return False
    raise _BadValueError("saves", text, "expected 1/0, yes/no or true/false")


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; a ConfigError when it cannot be read or is not UTF-8."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the trace: {err.strerror}", source=str(path)) from None
    return decode_utf8(raw, str(path), kind="traces")


def read_generic(path: str | Path, *, skip_bad: bool = False) -> Trace:
    """A generic CSV trace (columns in the module docstring); ids default to the row order."""
    p = Path(path)
    reader = _Rows(p, GENERIC_COLUMNS, skip_bad)
    jobs: list[TraceJob] = []
    for line, row in reader.rows():
        try:
            submit = _int(row, "submit")
            duration = _int(row, "duration", 1)
            gpus = _int(row, "gpus", 1)
            nodes = _int(row, "nodes", 0, empty=0)
            job_id = _int(row, "id", 1) if row.get("id") else len(jobs) + 1
            team = row["team"]
            if not team:
                raise _BadValueError("team", team, "must not be empty")
            try:
                cls = parse_class(row["class"])
            except ConfigError as err:
                raise _BadValueError("class", row["class"], str(err).split(": ", 1)[-1]) from None
            if nodes > gpus:
                raise _BadValueError("nodes", row["nodes"], f"more nodes than GPUs ({gpus})")
            saves = _saves(row)
        except _BadValueError as err:
            reader.bad(line, err.column, err.value, err.why)
            continue
        jobs.append(TraceJob(job_id, submit, duration, gpus, team, cls, nodes,
                             row.get("user") or team, row.get("name", ""), saves))
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"job id {dup} appears more than once", source=str(p), key="id",
                          value=dup)
    return Trace(_ordered(jobs), str(p), dict(reader.skipped))


def alibaba_team(row: Mapping[str, str], teams: int) -> str:
    """The team of an Alibaba pod: its resource shape hashed into ``teams`` buckets.

    The trace has no team or user column. Pods with the same request shape (CPU, memory, GPUs,
    GPU share) most likely belong to the same workload, so the shape, not the pod name, picks the
    team: ``team{crc32("cpu_milli/memory_mib/num_gpu/gpu_milli") % teams}``. Deterministic and
    independent of row order.
    """
    shape = "/".join(row[c] for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    return f"team{zlib.crc32(shape.encode()) % teams}"


def read_alibaba(path: str | Path, *, teams: int = 8, skip_bad: bool = False) -> Trace:
    """The Alibaba GPU trace v2023 pod list (``openb_pod_list_default.csv`` and variants).

    * submit = ``creation_time``; duration = ``deletion_time - scheduled_time`` (the time the
      pod held its GPUs; pods still running at the trace end are cut there, as in the trace);
    * GPUs = ``num_gpu``; a GPU-sharing pod (``gpu_milli`` < 1000) gets one whole GPU, since
      Slurm's gres/gpu does not share (counted in the notes); nodes = 0 (one node: <= 8 GPUs);
    * class from ``qos`` via :data:`ALIBABA_QOS`; team via :func:`alibaba_team`; user = team;
    * left out and counted: CPU-only pods (``num_gpu`` 0) and pods never scheduled in the trace
      (``scheduled_time`` empty: no duration to replay).
    """
    if teams < 1:
        raise ConfigError("the number of teams must be >= 1", key="teams", value=teams)
    p = Path(path)
    reader = _Rows(p, ALIBABA_COLUMNS, skip_bad)
    jobs: list[TraceJob] = []
    shared = 0
    for line, row in reader.rows():
        try:
            gpus = _int(row, "num_gpu")
            milli = _int(row, "gpu_milli", empty=0)
            qos = row["qos"]
            if qos not in ALIBABA_QOS:
                raise _BadValueError("qos", qos,
                                     f"unknown QoS; expected one of {', '.join(ALIBABA_QOS)}")
            created = _int(row, "creation_time")
            deleted = _int(row, "deletion_time")
            if row["scheduled_time"] == "":
                scheduled = None
            else:
                scheduled = _int(row, "scheduled_time")
                if scheduled < created or deleted < scheduled:
                    raise _BadValueError("scheduled_time", row["scheduled_time"],
                                    "must lie between creation_time and deletion_time")
        except _BadValueError as err:
            reader.bad(line, err.column, err.value, err.why)
            continue
        if gpus == 0:
            reader.skip("cpu-only (num_gpu 0)")
            continue
        if scheduled is None:
            reader.skip("never scheduled in the trace (no duration)")
            continue
        if 0 < milli < 1000:
            shared += 1
        team = alibaba_team(row, teams)
        jobs.append(TraceJob(len(jobs) + 1, created, max(1, deleted - scheduled), gpus, team,
                             ALIBABA_QOS[qos], 0, team, row["name"]))
    notes = (f"{shared} GPU-sharing pods (gpu_milli < 1000) each take one whole GPU",)
    return Trace(_ordered(jobs), str(p), dict(reader.skipped), notes)


def _ordered(jobs: list[TraceJob]) -> tuple[TraceJob, ...]:
    return tuple(sorted(jobs, key=lambda j: j.submit))  # stable: ties keep the input order


def load_trace(path: str | Path, *, fmt: str = "auto", teams: int = 8,
               skip_bad: bool = False) -> Trace:
    """Read ``path`` as ``fmt`` ("generic", "alibaba" or "auto": by the header line)."""
    p = Path(path)
    if fmt == "auto":
        header = _read_text(p).split("\n", 1)[0]
        fmt = "alibaba" if "num_gpu" in header and "qos" in header else "generic"
    readers: dict[str, Callable[[], Trace]] = {
        "generic": lambda: read_generic(p, skip_bad=skip_bad),
        "alibaba": lambda: read_alibaba(p, teams=teams, skip_bad=skip_bad),
    }
    if fmt not in readers:
        raise ConfigError(f"unknown trace format {fmt!r}; use generic, alibaba or auto",
                          key="format", value=fmt)
    return readers[fmt]()


def compress(trace: Trace, factor: float) -> Trace:
    """Arrivals ``factor`` times closer together (durations unchanged): more load, same jobs.

    The first submit stays; each later one moves to ``first + (submit - first) / factor``.
    """
    if not factor > 0:
        raise ConfigError("the time compression factor must be > 0", key="compress",
                          value=factor)
    if factor == 1 or not trace.jobs:
        return trace
    first = trace.jobs[0].submit
    jobs = tuple(replace(j, submit=first + int((j.submit - first) / factor)) for j in trace.jobs)
    return replace(trace, jobs=jobs,
                   notes=(*trace.notes, f"arrivals compressed {factor:g}x (durations kept)"))


def limit(trace: Trace, jobs: int) -> Trace:
    """The first ``jobs`` jobs of the trace (by submit time)."""
    if jobs <= 0 or jobs >= len(trace.jobs):
        return trace
    return replace(trace, jobs=trace.jobs[:jobs],
                   notes=(*trace.notes, f"first {jobs} jobs only"))
