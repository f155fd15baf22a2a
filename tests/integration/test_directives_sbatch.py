"""#HAI directives through real sbatch and slurmctld's job_submit/lua plugin.

The cluster is the session testbed (fixture ``testbed`` from tests/integration/conftest.py); it
installs slurm_plugins/job_submit.lua and hai_entitlements.lua (the demo table: team-a up to
VERY_HIGH, team-b up to HIGH) beside slurm.conf, which a module fixture checks.
``HAI_DIRECTIVES_SLURM_CONF`` points the tests at another running cluster with the same files
instead. Jobs are submitted held and cancelled when each test ends; the non-admin user ``nobody``
gets an association in team-b for the module and loses it afterwards.

Each rejection is compared with the Python twin: sbatch must print every line of
``evaluate_submission``'s message, so the plugin that really runs in slurmctld says what the unit
tests (which compare Lua and Python) say it says.

Every command goes through :class:`Cluster` (``command`` builds the argv, ``etc_text`` reads a
file beside slurm.conf), so tests/matrix/test_matrix_directives.py runs these same tests on the
Docker testbed of each Slurm release by overriding the ``access`` fixture with a ``docker exec``
variant.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import DirectiveError
from hai_slurm.slurm_plugins import entitlements as entitlements_module
from hai_slurm.slurm_plugins.directives import HaiJobInfo, parse_admin_comment
from hai_slurm.slurm_plugins.entitlements import demo_entitlements
from hai_slurm.slurm_plugins.submit_check import evaluate_submission

pytestmark = pytest.mark.integration

SH = "#!/bin/bash\n"
BODY = "sleep 300\n"
CLASS_QOS = ",".join(c.qos for c in demo_entitlements().classes)
PLUGINS = Path(entitlements_module.__file__).parent
OTHER_USER = "nobody"  # a non-admin submitter: its association is added by a fixture


class Cluster:
    """sbatch/scontrol against one cluster; remembers and cancels the jobs it submits."""

    #: A directory that jobs on every node and :meth:`run` see alike (the local testbed's nodes
    #: are processes of this host).
    scratch_root = "/tmp"

    def __init__(self, slurm_conf: str) -> None:
        self.env = {**os.environ, "SLURM_CONF": slurm_conf}
        self.jobs: list[str] = []

    def fresh(self) -> Cluster:
        """Another handle on the same cluster with no jobs remembered."""
        return Cluster(self.env["SLURM_CONF"])

    def command(self, argv: list[str], user: str | None) -> list[str]:
        """The argv that runs ``argv`` against the cluster, as ``user`` if given."""
        if user is None:
            return argv
        return ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.env['SLURM_CONF']}", *argv]

    def etc_text(self, name: str) -> str | None:
        """A file beside the cluster's slurm.conf, or None if it is missing."""
        path = Path(self.env["SLURM_CONF"]).parent / name
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def run(self, argv: list[str], *, user: str | None = None, stdin: str | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(argv, user), capture_output=True, text=True,
                              env=self.env, input=stdin, timeout=timeout, check=False)

    def sbatch(self, script: str, *args: str, user: str | None = None,
               ) -> subprocess.CompletedProcess[str]:
        """Submit ``script`` (on standard input, so any user can read it), held."""
        res = self.run(["sbatch", "--parsable", "--hold", "--output=/dev/null", "--chdir=/",
                        *args], user=user, stdin=script)
        if res.returncode == 0:
            self.jobs.append(res.stdout.strip().split(";")[0])
        return res

    def run_job(self, script: str, output: str, *args: str, env: tuple[str, ...] = (),
                timeout: float = 60) -> str:
        """Submit ``script`` to run now (``env``: NAME=value set for sbatch), wait until Slurm
        has forgotten it or it ended, and return its output file's text."""
        res = self.run(["env", *env, "sbatch", "--parsable", f"--output={output}", "--chdir=/",
                        *args], stdin=script)
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().split(";")[0]
        self.jobs.append(job)
        end = time.monotonic() + timeout
        state = "?"
        while time.monotonic() < end:
            q = self.run(["squeue", "-h", "-j", job, "-o", "%T"])
            state = q.stdout.strip()
            if q.returncode == 0 and state in ("", "COMPLETED", "FAILED"):
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"job {job} did not end within {timeout:g} s (now {state})")
        return self.run(["cat", output]).stdout

    def show(self, job: str) -> dict[str, str]:
        res = self.run(["scontrol", "show", "job", "-o", job])
        assert res.returncode == 0, res.stderr
        fields = dict(re.findall(r"(\w+)=(\S*)", res.stdout))
        return fields

    def cancel_all(self) -> None:
        if self.jobs:
            self.run(["scancel", *self.jobs])


@pytest.fixture(scope="module")
def access(request: pytest.FixtureRequest) -> Cluster:
    """The cluster under test (no jobs of its own; ``cluster`` makes one handle per test)."""
    override = os.environ.get("HAI_DIRECTIVES_SLURM_CONF")
    if override:
        return Cluster(override)
    return Cluster(str(request.getfixturevalue("testbed").slurm_conf))


@pytest.fixture(scope="module")
def installed(access: Cluster) -> None:
    """The cluster runs this tree's job_submit.lua and table, not a stale copy."""
    for name in ("job_submit.lua", "hai_entitlements.lua"):
        ours = (PLUGINS / name).read_text(encoding="utf-8")
        assert access.etc_text(name) == ours, (
            f"{name} beside slurm.conf is missing or differs from slurm_plugins/{name}; restart "
            "the testbed (it copies both files at `up`)")


@pytest.fixture
def cluster(access: Cluster, installed: None) -> Iterator[Cluster]:
    c = access.fresh()
    yield c
    c.cancel_all()


@pytest.fixture(scope="module")
def other_user_name(access: Cluster) -> str:
    """A non-admin user that exists where the cluster's commands run."""
    if access.run(["id", "-u", OTHER_USER]).returncode != 0:
        pytest.skip(f"no user {OTHER_USER!r} to submit as")
    return OTHER_USER


@pytest.fixture(scope="module")
def other_user(access: Cluster, other_user_name: str) -> Iterator[str]:
    """A non-admin user of account team-b allowed every class QOS (removed afterwards)."""

    def sacctmgr(*args: str) -> None:
        res = access.run(["sacctmgr", "-i", *args])
        assert res.returncode == 0 or "Nothing" in res.stdout + res.stderr, res.stderr

    sacctmgr("add", "user", other_user_name, "account=team-b")
    sacctmgr("modify", "user", "where", f"name={other_user_name}", "account=team-b", "set",
             f"qos={CLASS_QOS}", "defaultqos=normal")
    yield other_user_name
    sacctmgr("delete", "user", "where", f"name={other_user_name}", "account=team-b")


def expected_rejection(script: str, account: str, qos: str | None = None) -> str:
    try:
        evaluate_submission(script, account=account, qos=qos, admin_comment=None,
                            table=demo_entitlements())
    except DirectiveError as err:
        return str(err)
    raise AssertionError("the Python twin accepts this script; the case is wrong")


REJECTED = [
    ("typo-class", SH + "#HAI --priority=HIGHT\n" + BODY, "team-a", None),
    ("typo-option", SH + "#SBATCH -N1\n#HAI --priorty=HIGH\n" + BODY, "team-a", None),
    ("duplicate", SH + "#HAI --priority=HIGH\n#HAI --priority=LOW\n" + BODY, "team-a", None),
    ("bad-grace", SH + "#HAI --grace=soon --priority=LOW\n" + BODY, "team-a", None),
    ("unauthorized-class", SH + "#HAI --priority=VERY_HIGH\n" + BODY, "team-b", None),
    ("unauthorized-team", SH + "#HAI --team=team-a\n" + BODY, "team-b", None),
    ("preemptible-no", SH + "#HAI --priority=HIGH --preemptible=no\n" + BODY, "team-a", None),
    ("grace-over-cap", SH + "#HAI --priority=LOW --grace=500\n" + BODY, "team-a", None),
    ("qos-contradicts", SH + "#HAI --priority=HIGH\n" + BODY, "team-a", "low"),
    ("qos-not-a-class", SH + BODY, "team-a", "extreme_high_not"),
    ("nbsp-after-prefix", SH + "#HAI\u00a0--priority=HIGH\n" + BODY, "team-a", None),
    ("quoted-value", SH + '#HAI --priority="HIGH"\n' + BODY, "team-a", None),
    ("dir-with-shell-variable", SH + "#HAI --checkpoint-dir=/scratch/$USER/ck\n" + BODY,
     "team-a", None),
]


@pytest.mark.parametrize(("script", "account", "qos"), [r[1:] for r in REJECTED],
                         ids=[r[0] for r in REJECTED])
def test_bad_directives_are_rejected_by_sbatch_with_the_message(
        cluster: Cluster, script: str, account: str, qos: str | None) -> None:
    """sbatch fails and prints every line of the message: line, value, what is allowed."""
    args = [f"--account={account}"] + ([f"--qos={qos}"] if qos else [])
    res = cluster.sbatch(script, *args)
    assert res.returncode != 0, f"sbatch accepted the job: {res.stdout}"
    printed = [line.removeprefix("sbatch: error: ") for line in res.stderr.splitlines()]
    expected = expected_rejection(script, account, qos).splitlines()
    assert printed[:len(expected)] == expected, res.stderr


def test_good_directives_land_in_admin_comment_and_qos(cluster: Cluster) -> None:
    """An allowed job gets the class's QOS and the normalized record in admin_comment."""
    script = (SH + "#SBATCH --job-name=hai-directives\n# setup\n#HAI --priority=very_high "
              "--grace=90\n#HAI --checkpoint-dir /ckpt/x --preemptible=no\n" + BODY)
    res = cluster.sbatch(script, "--account=team-a")
    assert res.returncode == 0, res.stderr
    fields = cluster.show(cluster.jobs[-1])
    assert fields["QOS"] == "very_high"
    assert parse_admin_comment(fields["AdminComment"]) == HaiJobInfo(
        priority="VERY_HIGH", job_class="VERY_HIGH", team="team-a", preemptible=False,
        grace=90, source=ClassOrigin.DIRECTIVE, checkpoint_dir="/ckpt/x")


def test_job_without_directives_gets_the_default_class(cluster: Cluster) -> None:
    """No #HAI line: the account's default class, recorded as such."""
    res = cluster.sbatch(SH + BODY, "--account=team-b")
    assert res.returncode == 0, res.stderr
    fields = cluster.show(cluster.jobs[-1])
    info = parse_admin_comment(fields["AdminComment"])
    assert fields["QOS"] == "normal"
    assert info is not None and (info.job_class, info.team, info.source) == (
        "NORMAL", "team-b", ClassOrigin.DEFAULT)


def test_directive_after_first_command_is_ignored_with_a_warning(cluster: Cluster) -> None:
    """sbatch accepts the job, tells the user which line was ignored, and the class stays."""
    res = cluster.sbatch(SH + "#HAI --priority=LOW\nhostname\n#HAI --priority=HIGH\n" + BODY,
                         "--account=team-a")
    assert res.returncode == 0, res.stderr
    assert ("hai-slurm: line 4 (#HAI --priority=HIGH): ignored, it comes after the first "
            "command on line 3") in res.stderr
    assert cluster.show(cluster.jobs[-1])["QOS"] == "low"


def test_owner_rewriting_comment_gains_nothing(cluster: Cluster, other_user: str) -> None:
    """A non-admin owner may rewrite `comment`, but admin_comment and QOS stay what we set."""
    deadline = time.monotonic() + 20  # slurmctld learns the new association from slurmdbd
    while True:
        res = cluster.sbatch(SH + "#HAI --priority=HIGH\n" + BODY, "--account=team-b",
                             user=other_user)
        if res.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert res.returncode == 0, res.stderr
    job = cluster.jobs[-1]
    before = cluster.show(job)
    forged = ("hai:v1:priority=EXTREME_HIGH;class=EXTREME_HIGH;team=team-b;preemptible=no;"
              "grace=1800;source=directive")
    edit = cluster.run(["scontrol", "update", f"JobId={job}", f"Comment={forged}"],
                       user=other_user)
    assert edit.returncode == 0, edit.stderr  # the owner may change comment...
    refused = cluster.run(["scontrol", "update", f"JobId={job}", f"AdminComment={forged}"],
                          user=other_user)
    assert refused.returncode != 0  # ...but not admin_comment (Slurm's rule)
    qos = cluster.run(["scontrol", "update", f"JobId={job}", "QOS=extreme_high"],
                      user=other_user)
    assert qos.returncode != 0  # ...nor the QOS (job_submit.lua's slurm_job_modify)
    requeue = cluster.run(["scontrol", "update", f"JobId={job}", "Requeue=0"], user=other_user)
    assert requeue.returncode != 0  # ...nor turn requeue off: it makes a job non-preemptible
    after = cluster.show(job)
    assert after["Requeue"] == "1"
    assert after["Comment"] == forged
    assert (after["AdminComment"], after["QOS"]) == (before["AdminComment"], "high")
    info = parse_admin_comment(after["AdminComment"])
    assert info is not None and info.job_class == "HIGH" and info.preemptible


def test_no_requeue_needs_a_class_that_allows_non_preemptible(cluster: Cluster) -> None:
    """sbatch --no-requeue makes a job non-preemptible (Slurm will not requeue it): refused
    for a class that does not allow that, with job_submit's message (before: accepted, so
    anyone could opt out of preemption), accepted for one that does, recorded
    preemptible=no."""
    res = cluster.sbatch(SH + BODY, "--account=team-a", "--no-requeue")
    assert res.returncode != 0, f"sbatch accepted the job: {res.stdout}"
    assert ("sbatch --no-requeue makes a job non-preemptible (Slurm cannot requeue it after it "
            "saves), which class NORMAL does not allow") in res.stderr, res.stderr
    res = cluster.sbatch(SH + "#HAI --priority=VERY_HIGH\n" + BODY, "--account=team-a",
                         "--no-requeue")
    assert res.returncode == 0, res.stderr
    fields = cluster.show(cluster.jobs[-1])
    info = parse_admin_comment(fields["AdminComment"])
    assert fields["Requeue"] == "0"
    assert info is not None and info.job_class == "VERY_HIGH" and not info.preemptible


def test_a_heterogeneous_job_takes_no_directives(cluster: Cluster) -> None:
    """slurmctld runs job_submit once per component of a heterogeneous job and only the first
    carries the script, so #HAI lines would reach that component alone: refused, saying so
    (before: the other components ran as preemptible NORMAL jobs); one without #HAI lines is
    accepted."""
    het = "#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n1\n"
    res = cluster.sbatch(SH + "#HAI --priority=HIGH\n" + het + BODY, "--account=team-a")
    assert res.returncode != 0, f"sbatch accepted the job: {res.stdout}"
    assert "#HAI directives are not supported in a heterogeneous job" in res.stderr, res.stderr
    res = cluster.sbatch(SH + het + BODY, "--account=team-a")
    assert res.returncode == 0, res.stderr


def test_empty_account_is_the_users_default_account(cluster: Cluster, other_user: str) -> None:
    """`--account=` (empty) is checked as the submitter's default account (team-b, up to HIGH),
    not as the '*' rule (every class): VERY_HIGH is rejected naming team-b. (Slurm 22.05 itself
    then refuses an empty account that got past us: "Invalid account".)"""
    deadline = time.monotonic() + 20  # slurmctld learns the new association from slurmdbd
    while True:
        res = cluster.sbatch(SH + "#HAI --priority=VERY_HIGH\n" + BODY, "--account=",
                             user=other_user)
        if "may not use" in res.stderr or res.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert res.returncode != 0, f"sbatch accepted the job: {res.stdout}"
    assert "account 'team-b' may not use class VERY_HIGH" in res.stderr, res.stderr
    res = cluster.sbatch(SH + "#HAI --priority=HIGH\n" + BODY, "--account=", user=other_user)
    assert res.returncode != 0 and "Invalid account" in res.stderr, res.stderr


def test_auto_is_recorded_with_a_provisional_class(cluster: Cluster) -> None:
    """AUTO stays AUTO in the record for the daemon to resolve; the job gets the default QOS."""
    res = cluster.sbatch(SH + "#HAI --priority=Auto\n" + BODY, "--account=team-b")
    assert res.returncode == 0, res.stderr
    fields = cluster.show(cluster.jobs[-1])
    info = parse_admin_comment(fields["AdminComment"])
    assert fields["QOS"] == "normal"
    assert info is not None and (info.priority, info.job_class) == ("AUTO", "NORMAL")


ENV_SCRIPT = (SH + "#SBATCH -N 2\n#HAI --checkpoint-dir=/ckpt/env-test\n#HAI --grace=45\n"
              'echo "batch dir=$HAI_CHECKPOINT_DIR grace=$HAI_CHECKPOINT_GRACE"\n'
              "srun bash -c 'echo \"step $SLURM_PROCID dir=$HAI_CHECKPOINT_DIR "
              "grace=$HAI_CHECKPOINT_GRACE\"'\n")


def test_directives_reach_the_batch_shell_and_every_srun_step(cluster: Cluster) -> None:
    """#HAI --checkpoint-dir and --grace are HAI_CHECKPOINT_DIR/GRACE in the batch script's
    environment and in each task of its srun step (job_submit.lua sets job_desc.environment)."""
    output = f"{cluster.scratch_root}/hai-directives-env-{os.getpid()}-{time.time_ns()}.out"
    try:
        text = cluster.run_job(ENV_SCRIPT, output, "--account=team-a")
    finally:
        cluster.run(["rm", "-f", output])
    assert sorted(text.splitlines()) == [
        "batch dir=/ckpt/env-test grace=45",
        "step 0 dir=/ckpt/env-test grace=45",
        "step 1 dir=/ckpt/env-test grace=45"], text


def test_the_submitters_own_variable_wins_with_a_warning(cluster: Cluster) -> None:
    """HAI_CHECKPOINT_DIR in the submitting shell: the job keeps the user's value (batch and
    step) and sbatch warns that the daemon looks under the directive's directory.

    (Set in sbatch's environment rather than with ``--export=ALL,VAR=...``: in the Docker
    testbed, Slurm 24.11's and 26.05's slurmd die with "fatal: clone: Operation not permitted"
    when a step of a job submitted with ``--export=ALL,ANY=value`` starts.)"""
    res = cluster.run(["env", "HAI_CHECKPOINT_DIR=/mine", "sbatch", "--parsable", "--hold",
                       "--output=/dev/null", "--chdir=/", "--account=team-a"], stdin=ENV_SCRIPT)
    assert res.returncode == 0, res.stderr
    cluster.jobs.append(res.stdout.strip().split(";")[0])
    assert ("HAI_CHECKPOINT_DIR=/mine from the submission is kept in the job's environment, "
            "but hai-slurm looks for the job's acknowledgements under #HAI "
            "--checkpoint-dir=/ckpt/env-test (line 3)") in res.stderr
    output = f"{cluster.scratch_root}/hai-directives-env-{os.getpid()}-{time.time_ns()}.out"
    try:
        text = cluster.run_job(ENV_SCRIPT, output, "--account=team-a",
                               env=("HAI_CHECKPOINT_DIR=/mine",))
    finally:
        cluster.run(["rm", "-f", output])
    assert sorted(text.splitlines()) == [
        "batch dir=/mine grace=45", "step 0 dir=/mine grace=45", "step 1 dir=/mine grace=45"], text
