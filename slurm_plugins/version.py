"""Slurm release differences, handled in this one place.

The adapter detects the release once (``scontrol version``) and asks :func:`query_plan` which
commands give jobs, nodes and partitions on that release. The JSON parsers themselves are
layout-tolerant (plain ints or ``{"set", "infinite", "number"}`` wrappers, string or list states),
so the plan only decides *which command* to run:

==============  ===================================  =======================================
release         nodes                                partitions
==============  ===================================  =======================================
< 23.02         ``sinfo --json`` (key ``nodes``)     ``scontrol -o show partition`` (text)
>= 23.02        ``scontrol show nodes --json``       ``scontrol -o show partition`` (text)
==============  ===================================  =======================================

Jobs always come from ``squeue --json`` (openapi v0.0.38 on 22.05; data_parser v0.0.39+ later).
From 23.02 on ``sinfo --json`` reports aggregated "sinfo" records rather than nodes, and
``scontrol ... --json`` exists, so the scontrol command is used for nodes there.

Partitions are read from ``scontrol``'s text on every release, because the JSON is not faithful
across releases (recorded, see tests/data/slurm/): 24.11.5's ``scontrol show partitions --json``
has no ``flags`` at all, so the default partition cannot be told; 26.05.5's has ``flags``, but its
``preempt_mode`` is ``["CLUSTER_GLOBAL"]`` where the text shows the effective ``PreemptMode=OFF``.
The text (``Default=YES``, ``PreemptMode``, ``GraceTime``, ``PriorityTier``, ``MaxTime``) is the
same from 22.05 to 26.05. :func:`~.parse.parse_partitions_json` stays for callers holding JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import OLDEST_SUPPORTED, SlurmVersion

JSON_COMMANDS_SINCE = SlurmVersion(23, 2, 0)
"""First release with ``scontrol show ... --json`` and the data_parser ``sinfo --json`` layout."""
EXCLUSIVE_COLUMN_SINCE = SlurmVersion(25, 5, 0)
"""From here a job's ``--exclusive`` is read from ``squeue -O Exclusive``: measured on 26.05.5,
whose ``squeue --json`` (data_parser v0.0.45) lists ``shared`` as ``[]`` for every job, with
``--exclusive``, ``=user`` or ``--oversubscribe`` alike, and whose ``OverSubscribe`` column
no longer tells (``NO`` for a plain job); 24.11.5 refuses the ``Exclusive`` column ("Invalid job
format specification") and its JSON's ``shared`` tells (``["none"]``, ``["user"]``). The
releases between were not measured: on a refusal the JSON's value stands."""


class PartitionSource(StrEnum):
    """How partitions are read on a release."""

    SCONTROL_TEXT = "scontrol_text"
    SCONTROL_JSON = "scontrol_json"


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """The read commands for one Slurm release (argument lists without the program path)."""

    version: SlurmVersion
    jobs: tuple[str, ...]
    nodes: tuple[str, ...]
    partitions: tuple[str, ...]
    partition_source: PartitionSource
    each_record: tuple[str, ...] = ()
    """The ``squeue`` option that lists one line per job record (:data:`ARRAY_UNIQUE` on 22.05;
    none since 23.02, which removed it)."""
    exclusive_column: bool = False
    """Whether jobs' ``--exclusive`` is read from ``squeue -O Exclusive`` (see
    :data:`EXCLUSIVE_COLUMN_SINCE`) rather than from the JSON's ``shared``."""


ARRAY_UNIQUE = "--array-unique"
"""Given (on 22.05) to every ``squeue`` that lists jobs: one line per job record, as ``squeue
--json`` lists them. Without it squeue prints the pending records of one array as one line (the
array's own id, every pending task: ``7|7|0-2``), so a task split off its array (its own job id,
still pending: after ``scontrol release 7_0``, or ``scontrol update JobId=7_0 ...``, which a
priority write to one task is) would be missing from the listing, and the array's line would
name that task too (22.05.8; ``squeue --json`` lists ``8`` with task 0 and ``7`` with ``1-2``).
Not ``--array``: that prints every pending task of an array on a line of its own. Slurm 23.02
removed the option (squeue then always folds a split task with the same name and partition into
its array's line, unless ``--array``): 24.11 and 26.05 snapshots read ``squeue --json``, which
lists every record, but their ``squeue -O`` reads (job facts, pending briefs, switches) still
miss such a task."""


def parse_version(text: str) -> SlurmVersion:
    """``scontrol version`` output (``"slurm 24.11.5"``) as a SlurmVersion; SlurmError if none."""
    try:
        return SlurmVersion.parse(text)
    except ValueError:
        raise SlurmError(f"cannot read a Slurm version from {(text or '').strip()!r}; expected "
                         "output like 'slurm 24.11.5' from 'scontrol version'") from None


def query_plan(version: SlurmVersion) -> QueryPlan:
    """The commands that read jobs, nodes and partitions on ``version``."""
    if version < OLDEST_SUPPORTED:
        raise SlurmError(f"Slurm {version} is too old: hai-slurm needs {OLDEST_SUPPORTED.series} "
                         "or newer (squeue --json appeared in 21.08, openapi v0.0.38 in 22.05)")
    jobs = ("squeue", "--json")
    partitions = ("scontrol", "--oneliner", "show", "partition")  # text: see the module docstring
    if version < JSON_COMMANDS_SINCE:
        return QueryPlan(version, jobs, ("sinfo", "--json"), partitions,
                         PartitionSource.SCONTROL_TEXT, (ARRAY_UNIQUE,))
    return QueryPlan(version, jobs, ("scontrol", "show", "nodes", "--json"), partitions,
                     PartitionSource.SCONTROL_TEXT,
                     exclusive_column=version >= EXCLUSIVE_COLUMN_SINCE)


QOS_FIELDS = ("Name", "Priority", "Preempt", "PreemptMode", "GraceTime", "MaxWall",
              "UsageFactor", "Flags")
"""Columns asked of ``sacctmgr show qos``; the same names exist from 22.05 to 26.05."""

QOS_COMMAND = ("sacctmgr", "--parsable2", "--noheader", "show", "qos",
               "format=" + ",".join(QOS_FIELDS))
