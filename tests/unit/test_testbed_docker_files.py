"""The Docker testbed's pure parts: layout, rendered configs, the archive put into containers."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from hai_slurm.errors import ConfigError, TestbedError
from hai_slurm.testbed import docker_files, docker_images, docker_mode
from hai_slurm.testbed.render import render_configs
from hai_slurm.testbed.shape import ClusterShape

SHAPE = ClusterShape(nodes=3, gpus_per_node=4, leaf_switch_count=2)


def _configs(shape: ClusterShape = SHAPE) -> dict[str, str]:
    return render_configs(shape, docker_mode.docker_layout(shape, "pw123"))


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_docker_layout_uses_container_hostnames_and_default_ports() -> None:
    """Nodes are addressed by their container hostname with slurmd's default port (no Port=)."""
    conf = _configs()["slurm.conf"]
    assert "SlurmctldHost=slurmctl(slurmctl)" in conf
    assert "AccountingStorageHost=slurmdb" in conf
    for name in ("n1", "n2", "n3"):
        line = next(ln for ln in conf.splitlines() if ln.startswith(f"NodeName={name} "))
        assert f"NodeHostname={name} NodeAddr={name} " in line
        assert "Port=" not in line


def test_slurmdbd_conf_points_at_the_database_container() -> None:
    """slurmdbd runs in the database container and reaches MariaDB on its loopback."""
    dbd = _configs()["slurmdbd.conf"]
    assert "DbdHost=slurmdb" in dbd
    assert "StorageHost=127.0.0.1" in dbd and "StoragePass=pw123" in dbd


def test_compute_archive_has_configs_key_and_gpu_links_with_real_mtimes() -> None:
    """The tar holds every config, the munge key (0400) and /dev/null links, none with mtime 0.

    Slurm 22.05's job_submit/lua never loads a script whose mtime is 0, and slurmctld then
    segfaults at the first submission: that happened with mtime=0 archives.
    """
    files = docker_files.etc_files(SHAPE, _configs())
    before = int(time.time())
    members = _members(docker_files.archive(files, b"k" * 1024, gpus=4,
                                            device_dir="/opt/hai-testbed/dev"))
    for name in ("slurm.conf", "gres.conf", "topology.conf", "slurmdbd.conf", "job_submit.lua"):
        assert f"etc/slurm/{name}" in members
    assert members["etc/slurm/slurmdbd.conf"].mode == 0o600
    assert members["etc/slurm/slurm.conf"].mode == 0o644
    assert members["etc/munge/munge.key"].mode == 0o400
    links = {n: m for n, m in members.items() if n.startswith("opt/hai-testbed/dev/nvidia")}
    assert sorted(links) == [f"opt/hai-testbed/dev/nvidia{i}" for i in range(4)]
    assert all(m.issym() and m.linkname == "/dev/null" for m in links.values())
    assert all(m.mtime >= before for m in members.values())


def test_gres_conf_points_at_the_links_the_archive_makes() -> None:
    """Every File= in gres.conf is one of the device links put into compute containers."""
    members = _members(docker_files.archive({}, b"k" * 64, gpus=4,
                                            device_dir="/opt/hai-testbed/dev"))
    files = [part.split("=", 1)[1] for ln in _configs()["gres.conf"].splitlines()
             for part in ln.split() if part.startswith("File=")]
    assert files and all(f.lstrip("/") in members for f in files)


def test_controller_archive_has_no_device_links() -> None:
    """Only compute containers get fake GPUs."""
    members = _members(docker_files.archive({"slurm.conf": "x\n"}, b"k" * 64))
    assert not any("nvidia" in name for name in members)


def test_munge_key_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    """The key is random, 1024 bytes, private, and the same on the second call."""
    first = docker_files.munge_key(tmp_path)
    path = tmp_path / "docker" / "munge.key"
    assert len(first) == 1024 and path.stat().st_mode & 0o777 == 0o600
    assert docker_files.munge_key(tmp_path) == first


@pytest.mark.parametrize("suite", ["Bookworm", "book worm", "../x", "", "12"])
def test_bad_suite_names_the_option_and_value(suite: str) -> None:
    """A suite that is not a Debian release name is refused naming --slurm and the value."""
    with pytest.raises(ConfigError, match=r"--slurm.*not a Debian release name") as err:
        docker_images.check_suite(suite)
    assert err.value.value == suite


def test_image_tag_per_suite() -> None:
    """One testbed image per Debian suite."""
    assert docker_images.image_tag("trixie") == "hai-slurm-testbed:trixie"


def test_testbed_id_depends_on_the_state_dir(tmp_path: Path) -> None:
    """Same dir, same id (so down finds what up made); another dir, another id."""
    assert docker_mode.testbed_id(tmp_path) == docker_mode.testbed_id(tmp_path / ".")
    assert docker_mode.testbed_id(tmp_path) != docker_mode.testbed_id(tmp_path / "other")


def test_state_file_round_trip_is_private(tmp_path: Path) -> None:
    """The state file (it holds the DB password) is 0600 and reads back equal."""
    state = docker_mode.DockerState("abc", "bookworm", "hai-slurm-testbed:bookworm", SHAPE,
                                    "secret", ready=True)
    docker_mode._save(tmp_path, state)
    path = tmp_path / docker_mode.STATE_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert docker_mode.load_state(tmp_path) == state
    assert json.loads(path.read_text())["containers"] == [
        "hai-slurm-abc-db", "hai-slurm-abc-ctl", "hai-slurm-abc-n1", "hai-slurm-abc-n2",
        "hai-slurm-abc-n3"]


def test_unreadable_state_file_names_the_file_and_the_label(tmp_path: Path) -> None:
    """A corrupt state file fails with its path and the label to clean up by."""
    (tmp_path / docker_mode.STATE_FILE).write_text("{not json")
    with pytest.raises(TestbedError,
                       match=r"docker-testbed\.json is unreadable.*hai-slurm\.testbed="):
        docker_mode.load_state(tmp_path)
