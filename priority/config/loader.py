"""The daemon's configuration: one TOML file, read with tomllib and validated at load.

:func:`load_config` (a path) and :func:`parse_config` (a string) return a :class:`DaemonConfig`
or raise :class:`~hai_slurm.errors.ConfigError` naming the file, line, key, bad value and what is
allowed. Every setting has a default, so an empty file is a valid configuration; the commented
example is ``priority/examples/daemon.toml``. With the root key ``cluster`` (a cluster description,
see :mod:`hai_slurm.priority.config.cluster`), teams and class facts come from that description.
"""

from __future__ import annotations

import math
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.description import decode_utf8
from hai_slurm.conf.model import ClusterDescription
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.cluster import (
    class_facts,
    read_description,
    reject_class_facts,
    reject_teams,
)
from hai_slurm.priority.config.preempt import PREEMPT_KEYS, PreemptConfig, read_preempt
from hai_slurm.priority.config.toml_reader import (
    Source,
    Table,
    boolean,
    class_keys,
    integer,
    number,
    string,
)
from hai_slurm.priority.policy.ladder import LADDER, class_names, parse_class, rank
from hai_slurm.priority.policy.settings import (
    DEFAULT_CLASSES,
    AgingConfig,
    ClassPolicy,
    CompensationConfig,
    DeadlineAction,
    DecayConfig,
    FairnessConfig,
    FairShareConfig,
    PolicyConfig,
    TeamQuota,
)
from hai_slurm.priority.policy.units import parse_duration, parse_size_mb
from hai_slurm.urls import has_password

_ROOT_KEYS = ("cluster", "default_class", "state_dir", "database_url", "redis_url", "metrics_port",
              "intervals", "classes", "aging", "decay", "fairness", "fair_share", "compensation",
              "team_defaults", "teams", *PREEMPT_KEYS)
_DURATION_FORMS = "seconds (e.g. 600) or '45s', '10m', '1h30m', '2d'"


@dataclass(frozen=True, slots=True)
class Intervals:
    """Daemon timing: cycle interval, leader-lock expiry, longest back-off after failures, the
    urgent path's poll of the pending jobs between cycles (0: off; see
    :mod:`hai_slurm.priority.daemon.urgent`), and the most priorities one cycle writes (0: no
    limit; the top of the queue first, :func:`~hai_slurm.priority.policy.scoring.budget_writes`):
    each write is one slurmctld RPC, so a first cycle at 10,000 pending jobs otherwise spends
    10-40 s writing, and every cycle is bounded however many jobs arrive at once."""

    cycle: float = 30.0
    lock_ttl: float = 90.0
    backoff_max: float = 300.0
    urgent_poll: float = 1.0
    writes_per_cycle: int = 1000


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """The whole file."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    intervals: Intervals = Intervals()
    state_dir: str = "/var/lib/hai-slurm"
    database_url: str = "sqlite:////var/lib/hai-slurm/hai-slurm.db"
    redis_url: str | None = None
    metrics_port: int = 9464
    source: str = "<defaults>"
    #: The cluster description named by ``cluster`` (teams and class facts came from it), or None.
    description: ClusterDescription | None = None
    #: ``[planner]`` and ``[executor]`` (:mod:`hai_slurm.priority.config.preempt`).
    preempt: PreemptConfig = field(default_factory=PreemptConfig)


def load_config(path: str | Path) -> DaemonConfig:
    """Read and validate the TOML file at ``path``.

    A file every local user may write is refused (it decides whose jobs are preempted), and
    so is a file that holds a password (in ``database_url`` or ``redis_url``) and that
    every local user may read, as ssh refuses a private key others can read: a warning in a
    daemon's log is easily missed while the password is already exposed, and the fix is one
    ``chmod``.
    """
    file = Path(path)
    try:
        raw = file.read_bytes()
        mode = file.stat().st_mode
    except OSError as err:
        raise ConfigError(f"cannot read the configuration: {err.strerror}", source=str(file),
                          ) from None
    text = decode_utf8(raw, str(file))
    cfg = parse_config(text, source=str(file), base_dir=file.parent)
    secret = [key for key, url in (("database_url", cfg.database_url),
                                   ("redis_url", cfg.redis_url or "")) if has_password(url)]
    if secret and mode & (stat.S_IROTH | stat.S_IWOTH):
        raise ConfigError(
            f"{' and '.join(secret)} "
            f"{'holds a password' if len(secret) == 1 else 'hold passwords'}, but every local "
            "user can read this "
            f"file (mode {stat.filemode(mode)}); run `chmod 600 {file}` (or 640 with a group "
            "only the daemon's admins are in), then start again", source=str(file))
    _refuse_writable(file, mode)
    if cfg.description is not None:
        described = Path(cfg.description.source)
        _refuse_writable(described, described.stat().st_mode)
    return cfg


def _refuse_writable(file: Path, mode: int) -> None:
    """Refuse a daemon or cluster file every local user may write: it decides whose jobs the
    daemon (a Slurm operator) preempts, as sshd refuses a world-writable authorized_keys. (A
    group-writable file is common under a umask of 002 with a group per user; the group is
    the owner's choice.)"""
    if mode & stat.S_IWOTH:
        raise ConfigError(
            f"every local user may write this file (mode {stat.filemode(mode)}), and it decides "
            f"whose jobs the daemon (a Slurm operator) preempts; run `chmod o-w {file}`, then "
            "start again", source=str(file))


def parse_config(text: str, *, source: str = "<string>",
                 base_dir: str | Path | None = None) -> DaemonConfig:
    """Validate TOML ``text``; ``source`` names it in errors. A relative ``cluster`` path is read
    from ``base_dir`` (default: the directory of ``source``, the current one for ``<string>``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"not valid TOML: {err}", source=source) from None
    src = Source(source, text)
    root = Table(data, "", src)
    root.finish(allowed=_ROOT_KEYS)
    description = read_description(
        root, Path(base_dir) if base_dir is not None else Path(source).parent)
    state_dir = root.get("state_dir", "/var/lib/hai-slurm", _nonempty, "a directory path")
    db_default = f"sqlite:///{Path(state_dir) / 'hai-slurm.db'}"
    database_url = root.get("database_url", db_default, _db_url,
                            "sqlite:///PATH or mysql+pymysql://USER:PASS@HOST/DB")
    redis_url = root.get("redis_url", None, _redis_url, "redis://HOST:PORT/DB or omit the key")
    metrics_port = root.get("metrics_port", 9464, integer(0, 65535), "0 (off) to 65535")
    default_class = root.get("default_class", PriorityClass.NORMAL, _cls, ", ".join(class_names()))

    iv = root.sub("intervals")
    intervals = Intervals(
        cycle=iv.get("cycle", 30.0, _cycle, _DURATION_FORMS + f", at least {MIN_CYCLE:g}s"),
        lock_ttl=iv.get("lock_ttl", 90.0, _positive_duration, _DURATION_FORMS + ", > 0"),
        backoff_max=iv.get("backoff_max", 300.0, _positive_duration, _DURATION_FORMS + ", > 0"),
        urgent_poll=iv.get("urgent_poll", 1.0, _urgent_poll,
                           _DURATION_FORMS + f", at least {MIN_URGENT_POLL:g}s (0 turns the "
                           "urgent path off)"),
        writes_per_cycle=iv.get("writes_per_cycle", 1000, integer(0, 10_000_000),
                                "a whole number of priority writes, 0 for no limit"),
    )
    iv.finish()
    if not lease_outlasts(intervals.cycle, intervals.lock_ttl):
        raise iv.error("lock_ttl", f"must be longer than intervals.cycle ({intervals.cycle:g}s), "
                       "or the lock expires between two heartbeats", intervals.lock_ttl)

    classes = _read_classes(root.sub("classes"), description)

    ag = root.sub("aging")
    aging = AgingConfig(
        max_class=ag.get("max_class", PriorityClass.HIGH, _cls, ", ".join(class_names())),
        depth_per_step=ag.get("depth_per_step", 1000, integer(1), "an integer >= 1"),
        max_step=ag.get("max_step", 2, integer(1, len(LADDER) - 1), f"1 to {len(LADDER) - 1}"),
    )
    ag.finish()

    dc = root.sub("decay")
    decay = DecayConfig(
        source=dc.get("from", PriorityClass.ABOVE_NORMAL, _cls, ", ".join(class_names())),
        target=dc.get("to", PriorityClass.NORMAL, _cls, ", ".join(class_names())),
        after=dc.get("after", 1800.0, _duration, _DURATION_FORMS + " (0 turns decay off)"),
    )
    dc.finish()
    if rank(decay.target) >= rank(decay.source):
        raise dc.error("to", f"must be a class below decay.from ({decay.source.name})",
                       decay.target.name)

    fa = root.sub("fairness")
    fairness = FairnessConfig(
        window=fa.get("window", 86400.0, _positive_duration, _DURATION_FORMS + ", > 0"),
        protect_after=fa.get("protect_after", 3, integer(0), "an integer >= 0"),
        protect_for=fa.get("protect_for", 3600.0, _duration, _DURATION_FORMS),
        demote_after=fa.get("demote_after", 5, integer(0), "an integer >= 0"),
        demote_from=fa.get("demote_from", PriorityClass.HIGH, _cls, ", ".join(class_names())),
        demote_excess=fa.get("demote_excess", 10.0, number(0.0, 100.0), "a number from 0 to 100"),
        protect_borrowed=fa.get("protect_borrowed", False, boolean, "true or false"),
        protect_excess=fa.get("protect_excess", 2.0, number(0.0, 100.0),
                              "a number from 0 to 100"),
    )
    fa.finish()

    fs = root.sub("fair_share")
    fair_share = FairShareConfig(
        quantum=fs.get("quantum", 0.05, number(0.001, 1.0), "a number from 0.001 to 1"),
        max_share=fs.get("max_share", 2.0, number(0.1, 10.0), "a number from 0.1 to 10"),
    )
    fs.finish()

    cp = root.sub("compensation")
    compensation = CompensationConfig(
        per_restart=cp.get("per_restart", 600.0, _duration, _DURATION_FORMS),
        per_wait=cp.get("per_wait", 0.5, number(0.0, 100.0), "a number from 0 to 100"),
        step=cp.get("step", 600.0, _positive_duration, _DURATION_FORMS + ", > 0"),
        cap=cp.get("cap", 7200.0, _duration, _DURATION_FORMS),
    )
    cp.finish()

    team_default = _read_team(root.sub("team_defaults"))
    tt = root.sub("teams")
    if description is None:
        teams = {name: _read_team(tt.sub(name)) for name in tt.names()}
    else:
        reject_teams(tt, description)
        teams = {t.name: TeamQuota(gpus=t.gpu_quota or 0, class_gpus=MappingProxyType({}),
                                   allowed_classes=frozenset(t.classes))
                 for t in description.teams}
    preempt = read_preempt(root, redis_url)
    if default_class not in team_default.allowed_classes:
        raise root.error("default_class", "team_defaults.allowed_classes does not include the "
                         "default class", default_class.name)
    root.finish()
    policy = PolicyConfig(
        classes=MappingProxyType(classes), default_class=default_class, aging=aging, decay=decay,
        fairness=fairness, fair_share=fair_share, compensation=compensation,
        teams=MappingProxyType(teams), team_default=team_default,
    )
    return DaemonConfig(policy=policy, intervals=intervals, state_dir=state_dir,
                        database_url=database_url, redis_url=redis_url,
                        metrics_port=metrics_port, source=source, description=description,
                        preempt=preempt)


def _read_classes(table: Table, description: ClusterDescription | None,
                  ) -> dict[PriorityClass, ClassPolicy]:
    given = class_keys(table)
    facts = class_facts(description) if description is not None else None
    out: dict[PriorityClass, ClassPolicy] = {}
    for cls in LADDER:
        wait, grace, optional = DEFAULT_CLASSES[cls.name]
        if facts is not None:
            grace, optional = facts[cls].grace_cap, facts[cls].preemptible_optional
        if cls not in given:
            out[cls] = ClassPolicy(wait, grace, optional)
            continue
        sub = table.sub(given[cls])
        if description is not None:
            reject_class_facts(sub, description)
        out[cls] = ClassPolicy(
            max_wait=sub.get("max_wait", wait, _positive_duration, _DURATION_FORMS + ", > 0"),
            grace_cap=sub.get("grace_cap", grace, _duration, _DURATION_FORMS),
            preemptible_optional=sub.get("preemptible_optional", optional, boolean,
                                         "true or false"),
            on_deadline=sub.get("on_deadline", DeadlineAction.FORCE, _deadline,
                                "'abort' or 'force'"),
        )
        sub.finish()
    return out


def _read_team(table: Table) -> TeamQuota:
    gpus = table.get("gpus", 0, integer(0), "an integer >= 0")
    cpus = table.get("cpus", None, integer(0), "an integer >= 0")
    memory = table.get("memory", None, parse_size_mb, "MiB (e.g. 4096) or '512G', '4T'")
    allowed = table.get("allowed_classes", frozenset(PriorityClass), _class_set,
                        "a list of class names: " + ", ".join(class_names()))
    per_class = table.sub("class_gpus")
    class_gpus: dict[PriorityClass, int] = {}
    for cls, name in class_keys(per_class).items():
        class_gpus[cls] = per_class.get(name, 0, integer(0), "an integer >= 0")
    table.finish()
    return TeamQuota(gpus=gpus, cpus=cpus, memory_mb=memory,
                     class_gpus=MappingProxyType(class_gpus), allowed_classes=allowed)


def _cls(value: object) -> PriorityClass:
    return parse_class(value)


def _duration(value: object) -> float:
    return parse_duration(value)


MIN_CYCLE = 1.0
"""The shortest cycle (``[intervals] cycle``, ``daemon --interval``): a cycle reads every job
from slurmctld, so shorter ones only load it."""
MIN_URGENT_POLL = 0.1
"""The shortest ``[intervals] urgent_poll`` other than 0 (one ``squeue`` of the pending jobs
per poll)."""


def check_cycle(seconds: float) -> float:
    """``seconds`` as a cycle: finite and at least :data:`MIN_CYCLE` (ValueError otherwise)."""
    if not math.isfinite(seconds) or seconds < MIN_CYCLE:
        raise ValueError(f"a cycle is at least {MIN_CYCLE:g} s (each one reads every job from "
                         "slurmctld)")
    return seconds


def lease_outlasts(cycle: float, lock_ttl: float) -> bool:
    """Whether a leader lock of ``lock_ttl`` s outlasts a cycle of ``cycle`` s: the leader
    renews it once a cycle, so a shorter one expires between two renewals (checked for the
    file's ``[intervals]`` and for ``daemon --interval``)."""
    return lock_ttl > cycle


def _cycle(value: object) -> float:
    return check_cycle(parse_duration(value))


def _urgent_poll(value: object) -> float:
    seconds = parse_duration(value)
    if 0 < seconds < MIN_URGENT_POLL:
        raise ValueError(f"0 (off) or at least {MIN_URGENT_POLL:g} s (each poll is a squeue)")
    return seconds


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be longer than 0")
    return seconds


def _deadline(value: object) -> DeadlineAction:
    return DeadlineAction(string(value).lower())


def _class_set(value: object) -> frozenset[PriorityClass]:
    if not isinstance(value, list) or not value:
        raise TypeError("expected a non-empty list of class names")
    return frozenset(parse_class(v) for v in value)


def _nonempty(value: object) -> str:
    text = string(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _db_url(value: object) -> str:
    """A database URL checked as far as the standard library can, as SQLAlchemy reads it: a
    SQLite file is ``sqlite:///PATH`` (``sqlite://PATH`` would take PATH's first part for a
    host and drop it), a server URL has a host and a numeric port if any."""
    text = _nonempty(value)
    if text.startswith("sqlite://"):
        if text != "sqlite://" and not text.startswith("sqlite:///"):
            raise ValueError("a SQLite file is sqlite:///RELATIVE/PATH or sqlite:////ABS/PATH "
                             "(three slashes, then the path)")
        return text
    if not text.startswith(("mysql+pymysql://", "mariadb+pymysql://")):
        raise ValueError("unsupported database URL scheme")
    _host_port(text, "mysql+pymysql://USER:PASS@HOST:PORT/DB")
    return text


def _host_port(text: str, form: str) -> None:
    """Check the host and port of a server URL; the user part ends at the last ``@`` (a
    password may hold ``?`` or ``/``, as SQLAlchemy reads it)."""
    rest = text.partition("//")[2]
    hostport = rest[rest.rfind("@") + 1:].split("/", 1)[0].split("?", 1)[0]
    host, colon, port = hostport.rpartition(":") if not hostport.endswith("]") else (
        hostport, "", "")
    if not colon:
        host, port = hostport, ""
    if not host and "unix_socket=" not in text:   # PyMySQL: USER:PASS@/DB?unix_socket=PATH
        raise ValueError(f"no host ({form}, or USER:PASS@/DB?unix_socket=PATH)")
    if colon and not port.isdigit():
        raise ValueError(f"the port is not a number ({form})")


def _redis_url(value: object) -> str:
    """A Redis URL checked as redis-py reads it (a bad port or database number is an error
    here, naming the key, not a traceback when the daemon connects)."""
    text = _nonempty(value)
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("unsupported Redis URL scheme (redis://, rediss:// or unix://)")
    url = urlsplit(text)
    if url.scheme == "unix":
        if not url.path:
            raise ValueError("a unix:// URL needs the socket's path (unix:///run/redis.sock)")
        return text
    try:
        url.port   # noqa: B018 (read to check it: a port that is no number raises)
    except ValueError:
        if "@" not in url.netloc and "@" in text.partition("//")[2]:
            raise ValueError("the password holds '?', '#' or '/', which redis-py reads as the "
                             "end of the host: percent-encode them (%3F, %23, %2F)") from None
        raise ValueError("the port is not a number (redis://HOST:PORT/DB)") from None
    if not url.hostname:
        raise ValueError("no host (redis://HOST:PORT/DB)")
    db = url.path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"the database {db!r} is not a number (redis://HOST:PORT/DB)")
    return text
