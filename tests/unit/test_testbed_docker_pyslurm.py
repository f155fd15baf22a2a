"""Choosing and checking the pyslurm archive the trixie image builds, and its build context."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

from hai_slurm.errors import TestbedError
from hai_slurm.testbed import docker_pyslurm
from hai_slurm.testbed.docker_pyslurm import PyslurmArchive, pyslurm_archive


def _archives(tmp_path: Path, data: bytes = b"not really a tarball",
              name: str = "pyslurm-24.11.x-2adb2da.tar.gz", sums: str | None = None) -> Path:
    (tmp_path / name).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / "SHA256SUMS").write_text(
        sums if sums is not None else f"0000  pyslurm-22.5.x-1.tar.gz\n{digest}  {name}\n")
    return tmp_path


def test_the_trixie_archive_is_found_and_checked(tmp_path: Path) -> None:
    found = pyslurm_archive("trixie", _archives(tmp_path))
    assert isinstance(found, PyslurmArchive)
    assert found.path.name == "pyslurm-24.11.x-2adb2da.tar.gz"
    assert found.sha256 == hashlib.sha256(b"not really a tarball").hexdigest()


def test_why_there_is_nothing_to_build(tmp_path: Path) -> None:
    assert "no pyslurm-24.11.x-*.tar.gz in" in str(pyslurm_archive("trixie", tmp_path))
    assert "only trixie (24.11.x)" in str(pyslurm_archive("sid", tmp_path))
    _archives(tmp_path, sums="abc  other.tar.gz\n")
    assert "has no line for pyslurm-24.11.x-2adb2da.tar.gz" in str(
        pyslurm_archive("trixie", tmp_path))
    (tmp_path / "SHA256SUMS").unlink()
    assert "has no checksum to check" in str(pyslurm_archive("trixie", tmp_path))


def test_a_changed_archive_is_an_error_not_a_skip(tmp_path: Path) -> None:
    archives = _archives(tmp_path)
    (archives / "pyslurm-24.11.x-2adb2da.tar.gz").write_bytes(b"swapped")
    with pytest.raises(TestbedError, match="does not match"):
        pyslurm_archive("trixie", archives)


def test_context_is_the_dockerfile_archive_and_one_checksum_line(tmp_path: Path) -> None:
    found = pyslurm_archive("trixie", _archives(tmp_path))
    assert isinstance(found, PyslurmArchive)
    with tarfile.open(fileobj=docker_pyslurm._context(found)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"Dockerfile", "SHA256SUMS", found.path.name}
        assert all(m.mtime == 0 for m in members.values())   # stable layer-cache keys
        sums = tar.extractfile("SHA256SUMS")
        assert sums is not None
        assert sums.read().decode() == f"{found.sha256}  {found.path.name}\n"
        dockerfile = tar.extractfile("Dockerfile")
        assert dockerfile is not None
        text = dockerfile.read().decode()
    assert "sha256sum -c SHA256SUMS" in text and "--no-index" in text
