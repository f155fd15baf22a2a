"""Fuzzing ``#HAI`` directives: job_submit.lua (real Lua 5.1) and its Python twin must agree.

Scripts are built by hypothesis from valid and broken directive fragments, arbitrary text
(non-ASCII blanks, control characters, CRLF) and line layouts; each example runs a batch of
scripts through both sides (the harness of test_directives_lua) and compares return code, QOS,
admin_comment, message and job environment. The Python side alone must never raise anything but
a DirectiveError, and the record it writes must read back as what was decided.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from directive_cases import Case
from fuzz_support import fuzz, rejects_cleanly
from hypothesis import given
from hypothesis import strategies as st
from test_directives_lua import as_lua_case, python_outcome, run_lua

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import DirectiveError
from hai_slurm.slurm_plugins.directives import (
    CLASS_NAMES,
    HaiJobInfo,
    format_admin_comment,
    parse_admin_comment,
    parse_script,
)
from hai_slurm.slurm_plugins.entitlements import demo_entitlements
from hai_slurm.slurm_plugins.submit_check import evaluate_submission

pytestmark = pytest.mark.fuzz

_WORDS = ("#HAI", "#hai", "#HAI--grace=1", "  #HAI", "#HAIKU", "#SBATCH", "#", "srun", "echo",
          "--priority=HIGH", "--priority=high", "--priority=HIHG", "--priority=AUTO",
          "--priority", "LOW", "--team=team-a", "--team=Team_B", "--team=a/b", "--team",
          "--checkpoint-dir=/c", "--checkpoint-dir", "/x%y", "--preemptible=no",
          "--preemptible=YES", "--grace=60", "--grace=0", "--grace=1801", "--grace",
          "0999999999", "--qos=high", "--priorty=LOW", "=", "--=", "--", "\u00a0", "\u3000",
          "\u2028", "\x85", "\x0b", "\x0c", "\r", "é", "\U0001f600", "%", "|", ";", "hai:v1:")
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_WORD = st.one_of(st.sampled_from(_WORDS), st.text(_CHARS, max_size=6))
_LINE = st.lists(_WORD, min_size=1, max_size=5).flatmap(
    lambda words: st.sampled_from((" ", "\t", "  ", "\u00a0")).map(lambda sep: sep.join(words)))
SCRIPTS = st.builds(
    lambda shebang, lines, nl, end: nl.join((["#!/bin/bash"] if shebang else []) + lines) + end,
    st.booleans(), st.lists(_LINE, max_size=6), st.sampled_from(("\n", "\r\n")),
    st.sampled_from(("", "\n")))
CASES = st.builds(
    lambda script, account, default, qos, comment, env: Case(
        "", script, account=account, default_account=default, qos=qos, admin_comment=comment,
        environment=env),
    SCRIPTS,
    st.one_of(st.none(), st.sampled_from(("team-a", "team-b", "Team-A", "root", "", "other")),
              st.text(_CHARS, max_size=6)),
    st.one_of(st.none(), st.sampled_from(("team-a", "team-b", ""))),
    st.one_of(st.none(), st.sampled_from(("high", "normal", "HIGH", "debug", "")),
              st.text(_CHARS, max_size=5)),
    st.one_of(st.none(), st.sampled_from(("note", "a|hai:v1:x", "hai:v1:priority=HIGH")),
              st.text(_CHARS, max_size=12)),
    st.one_of(st.none(), st.just(()), st.just((("HAI_CHECKPOINT_DIR", "/c"),)),
              st.just((("HAI_CHECKPOINT_GRACE", "5"), ("PATH", "/bin")))))

needs_lua = pytest.mark.skipif(shutil.which("lua5.1") is None,
                               reason="lua5.1 is not installed (apt install lua5.1)")


@needs_lua
@fuzz(12)
@given(cases=st.lists(CASES, min_size=1, max_size=25))
def test_lua_and_python_agree(tmp_path: Path, cases: list[Case]) -> None:
    """Each generated submission gets the same outcome from job_submit.lua and Python."""
    cases = [Case(f"f{i}", c.script, account=c.account, default_account=c.default_account,
                  qos=c.qos, admin_comment=c.admin_comment, environment=c.environment)
             for i, c in enumerate(cases)]
    results = run_lua(tmp_path, [as_lua_case(c) for c in cases], table=demo_entitlements())
    for case in cases:
        assert results[case.id] == python_outcome(case), case


@fuzz(120)
@given(script=st.one_of(SCRIPTS, st.text(_CHARS, max_size=200)))
def test_parse_script_raises_only_directive_errors(script: str) -> None:
    """Any text: directives, or a DirectiveError whose every problem names its line."""
    try:
        parse_script(script)
    except DirectiveError as err:
        assert err.problems and all(p.startswith("line ") for p in err.problems), err.problems


@fuzz(80)
@given(case=CASES)
def test_evaluate_submission_accepts_or_rejects(case: Case) -> None:
    """A whole submission: accepted with a record that reads back, or a DirectiveError."""
    accepted = rejects_cleanly(
        evaluate_submission, case.script, account=case.account or case.default_account,
        qos=case.qos, admin_comment=case.admin_comment, table=demo_entitlements(),
        environment=dict(case.environment) if case.environment is not None else None)
    if accepted is not None:
        assert parse_admin_comment(accepted.admin_comment) == accepted.info


@fuzz(120)
@given(team=st.text(_CHARS, min_size=1, max_size=20),
       ckpt=st.one_of(st.none(), st.text(_CHARS, max_size=30)),
       existing=st.one_of(st.none(), st.text(_CHARS, max_size=40)),
       cls=st.sampled_from(CLASS_NAMES), grace=st.integers(1, 999_999_999),
       preemptible=st.booleans(),
       source=st.sampled_from((ClassOrigin.DIRECTIVE, ClassOrigin.QOS, ClassOrigin.DEFAULT)))
def test_admin_comment_record_round_trips(team: str, ckpt: str | None, existing: str | None,
                                          cls: str, grace: int, preemptible: bool,
                                          source: ClassOrigin) -> None:
    """Whatever an admin's note or the values hold, the record written reads back unchanged."""
    info = HaiJobInfo(priority=cls, job_class=cls, team=team, preemptible=preemptible,
                      grace=grace, source=source, checkpoint_dir=ckpt)
    assert parse_admin_comment(format_admin_comment(info, existing)) == info


@fuzz(120)
@given(text=st.text(_CHARS, max_size=120))
def test_parse_admin_comment_never_raises(text: str) -> None:
    """Any admin_comment (users cannot write it, but admins and other tools can)."""
    parse_admin_comment(text)
