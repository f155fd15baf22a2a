"""The Slurm version matrix: the same tests against the Docker testbed of each Debian suite.

``HAI_SLURM_SUITES`` (comma-separated, default ``bookworm,trixie,sid``) picks the suites, i.e. the
Slurm releases (22.05, 24.11, 26.05). ``suite_cluster`` is a session fixture parametrized by suite:
pytest groups the tests by suite, so one 2-node x 4-GPU testbed (accounting on, daemon preemption)
runs at a time; it is brought up (base image and image made if missing) before the first test of
its suite and removed before the next suite starts. Every test id carries the suite name, e.g.
``test_signal_running_job[trixie]``, so a failure names the release.

``HAI_MATRIX_STATE_DIRS`` (``suite=DIR,...``) reuses Docker testbeds already running in those state
dirs (``hai-slurm testbed up --docker --slurm SUITE --nodes 2 --gpus-per-node 4 --state-dir DIR``)
and leaves them running: handy while iterating on one release.

Every test here is marked ``docker`` and ``slow``. Without a Docker engine the tests are skipped,
unless ``HAI_REQUIRE_DOCKER`` is set (CI): then they fail.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.errors import TestbedError
from hai_slurm.slurm_plugins.runner import DockerExecRunner
from hai_slurm.testbed import docker_images, docker_mode
from hai_slurm.testbed.docker_runner import SHARED_DIR
from hai_slurm.testbed.shape import ClusterShape

DEFAULT_SUITES = ",".join(docker_images.SUITES)
SHAPE = ClusterShape(nodes=2, gpus_per_node=4, leaf_switch_count=2)


def selected_suites() -> list[str]:
    """Suites named by ``HAI_SLURM_SUITES``; a bad name fails collection with the allowed ones."""
    raw = os.environ.get("HAI_SLURM_SUITES", DEFAULT_SUITES)
    suites = [s.strip() for s in raw.split(",") if s.strip()]
    for s in suites:
        if s not in docker_images.SUITES:
            raise pytest.UsageError(f"HAI_SLURM_SUITES: unknown suite {s!r}; use a comma-separated "
                                    f"list of {', '.join(docker_images.SUITES)}")
    return suites


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/matrix as ``docker`` and ``slow``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.docker)
            item.add_marker(pytest.mark.slow)


@dataclass(frozen=True)
class SuiteCluster:
    """A running Docker testbed of one suite and the way into it."""

    suite: str
    series: str
    """The Slurm release series this suite is known to ship (``docker_images.SLURM_SERIES``)."""
    state_dir: Path
    controller: str
    prefix: str
    docker: Any

    def runner(self, user: str | None = None, *, workdir: str = SHARED_DIR) -> DockerExecRunner:
        """Runs commands in the controller container (as ``user``), cwd ``workdir``."""
        return DockerExecRunner(self.controller, user=user, workdir=workdir)

    def node_container(self, node: str) -> str:
        """Container name of compute node ``node``."""
        return f"{self.prefix}-{node}"

    def scratch(self) -> str:
        """A new world-writable directory on the shared volume for one test."""
        path = f"{SHARED_DIR}/t-{uuid.uuid4().hex[:10]}"
        res = self.runner()(["install", "-d", "-m", "0777", path])
        assert res.returncode == 0, res.stderr
        return path


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A Docker client, or a skip/failure saying why there is none."""
    try:
        return docker_images.connect()
    except TestbedError as err:
        if os.environ.get("HAI_REQUIRE_DOCKER"):
            pytest.fail(f"HAI_REQUIRE_DOCKER is set but {err}")
        pytest.skip(f"{err} (set HAI_REQUIRE_DOCKER=1 to fail instead)")


def _reused(suite: str, docker_client: Any) -> Path | None:
    """The state dir ``HAI_MATRIX_STATE_DIRS`` names for ``suite``, checked; None if unnamed."""
    pairs = dict(p.split("=", 1) for p in os.environ.get("HAI_MATRIX_STATE_DIRS", "").split(",")
                 if "=" in p)
    if suite not in pairs:
        return None
    state_dir = Path(pairs[suite]).resolve()
    state = docker_mode.load_state(state_dir)
    if state is None or state.suite != suite or state.shape != SHAPE \
            or not docker_mode.healthy(docker_client, state):
        pytest.fail(f"HAI_MATRIX_STATE_DIRS: {state_dir} holds no healthy {suite} testbed of "
                    f"the matrix shape; start one with `hai-slurm testbed up --docker --slurm "
                    f"{suite} --nodes 2 --gpus-per-node 4 --state-dir {state_dir}`")
    return state_dir


@pytest.fixture(scope="session", params=selected_suites())
def suite_cluster(request: pytest.FixtureRequest, docker_client: Any,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[SuiteCluster]:
    """The Docker testbed of one suite (the test id's ``[suite]``); removed after its tests."""
    suite = str(request.param)
    reused = _reused(suite, docker_client)
    state_dir = reused or tmp_path_factory.mktemp(f"matrix-{suite}")
    try:
        if reused is None:
            docker_images.prepare_images(docker_client, suite)
            docker_mode.up(SHAPE, state_dir=state_dir, suite=suite, build=False)
        state = docker_mode.load_state(state_dir.resolve())
        assert state is not None
        yield SuiteCluster(suite, docker_images.SLURM_SERIES[suite], state_dir.resolve(),
                           state.controller, state.prefix, docker_client)
    finally:
        if reused is None:
            docker_mode.down(state_dir)


def series_of(version_text: str) -> str:
    """``"slurm-wlm 24.11.5"`` -> ``"24.11"``."""
    m = re.search(r"(\d+)\.(\d+)", version_text)
    return f"{m.group(1)}.{m.group(2)}" if m else version_text.strip()
