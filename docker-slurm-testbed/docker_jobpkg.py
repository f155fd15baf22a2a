"""Make the job-side library importable by jobs in the Docker testbed.

Jobs run inside the compute containers with the image's own ``python3`` (3.11 on bookworm, 3.13
on trixie, 3.14 on sid). :func:`install_job_package` copies the stdlib-only part of this installed
``hai_slurm`` (``__init__``, ``errors`` and the ``checkpoint`` package, sources only) into the
shared volume, so a batch script needs just ``export PYTHONPATH=/shared/hai-py``
(:data:`JOB_PYTHONPATH`) to ``from hai_slurm.checkpoint import Checkpointer`` on every node.
"""

from __future__ import annotations

import io
import tarfile
import time
from importlib import resources
from typing import Any

from hai_slurm.errors import TestbedError

from .docker_runner import SHARED_DIR

JOB_PYTHONPATH = f"{SHARED_DIR}/hai-py"
"""Where the job-side package lands (on the shared volume, so every node sees it)."""

_TOP_FILES = ("__init__.py", "errors.py")


def job_package_archive() -> bytes:
    """A tar of ``hai_slurm/{__init__,errors}.py`` and ``hai_slurm/checkpoint/*.py``."""
    buf = io.BytesIO()
    now = int(time.time())
    root = resources.files("hai_slurm")
    members = [(f"hai_slurm/{name}", root.joinpath(name)) for name in _TOP_FILES]
    ckpt = resources.files("hai_slurm.checkpoint")
    members += [(f"hai_slurm/checkpoint/{item.name}", item) for item in ckpt.iterdir()
                if item.name.endswith(".py")]
    if len(members) <= len(_TOP_FILES):
        raise TestbedError("hai_slurm.checkpoint has no .py files; reinstall the package "
                           "(pip install -e .)")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dirname in ("hai_slurm", "hai_slurm/checkpoint"):
            info = tarfile.TarInfo(dirname)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            tar.addfile(info)
        for name, item in sorted(members, key=lambda m: m[0]):
            data = item.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def install_job_package(client: Any, container: str) -> str:
    """Copy the job-side package into ``container``'s shared volume; return the PYTHONPATH."""
    box = client.containers.get(container)
    code, out = box.exec_run(["mkdir", "-p", JOB_PYTHONPATH])
    if code != 0:
        raise TestbedError(f"cannot create {JOB_PYTHONPATH} in {container}: "
                           f"{(out or b'').decode(errors='replace').strip()}")
    if not box.put_archive(JOB_PYTHONPATH, job_package_archive()):
        raise TestbedError(f"could not copy hai_slurm.checkpoint into {container}")
    return JOB_PYTHONPATH
