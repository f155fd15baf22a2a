"""Attacks by one real, unprivileged Unix user on another's checkpoints, and on the testbed's
secrets, blocked.

Two throwaway users (``useradd``, removed afterwards) act through ``runuser``: ``alice`` trains,
``mallory`` plants and squats. They run the job side as a user would, with the system's
``python3`` and a world-readable copy of the job-side package (standard library only: the test's
virtual environment under /root is not readable by them). The testbed tests read every process's
command line, as any local user can, and talk to Redis as ``mallory``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Testbed

import hai_slurm
from hai_slurm.testbed.services import redis_password, storage_password

pytestmark = pytest.mark.integration

PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Users:
    """The two users, the job-side package they import, and a shared sticky directory."""

    alice: str
    mallory: str
    pkg: Path
    shared: Path

    def run(self, user: str, code: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run Python ``code`` as ``user`` with the job-side package importable."""
        argv = ["runuser", "-u", user, "--", "env", f"PYTHONPATH={self.pkg}",
                *(f"{k}={v}" for k, v in env.items()), PYTHON, "-c", textwrap.dedent(code)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              cwd="/")

    def sh(self, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True,
                              text=True, timeout=30, check=False, cwd="/")

    def uid(self, user: str) -> int:
        return pwd.getpwnam(user).pw_uid


def _job_side_copy(into: Path) -> Path:
    """hai_slurm/{__init__,errors}.py and hai_slurm/checkpoint/, readable by everyone."""
    src = Path(hai_slurm.__file__).parent
    pkg = into / "pkg"
    (pkg / "hai_slurm").mkdir(parents=True)
    for name in ("__init__.py", "errors.py"):
        shutil.copy(src / name, pkg / "hai_slurm" / name)
    shutil.copytree(src.parent / "checkpoint", pkg / "hai_slurm" / "checkpoint",
                    ignore=shutil.ignore_patterns("__pycache__", "*.md"))
    for path in [pkg, *pkg.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return pkg


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Users]:
    """Create alice and mallory (unique names), remove them and their files afterwards."""
    tag = f"{os.getpid() % 100000}"
    names = (f"haisec{tag}a", f"haisec{tag}m")
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name], check=True)
    base = Path("/var/tmp") / f"hai-security-{tag}"
    try:
        base.mkdir(mode=0o755)
        pkg = _job_side_copy(base)
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o1777)  # like /tmp or a project scratch dir: everyone may create entries
        yield Users(names[0], names[1], pkg, shared)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for name in names:
            subprocess.run(["userdel", name], check=False)


SAVE = """
    import sys
    from hai_slurm.checkpoint import Checkpointer
    ck = Checkpointer.from_env(install_signals=False, serializer="json")
    ck.save({"step": int(sys.argv[1]) if len(sys.argv) > 1 else 1, "owner": "alice"})
    ck.close()
"""
LOAD = """
    import json
    from hai_slurm.checkpoint import Checkpointer
    from hai_slurm.errors import CheckpointError
    try:
        ck = Checkpointer.from_env(install_signals=False, serializer="json")
    except CheckpointError as err:
        print(json.dumps({"error": str(err)}))
    else:
        print(json.dumps({"state": ck.load_latest()}))
        ck.close()
"""


def _env(run_dir: Path, rank: int = 0) -> dict[str, str]:
    return {"HAI_CHECKPOINT_DIR": str(run_dir), "SLURM_JOB_ID": "4242",
            "SLURM_PROCID": str(rank)}


def _load(users: Users, run_dir: Path, rank: int = 0) -> dict[str, object]:
    res = users.run(users.alice, LOAD, **_env(run_dir, rank))
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def _plant(users: Users, run_dir: Path) -> None:
    """mallory writes a complete, checksummed JSON checkpoint (step 999) into run_dir."""
    code = f"""
        import hashlib, json, pathlib, time
        d = pathlib.Path({str(run_dir)!r})
        payload = json.dumps({{"hai_checkpoint": 1, "step": 999, "rng": {{}},
                               "state": {{"step": 999, "owner": "mallory"}}}}).encode()
        name = "ckpt-00000099-step999.json"
        (d / name).write_bytes(payload)
        info = {{"file": name, "seq": 99, "step": 999, "size": len(payload),
                "sha256": hashlib.sha256(payload).hexdigest(), "time": time.time(),
                "serializer": "json", "format": 1, "job_id": "4242", "restart_count": 0}}
        (d / "ckpt-00000099-step999.meta.json").write_text(json.dumps(info))
    """
    res = users.run(users.mallory, code)
    assert res.returncode == 0, res.stderr


def test_json_checkpoint_planted_by_another_user_is_not_loaded(users: Users) -> None:
    """alice's run dir is world-writable for a while; mallory plants a valid JSON checkpoint.
    Rank 0 refuses the directory (naming the chmod), rank 1 loads nothing from it; once alice
    fixes the mode, her own checkpoint is loaded and mallory's, still there, is skipped."""
    run_dir = users.shared / "alice-json"
    assert users.sh(users.alice, "mkdir", str(run_dir)).returncode == 0
    res = users.run(users.alice, SAVE, **_env(run_dir))
    assert res.returncode == 0, res.stderr
    assert users.sh(users.alice, "chmod", "777", str(run_dir)).returncode == 0
    _plant(users, run_dir)

    out = _load(users, run_dir, rank=0)
    assert "writable by group or others" in str(out.get("error")), out
    assert f"chmod go-w {run_dir}" in str(out["error"])
    assert _load(users, run_dir, rank=1) == {"state": None}

    assert users.sh(users.alice, "chmod", "755", str(run_dir)).returncode == 0
    assert (run_dir / "ckpt-00000099-step999.json").stat().st_uid == users.uid(users.mallory)
    assert _load(users, run_dir, rank=0) == {"state": {"step": 1, "owner": "alice"}}


def test_checkpoint_dir_squatted_by_another_user_is_refused(users: Users) -> None:
    """mallory creates the directory alice's job will use before the job starts: alice's job
    stops with an error naming the directory and mallory, and writes nothing there."""
    run_dir = users.shared / "alice-squat"
    assert users.sh(users.mallory, "mkdir", "-m", "777", str(run_dir)).returncode == 0
    out = _load(users, run_dir)
    assert f"checkpoint directory {run_dir} belongs to uid {users.uid(users.mallory)} " \
           f"({users.mallory})" in str(out.get("error")), out
    assert list(run_dir.iterdir()) == []


def test_hai_parent_squatted_by_another_user_is_refused(users: Users) -> None:
    """mallory made ``.hai`` while alice's dir was open; alice has since closed it. The job
    refuses the control directory's parent instead of acknowledging where the daemon won't
    trust it (or failing later with a bare EACCES)."""
    run_dir = users.shared / "alice-hai"
    assert users.sh(users.alice, "mkdir", "-m", "777", str(run_dir)).returncode == 0
    assert users.sh(users.mallory, "mkdir", "-m", "777", str(run_dir / ".hai")).returncode == 0
    assert users.sh(users.alice, "chmod", "755", str(run_dir)).returncode == 0
    out = _load(users, run_dir)
    assert f"control directory parent {run_dir / '.hai'} belongs to uid " \
           f"{users.uid(users.mallory)}" in str(out.get("error")), out


def test_a_job_of_its_own_user_starts_in_a_shared_sticky_dir(users: Users) -> None:
    """The checks do not get in the way: a fresh run dir in a 1777 scratch dir just works."""
    run_dir = users.shared / "alice-ok" / "run1"
    res = users.run(users.alice, SAVE, **_env(run_dir))
    assert res.returncode == 0, res.stderr
    assert _load(users, run_dir) == {"state": {"step": 1, "owner": "alice"}}


def _cmdlines() -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace"))
            except OSError:
                continue
    return out


def test_no_testbed_password_in_any_command_line(testbed: Testbed) -> None:
    """Any local user can read /proc/PID/cmdline: neither the MariaDB nor the Redis password is
    in any process's argv (slurmdbd, mariadbd and redis-server are running)."""
    secrets = [redis_password(testbed.state_dir)]
    if testbed.shape.accounting:
        secrets.append(storage_password(testbed.state_dir))
    lines = _cmdlines()
    assert any("redis-server" in ln for ln in lines)
    assert not [ln for ln in lines for s in secrets if s in ln]
    for name in ("redis/password", "redis/redis.conf", "mariadb/slurm-password",
                 "etc/slurmdbd.conf"):
        path = testbed.state_dir / name
        if path.exists():
            assert path.stat().st_mode & 0o077 == 0, path


def test_redis_refuses_another_user_without_the_password(testbed: Testbed,
                                                         users: Users) -> None:
    """mallory's PING gets NOAUTH; the testbed's URL (the daemon's and the demo's) works."""
    port = str(testbed.ports.redis)
    res = users.sh(users.mallory, "redis-cli", "-p", port, "ping")
    assert "NOAUTH" in res.stdout + res.stderr, res
    res = users.sh(users.mallory, "redis-cli", "-p", port, "config", "get", "requirepass")
    assert redis_password(testbed.state_dir) not in res.stdout
    import redis

    assert redis.Redis.from_url(testbed.redis_url).ping() is True
