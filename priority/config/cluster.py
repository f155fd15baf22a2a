"""The daemon configuration's link to the cluster description: ``cluster = "cluster.toml"``.

With that key, teams (GPU quota, allowed classes) and class facts (grace cap, whether jobs may say
``#HAI --preemptible=no``) come from the cluster description (``hai_slurm.conf``), the file the
Slurm generators, job_submit.lua's entitlements and the simulator read too; the daemon file keeps
its policy knobs. A fact set in both files is an error naming both, never a silent precedence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.description import load_description
from hai_slurm.conf.gen_entitlements import entitlements_of
from hai_slurm.conf.model import ClusterDescription
from hai_slurm.priority.config.toml_reader import Table, string

#: ``[classes.X]`` keys of the daemon file that the description owns, with the description's key.
CLASS_FACTS: Mapping[str, str] = MappingProxyType({
    "grace_cap": "max_grace (default: grace_time)",
    "preemptible_optional": "allow_non_preemptible (default: classes no class preempts)",
})


@dataclass(frozen=True, slots=True)
class ClassFacts:
    """What the description says about one class, in the daemon's terms."""

    grace_cap: float
    preemptible_optional: bool


def read_description(root: Table, base_dir: Path) -> ClusterDescription | None:
    """The description named by the root key ``cluster`` (None without the key).

    A relative path is read from ``base_dir`` (the daemon file's directory). A missing file is
    an error on the ``cluster`` key; errors inside the description name the description's file.
    """
    raw = root.get("cluster", None, _path, "a path to a cluster description TOML file")
    if raw is None:
        return None
    path = (base_dir / raw).resolve()
    if not path.is_file():
        raise root.error("cluster", f"the cluster description {path} does not exist or is not a "
                         f"file (a relative path is read from {base_dir.resolve()}, the "
                         "directory of this file)", raw)
    return load_description(path)


def class_facts(desc: ClusterDescription) -> dict[PriorityClass, ClassFacts]:
    """Grace cap and preemptible-optional per class, exactly as job_submit.lua enforces them."""
    table = entitlements_of(desc)
    out: dict[PriorityClass, ClassFacts] = {}
    for cls in PriorityClass:
        rule = table.class_rule(cls.value)
        out[cls] = ClassFacts(float(rule.max_grace), rule.allow_non_preemptible)
    return out


def reject_class_facts(table: Table, desc: ClusterDescription) -> None:
    """Fail if the daemon's ``[classes.X]`` ``table`` sets a fact the description owns."""
    for key, theirs in CLASS_FACTS.items():
        if key in table.data:
            cls = table.path.rpartition(".")[2]
            raise table.error(key, f"defined in both {table.source.name} and the cluster "
                              f"description {desc.source} (there: classes.{cls.upper()}."
                              f"{theirs}); keep it in the cluster description and remove it "
                              "here", table.data[key])


def reject_teams(teams: Table, desc: ClusterDescription) -> None:
    """Fail on any ``[teams.X]`` in the daemon file: teams come from the description."""
    known = {t.name for t in desc.teams}
    for name in teams.data:
        if name in known:
            raise teams.error(name, f"defined in both {teams.source.name} and the cluster "
                              f"description {desc.source} (there: teams.{name}); keep it in "
                              "the cluster description and remove it here")
        raise teams.error(name, f"teams come from the cluster description {desc.source} when "
                          f"`cluster` is set; add [teams.{name}] (gpu_quota, classes) there "
                          "and remove it here")


def _path(value: object) -> str:
    text = string(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text
