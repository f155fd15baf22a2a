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

``HAI_PYSLURM_DOCKER=1`` (opt-in) runs the trixie testbed from ``hai-slurm-testbed:trixie-pyslurm``,
the image with pyslurm 24.11.x built in it from ``../shared/third_party`` (``PYSLURM_ARCHIVES``
overrides; see docker-slurm-testbed/docker_pyslurm.py), for test_matrix_pyslurm.py. Off by
default: a cold build is a pyslurm compile, more than CI can spend (the layer cache does not
outlive a CI machine); the tests that need it skip saying so.

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
from hai_slurm.testbed import docker_images, docker_mode, docker_pyslurm
from hai_slurm.testbed.docker_runner import SHARED_DIR
from hai_slurm.testbed.shape import ClusterShape

DEFAULT_SUITES = ",".join(docker_images.SUITES)
SHAPE = ClusterShape(nodes=2, gpus_per_node=4, leaf_switch_count=2)
PYSLURM_OPT_IN = "HAI_PYSLURM_DOCKER"
PYSLURM_ARCHIVES = Path(os.environ.get("PYSLURM_ARCHIVES")
                        or Path(__file__).resolve().parents[2].parent / "shared" / "third_party")
"""pyslurm's source archives: ../shared/third_party from the repository root, as setup-host.sh."""


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
class PyslurmInImage:
    """The pyslurm wheel installed in the testbed image (None: not there, ``why_not`` says why)
    and the seconds its image build took in this session (0 when the layer was cached)."""

    wheel: str | None
    why_not: str = ""
    build_seconds: float = 0.0


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
    pyslurm: PyslurmInImage
    """Whether the containers' image has pyslurm (and which), else why not."""

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


def _pyslurm_image(client: Any, suite: str) -> tuple[str | None, PyslurmInImage]:
    """The pyslurm image for ``suite`` (built now) when opted in and possible, else why not."""
    if suite not in docker_pyslurm.PYSLURM_BRANCHES:
        return None, PyslurmInImage(None, f"no pyslurm is built in the {suite} image: "
                                    + {"bookworm": "22.05's runs on the host "
                                       "(tests/integration/test_adapter_contract.py)",
                                       "sid": "Slurm 26.05 has no pyslurm"}.get(suite, "none"))
    if not os.environ.get(PYSLURM_OPT_IN):
        return None, PyslurmInImage(None, f"{PYSLURM_OPT_IN}=1 builds pyslurm in the {suite} "
                                    "image (opt-in: a cold build compiles pyslurm, longer than "
                                    "CI can spend; see the README's pyslurm backend)")
    archive = docker_pyslurm.pyslurm_archive(suite, PYSLURM_ARCHIVES)
    if isinstance(archive, str):
        return None, PyslurmInImage(None, f"no pyslurm in the {suite} image: {archive}")
    jobs = int(os.environ.get("HAI_PYSLURM_BUILD_JOBS", "1"))
    built = docker_pyslurm.build_pyslurm_image(client, suite, archive, jobs=jobs)
    return built.tag, PyslurmInImage(built.wheel, build_seconds=built.seconds)


def _pyslurm_of(state: docker_mode.DockerState) -> PyslurmInImage:
    """What a reused testbed's image says about pyslurm."""
    if not state.image.endswith("-pyslurm"):
        return PyslurmInImage(None, f"the reused testbed runs {state.image}, not the pyslurm "
                              "image (start it with HAI_PYSLURM_DOCKER=1 through this suite)")
    res = DockerExecRunner(state.controller)(["cat", "/etc/hai-testbed-pyslurm"])
    return PyslurmInImage(res.stdout.strip() or None, res.stderr.strip())


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
            image, pyslurm = _pyslurm_image(docker_client, suite)
            docker_mode.up(SHAPE, state_dir=state_dir, suite=suite, build=False, image=image)
        state = docker_mode.load_state(state_dir.resolve())
        assert state is not None
        if reused is not None:
            pyslurm = _pyslurm_of(state)
        yield SuiteCluster(suite, docker_images.SLURM_SERIES[suite], state_dir.resolve(),
                           state.controller, state.prefix, docker_client, pyslurm)
    finally:
        if reused is None:
            docker_mode.down(state_dir)


def series_of(version_text: str) -> str:
    """``"slurm-wlm 24.11.5"`` -> ``"24.11"``."""
    m = re.search(r"(\d+)\.(\d+)", version_text)
    return f"{m.group(1)}.{m.group(2)}" if m else version_text.strip()
