"""The Docker testbed's images: the local ``debian:SUITE`` base and the one testbed image per suite.

``debian:SUITE`` is pulled by users who have a registry; here none is reachable, so
:func:`ensure_base_image` runs ``mkimage.sh`` (debootstrap + ``docker import``) when it is missing.
:func:`build_image` builds ``hai-slurm-testbed:SUITE`` from this folder's ``Dockerfile`` and
``entrypoint.sh`` only (a two-file build context), so an unchanged image is a cache hit in a second.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

import docker
import docker.errors

from hai_slurm.errors import ConfigError, TestbedError

IMAGE_REPO = "hai-slurm-testbed"
SUITES = ("bookworm", "trixie", "sid")
"""Debian suites the image is built for: Slurm 22.05, 24.11 and 26.05 (issue 7's matrix)."""

SLURM_SERIES = {"bookworm": "22.05", "trixie": "24.11", "sid": "26.05"}
"""The Slurm release series each suite's slurm-wlm package gave when last checked (bookworm
22.05.8, trixie 24.11.5, sid 26.05.5). sid moves on: the version-matrix tests say so when it
does."""

CONTEXT_FILES = ("Dockerfile", "entrypoint.sh")


@dataclass(frozen=True)
class ImageTimes:
    """Seconds spent making the base image (0 when it existed) and building the testbed image."""

    base_image: float
    build: float
    base_made: bool


def connect() -> Any:
    """A Docker client for the engine in the environment (``DOCKER_HOST`` or the local socket)."""
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except docker.errors.DockerException as err:
        raise TestbedError(
            f"no Docker engine reachable ({err}); start one with "
            "`bash docker-slurm-testbed/start-dockerd.sh` (or `dockerd &` as root)") from None
    return client


def check_suite(suite: str) -> str:
    """The suite name if it looks like a Debian release name, else :class:`ConfigError`."""
    if not suite or not suite.isascii() or not suite.replace("-", "").isalnum() \
            or not suite[0].isalpha() or suite != suite.lower():
        raise ConfigError(f"not a Debian release name; use one of {', '.join(SUITES)}",
                          key="--slurm", value=suite)
    return suite


def image_tag(suite: str) -> str:
    """``hai-slurm-testbed:SUITE``."""
    return f"{IMAGE_REPO}:{check_suite(suite)}"


def has_image(client: Any, tag: str) -> bool:
    """Whether the engine has an image with this tag."""
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _script(name: str) -> str:
    return str(resources.files("hai_slurm.testbed").joinpath(name))


def ensure_base_image(client: Any, suite: str, *, timeout: float = 900.0,
                      tag: str | None = None) -> float:
    """Make ``debian:SUITE`` with ``mkimage.sh`` when it is missing; return the seconds spent.

    ``tag`` makes the image under another name (the benchmark times a fresh one that way).
    """
    tag = tag or f"debian:{check_suite(suite)}"
    if has_image(client, tag):
        return 0.0
    start = time.monotonic()
    try:
        proc = subprocess.run(["bash", _script("mkimage.sh"), suite, tag], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"making {tag} with mkimage.sh took more than {timeout:g} s; "
                           "is the Debian mirror reachable?") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()[-20:]
        raise TestbedError(f"mkimage.sh {suite} failed (exit {proc.returncode}); "
                           f"or `docker pull {tag}` if you have a registry", log_lines=lines)
    return time.monotonic() - start


def _context() -> io.BytesIO:
    """A tar of exactly the files the Dockerfile needs, with fixed metadata (stable cache keys)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in CONTEXT_FILES:
            data = resources.files("hai_slurm.testbed").joinpath(name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def build_image(client: Any, suite: str, *, network_mode: str | None = None,
                tag: str | None = None, nocache: bool = False) -> str:
    """Build (or refresh from cache) ``hai-slurm-testbed:SUITE``; return the tag.

    The base image must exist (:func:`ensure_base_image`). ``network_mode`` is the build
    containers' network (``host`` when the default bridge cannot reach the Debian mirror).
    ``tag`` and ``nocache`` are for the benchmark (a full build under another name).
    Without ``network_mode``, ``HAI_DOCKER_BUILD_NETWORK`` is used if set.
    """
    tag = tag or image_tag(suite)
    network_mode = network_mode or os.environ.get("HAI_DOCKER_BUILD_NETWORK") or None
    if not has_image(client, f"debian:{suite}"):
        raise TestbedError(f"base image debian:{suite} is missing; make it with "
                           f"`bash docker-slurm-testbed/mkimage.sh {suite}` or pull it")
    try:
        client.images.build(fileobj=_context(), custom_context=True, tag=tag, rm=True,
                            forcerm=True, buildargs={"SUITE": suite}, network_mode=network_mode,
                            labels={"hai-slurm.image": "testbed"}, nocache=nocache)
    except docker.errors.BuildError as err:
        lines = [str(item.get("stream") or item.get("error") or "").rstrip()
                 for item in err.build_log if isinstance(item, dict)]
        lines = [ln for ln in lines if ln][-25:]
        hint = ""
        if any("Could not resolve" in ln or "Failed to fetch" in ln for ln in lines):
            hint = ("; apt-get could not reach the Debian mirror from the build container: "
                    "retry with HAI_DOCKER_BUILD_NETWORK=host")
        raise TestbedError(f"building {tag} failed: {err.msg}{hint}", log_lines=lines) from None
    except docker.errors.APIError as err:
        raise TestbedError(f"building {tag} failed: {err.explanation or err}") from None
    return tag


def prepare_images(client: Any, suite: str, *, network_mode: str | None = None) -> ImageTimes:
    """Base image if missing, then the testbed image; the seconds each took."""
    base = ensure_base_image(client, suite)
    start = time.monotonic()
    build_image(client, suite, network_mode=network_mode)
    return ImageTimes(base_image=base, build=time.monotonic() - start, base_made=base > 0)
