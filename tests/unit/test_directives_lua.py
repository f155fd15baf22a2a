"""job_submit.lua, run by the real Lua 5.1 interpreter, against its Python twin.

The Lua file is run as slurmctld runs it (loaded from a directory holding hai_entitlements.lua,
``slurm_job_submit(job_desc, part_list, uid)`` called with a job_desc table) through a small
harness that fakes only the ``slurm`` table. Every case of ``directive_cases.CASES`` must give the
same return code, QOS, admin_comment, user message and job environment on both sides.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from directive_cases import CASES, ENV_EXPECTED, Case

from hai_slurm.errors import DirectiveError
from hai_slurm.slurm_plugins import entitlements as ent_mod
from hai_slurm.slurm_plugins.entitlements import (
    AccountRule,
    Entitlements,
    demo_entitlements,
    render_entitlements,
)
from hai_slurm.slurm_plugins.submit_check import evaluate_submission, submission_account

PLUGINS = Path(ent_mod.__file__).parent
HARNESS = Path(__file__).with_name("lua_job_submit_harness.lua")
LUA = shutil.which("lua5.1")
LUA54 = shutil.which("lua5.4")

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 is not installed (apt install lua5.1)")

# rc, qos, admin_comment, message, environment afterwards (sorted NAME=value lines; None: no
# environment, i.e. not a batch job)
Outcome = tuple[str, str | None, str | None, str | None, str | None]


def lua_string(text: str) -> str:
    """A Lua string literal for any text (every byte outside printable ASCII as \\ddd)."""
    out = []
    for byte in text.encode("utf-8"):
        out.append(chr(byte) if 32 <= byte < 127 and chr(byte) not in '"\\' else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def lua_value(value: object) -> str:
    if value is None:
        return "nil"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "{" + ", ".join(f"[{lua_string(k)}] = {lua_string(v)}" for k, v in value) + "}"
    assert isinstance(value, str)
    return lua_string(value)


def unescape(field: str) -> str | None:
    if field == "\\N":
        return None
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[field[i + 1]])
            i += 2
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def run_lua(tmp_path: Path, cases: list[dict[str, object]], *,
            table: Entitlements | None = None, lua: str | None = None) -> dict[str, Outcome]:
    """Run the harness on ``cases`` with job_submit.lua copied beside a rendered ``table``
    (``lua``: the interpreter, lua5.1 by default: Debian's Slurm links it)."""
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    shutil.copy(PLUGINS / "job_submit.lua", etc / "job_submit.lua")
    if table is not None:
        (etc / "hai_entitlements.lua").write_text(render_entitlements(table), encoding="utf-8")
    body = ",\n".join("{" + ", ".join(f"{k} = {lua_value(v)}" for k, v in case.items()) + "}"
                      for case in cases)
    cases_file = tmp_path / "cases.lua"
    cases_file.write_text("return {\n" + body + "\n}\n", encoding="utf-8")
    interpreter = lua or LUA
    assert interpreter is not None
    proc = subprocess.run([interpreter, str(HARNESS), str(etc / "job_submit.lua"),
                           str(cases_file)],
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    results: dict[str, Outcome] = {}
    for line in proc.stdout.decode("utf-8", "surrogateescape").split("\n"):
        if line:
            case_id, rc, qos, comment, message, env = line.split("\t")
            results[case_id] = (rc, unescape(qos), unescape(comment), unescape(message),
                                unescape(env))
    return results


def env_lines(environment: dict[str, str] | None) -> str | None:
    """The harness's rendering of a job environment: sorted NAME=value lines."""
    if environment is None:
        return None
    return "\n".join(sorted(f"{k}={v}" for k, v in environment.items()))


def python_outcome(case: Case) -> Outcome:
    given = dict(case.environment) if case.environment is not None else None
    try:
        accepted = evaluate_submission(case.script,
                                       account=submission_account(case.account,
                                                                  case.default_account),
                                       qos=case.qos, admin_comment=case.admin_comment,
                                       table=demo_entitlements(), environment=given,
                                       requeue=case.requeue, het_offset=case.het_offset)
    except DirectiveError as err:
        return ("-1", case.qos, case.admin_comment, str(err), env_lines(given))
    after = {**given, **dict(accepted.environment)} if given is not None else None
    return ("0", accepted.qos, accepted.admin_comment, accepted.message, env_lines(after))


def as_lua_case(case: Case) -> dict[str, object]:
    out: dict[str, object] = {
        "id": case.id, "script": case.script, "account": case.account,
        "default_account": case.default_account, "qos": case.qos,
        "admin_comment": case.admin_comment}
    if case.environment is not None:
        out["environment"] = case.environment
    if case.requeue is not None:  # Slurm's job_desc.requeue: 0 or 1 (NO_VAL16 when not given)
        out["requeue"] = int(case.requeue)
    if case.het_offset is not None:  # job_desc.het_job_offset (NO_VAL when not a het job)
        out["het_job_offset"] = case.het_offset
    return out


@pytest.fixture(scope="module")
def lua_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    return run_lua(tmp_path_factory.mktemp("lua"), [as_lua_case(c) for c in CASES],
                   table=demo_entitlements())


@pytest.mark.skipif(LUA54 is None, reason="lua5.4 is not installed (apt install lua5.4)")
def test_lua_54_decides_as_51(tmp_path: Path, lua_results: dict[str, Outcome]) -> None:
    """Slurm built against Lua 5.2 or later (other distributions than Debian's) runs the same
    job_submit.lua: every case gets the same outcome under lua5.4 as under lua5.1. (Before:
    setfenv, which 5.2 dropped, made every submission fail to load the entitlements.)"""
    assert LUA54 is not None
    results = run_lua(tmp_path, [as_lua_case(c) for c in CASES], table=demo_entitlements(),
                      lua=LUA54)
    assert results == lua_results


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_lua_and_python_agree(case: Case, lua_results: dict[str, Outcome]) -> None:
    """Lua and Python give the same rc, QOS, admin_comment and message, and the expected one."""
    python = python_outcome(case)
    assert lua_results[case.id] == python
    rc, _, comment, message, _ = python
    assert rc == ("0" if case.accepted else "-1")
    assert case.expect in ((comment or "") if case.accepted else (message or ""))


@pytest.mark.parametrize("case_id", sorted(ENV_EXPECTED))
def test_job_environment_gets_the_settings_unless_given(
        case_id: str, lua_results: dict[str, Outcome]) -> None:
    """Batch jobs end with HAI_CHECKPOINT_DIR/GRACE from the directives; a variable the
    submission already has is kept; rejected and script-less jobs are left alone."""
    assert lua_results[case_id][4] == env_lines(ENV_EXPECTED[case_id])


def test_kept_checkpoint_dir_that_differs_is_warned_about(
        lua_results: dict[str, Outcome]) -> None:
    """A submission's own HAI_CHECKPOINT_DIR wins, and sbatch says the daemon looks elsewhere."""
    dir_warning, grace_warning = str(lua_results["env-user-dir-kept"][3]).split("\n")
    assert dir_warning == (
        "hai-slurm: HAI_CHECKPOINT_DIR=/mine from the submission is kept in the job's "
        "environment, but hai-slurm looks for the job's acknowledgements under #HAI "
        "--checkpoint-dir=/shared/ckpt/run42 (line 5); unset HAI_CHECKPOINT_DIR before sbatch "
        "or make the two agree")
    assert grace_warning.startswith("hai-slurm: HAI_CHECKPOINT_GRACE=7 from the submission")
    assert lua_results["env-user-same-dir"][3] is None


def test_kept_grace_that_differs_is_warned_about(lua_results: dict[str, Outcome]) -> None:
    """A submission's own HAI_CHECKPOINT_GRACE (a job resubmitting itself inherits its own)
    wins too, and sbatch says the daemon waits by the record's grace; an equal one (45.0 is
    45, " 16. " is 16) is not warned about, and one the job side would refuse (0x10: it reads
    plain decimals) is. (Before: kept silently, so the job dropped requests the daemon still
    waited on.)"""
    assert lua_results["inherited-grace-differs"][3] == (
        "hai-slurm: HAI_CHECKPOINT_GRACE=60 from the submission is kept in the job's environment "
        "(the job drops a checkpoint request after that many seconds), but hai-slurm waits for "
        "the job's save by #HAI --grace=30 (line 2); unset HAI_CHECKPOINT_GRACE before sbatch "
        "or make the two agree")
    assert "by the class's grace of 60 s;" in str(
        lua_results["inherited-grace-differs-from-default"][3])
    assert lua_results["inherited-grace-same"][3] is None
    assert lua_results["inherited-grace-blanks"][3] is None
    assert "HAI_CHECKPOINT_GRACE=0x10 from the submission" in str(
        lua_results["inherited-grace-hex"][3])


def test_warning_for_directive_after_command(lua_results: dict[str, Outcome]) -> None:
    """A #HAI line below the first command is ignored and the user is told so, by both sides."""
    _, _, _, message, _ = lua_results["after-command-ignored"]
    assert message == ("hai-slurm: line 4 (#HAI --priority=BOGUS): ignored, it comes after the "
                       "first command on line 3 (like #SBATCH, #HAI is only read above it)")


def test_every_ignored_directive_is_reported_with_its_line(
        lua_results: dict[str, Outcome]) -> None:
    """Lines below the first command: each #HAI-looking line is named, nothing else is."""
    _, _, _, message, _ = lua_results["many-ignored"]
    assert message is not None
    assert [line.split(":")[1] for line in message.split("\n")] == [
        " line 5 (#HAI --grace=2)", " line 6 (#hai x)", " line 11 (#HAI)"]


def test_other_table_agrees(tmp_path: Path) -> None:
    """With a table where '*' is narrow and AUTO is missing, Lua and Python still agree."""
    base = demo_entitlements()
    table = Entitlements(
        classes=base.classes,
        accounts=(AccountRule("lab", ("LOW", "NORMAL"), "LOW", (), ("shared",)),),
        default_team="nobody")
    cases = [
        Case("auto-not-allowed", "#HAI --priority=AUTO\n", account="lab", accepted=False),
        Case("team-extra", "#HAI --team=Shared\n", account="lab"),
        Case("no-entry", "x\n", account="other", accepted=False),
        Case("class-order-in-message", "#HAI --priority=HIGH\n", account="lab", accepted=False),
    ]
    results = run_lua(tmp_path, [as_lua_case(c) for c in cases], table=table)
    for case in cases:
        try:
            acc = evaluate_submission(case.script, account=case.account, qos=None,
                                      admin_comment=None, table=table)
            python: Outcome = ("0", acc.qos, acc.admin_comment, acc.message, None)
        except DirectiveError as err:
            python = ("-1", None, None, str(err), None)
        assert results[case.id] == python, case.id
        assert python[0] == ("0" if case.accepted else "-1"), case.id
    assert "account 'lab' may not use AUTO; allowed: LOW, NORMAL" in str(
        results["auto-not-allowed"])
    assert results["team-extra"][1] == "low"
    assert "team=shared" in str(results["team-extra"][2])
    assert "account 'other' has no entry" in str(results["no-entry"][3])


def test_missing_table_rejects_with_clear_message(tmp_path: Path) -> None:
    """Without hai_entitlements.lua beside it, job_submit.lua rejects jobs and says why."""
    results = run_lua(tmp_path, [{"id": "x", "script": "#HAI --priority=HIGH\n"}], table=None)
    rc, qos, comment, message, _ = results["x"]
    assert (rc, qos, comment) == ("-1", None, None)
    assert message is not None and "entitlements table could not be loaded" in message


def test_only_admins_change_qos(tmp_path: Path) -> None:
    """slurm_job_modify refuses a QOS or account change from a user, and a Requeue=0 (it
    would make the job non-preemptible whatever its class allows), allows root, ignores
    others."""
    cases: list[dict[str, object]] = [
        {"id": "user-qos", "mode": "modify", "qos": "extreme_high", "uid": 1000},
        {"id": "root-qos", "mode": "modify", "qos": "normal", "uid": 0},
        {"id": "user-other", "mode": "modify", "uid": 1000},
        {"id": "user-account", "mode": "modify", "account": "team-a", "uid": 1000},
        {"id": "user-requeue-0", "mode": "modify", "requeue": 0, "uid": 1000},
        {"id": "user-requeue-1", "mode": "modify", "requeue": 1, "uid": 1000},
        {"id": "root-requeue-0", "mode": "modify", "requeue": 0, "uid": 0},
    ]
    results = run_lua(tmp_path, cases, table=demo_entitlements())
    assert results["user-qos"][0] == "2002"
    assert results["user-account"][0] == "2002"
    assert results["root-qos"][0] == "0"
    assert results["user-other"][0] == "0"
    assert results["user-requeue-0"][0] == "2002"
    assert "Requeue=0 would make the job non-preemptible" in str(results["user-requeue-0"][3])
    assert results["user-requeue-1"][0] == "0"
    assert results["root-requeue-0"][0] == "0"


def test_lua_edit_distance_matches_python(tmp_path: Path) -> None:
    """Near misses of every class are suggested identically (exercises the distance function)."""
    from hai_slurm.slurm_plugins.directives import CLASS_NAMES

    typos = [name[:-1] for name in CLASS_NAMES] + [name.replace("_", "") for name in CLASS_NAMES]
    typos = [t for t in typos if t not in CLASS_NAMES]
    cases = [Case(f"t{i}", f"#HAI --priority={t}\n", accepted=False) for i, t in enumerate(typos)]
    results = run_lua(tmp_path, [as_lua_case(c) for c in cases], table=demo_entitlements())
    for case in cases:
        assert results[case.id] == python_outcome(case)
        assert "did you mean" in str(results[case.id][3])


_FRAGMENTS = (
    "#HAI", "#hai", "#HAI--grace=1", "  #HAI", "#HAIKU", "#SBATCH -N1", "# note", "", "srun x",
    "--priority=HIGH", "--priority=high", "--priority=HIHG", "--priority=AUTO", "--priority",
    "EXTREME_HIGH", "VERY_HIGH", "LOW", "--team=team-a", "--team=team-b", "--team=Team_B",
    "--team=a/b", "--checkpoint-dir=/c", "--checkpoint-dir=c", "--checkpoint-dir /x%y",
    "--preemptible=no", "--preemptible=YES", "--preemptible=ye", "--grace=60", "--grace=0",
    "--grace=700", "--grace 1801", "--grace=x", "--qos=high", "--priorty=LOW", "priority",
    "#", "# trailing", "\t", "\r", "\u00e9", "=", "--=", "--",
)


_ENVIRONMENTS: tuple[tuple[tuple[str, str], ...] | None, ...] = (
    None, (), (("HAI_CHECKPOINT_DIR", "/c"),), (("HAI_CHECKPOINT_DIR", "/x%y"),),
    (("HAI_CHECKPOINT_GRACE", "5"), ("PATH", "/bin")))


def _random_script(rng: random.Random) -> str:
    lines = ["#!/bin/bash"] if rng.random() < 0.7 else []
    for _ in range(rng.randint(0, 6)):
        words = [rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.6:
            words[0] = rng.choice(("#HAI", "#HAI", "#hai", "  #HAI", "#SBATCH", "echo"))
        lines.append(rng.choice((" ", "  ", "\t")).join(words))
    return rng.choice(("\n", "\r\n")).join(lines) + rng.choice(("", "\n"))


def test_lua_and_python_agree_on_random_scripts(tmp_path: Path) -> None:
    """Fuzzing: 400 scripts built from valid and broken fragments, with and without a job
    environment, give identical outcomes."""
    rng = random.Random(20261129)
    accounts = ("team-a", "team-b", "root", "physics", None)
    cases = [Case(f"r{i}", _random_script(rng), account=rng.choice(accounts),
                  qos=rng.choice((None, None, None, "high", "normal", "debug")),
                  admin_comment=rng.choice((None, "note", "a|hai:v1:x")),
                  environment=rng.choice(_ENVIRONMENTS))
             for i in range(400)]
    results = run_lua(tmp_path, [as_lua_case(c) for c in cases], table=demo_entitlements())
    outcomes = {results[c.id][0] for c in cases}
    assert outcomes == {"0", "-1"}  # the mix exercises both paths
    for case in cases:
        assert results[case.id] == python_outcome(case), repr(case.script)


def test_control_character_before_a_digit_reaches_lua_intact(tmp_path: Path) -> None:
    """Regression (found by tests/unit/test_fuzz_directives.py): a byte below 32 followed by a
    digit ('\\x1f0') was written as the Lua escape \\310, "escape sequence too large"; both
    sides now see the same script."""
    cases = [Case("ctl-digit", "\x1f0"), Case("ctl-digits", "#HAI --team=a\x019\n")]
    results = run_lua(tmp_path, [as_lua_case(c) for c in cases], table=demo_entitlements())
    for case in cases:
        assert results[case.id] == python_outcome(case)
    assert results["ctl-digit"][0] == "0"


def test_entitlements_strings_survive_lua_escapes() -> None:
    """The same escape bug in hai_entitlements.lua's writer: a control byte before a digit
    must come back from Lua byte for byte."""
    from hai_slurm.slurm_plugins.entitlements import _lua_str

    text = "a\x1f0\x019é\"\\"
    assert LUA is not None
    proc = subprocess.run([LUA, "-e", f"io.write({_lua_str(text)})"], capture_output=True,
                          timeout=30, check=True)
    assert proc.stdout == text.encode("utf-8")
