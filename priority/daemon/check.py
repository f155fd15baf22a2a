"""``hai-slurm daemon --check``: is everything the daemon needs there? One line per check.

Checks, in order: the configuration (read and validated like the daemon reads it), the database
(reachable, schema revision known; behind is fine, the daemon migrates at start, but the line
says so: back it up first), Slurm (a full snapshot the daemon would act on) and Redis when the
configuration uses it (PING). Nothing is written: not to Slurm, and not to the database (no
migration). Used as systemd's ``ExecStartPre``, so a broken setup fails the unit with a message
in ``journalctl`` instead of a daemon that backs off forever.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hai_slurm.errors import HaiSlurmError
from hai_slurm.priority.config.loader import DaemonConfig
from hai_slurm.priority.daemon.cycle import snapshot_problem
from hai_slurm.slurm_plugins.types import SlurmClient
from hai_slurm.urls import mask_password

Line = tuple[bool, str]


def check_database(cfg: DaemonConfig) -> Line:
    """Reachable, and at a schema revision this hai-slurm knows."""
    from hai_slurm.priority.store.engine import (
        check_connection,
        current_revision,
        head_revision,
        make_engine,
        masked,
    )

    url = cfg.database_url
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).parent.exists():
        directory = Path(url[len("sqlite:///"):]).parent
        parent = next(p for p in directory.parents if p.exists())
        if os.access(parent, os.W_OK):
            return True, (f"database {masked(url)}: directory {directory} does not exist yet; "
                          "the daemon creates it and the schema at start")
        return False, (f"database {masked(url)}: directory {directory} does not exist and "
                       f"{parent} is not writable by this user; create it for the daemon's user "
                       "(systemd: StateDirectory=hai-slurm)")
    try:
        engine = make_engine(cfg.database_url)
        check_connection(engine)
        at = current_revision(engine)
        engine.dispose()
    except HaiSlurmError as err:
        return False, f"database: {err}"
    head = head_revision()
    where = masked(cfg.database_url)
    if at == head:
        return True, f"database {where}: reachable, schema at revision {head} (current)"
    if at is None:
        return True, (f"database {where}: reachable and empty; the daemon creates the schema "
                      f"(revision {head}) at start")
    from alembic.script import ScriptDirectory

    from hai_slurm.priority.store.engine import alembic_config

    known = [s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()]
    if at not in known:
        return False, (f"database {where}: schema revision {at!r} is unknown to this hai-slurm "
                       f"(it knows up to {head}); a newer hai-slurm wrote it: upgrade hai-slurm "
                       "or point database_url elsewhere")
    return True, (f"database {where}: reachable, schema at revision {at}, behind {head}: the "
                  "daemon migrates it at start (back it up first; hai-slurm daemon --migrate "
                  "does it now)")


def check_slurm(slurm: SlurmClient) -> Line:
    """A snapshot the daemon would act on."""
    try:
        version = slurm.version()
        snap = slurm.snapshot()
    except HaiSlurmError as err:
        return False, f"slurm: {err}"
    problem = snapshot_problem(snap, None)
    if problem is not None:
        return False, f"slurm {version}: the daemon would not act on this snapshot: {problem}"
    return True, (f"slurm {version}: reachable, {len(snap.nodes)} nodes, {len(snap.partitions)} "
                  f"partitions, {len(snap.jobs)} active jobs")


def check_redis(cfg: DaemonConfig) -> Line | None:
    """PING, when the configuration sends checkpoint requests through Redis."""
    if not cfg.redis_url or not cfg.preempt.redis:
        return None
    where = mask_password(cfg.redis_url)
    try:
        import redis
    except ModuleNotFoundError:
        return False, (f"redis {where}: redis_url is set but the Python package 'redis' is "
                       "missing; pip install 'hai-slurm[daemon]' (or remove redis_url)")
    try:
        client = redis.Redis.from_url(cfg.redis_url, socket_timeout=5, socket_connect_timeout=5)
        client.ping()
        client.close()
    except redis.RedisError as err:
        return False, (f"redis {where}: {err}; check that the server runs and the password in "
                       "redis_url is right, or set [executor] redis = false")
    return True, f"redis {where}: reachable"


def run_checks(config_path: str | None, state_dir: str | None, *,
               slurm: Callable[[], SlurmClient] | None = None) -> tuple[list[str], bool]:
    """Every check's line ("ok ..." / "FAIL ...") and whether all passed."""
    from hai_slurm.priority.cli.daemon import daemon_config

    try:
        cfg = daemon_config(config_path, state_dir, None)
    except HaiSlurmError as err:
        return [f"FAIL config: {err}"], False
    results: list[Line] = [(True, f"config {config_path or 'built-in defaults'}: valid")]
    results.append(check_database(cfg))
    try:
        client = slurm() if slurm is not None else _cli_client()
    except HaiSlurmError as err:
        results.append((False, f"slurm: {err}"))
    else:
        results.append(check_slurm(client))
    redis_line = check_redis(cfg)
    if redis_line is not None:
        results.append(redis_line)
    lines = [("ok   " if ok else "FAIL ") + text for ok, text in results]
    ok = all(ok for ok, _ in results)
    lines.append("all checks passed" if ok else "some checks failed: the daemon would not run "
                 "properly; fix the FAIL lines above")
    return lines, ok


def _cli_client() -> SlurmClient:
    from hai_slurm.slurm_plugins.adapter import make_client

    return make_client()
