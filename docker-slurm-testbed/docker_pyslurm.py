"""pyslurm inside the Docker testbed: an image layer that builds it against the suite's own Slurm.

pyslurm (GPL-2.0-only, optional, never part of hai-slurm) is built from the source archive of its
maintenance branch for the suite's Slurm series, as ``scripts/setup-host.sh`` does on the host.
The build needs the suite's headers and its result the suite's glibc, so it runs in the image:
``hai-slurm-testbed:SUITE-pyslurm`` is ``hai-slurm-testbed:SUITE`` plus ``Dockerfile.pyslurm``
(build tools, then the wheel built and installed in ``/opt/hai-venv``). Only the trixie suite
(Slurm 24.11, pyslurm ``24.11.x``) is built this way: bookworm's 22.05 is the host's own Slurm,
and 26.05 (sid) has no pyslurm.

The archive is checked against the ``SHA256SUMS`` next to it here and again in the build. The
build context is this file's Dockerfile, the archive and its one checksum line, with fixed
metadata, so an unchanged archive is a layer-cache hit (seconds); a cold build compiles pyslurm
(measured in the README, pyslurm section). :func:`pyslurm_archive` says why there is nothing to
build (no archive, no checksum) instead of failing, so callers can skip with that reason.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import docker.errors

from hai_slurm.errors import TestbedError

from .docker_images import has_image, image_tag

PYSLURM_BRANCHES = {"trixie": "24.11.x"}
"""The pyslurm branch built in each suite's image (Slurm 24.11 on trixie)."""

VENV = "/opt/hai-venv"
"""The venv in the image that holds pyslurm (system site-packages: Debian's pytest)."""


@dataclass(frozen=True)
class PyslurmArchive:
    """A pyslurm source archive and its expected SHA256 (from ``SHA256SUMS``)."""

    path: Path
    sha256: str


@dataclass(frozen=True)
class PyslurmImage:
    """The image built, the seconds the build took, and the wheel it installed."""

    tag: str
    seconds: float
    wheel: str


def pyslurm_image_tag(suite: str) -> str:
    """``hai-slurm-testbed:SUITE-pyslurm``."""
    return f"{image_tag(suite)}-pyslurm"


def pyslurm_archive(suite: str, archives: Path) -> PyslurmArchive | str:
    """The archive to build for ``suite`` from ``archives``, or why there is none (a sentence).

    A file that does not match its SHA256SUMS line raises :class:`TestbedError`: that is a
    corrupt or swapped archive, not a machine without one.
    """
    branch = PYSLURM_BRANCHES.get(suite)
    if branch is None:
        return (f"no pyslurm is built in the {suite} image (only "
                f"{', '.join(f'{s} ({b})' for s, b in PYSLURM_BRANCHES.items())})")
    found = sorted(archives.glob(f"pyslurm-{branch}-*.tar.gz"))
    if not found:
        return f"no pyslurm-{branch}-*.tar.gz in {archives} (pyslurm's {branch} source archive)"
    path = found[-1]
    sums = archives / "SHA256SUMS"
    try:
        lines = sums.read_text().splitlines()
    except OSError as err:
        return f"{path.name} has no checksum to check: {sums} unreadable ({err.strerror})"
    expected = next((ln.split()[0] for ln in lines
                     if len(ln.split()) == 2 and ln.split()[1].lstrip("*") == path.name), None)
    if expected is None:
        return f"{sums} has no line for {path.name}"
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != expected:
        raise TestbedError(f"{path} does not match {sums}: sha256 {actual}, expected {expected}")
    return PyslurmArchive(path, expected)


def _context(archive: PyslurmArchive) -> io.BytesIO:
    """Dockerfile.pyslurm as ``Dockerfile``, the archive and its checksum line (mtime 0)."""
    dockerfile = resources.files("hai_slurm.testbed").joinpath("Dockerfile.pyslurm").read_bytes()
    members = [("Dockerfile", dockerfile), (archive.path.name, archive.path.read_bytes()),
               ("SHA256SUMS", f"{archive.sha256}  {archive.path.name}\n".encode())]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def build_pyslurm_image(client: Any, suite: str, archive: PyslurmArchive, *,
                        jobs: int = 1, network_mode: str | None = None) -> PyslurmImage:
    """Build ``hai-slurm-testbed:SUITE-pyslurm`` on the suite's testbed image (which must exist).

    ``jobs`` is pyslurm's ``PYSLURM_BUILD_JOBS`` (parallel Cython runs): keep it small on a
    shared machine. ``network_mode`` as :func:`~.docker_images.build_image` (default
    ``HAI_DOCKER_BUILD_NETWORK``). Raises :class:`TestbedError` with the build's last lines.
    """
    network_mode = network_mode or os.environ.get("HAI_DOCKER_BUILD_NETWORK") or None
    base = image_tag(suite)
    if not has_image(client, base):
        raise TestbedError(f"image {base} is missing; build the testbed image first "
                           f"(`hai-slurm testbed up --docker --slurm {suite}`)")
    tag = pyslurm_image_tag(suite)
    start = time.monotonic()
    try:
        client.images.build(
            fileobj=_context(archive), custom_context=True, tag=tag, rm=True, forcerm=True,
            buildargs={"BASE": base, "PYSLURM_ARCHIVE": archive.path.name,
                       "PYSLURM_BUILD_JOBS": str(max(1, jobs))},
            network_mode=network_mode, labels={"hai-slurm.image": "testbed-pyslurm"})
    except docker.errors.BuildError as err:
        lines = [str(item.get("stream") or item.get("error") or "").rstrip()
                 for item in err.build_log if isinstance(item, dict)]
        raise TestbedError(f"building {tag} (pyslurm from {archive.path.name}) failed: "
                           f"{err.msg}", log_lines=[ln for ln in lines if ln][-30:]) from None
    except docker.errors.APIError as err:
        raise TestbedError(f"building {tag} failed: {err.explanation or err}") from None
    seconds = time.monotonic() - start
    out = client.containers.run(tag, ["cat", "/etc/hai-testbed-pyslurm"], entrypoint=[],
                                remove=True, network_mode="none")
    return PyslurmImage(tag, seconds, out.decode().strip())
