"""The #HAI directive tests (tests/integration/test_directives_sbatch.py) on each release in Docker.

The test functions and fixtures are the integration module's own, imported here; only the
``access`` fixture differs: sbatch/scontrol/sacctmgr run in the controller container through
``docker exec``, and the Lua files are read from the container's /etc/slurm. So job_submit.lua is
exercised by each release's slurmctld, including the job environment it sets (jobs that run write
their output to the shared directory, which the controller container reads).

The non-admin submitter is a user made in the controller container (:data:`SUBMITTER`), not
``nobody``: Slurm 26.05's slurmctld resolves ``nobody`` (uid 65534) to no uid at all
(``scontrol show assoc_mgr`` prints ``nobody(4294967294)``), so an association for it never
matches and sbatch says "Invalid account" (22.05 and 24.11 accept it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import SuiteCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from test_directives_sbatch import (  # noqa: F401  (fixtures and tests collected here as well)
    Cluster,
    cluster,
    installed,
    other_user,
    test_auto_is_recorded_with_a_provisional_class,
    test_bad_directives_are_rejected_by_sbatch_with_the_message,
    test_directive_after_first_command_is_ignored_with_a_warning,
    test_directives_reach_the_batch_shell_and_every_srun_step,
    test_good_directives_land_in_admin_comment_and_qos,
    test_job_without_directives_gets_the_default_class,
    test_owner_rewriting_comment_gains_nothing,
    test_the_submitters_own_variable_wins_with_a_warning,
)

from hai_slurm.testbed.docker_runner import SHARED_DIR


class DockerCluster(Cluster):
    """The integration tests' Cluster, with every command run in the controller container."""

    scratch_root = SHARED_DIR  # mounted in every container: job output is readable from here

    def __init__(self, container: str) -> None:
        super().__init__("/etc/slurm/slurm.conf")
        self.env = dict(os.environ)
        self.container = container

    def fresh(self) -> Cluster:
        """Another handle on the same container with no jobs remembered."""
        return DockerCluster(self.container)

    def command(self, argv: list[str], user: str | None) -> list[str]:
        """``docker exec -i [-u USER] -w / CONTAINER argv``."""
        return ["docker", "exec", "-i", *(["-u", user] if user else []), "-w", "/",
                self.container, *argv]

    def etc_text(self, name: str) -> str | None:
        """``/etc/slurm/NAME`` in the container."""
        res = self.run(["cat", f"/etc/slurm/{name}"])
        return res.stdout if res.returncode == 0 else None


SUBMITTER = "hai-tester"


@pytest.fixture(scope="module")
def access(suite_cluster: SuiteCluster) -> Cluster:
    """The suite's controller container."""
    return DockerCluster(suite_cluster.controller)


@pytest.fixture(scope="module")
def other_user_name(access: Cluster) -> str:
    """A plain user made in the controller container (sbatch runs there; the jobs stay held)."""
    if access.run(["id", "-u", SUBMITTER]).returncode != 0:
        res = access.run(["useradd", "--no-create-home", "--shell", "/bin/bash", SUBMITTER])
        assert res.returncode == 0, res.stderr
    return SUBMITTER
