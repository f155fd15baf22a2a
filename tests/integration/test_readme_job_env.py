"""The README's example job script, unchanged, on the local testbed: what the job side resolves.

The script is README.md's ("Using it", the first ``sh`` block), read from the README itself, and
``train.py`` beside it calls ``Checkpointer.from_env()`` as the README's training loop does and
prints what it resolved, per rank; rank 0 also reads the environment of the job's batch shell
from /proc (the process running ``slurm_script``, or the ``srun`` it became with ``exec``: its
initial environment is the shell's), which works because the testbed's nodes are processes of
this host. The README's ``--team=vision`` is the account's own team, so the job is
submitted with ``--account=vision`` (an account this module adds for root and removes).

The second test narrows the step environment (``sbatch --export=PATH,SLURM_CONF``: srun inherits
``SLURM_EXPORT_ENV`` and passes only those), so the step has no HAI_* variables and the library
reads the job's record from Slurm: one ``scontrol show job`` by rank 0, shared with rank 1 through
``~/.cache/hai-slurm/jobs/<job>.<run>.json``.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Submitter, Testbed

from hai_slurm.checkpoint import job_record
from hai_slurm.slurm_plugins.entitlements import demo_entitlements

README = Path(__file__).resolve().parents[2] / "README.md"
ACCOUNT = "vision"
CLASS_QOS = ",".join(c.qos for c in demo_entitlements().classes)

TRAIN = r'''
import json, os
from pathlib import Path
from hai_slurm.checkpoint import Checkpointer

KEYS = ("HAI_CHECKPOINT_DIR", "HAI_CHECKPOINT_GRACE", "HAI_CHECKPOINT_SIGNAL")

def batch_shell_env():
    me = os.environ["SLURM_JOB_ID"]
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
            raw = (p / "environ").read_bytes().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw if "=" in kv)
        batch = (any(a.endswith(b"/slurm_script") for a in argv)
                 or os.path.basename(argv[0]) == b"srun")  # the batch shell after `exec srun`
        # The same job id may run on another testbed of this host (each numbers its jobs from
        # 1; a bench's 2,000 sleeping jobs made this test read another job's shell): the
        # submit directory and slurm.conf, where the step has them, tell this job's shell apart.
        if batch and env.get("SLURM_JOB_ID") == me and all(
                env.get(k) == os.environ[k] for k in ("SLURM_SUBMIT_DIR", "SLURM_CONF")
                if k in os.environ):
            return {k: env.get(k) for k in KEYS}
    return "not found"

ck = Checkpointer.from_env()
out = {"rank": ck.env.rank, "world": ck.env.world_size,
       "checkpoint_dir": str(ck.env.checkpoint_dir), "grace": ck.env.grace_s,
       "signal": ck.env.request_signal.name,
       "env": {k: os.environ.get(k) for k in KEYS}}
if ck.env.rank == 0:
    out["batch"] = batch_shell_env()
print("resolved " + json.dumps(out, sort_keys=True), flush=True)
ck.close()
'''


def readme_script() -> str:
    """The example job script of README.md's "Using it" section, as written there."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### Researchers", 1)[1]
    match = re.search(r"```sh\n(#!/bin/bash\n.*?)```", section, re.S)
    assert match is not None, "README.md has no example job script under '### Researchers'"
    return match.group(1)


@pytest.fixture(scope="module")
def vision_account(testbed: Testbed) -> Iterator[str]:
    """Account ``vision`` with root as a user allowed every class QOS (removed afterwards)."""
    run = testbed.run
    for argv in (["sacctmgr", "-i", "add", "account", ACCOUNT],
                 ["sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNT}"],
                 ["sacctmgr", "-i", "modify", "user", "where", "name=root", f"account={ACCOUNT}",
                  "set", f"qos={CLASS_QOS}", "defaultqos=normal"]):
        res = run(argv)
        assert res.returncode == 0 or "Nothing" in res.stdout + res.stderr, res.stderr
    yield ACCOUNT
    run(["sacctmgr", "-i", "delete", "user", "where", "name=root", f"account={ACCOUNT}"])
    run(["sacctmgr", "-i", "delete", "account", ACCOUNT])


@pytest.fixture
def ckpt_dir() -> Iterator[Path]:
    """The README's /shared/ckpt/run42; removed afterwards (with /shared if the test made it)."""
    path = Path("/shared/ckpt/run42")
    made = [p for p in (Path("/shared"), Path("/shared/ckpt"), path) if not p.exists()]
    yield path
    top = made[0] if made else path / ".hai"
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def job_dir(submit: Submitter, monkeypatch: pytest.MonkeyPatch) -> Path:
    """train.py in the submit directory; ``python`` on the submitter's PATH is this
    interpreter (the one with hai-slurm installed), no HAI_* variable in its environment."""
    (submit.workdir / "train.py").write_text(TRAIN, encoding="utf-8")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{Path('/usr/bin')}:/bin")
    for key in ("HAI_CHECKPOINT_DIR", "HAI_CHECKPOINT_GRACE", "HAI_CHECKPOINT_SIGNAL",
                "HAI_CONTROL_DIR"):
        monkeypatch.delenv(key, raising=False)
    return submit.workdir


def resolved(output: str) -> list[dict[str, object]]:
    """The ``resolved`` lines of the job's output, by rank."""
    rows = [json.loads(line.removeprefix("resolved ")) for line in output.splitlines()
            if line.startswith("resolved ")]
    return sorted(rows, key=lambda r: int(str(r["rank"])))


def run_readme_job(submit: Submitter, *args: str) -> tuple[str, list[dict[str, object]]]:
    """Submit the README script unchanged, wait until it completed; its id and resolved lines."""
    job = submit(readme_script(), args=[f"--account={ACCOUNT}", *args])
    submit.wait(job, "COMPLETED", timeout=60)
    return job, resolved(submit.output(job))


def test_readme_script_gets_its_settings_in_batch_shell_and_srun_step(
        vision_account: str, ckpt_dir: Path, job_dir: Path, submit: Submitter) -> None:
    """Both ranks of `srun python train.py` resolve /shared/ckpt/run42 and grace 120 from their
    environment, and the batch shell has the same variables."""
    job, rows = run_readme_job(submit)
    assert [r["rank"] for r in rows] == [0, 1], submit.output(job)
    want_env = {"HAI_CHECKPOINT_DIR": str(ckpt_dir), "HAI_CHECKPOINT_GRACE": "120",
                "HAI_CHECKPOINT_SIGNAL": None}
    for r in rows:
        assert (r["checkpoint_dir"], r["grace"], r["signal"], r["world"]) == (
            str(ckpt_dir), 120.0, "SIGUSR2", 2), r
        assert r["env"] == want_env, r
    assert rows[0]["batch"] == want_env, rows[0]
    assert (ckpt_dir / ".hai" / job).is_dir()  # where the daemon looks (admin_comment's dir)


def test_step_without_the_variables_reads_the_job_record_once(
        vision_account: str, ckpt_dir: Path, job_dir: Path, submit: Submitter) -> None:
    """With the step's environment narrowed to PATH and SLURM_CONF, both ranks still resolve
    the README's settings: rank 0 from `scontrol show job`, rank 1 from rank 0's shared file."""
    job, rows = run_readme_job(submit, "--export=PATH,SLURM_CONF")
    found = sorted(job_record.share_dir().glob(f"*.{job}.0.json"),
                   key=lambda p: p.stat().st_mtime)
    assert found, f"rank 0 shared no settings file for job {job}"
    shared = found[-1]
    try:
        assert [r["rank"] for r in rows] == [0, 1], submit.output(job)
        for r in rows:
            assert (r["checkpoint_dir"], r["grace"]) == (str(ckpt_dir), 120.0), r
            assert r["env"] == {"HAI_CHECKPOINT_DIR": None, "HAI_CHECKPOINT_GRACE": None,
                                "HAI_CHECKPOINT_SIGNAL": None}, r
        # the batch shell itself still has them (job_submit.lua), only the step lost them
        assert rows[0]["batch"] == {"HAI_CHECKPOINT_DIR": str(ckpt_dir),
                                    "HAI_CHECKPOINT_GRACE": "120",
                                    "HAI_CHECKPOINT_SIGNAL": None}, rows[0]
        doc = json.loads(shared.read_text())
        assert doc == {"version": 1, "job_id": job, "restart_count": 0,
                       "record": {"checkpoint_dir": str(ckpt_dir), "grace": 120}}
    finally:
        shared.unlink(missing_ok=True)


def test_an_array_task_reads_its_own_record(
        vision_account: str, ckpt_dir: Path, job_dir: Path, submit: Submitter) -> None:
    """The README script as a two-task array, with the step's environment narrowed: the task
    Slurm starts last keeps the array's id, whose `scontrol show job` prints both tasks' records;
    it reads its own (`ARRAY_TASK`) and resolves the README's settings. (Before: it failed,
    taking the second AdminComment line for a forged one.)"""
    job, rows = run_readme_job(submit, "--export=PATH,SLURM_CONF", "--array=0-1")
    for path in job_record.share_dir().glob(f"*.{job}.0.json"):
        path.unlink(missing_ok=True)
    assert [r["rank"] for r in rows] == [0, 1], submit.output(job)
    for r in rows:
        assert (r["checkpoint_dir"], r["grace"]) == (str(ckpt_dir), 120.0), r
