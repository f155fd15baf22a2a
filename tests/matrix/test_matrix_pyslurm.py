"""The pyslurm backend on the Docker testbeds: the contract suite on Slurm 24.11 (trixie), the
backend ``make_client("auto")`` picks there, and its refusal on 26.05 (sid).

pyslurm is built in the trixie image (``HAI_PYSLURM_DOCKER=1``, see conftest.py) and needs that
image's glibc, so these tests run *inside* the controller container, not on the host: a wheel of
this checkout and the contract's test files are copied in, pytest runs there with
``HAI_ADAPTER_SLURM_CONF`` pointing at the container's slurm.conf (its jobs run on the compute
containers, in a directory on the shared volume), and its JUnit XML comes back to name each
result. Without the opt-in, or without the source archive, they skip saying why.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import PYSLURM_OPT_IN, SuiteCluster

from hai_slurm.slurm_plugins.runner import Completed
from hai_slurm.testbed.docker_images import has_image
from hai_slurm.testbed.docker_pyslurm import VENV, pyslurm_image_tag
from hai_slurm.testbed.docker_runner import SHARED_DIR

ROOT = Path(__file__).resolve().parents[2]
INSIDE = "/opt/hai-run"
"""Where the wheel and the test files go in the controller container."""
TEST_FILES = ("pyproject.toml", "tests/contract/slurm_client_contract.py",
              "tests/integration/test_adapter_contract.py")
CONTRACT_SELECTION = "pyslurm or both_backends"
"""The pyslurm variants of test_adapter_contract.py (the CLI ones run from the host,
test_matrix_contract.py) and the test comparing the two backends' reads."""
SLURM_CONF = "/etc/slurm/slurm.conf"


@pytest.fixture(scope="session")
def hai_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout (pure Python), built once per session."""
    out = tmp_path_factory.mktemp("hai-wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                          str(out), str(ROOT)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = out.glob("hai_slurm-*.whl")
    return wheel


def _wheel(request: pytest.FixtureRequest) -> Path:
    """:func:`hai_wheel`, asked for only once a test is sure to run (it takes a while)."""
    wheel = request.getfixturevalue("hai_wheel")
    assert isinstance(wheel, Path)
    return wheel


def _in_controller(bed: SuiteCluster, argv: list[str], timeout: float = 60.0) -> Completed:
    return bed.runner(workdir="/")(argv, timeout=timeout)


def _install(bed: SuiteCluster, wheel: Path, *, files: tuple[str, ...] = ()) -> None:
    """Copy ``wheel`` and ``files`` (repository paths) to :data:`INSIDE` in the controller."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in [(wheel.name, wheel), *((f, ROOT / f) for f in files)]:
            tar.add(str(path), arcname=f"hai-run/{name}")
    box = bed.docker.containers.get(bed.controller)
    assert box.put_archive("/opt", buf.getvalue()), "could not copy files into the controller"


def _needs_pyslurm(bed: SuiteCluster) -> None:
    if bed.pyslurm.wheel is None:
        pytest.skip(bed.pyslurm.why_not)


def _results(junit: str) -> dict[str, str]:
    """``{test id: passed|failed|error|skipped: message}`` from pytest's JUnit XML."""
    out: dict[str, str] = {}
    for case in ET.fromstring(junit).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        verdict = "passed"
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                verdict = f"{'failed' if kind == 'failure' else kind}: {el.get('message', '')}"
                break
        out[name] = verdict
    return out


def test_contract_through_pyslurm_inside_the_container(suite_cluster: SuiteCluster,
                                                       request: pytest.FixtureRequest) -> None:
    """Every pyslurm variant of the adapter contract passes against the suite's slurmctld, run
    in its controller with the pyslurm built in the image; none of them is skipped."""
    bed = suite_cluster
    _needs_pyslurm(bed)
    hai_wheel = _wheel(request)
    _install(bed, hai_wheel, files=TEST_FILES)
    res = _in_controller(bed, [f"{VENV}/bin/pip", "install", "-q", "--no-index", "--no-deps",
                               "--force-reinstall", f"{INSIDE}/{hai_wheel.name}"], timeout=120)
    assert res.returncode == 0, res.stderr
    run_dir = f"{SHARED_DIR}/pyslurm-contract-{uuid.uuid4().hex[:8]}"
    junit = f"{run_dir}.xml"
    res = _in_controller(bed, [
        "env", f"HAI_ADAPTER_SLURM_CONF={SLURM_CONF}", f"SLURM_CONF={SLURM_CONF}",
        "sh", "-c", f'cd {INSIDE} && exec "$@"', "sh",
        f"{VENV}/bin/python", "-m", "pytest", "--noconftest", "-p", "no:cacheprovider", "-q",
        "-rA", f"--basetemp={run_dir}", f"--junitxml={junit}", "-k", CONTRACT_SELECTION,
        "tests/integration/test_adapter_contract.py"], timeout=1200)
    print(res.stdout[-6000:])
    xml = _in_controller(bed, ["cat", junit])
    assert xml.returncode == 0, f"pytest in the container left no JUnit XML:\n" \
        f"{res.stdout[-3000:]}\n{res.stderr[-2000:]}"
    results = _results(xml.stdout)
    not_passed = {k: v for k, v in results.items() if v != "passed"}
    assert results and not not_passed, "\n".join(f"{k}: {v}" for k, v in not_passed.items()) \
        + "\n" + res.stdout[-3000:]
    assert all("pyslurm" in k or "both_backends" in k for k in results)
    assert res.returncode == 0, res.stdout[-3000:]


_AUTO = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.adapter import make_client
client = make_client("auto")
print("CHOSEN", type(client).__name__, client.version())
try:
    make_client("pyslurm")
    print("FORCED ok")
except SlurmError as err:
    print("FORCED refused:", err)
"""


def test_auto_picks_pyslurm_on_24_11(suite_cluster: SuiteCluster,
                                     request: pytest.FixtureRequest) -> None:
    """In the trixie controller, with pyslurm 24.11.x installed, ``make_client("auto")`` takes
    the pyslurm backend and logs why."""
    bed = suite_cluster
    _needs_pyslurm(bed)
    hai_wheel = _wheel(request)
    _install(bed, hai_wheel)
    res = _in_controller(bed, [f"{VENV}/bin/pip", "install", "-q", "--no-index", "--no-deps",
                               "--force-reinstall", f"{INSIDE}/{hai_wheel.name}"], timeout=120)
    assert res.returncode == 0, res.stderr
    res = _in_controller(bed, ["env", f"SLURM_CONF={SLURM_CONF}", f"{VENV}/bin/python", "-c",
                               _AUTO])
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    assert f"CHOSEN PyslurmClient {bed.series}." in res.stdout, res.stdout
    assert f"Slurm backend: pyslurm (pyslurm 24.11.0 matches Slurm {bed.series}." \
        in res.stdout, res.stdout
    assert "FORCED ok" in res.stdout, res.stdout


def test_26_05_refuses_pyslurm(suite_cluster: SuiteCluster,
                               request: pytest.FixtureRequest) -> None:
    """In the sid controller (Slurm 26.05) with a pyslurm installed (the 24.11.x wheel from the
    trixie image: no pyslurm exists for 26.05), ``auto`` takes the CLI saying why, and asking
    for pyslurm is refused with the same reason; pyslurm is never imported."""
    bed = suite_cluster
    if bed.series != "26.05":
        pytest.skip(f"checks the refusal on Slurm 26.05 (sid); {bed.suite} runs {bed.series}")
    if not os.environ.get(PYSLURM_OPT_IN):
        pytest.skip(f"{PYSLURM_OPT_IN}=1 makes the trixie pyslurm image whose wheel this uses")
    tag = pyslurm_image_tag("trixie")
    if not has_image(bed.docker, tag):
        pytest.skip(f"image {tag} is missing: run trixie first (HAI_SLURM_SUITES=trixie,sid)")
    hai_wheel = _wheel(request)
    name = bed.docker.containers.run(tag, ["cat", "/etc/hai-testbed-pyslurm"], entrypoint=[],
                                     remove=True, network_mode="none").decode().strip()
    box = bed.docker.containers.create(tag, ["true"], entrypoint=[], network_mode="none")
    try:   # get_archive: a container's output stream is not binary-safe
        stream, _stat = box.get_archive(f"/opt/pyslurm/wheels/{name}")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(name)
            assert member is not None
            data = member.read()
    finally:
        box.remove(force=True)
    pyslurm_wheel = hai_wheel.parent / name
    pyslurm_wheel.write_bytes(data)
    _install(bed, hai_wheel)
    _install(bed, pyslurm_wheel)
    site = f"{INSIDE}/site"
    for wheel in (hai_wheel.name, name):   # sid's python3 has no pip: wheels are zip files
        res = _in_controller(bed, ["python3", "-m", "zipfile", "-e", f"{INSIDE}/{wheel}", site])
        assert res.returncode == 0, res.stderr
    res = _in_controller(bed, ["env", f"SLURM_CONF={SLURM_CONF}", f"PYTHONPATH={site}",
                               "python3", "-c", _AUTO + _DIRECT])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    print(out)
    assert f"CHOSEN CliSlurmClient {bed.series}." in out, out
    reason = f"Slurm {bed.series}."
    assert f"Slurm backend: CLI ({reason}" in out and "has no pyslurm (its C API changed in " \
        "26.05; pyslurm 24.11.0 is installed)" in out, out
    assert f"FORCED refused: pyslurm backend unavailable: {reason}" in out, out
    assert f"DIRECT refused: the pyslurm backend cannot run on Slurm {bed.series}." in out, out
    assert "PYSLURM IMPORTED False" in out, out


_DIRECT = """
from hai_slurm.slurm_plugins.adapter import PyslurmClient
try:
    PyslurmClient()
    print("DIRECT ok")
except SlurmError as err:
    print("DIRECT refused:", err)
print("PYSLURM IMPORTED", "pyslurm" in sys.modules)
"""
