"""The wheel installs the way the README says: the job side with no dependencies at all, and a
``hai-slurm`` that runs ``conf`` with click alone and names the extra for the rest."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "conf" / "examples" / "cluster.toml"

pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from a copy of this checkout (a build writes build/ and
    *.egg-info next to setup.cfg, which must not land in the working tree)."""
    src = tmp_path_factory.mktemp("src") / "hai-slurm"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "tests",
        "bench"))
    out = tmp_path_factory.mktemp("dist")
    _ok(_run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, src))
    (built,) = out.glob("hai_slurm-*.whl")
    return built


def test_job_side_needs_no_dependency_and_cli_needs_only_click(wheel: Path,
                                                               tmp_path: Path) -> None:
    """--no-deps: the checkpoint library and hai-run work; then click alone runs conf generate,
    and the daemon command names the extra it needs instead of a traceback."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py, bin_dir = env_dir / "bin" / "python", env_dir / "bin"
    _ok(_run(py, "-m", "pip", "install", "-q", "--no-deps", wheel))

    probe = ("import sys, hai_slurm.checkpoint as c; from hai_slurm.checkpoint import Checkpointer;"
             "third = sorted(m for m in sys.modules if m.split('.')[0] in "
             "{'click', 'sqlalchemy', 'alembic', 'redis', 'numpy'}); print(third)")
    assert _ok(_run(py, "-c", probe, cwd=tmp_path)).strip() == "[]"
    assert "usage" in _ok(_run(bin_dir / "hai-run", "--help", cwd=tmp_path)).lower()

    _ok(_run(py, "-m", "pip", "install", "-q", "click>=8.1"))
    out_dir = tmp_path / "generated"
    _ok(_run(bin_dir / "hai-slurm", "conf", "generate", EXAMPLE, "-o", out_dir, cwd=tmp_path))
    assert (out_dir / "gres.conf").is_file()
    _ok(_run(bin_dir / "hai-slurm", "config", "check", ROOT / "priority" / "examples" /
             "daemon.toml", cwd=tmp_path))

    daemon = _run(bin_dir / "hai-slurm", "daemon", "--once", cwd=tmp_path)
    assert daemon.returncode == 1
    assert "pip install 'hai-slurm[daemon]'" in daemon.stderr
    assert "Traceback" not in daemon.stderr


def test_wheel_ships_the_deploy_files(wheel: Path) -> None:
    """The systemd unit, alert rules, dashboard and upgrade note are installed with the daemon
    side (hai_slurm/priority/deploy/), not only in the source tree."""
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("hai-slurm.service", "prometheus-rules.yml", "grafana-dashboard.json",
                 "UPGRADE.md", "README.md"):
        assert f"hai_slurm/priority/deploy/{name}" in names, sorted(
            n for n in names if "deploy" in n)
