"""The job side's fallback: #HAI settings read back from the job's admin_comment (strict parsing,
one Slurm query per run shared with the other ranks, precedence of the environment)."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from hai_slurm.checkpoint import Checkpointer
from hai_slurm.checkpoint import job_record as jr
from hai_slurm.checkpoint.job_record import (
    JobRecord,
    admin_comment_of,
    parse_record,
    record_name,
    scontrol_show_job,
    share_path,
    shared_record,
    with_job_record,
)
from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import CheckpointError
from hai_slurm.slurm_plugins.directives import (
    HaiJobInfo,
    format_admin_comment,
    parse_admin_comment,
)

RECORD = ("hai:v1:priority=LOW;class=LOW;team=team-a;preemptible=yes;grace=33;"
          "checkpoint_dir=/tmp/x;source=directive")

# `scontrol show job 8` of Slurm 22.05.8 on the testbed (a user comment imitating the field).
SHOW_JOB = f"""JobId=8 JobName=s2.sh
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=0 Nice=0 Account=team-a QOS=low
   JobState=PENDING Reason=JobHeldUser Dependency=(null)
   Command=/tmp/hexp/s2.sh
   WorkDir=/tmp/hexp
   AdminComment={RECORD} \n   Comment=hi AdminComment=fake \n   StdErr=/dev/null
   Power=
"""


class FakeSlurm:
    """``scontrol show job`` answering from a dict of outputs, counting calls."""

    def __init__(self, outputs: Mapping[str, str]) -> None:
        self.outputs = outputs
        self.calls: list[str] = []

    def __call__(self, job_id: str, environ: Mapping[str, str]) -> str:
        self.calls.append(job_id)
        if job_id not in self.outputs:
            raise CheckpointError(f"`scontrol show job {job_id}` failed: Invalid job id specified")
        return self.outputs[job_id]


def never(job_id: str, environ: Mapping[str, str]) -> str:
    raise AssertionError("Slurm was asked although nothing needed it")


@pytest.mark.parametrize("directory", [None, "/ckpt/run42", "/a;b|c=d%e/\u00e9", "/x y/z"])
def test_records_written_by_the_plugin_twin_parse_to_the_same_settings(
        directory: str | None) -> None:
    """Whatever format_admin_comment writes (encoded characters, an admin note before it), the
    job side reads the same checkpoint dir and grace as the daemon's parser."""
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="vision", preemptible=True,
                      grace=120, source=ClassOrigin.DIRECTIVE, checkpoint_dir=directory)
    comment = format_admin_comment(info, "maintenance note|old")
    daemon = parse_admin_comment(comment)
    assert daemon is not None
    assert parse_record(comment, "1") == JobRecord(daemon.checkpoint_dir, daemon.grace)
    assert parse_record(comment, "1") == JobRecord(directory, 120)


def test_no_hai_segment_is_no_record() -> None:
    """An admin_comment without any hai: segment (job not seen by job_submit.lua) is None."""
    assert parse_record("just a note", "5") is None


@pytest.mark.parametrize(("comment", "problem"), [
    (RECORD + "|" + RECORD, "2 hai records"),
    (RECORD.replace("grace=33", "grace=33;grace=34"), "field 'grace' given twice"),
    (RECORD.replace("/tmp/x", "tmp/x"), "is not an absolute path"),
    (RECORD.replace("/tmp/x", "/tmp/x%0A/evil"), "contains a control character"),
    (RECORD.replace("/tmp/x", "/tmp/x y"), "characters job_submit.lua never writes"),
    (RECORD.replace("/tmp/x", "/tmp/%zz"), "characters job_submit.lua never writes"),
    (RECORD.replace("grace=33", "grace=0"), "grace '0'"),
    (RECORD.replace("grace=33", "grace=-1"), "grace '-1'"),
    (RECORD.replace("grace=33;", ""), "grace None"),
    (RECORD.replace("team=team-a", "team"), "'team' is not a key=value field"),
    (RECORD.replace("team=", "Team="), "'Team=team-a' is not a key=value field"),
])
def test_hostile_or_broken_records_are_clear_errors(comment: str, problem: str) -> None:
    """Anything job_submit.lua would not write stops the job with what is wrong and what to do."""
    with pytest.raises(CheckpointError, match="job 9: the hai record") as err:
        parse_record(comment, "9")
    assert problem in str(err.value)
    assert "only administrators can change it" in str(err.value)


def test_another_record_version_asks_for_the_matching_library() -> None:
    """A future hai:v2 record is not guessed at."""
    with pytest.raises(CheckpointError, match="version 'v2', this library reads v1"):
        parse_record("hai:v2:checkpoint_dir=/x", "9")


def test_admin_comment_is_taken_from_its_own_line_not_a_lookalike() -> None:
    """The real AdminComment line is used; a comment containing 'AdminComment=' is not."""
    assert admin_comment_of(SHOW_JOB, "8") == RECORD


def test_a_second_admin_comment_line_is_refused() -> None:
    """A working directory with a line break imitating the field makes the output ambiguous."""
    hostile = SHOW_JOB.replace("   WorkDir=/tmp/hexp\n",
                               "   WorkDir=/tmp/a\n   AdminComment=hai:v1:grace=1;"
                               "checkpoint_dir=/evil\n")
    with pytest.raises(CheckpointError, match="printed 2 AdminComment lines"):
        admin_comment_of(hostile, "8")


def test_output_of_another_job_is_refused() -> None:
    """The output must describe the job asked about."""
    with pytest.raises(CheckpointError, match="did not describe job 80"):
        admin_comment_of(SHOW_JOB, "80")


def test_missing_or_null_admin_comment_is_none() -> None:
    """No AdminComment line, or an empty one: no record."""
    assert admin_comment_of("JobId=3 JobName=x\n   Comment=(null) \n", "3") is None
    assert admin_comment_of("JobId=3 JobName=x\n   AdminComment= \n", "3") is None


def environ(**extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "8", "PATH": os.environ.get("PATH", ""), **extra}


def test_missing_settings_are_filled_from_the_record(tmp_path: Path) -> None:
    """No HAI_* in the step's environment: both come from the job's record."""
    slurm = FakeSlurm({"8": SHOW_JOB})
    out = with_job_record(environ(), rank=0, restart=0, show_job=slurm, directory=tmp_path)
    assert (out["HAI_CHECKPOINT_DIR"], out["HAI_CHECKPOINT_GRACE"]) == ("/tmp/x", "33")
    assert slurm.calls == ["8"]


def test_the_users_variables_win(tmp_path: Path) -> None:
    """An explicit HAI_CHECKPOINT_GRACE is kept; an explicit HAI_CHECKPOINT_DIR means no query."""
    slurm = FakeSlurm({"8": SHOW_JOB})
    out = with_job_record(environ(HAI_CHECKPOINT_GRACE="5"), rank=0, restart=0, show_job=slurm,
                          directory=tmp_path)
    assert (out["HAI_CHECKPOINT_DIR"], out["HAI_CHECKPOINT_GRACE"]) == ("/tmp/x", "5")
    given = environ(HAI_CHECKPOINT_DIR="/mine")
    assert with_job_record(given, rank=0, restart=0, show_job=never,
                           directory=tmp_path) == given


def test_nothing_is_looked_up_outside_slurm(tmp_path: Path) -> None:
    """Without SLURM_JOB_ID the environment is returned as it is."""
    assert with_job_record({"PATH": "/bin"}, rank=0, restart=0, show_job=never,
                           directory=tmp_path) == {"PATH": "/bin"}


def _array_task(job_id: int, task: int) -> str:
    """One task's record as ``scontrol show job`` prints it (Slurm 22.05 on the testbed)."""
    return (f"JobId={job_id} ArrayJobId=100 ArrayTaskId={task} JobName=b.sh\n"
            "   UserId=root(0) GroupId=root(0) MCS_label=N/A\n"
            f"   AdminComment={RECORD} \n   StdErr=/dev/null\n")


def test_an_array_task_reads_its_own_record_even_as_the_head_task(tmp_path: Path) -> None:
    """The task started last keeps the array's id (100), and `scontrol show job 100` prints
    every task (three AdminComment lines, refused as ambiguous): the record is read as
    ``100_3``, which prints that task alone (measured on the testbed, 22.05). (Before: an
    array's head task with --export=NONE failed.)"""
    every = _array_task(100, 3) + _array_task(102, 2) + _array_task(101, 1)
    slurm = FakeSlurm({"100": every, "100_3": _array_task(100, 3)})
    head = environ(SLURM_JOB_ID="100", SLURM_ARRAY_JOB_ID="100", SLURM_ARRAY_TASK_ID="3")
    out = with_job_record(head, rank=0, restart=0, show_job=slurm, directory=tmp_path)
    assert (out["HAI_CHECKPOINT_DIR"], out["HAI_CHECKPOINT_GRACE"]) == ("/tmp/x", "33")
    assert slurm.calls == ["100_3"]
    assert record_name("101", environ(SLURM_JOB_ID="101", SLURM_ARRAY_JOB_ID="100",
                                      SLURM_ARRAY_TASK_ID="1")) == "100_1"


def test_a_heterogeneous_job_reads_its_leaders_record() -> None:
    """A het job's id prints every component: the leader's record is read as ``JOB+0``
    (every component has the same defaults: job_submit refuses #HAI lines in a het job);
    any other job by its id."""
    het = {"SLURM_JOB_ID_HET_GROUP_0": "98", "SLURM_JOB_ID_HET_GROUP_1": "99"}
    assert record_name("98", environ(SLURM_JOB_ID="98", **het)) == "98+0"
    assert record_name("8", environ()) == "8"


def test_one_query_per_step_shared_with_every_rank(tmp_path: Path) -> None:
    """Rank 0 asks Slurm once per step; ranks 1-3 read the shared file, named by cluster, job
    and run."""
    slurm = FakeSlurm({"8": SHOW_JOB})
    env = environ(SLURM_CLUSTER_NAME="gpu/a")
    got = [shared_record("8", 2, 0, env, show_job=slurm, directory=tmp_path)]
    got += [shared_record("8", 2, r, env, show_job=never, directory=tmp_path)
            for r in (1, 2, 3)]
    assert got == [JobRecord("/tmp/x", 33)] * 4
    assert slurm.calls == ["8"]
    shared = tmp_path / "gpu_a.8.2.json"
    assert share_path("8", 2, env, tmp_path) == shared
    assert stat.S_IMODE(shared.stat().st_mode) == 0o600
    # a later step asks again (it cannot tell this run's file from an earlier job's of that id)
    shared_record("8", 2, 0, env, show_job=slurm, directory=tmp_path)
    assert slurm.calls == ["8", "8"]


def test_an_old_file_of_a_reused_job_id_is_never_used(tmp_path: Path) -> None:
    """A file left by an earlier job of the same id (another test bed, a reinstalled cluster)
    is overwritten by rank 0 and ignored by the other ranks, who wait for this step's."""
    stale = share_path("8", 0, environ(), tmp_path)
    stale.write_text(json.dumps({"version": 1, "job_id": "8", "restart_count": 0, "record": {
        "checkpoint_dir": "/elsewhere", "grace": 5}}))
    stale.chmod(0o600)
    old = time.time() - 3600
    os.utime(stale, (old, old))
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(CheckpointError, match="within 1 s"):
        shared_record("8", 0, 1, environ(), show_job=never, directory=tmp_path, timeout_s=1,
                      clock=lambda: now[0], sleep=sleep)
    slurm = FakeSlurm({"8": SHOW_JOB})
    assert shared_record("8", 0, 0, environ(), show_job=slurm, directory=tmp_path) == \
        JobRecord("/tmp/x", 33)
    assert slurm.calls == ["8"]
    assert shared_record("8", 0, 1, environ(), show_job=never, directory=tmp_path) == \
        JobRecord("/tmp/x", 33)


def test_a_job_without_record_is_shared_as_such(tmp_path: Path) -> None:
    """Rank 0 finds no hai record; the other ranks learn 'none' instead of waiting."""
    slurm = FakeSlurm({"8": "JobId=8 JobName=x\n   AdminComment=note \n"})
    assert shared_record("8", 0, 0, environ(), show_job=slurm, directory=tmp_path) is None
    assert shared_record("8", 0, 1, environ(), show_job=never, directory=tmp_path) is None


def test_rank_zero_failure_reaches_the_other_ranks(tmp_path: Path) -> None:
    """If rank 0's query fails, every rank stops with rank 0's reason."""
    slurm = FakeSlurm({})
    with pytest.raises(CheckpointError, match="Invalid job id"):
        shared_record("8", 0, 0, environ(), show_job=slurm, directory=tmp_path)
    with pytest.raises(CheckpointError, match=r"rank 0 could not read .*Invalid job id"):
        shared_record("8", 0, 1, environ(), show_job=never, directory=tmp_path)


def test_other_ranks_give_up_with_advice(tmp_path: Path) -> None:
    """No file from rank 0 within the timeout: an error naming the file and the fixes."""
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(CheckpointError, match=r"rank 3: .* within 1 s .*SLURM_EXPORT_ENV=ALL"):
        shared_record("8", 0, 3, environ(), show_job=never, directory=tmp_path, timeout_s=1,
                      clock=lambda: now[0], sleep=sleep)


def test_a_shared_file_others_could_write_is_refused(tmp_path: Path) -> None:
    """A group-writable settings file is not trusted."""
    shared_record("8", 0, 0, environ(), show_job=FakeSlurm({"8": SHOW_JOB}), directory=tmp_path)
    share_path("8", 0, environ(), tmp_path).chmod(0o620)
    with pytest.raises(CheckpointError, match="writable by group/others"):
        shared_record("8", 0, 1, environ(), show_job=never, directory=tmp_path)


def test_a_shared_file_of_another_job_is_refused(tmp_path: Path) -> None:
    """A file whose content names another job is refused, not used."""
    shared_record("8", 0, 0, environ(), show_job=FakeSlurm({"8": SHOW_JOB}), directory=tmp_path)
    share_path("8", 0, environ(), tmp_path).rename(share_path("9", 0, environ(), tmp_path))
    with pytest.raises(CheckpointError, match="not a settings file of job 9 run 0"):
        shared_record("9", 0, 1, environ(), show_job=never, directory=tmp_path)


def fake_scontrol(tmp_path: Path, output: str) -> dict[str, str]:
    """An environment whose PATH starts with a `scontrol` printing ``output``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "out.txt").write_text(output)
    exe = bin_dir / "scontrol"
    exe.write_text(f"#!/bin/sh\n[ \"$1 $2 $3\" = 'show job 8' ] || exit 1\n"
                   f"cat {bin_dir / 'out.txt'}\n")
    exe.chmod(0o755)
    return {"SLURM_JOB_ID": "8", "PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_from_env_reads_the_record_when_the_step_lacks_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpointer.from_env() in a step without HAI_*: the README settings, via scontrol."""
    ckpt = tmp_path / "ck"
    env = fake_scontrol(tmp_path, SHOW_JOB.replace("/tmp/x", str(ckpt)))
    monkeypatch.setattr(jr, "share_dir", lambda: tmp_path / "share")
    with Checkpointer.from_env(environ=env, install_signals=False) as ck:
        assert (ck.env.checkpoint_dir, ck.env.grace_s) == (ckpt, 33.0)


def test_from_env_without_record_dir_says_what_to_add(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose record has no checkpoint_dir: the old 'no checkpoint directory' advice."""
    env = fake_scontrol(tmp_path, SHOW_JOB.replace(";checkpoint_dir=/tmp/x", ""))
    monkeypatch.setattr(jr, "share_dir", lambda: tmp_path / "share")
    with pytest.raises(CheckpointError, match=r"no checkpoint directory.*#HAI --checkpoint-dir"):
        Checkpointer.from_env(environ=env, install_signals=False)


def test_scontrol_failure_is_reported(tmp_path: Path) -> None:
    """scontrol's own error text is in the message."""
    env = fake_scontrol(tmp_path, SHOW_JOB)
    with pytest.raises(CheckpointError, match="`scontrol show job 9` failed"):
        scontrol_show_job("9", env)


def test_hai_run_fills_the_settings_in_for_itself_and_its_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hai-run in a step without HAI_*: its control directory is under the record's checkpoint
    directory and the child sees HAI_CHECKPOINT_DIR/GRACE."""
    from hai_slurm.checkpoint.run import run

    ckpt = tmp_path / "ck"
    env = fake_scontrol(tmp_path, SHOW_JOB.replace("/tmp/x", str(ckpt)))
    monkeypatch.setattr(jr, "share_dir", lambda: tmp_path / "share")
    seen = tmp_path / "seen"
    rc = run(["--", "/bin/sh", "-c", f'echo "$HAI_CHECKPOINT_DIR $HAI_CHECKPOINT_GRACE" > {seen}'],
             env)
    assert rc == 0
    assert seen.read_text() == f"{ckpt} 33\n"
    assert (ckpt / ".hai" / "8" / "phase.json").is_file()
