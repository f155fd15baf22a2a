"""Files going into and out of the Docker testbed's containers.

In: the rendered configuration, the job_submit Lua scripts, the munge key and the fake GPU device
links, as one tar per role for ``put_archive``. Out: each container's Slurm logs, copied into
``STATE_DIR/docker/log/CONTAINER/`` (kept after ``down``) and summarised for error messages.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import docker.errors

from .render import SECRET_FILES
from .services import log_tail
from .shape import ClusterShape

CONF_DIR = "etc/slurm"
"""Where the configuration goes inside the containers (relative to /)."""

LOG_DIR = "/var/log/slurm"
PLUGIN_FILES = ("job_submit.lua", "hai_entitlements.lua")


def etc_files(shape: ClusterShape, configs: Mapping[str, str]) -> dict[str, str]:
    """The rendered configs plus the job_submit Lua scripts that exist in the package."""
    del shape  # the plugin scripts are the same for every shape
    files = dict(configs)
    plugins = resources.files("hai_slurm.slurm_plugins")
    for name in PLUGIN_FILES:
        src = plugins / name
        if src.is_file():
            files[name] = src.read_text()
    return files


def munge_key(state_dir: Path) -> bytes:
    """The testbed's munge key: 1024 random bytes made once, kept at ``docker/munge.key``."""
    path = state_dir / "docker" / "munge.key"
    if not path.is_file() or path.stat().st_size < 32:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(1024))
    return path.read_bytes()


def write_copies(state_dir: Path, files: Mapping[str, str]) -> Path:
    """Write the configuration as copied into the containers to ``docker/etc`` (for reading)."""
    etc = state_dir / "docker" / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = etc / name
        path.write_text(text)
        path.chmod(0o600 if name in SECRET_FILES else 0o644)
    return etc


def _add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, mode: int = 0o644,
         link: str | None = None) -> None:
    info = tarfile.TarInfo(name)
    # A real mtime matters: Slurm 22.05's job_submit/lua loads the script only if its mtime is
    # newer than the last load (initially 0), so mtime 0 means "never loaded" and slurmctld
    # segfaults at the first submission.
    info.mtime = int(time.time())
    info.mode = mode
    if link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = link
        tar.addfile(info)
    elif data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


REDIS_CONF = "etc/hai-slurm/redis.conf"
"""The controller's redis.conf (mode 0600; entrypoint.sh starts redis-server with it)."""


def redis_config(password: str) -> str:
    """redis.conf of the Docker testbed: every interface of the testbed's internal network, no
    persistence, and a password (kept in this file, never in argv: ``/proc/PID/cmdline`` is
    readable by every process of the container, batch jobs included)."""
    return "\n".join(["bind 0.0.0.0", "protected-mode no", 'save ""', "appendonly no",
                      f"requirepass {password}", ""])


def archive(files: Mapping[str, str], key: bytes, *, gpus: int = 0,
            device_dir: str = "/opt/hai-testbed/dev", redis_password: str | None = None) -> bytes:
    """A tar (extracted at ``/``) with the configs, the munge key, ``gpus`` device links and,
    for the controller, the Redis configuration with its password."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for directory in ("etc", CONF_DIR, "etc/munge"):
            _add(tar, directory, mode=0o755)
        for name, text in sorted(files.items()):
            _add(tar, f"{CONF_DIR}/{name}", data=text.encode(),
                 mode=0o600 if name in SECRET_FILES else 0o644)
        _add(tar, "etc/munge/munge.key", data=key, mode=0o400)
        if redis_password is not None:
            _add(tar, REDIS_CONF.rsplit("/", 1)[0], mode=0o755)
            _add(tar, REDIS_CONF, data=redis_config(redis_password).encode(), mode=0o600)
        if gpus:
            parts = device_dir.strip("/").split("/")
            for depth in range(1, len(parts) + 1):
                _add(tar, "/".join(parts[:depth]), mode=0o755)
            for index in range(gpus):
                _add(tar, f"{'/'.join(parts)}/nvidia{index}", link="/dev/null", mode=0o777)
    return buf.getvalue()


def _fetch_logs(box: Any, dest: Path) -> list[Path]:
    """Copy the regular files of the container's log dir to ``dest``; return their paths."""
    try:
        stream, _ = box.get_archive(LOG_DIR)
    except docker.errors.DockerException:
        return []
    raw = b"".join(stream)
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as tar:
        for member in tar.getmembers():
            src = tar.extractfile(member) if member.isfile() else None
            if src is None:
                continue
            path = dest / Path(member.name).name  # flat: never follow paths from the archive
            path.write_bytes(src.read())
            out.append(path)
    return sorted(out)


def collect_logs(client: Any, names: list[str], state_dir: Path, *, tail: int = 6) -> list[str]:
    """Log lines that explain a failure: each container's own output and its Slurm logs.

    Logs are also copied to ``STATE_DIR/docker/log/NAME/`` for a closer look.
    """
    lines: list[str] = []
    for name in names:
        try:
            box = client.containers.get(name)
        except docker.errors.DockerException:
            continue
        box.reload()
        own = box.logs(tail=tail).decode(errors="replace").strip().splitlines()
        lines.append(f"[{name}: {box.status}]")
        lines += [f"  {ln}" for ln in own]
        for path in _fetch_logs(box, state_dir / "docker" / "log" / name):
            if path.suffix == ".log" and not path.name.startswith("smoke"):
                lines += [f"  {ln}" for ln in log_tail(path, 8)]
    return lines
