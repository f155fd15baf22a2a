"""DockerExecRunner: the argv it hands to `docker exec`, stdin, users, and how failures map.

A stand-in `docker` program (a shell script in tmp_path, passed as ``docker=``) records its
arguments and standard input and exits as told; the real client is exercised by tests/matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.adapter import CliSlurmClient, DockerExecRunner, make_client

FAKE = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/argv"
cat > "$(dirname "$0")/stdin"
printf '%s' "${FAKE_OUT:-}"
printf '%s' "${FAKE_ERR:-}" >&2
exit "${FAKE_RC:-0}"
"""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recording `docker` stand-in."""
    path = tmp_path / "docker"
    path.write_text(FAKE)
    path.chmod(0o755)
    for var in ("FAKE_OUT", "FAKE_ERR", "FAKE_RC"):
        monkeypatch.delenv(var, raising=False)
    return path


def test_argv_stdin_user_and_workdir(fake_docker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`docker exec -i [-u U] [-w D] CONTAINER timeout -k 2 T argv`; stdin piped; argv kept."""
    monkeypatch.setenv("FAKE_OUT", "Submitted 7")
    run = DockerExecRunner("ctl", timeout=12, workdir="/shared", docker=str(fake_docker))
    res = run(["sbatch", "--parsable"], stdin="#!/bin/bash\nsleep 1\n")
    assert res.argv == ("sbatch", "--parsable") and res.stdout == "Submitted 7"
    argv = (fake_docker.parent / "argv").read_text().splitlines()
    assert argv == ["exec", "-i", "-w", "/shared", "ctl", "timeout", "-k", "2", "12", "sbatch",
                    "--parsable"]
    assert (fake_docker.parent / "stdin").read_text() == "#!/bin/bash\nsleep 1\n"
    run.as_user("hai-tester")(["squeue"], timeout=3)
    argv = (fake_docker.parent / "argv").read_text().splitlines()
    assert argv[:7] == ["exec", "-i", "-u", "hai-tester", "-w", "/shared", "ctl"]
    assert argv[7:] == ["timeout", "-k", "2", "3", "squeue"]


def test_slurm_failures_are_results_not_errors(fake_docker: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A Slurm command's own non-zero exit comes back as a result for the backend to judge."""
    monkeypatch.setenv("FAKE_RC", "1")
    monkeypatch.setenv("FAKE_ERR", "slurm_load_jobs error: Invalid job id specified")
    res = DockerExecRunner("ctl", docker=str(fake_docker))(["scontrol", "show", "job", "9"])
    assert res.returncode == 1 and "Invalid job id" in res.stderr


@pytest.mark.parametrize(("rc", "err", "match"), [
    ("124", "", r"scontrol ping \(in container ctl\) did not finish within 30 s"),
    ("1", "Error response from daemon: No such container: ctl",
     r"docker exec failed for scontrol ping \(in container ctl\): Error response.*No such"),
    ("126", "OCI runtime exec failed", r"docker exec failed.*OCI runtime"),
])
def test_timeouts_and_docker_errors_raise_naming_the_container(
        fake_docker: Path, monkeypatch: pytest.MonkeyPatch, rc: str, err: str,
        match: str) -> None:
    """Timeout inside the container and engine errors are SlurmError, not a Slurm answer."""
    monkeypatch.setenv("FAKE_RC", rc)
    monkeypatch.setenv("FAKE_ERR", err)
    with pytest.raises(SlurmError, match=match):
        DockerExecRunner("ctl", docker=str(fake_docker))(["scontrol", "ping"])


def test_missing_docker_client_says_what_to_install(tmp_path: Path) -> None:
    """No docker program: the message names the package."""
    with pytest.raises(SlurmError, match=r"apt-get install -y docker\.io"):
        DockerExecRunner("ctl", docker=str(tmp_path / "nope"))(["sinfo"])


def test_make_client_takes_the_runner(fake_docker: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """make_client(runner=...) gives a CLI client whose commands go through that runner."""
    monkeypatch.setenv("FAKE_OUT", "slurm 26.05.5\n")
    client = make_client("cli", runner=DockerExecRunner("ctl", docker=str(fake_docker)))
    assert isinstance(client, CliSlurmClient) and client.version().series == "26.05"
    assert (fake_docker.parent / "argv").read_text().splitlines()[-2:] == ["scontrol", "version"]
