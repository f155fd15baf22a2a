"""The #HAI grammar, the admin_comment record and the entitlements table, in Python."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hai_slurm.classes import ClassOrigin
from hai_slurm.errors import ConfigError, DirectiveError
from hai_slurm.slurm_plugins import entitlements as ent_mod
from hai_slurm.slurm_plugins.directives import (
    CLASS_NAMES,
    HaiJobInfo,
    decode_value,
    edit_distance,
    encode_value,
    format_admin_comment,
    format_record,
    parse_admin_comment,
    parse_script,
    suggest,
)
from hai_slurm.slurm_plugins.entitlements import (
    AccountRule,
    ClassRule,
    Entitlements,
    demo_entitlements,
    render_entitlements,
    validate_entitlements,
)
from hai_slurm.slurm_plugins.submit_check import evaluate_submission

INFO = HaiJobInfo(priority="HIGH", job_class="HIGH", team="team-a", preemptible=True, grace=60,
                  source=ClassOrigin.DIRECTIVE, checkpoint_dir="/ckpt/run 1")


def test_parse_script_reads_every_option_with_its_line() -> None:
    """All five options are normalized and remember where they were given."""
    d = parse_script("#!/bin/sh\n#SBATCH -N1\n#HAI --priority=above_normal --team=Team-B\n"
                     "\n#HAI --checkpoint-dir /c --preemptible=YES --grace=90\nsrun x\n")
    assert (d.priority, d.team, d.checkpoint_dir, d.preemptible, d.grace) == (
        "ABOVE_NORMAL", "team-b", "/c", True, 90)
    line = d.line_of("grace")
    assert line is not None and line.number == 5
    assert line.text == "#HAI --checkpoint-dir /c --preemptible=YES --grace=90"
    assert d.warnings == ()


def test_parse_script_without_directives_is_empty() -> None:
    """A script without #HAI lines gives no options and no warnings."""
    d = parse_script("#!/bin/bash\n#SBATCH --gres=gpu:1\npython train.py\n")
    assert (d.priority, d.team, d.grace, d.where) == (None, None, None, ())


def test_parse_script_stops_at_first_command() -> None:
    """Directives below the first command are ignored, with a warning naming both lines."""
    d = parse_script("#!/bin/bash\necho hi\n#HAI --priority=LOW\n")
    assert d.priority is None
    assert d.warnings == ("hai-slurm: line 3 (#HAI --priority=LOW): ignored, it comes after the "
                          "first command on line 2 (like #SBATCH, #HAI is only read above it)",)


def test_parse_script_reports_every_problem() -> None:
    """Each bad line is reported with its number, text, the bad value and what is allowed."""
    with pytest.raises(DirectiveError) as info:
        parse_script("#!/bin/bash\n#HAI --priority=NORMALL\n#HAI --preemptible=sure\nx\n")
    err = info.value
    assert isinstance(err, ConfigError)
    assert err.problems == (
        "line 2 (#HAI --priority=NORMALL): unknown priority class 'NORMALL' (did you mean "
        "'NORMAL'?); allowed: " + ", ".join(CLASS_NAMES) + ", AUTO",
        "line 3 (#HAI --preemptible=sure): invalid value 'sure' for --preemptible; allowed: "
        "yes, no",
    )
    assert str(err).splitlines()[0] == "hai-slurm: job rejected, fix these #HAI directives:"


def test_edit_distance_and_suggestions() -> None:
    """Distances count insertions, deletions, substitutions and neighbour swaps."""
    assert edit_distance("HIGH", "HIGH") == 0
    assert edit_distance("HIGHT", "HIGH") == 1
    assert edit_distance("HIHG", "HIGH") == 1
    assert edit_distance("", "LOW") == 3
    assert edit_distance("kitten", "sitting") == 3
    assert suggest("VERYHIGH", CLASS_NAMES) == "VERY_HIGH"
    assert suggest("URGENT", CLASS_NAMES) is None
    assert suggest("X" * 65, ("X" * 65,)) is None


def test_admin_comment_record_format() -> None:
    """The record has a fixed field order and percent-encodes the checkpoint directory."""
    assert format_admin_comment(INFO) == (
        "hai:v1:priority=HIGH;class=HIGH;team=team-a;preemptible=yes;grace=60;"
        "checkpoint_dir=/ckpt/run%201;source=directive")


def test_admin_comment_keeps_admin_content_and_drops_old_records() -> None:
    """An admin's note survives; a pre-existing hai: segment is replaced by ours."""
    merged = format_admin_comment(INFO, "ops: keep | hai:v1:priority=LOW;class=LOW|other")
    assert merged.startswith("ops: keep |other|hai:v1:priority=HIGH;")
    assert parse_admin_comment(merged) == INFO


@pytest.mark.parametrize("text", [None, "", "just a note", "hai:v2:priority=HIGH",
                                  "hai:v1:priority=HIGH;class=HIGH;team=t;preemptible=maybe;"
                                  "grace=1;source=directive",
                                  "hai:v1:priority=HIGH;team=t;preemptible=yes;grace=1;source=qos",
                                  "hai:v1:priority=HIGH;class=HIGH;team=t;preemptible=yes;"
                                  "grace=1;source=nowhere"])
def test_parse_admin_comment_tolerates_other_content(text: str | None) -> None:
    """No record, another version, or a broken v1 record: None, never an exception."""
    assert parse_admin_comment(text) is None


def test_parse_admin_comment_ignores_unknown_fields() -> None:
    """A newer writer may add fields; the reader skips them."""
    info = parse_admin_comment("x|hai:v1:priority=AUTO;class=NORMAL;team=t;preemptible=no;"
                               "grace=7;source=default;future=1")
    assert info == HaiJobInfo(priority="AUTO", job_class="NORMAL", team="t", preemptible=False,
                              grace=7, source=ClassOrigin.DEFAULT)


@given(ckpt=st.one_of(st.none(), st.text(min_size=1).map(lambda t: "/" + t)),
       note=st.text().filter(lambda t: "hai:" not in t),
       preemptible=st.booleans(), grace=st.integers(1, 999_999_999))
@example(ckpt="/hai:v1:priority=EXTREME_HIGH|hai:v1:x", note="", preemptible=False, grace=1)
def test_admin_comment_round_trip(ckpt: str | None, note: str, preemptible: bool,
                                  grace: int) -> None:
    """Whatever the checkpoint path and admin note, the record reads back unchanged."""
    info = HaiJobInfo(priority="LOW", job_class="LOW", team="team-b", preemptible=preemptible,
                      grace=grace, source=ClassOrigin.QOS, checkpoint_dir=ckpt)
    merged = format_admin_comment(info, note)
    assert parse_admin_comment(merged) == info
    # One record segment; the path may itself contain "hai:v1:" (CI's hypothesis found
    # checkpoint_dir='/hai:v1:'), but it is inside the record, never a segment of its own.
    assert [s for s in merged.split("|") if s.startswith("hai:")] == [format_record(info)]


@given(st.text())
def test_encode_value_round_trip(text: str) -> None:
    """Percent-encoding never leaves a delimiter and decodes to the original."""
    encoded = encode_value(text)
    assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789_./:@+,~-%")
    assert decode_value(encoded) == text


def test_evaluate_rejects_unauthorized_class_naming_account() -> None:
    """team-b may not use VERY_HIGH: the message says so and lists what team-b may use."""
    with pytest.raises(DirectiveError, match=r"account 'team-b' may not use class VERY_HIGH; "
                       r"allowed: HIGH, ABOVE_NORMAL, NORMAL, UNDER_NORMAL, BELOW_NORMAL, LOW, "
                       r"AUTO"):
        evaluate_submission("#HAI --priority=VERY_HIGH\n", account="team-b", qos=None,
                            admin_comment=None, table=demo_entitlements())


def test_evaluate_accepts_and_sets_class_qos() -> None:
    """An allowed directive gives the class's QOS and a record the daemon reads back."""
    acc = evaluate_submission("#HAI --priority=HIGH --grace=30\n", account="Team-B", qos=None,
                              admin_comment="note", table=demo_entitlements())
    assert acc.qos == "high"
    assert parse_admin_comment(acc.admin_comment) == HaiJobInfo(
        priority="HIGH", job_class="HIGH", team="team-b", preemptible=True, grace=30,
        source=ClassOrigin.DIRECTIVE)
    assert acc.admin_comment.startswith("note|")


def _classes(**changes: Any) -> tuple[ClassRule, ...]:
    return tuple(replace(c, **changes) if c.name == "HIGH" else c
                 for c in demo_entitlements().classes)


@pytest.mark.parametrize(("table", "key", "fragment"), [
    (Entitlements(classes=demo_entitlements().classes[:-1], accounts=()), "classes",
     "must list the eight classes"),
    (Entitlements(classes=_classes(qos="Very_High"), accounts=()), "classes.HIGH.qos",
     "already the QOS of"),
    (Entitlements(classes=_classes(qos="bad qos"), accounts=()), "classes.HIGH.qos",
     "a QOS name"),
    (Entitlements(classes=_classes(value=99), accounts=()), "classes.HIGH.value",
     "must be lower than VERY_HIGH's 40"),
    (Entitlements(classes=_classes(default_grace=5000), accounts=()), "classes.HIGH.default_grace",
     "must be from 1 to max_grace (900)"),
    (Entitlements(classes=demo_entitlements().classes,
                  accounts=(AccountRule("t", ("LOW",), "HIGH"),)),
     "accounts.t.default_class", "must be one of the account's classes: LOW"),
    (Entitlements(classes=demo_entitlements().classes,
                  accounts=(AccountRule("t", ("LOW", "HIGHT"), "LOW"),)),
     "accounts.t.classes", "'HIGHT'"),
    (Entitlements(classes=demo_entitlements().classes,
                  accounts=(AccountRule("t", ("LOW",), "LOW", ("HIGH",)),)),
     "accounts.t.auto", "AUTO may only choose the account's classes: LOW"),
    (Entitlements(classes=demo_entitlements().classes,
                  accounts=(AccountRule("Team A", ("LOW",), "LOW"),)),
     "accounts.Team A", "lower-case"),
    (Entitlements(classes=demo_entitlements().classes,
                  accounts=(AccountRule("t", ("LOW",), "LOW", (), ("Other",)),)),
     "accounts.t.teams", "'Other'"),
])
def test_validate_names_key_and_value(table: Entitlements, key: str, fragment: str) -> None:
    """Every bad table is refused with the key, the bad value and what is allowed."""
    with pytest.raises(ConfigError) as info:
        validate_entitlements(table)
    assert info.value.key == key
    assert str(info.value).startswith(f"entitlements: {key}: ")
    assert fragment in str(info.value)
    with pytest.raises(ConfigError):
        render_entitlements(table)


def test_shipped_table_is_the_rendered_demo() -> None:
    """slurm_plugins/hai_entitlements.lua is exactly render_entitlements(demo_entitlements()).

    After an intended change, regenerate it with
    ``python -m hai_slurm.slurm_plugins.entitlements slurm_plugins/hai_entitlements.lua``.
    """
    shipped = Path(ent_mod.__file__).with_name("hai_entitlements.lua").read_text(encoding="utf-8")
    assert shipped == render_entitlements(demo_entitlements())


def test_main_writes_the_demo_table(tmp_path: Path) -> None:
    """The module's command line writes the table to a path, and refuses a bad call."""
    out = tmp_path / "t.lua"
    assert ent_mod.main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render_entitlements(demo_entitlements())
    assert ent_mod.main([]) == 2


def test_admin_comment_parse_is_cached_and_decodes_plain_values_unchanged() -> None:
    """The daemon parses the same comments every cycle: the second parse is a cache hit and
    gives the same frozen value; values with and without percent escapes decode correctly."""
    from hai_slurm.slurm_plugins.directives import (
        HaiJobInfo,
        decode_value,
        format_admin_comment,
        parse_admin_comment,
    )
    info = HaiJobInfo(priority="HIGH", job_class="HIGH", team="vision lab|x", preemptible=True,
                      grace=90, source=ClassOrigin.DIRECTIVE, checkpoint_dir="/ckpt/a;b")
    text = format_admin_comment(info, "admin note")
    parse_admin_comment.cache_clear()
    first = parse_admin_comment(text)
    hits = parse_admin_comment.cache_info().hits
    second = parse_admin_comment(text)
    assert first == info and second is first
    assert parse_admin_comment.cache_info().hits == hits + 1
    assert decode_value("plain_value-1.0") == "plain_value-1.0"
    assert decode_value("a%3Bb%7Cc%25") == "a;b|c%"
    assert decode_value("50%") == "50%"  # a lone percent sign is kept
