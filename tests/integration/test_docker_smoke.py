"""Docker mode smoke test: base image, build, 2 nodes up, a 2-node GPU job, down leaves nothing.

Skipped (with the reason) only when no Docker engine answers and ``HAI_REQUIRE_DOCKER`` is unset;
CI sets it, so a missing engine fails there. Start an engine with
``bash docker-slurm-testbed/start-dockerd.sh``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.errors import TestbedError
from hai_slurm.testbed import docker_images, docker_mode, services
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.testbed.waiting import check, show_nodes, wait_job_state

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow]

SUITE = os.environ.get("HAI_DOCKER_SUITE", "bookworm")
SHAPE = ClusterShape(nodes=2, gpus_per_node=4, leaf_switch_count=2)


@pytest.fixture(scope="module")
def client() -> Any:
    """A Docker client, or a skip/failure saying why there is none."""
    try:
        return docker_images.connect()
    except TestbedError as err:
        if os.environ.get("HAI_REQUIRE_DOCKER"):
            pytest.fail(f"HAI_REQUIRE_DOCKER is set but {err}")
        pytest.skip(f"{err} (set HAI_REQUIRE_DOCKER=1 to fail instead)")


def _leftovers(client: Any, tid: str) -> list[str]:
    flt = {"label": f"{docker_mode.LABEL}={tid}"}
    return ([c.name for c in client.containers.list(all=True, filters=flt)]
            + [n.name for n in client.networks.list(filters=flt)]
            + [v.name for v in client.volumes.list(filters=flt)])


@pytest.fixture(scope="module")
def cluster(client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 2-node Docker testbed (images made or reused first); removed again afterwards."""
    state_dir = tmp_path_factory.mktemp("docker-testbed")
    docker_images.prepare_images(client, SUITE)
    try:
        assert docker_mode.up(SHAPE, state_dir=state_dir, suite=SUITE, build=False) is True
        yield state_dir
    finally:
        docker_mode.down(state_dir)


def test_two_node_gpu_job_sees_its_gpus_on_both_nodes(cluster: Path) -> None:
    """A 2-node job with gpu:2 per node prints two CUDA_VISIBLE_DEVICES ids on n1 and on n2."""
    run = docker_mode.runner(cluster)
    job = check(run, ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2",
                      "--output=/shared/two-node-%j.out",
                      # single quotes: the variables must expand on each node, not in the
                      # batch shell on n1
                      "--wrap=srun bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'"])
    job_id = job.strip().split(";")[0]
    wait_job_state(run, job_id, "COMPLETED", timeout=60)
    out = check(run, ["cat", f"/shared/two-node-{job_id}.out"])
    per_node = dict(line.split(" ", 1) for line in sorted(out.splitlines()) if line.strip())
    assert sorted(per_node) == ["n1", "n2"], out
    for node, gpus in per_node.items():
        ids = gpus.split(",")
        assert len(ids) == 2 and all(i.isdigit() for i in ids), f"{node}: {gpus!r}"


def test_nodes_and_topology_match_the_shape(cluster: Path) -> None:
    """scontrol reports 2 nodes with gpu:4 and 16 CPUs, under leaf1/leaf2 and the spine."""
    run = docker_mode.runner(cluster)
    nodes = {n["NodeName"]: n for n in show_nodes(run)}
    assert sorted(nodes) == ["n1", "n2"]
    for info in nodes.values():
        assert info["Gres"].startswith("gpu:4"), info["Gres"]
        assert info["CPUTot"] == str(SHAPE.cpus_per_node)
    topo = check(run, ["scontrol", "show", "topology"])
    assert "SwitchName=leaf1" in topo and "SwitchName=leaf2" in topo
    assert "SwitchName=spine" in topo and "Switches=leaf[1-2]" in topo


def test_up_again_is_a_no_op(cluster: Path) -> None:
    """A second up with the same shape finds the healthy testbed and does nothing."""
    assert docker_mode.up(SHAPE, state_dir=cluster, suite=SUITE, build=False) is False


def test_status_lists_every_container_running(cluster: Path) -> None:
    """status names db, ctl, n1, n2 as running with a PID, and shows both nodes idle."""
    st = docker_mode.status(cluster)
    assert st.all_running
    assert [(c.name, c.running) for c in st.components] == [
        ("db", True), ("ctl", True), ("n1", True), ("n2", True)]
    assert all(c.pid > 0 for c in st.components)
    text = "\n".join(st.lines())
    assert "n1 idle gpu:4" in text and "n2 idle gpu:4" in text


def test_down_removes_every_container_network_and_volume(client: Any,
                                                         tmp_path: Path) -> None:
    """up then down on a fresh state dir leaves nothing labelled with its id; down again is [].

    The down is `hai-slurm testbed down` *without* --docker: it finds the recorded Docker testbed.
    """
    shape = ClusterShape(nodes=2, gpus_per_node=2, leaf_switch_count=2, accounting=False)
    tid = docker_mode.testbed_id(tmp_path)
    try:
        docker_mode.up(shape, state_dir=tmp_path, suite=SUITE, build=False)
        assert len(_leftovers(client, tid)) == 5  # ctl, n1, n2, the network, the volume
    finally:
        res = CliRunner().invoke(cli, ["testbed", "down", "--state-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    removed = [ln.removeprefix("removed ") for ln in res.output.splitlines()
               if ln.startswith("removed ")]
    assert _leftovers(client, tid) == []
    assert sorted(removed) == sorted([f"hai-slurm-{tid}-ctl", f"hai-slurm-{tid}-n1",
                                      f"hai-slurm-{tid}-n2", f"network hai-slurm-{tid}",
                                      f"volume hai-slurm-{tid}"])
    assert docker_mode.down(tmp_path) == []


def test_missing_image_is_named_with_the_command_to_build_it(client: Any,
                                                             tmp_path: Path) -> None:
    """up without build for a suite never built says which image is missing and what to run."""
    with pytest.raises(TestbedError, match=r"hai-slurm-testbed:nosuchsuite is missing.*--slurm"):
        docker_mode.up(SHAPE, state_dir=tmp_path, suite="nosuchsuite", build=False)
    assert _leftovers(client, docker_mode.testbed_id(tmp_path)) == []


def test_redis_asks_for_the_testbed_password(cluster: Path) -> None:
    """The controller's Redis refuses a client without the password of
    ``STATE_DIR/redis/password``, answers one with it, and no process shows it in its argv."""
    password = services.redis_password(cluster)
    run = docker_mode.runner(cluster)
    anonymous = run(["redis-cli", "PING"], timeout=10)
    assert "NOAUTH" in anonymous.stdout + anonymous.stderr, anonymous
    authed = run(["redis-cli", "--no-auth-warning", "-a", password, "PING"], timeout=10)
    assert authed.stdout.strip() == "PONG", authed
    argvs = run(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], timeout=10).stdout
    assert "redis-server" in argvs
    assert password not in argvs
