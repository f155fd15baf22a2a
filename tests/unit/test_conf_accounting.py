"""The accounting set-up shared by conf's sacctmgr script and the testbed's change plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hai_slurm.conf.accounting import (
    AccountingSnapshot,
    QosSetting,
    accounting_setup,
    harmless,
    parse_snapshot,
    plan_changes,
)
from hai_slurm.conf.deployment import PreemptionMode
from hai_slurm.conf.description import load
from hai_slurm.errors import SlurmError

GOLDEN = Path(__file__).parent / "golden" / "conf"


def _dgx(mode: PreemptionMode = PreemptionMode.DAEMON):
    desc, dep = load(GOLDEN / "dgx-a100-nvlink" / "description.toml")
    setup = accounting_setup(desc, dataclasses.replace(dep, preemption=mode, accounting=True))
    assert setup is not None
    return setup


def test_fresh_database_gets_the_gpu_cap_and_users_their_default_account() -> None:
    """New accounts are created with their cap (llm) and QOS; new users with their QOS,
    DefaultQOS and, in their first team, DefaultAccount."""
    setup = _dgx()
    plan = plan_changes(setup, AccountingSnapshot())
    assert not [c for c in plan if c[2] == "modify" and c[3] in ("account", "user")]
    llm = next(c for c in plan if c[2:5] == ["add", "account", "llm"])
    assert "GrpTRES=gres/gpu=64" in llm
    infra = next(c for c in plan if c[2:5] == ["add", "account", "infra"])
    assert not any(a.startswith("GrpTRES=") for a in infra)  # no cap, nothing to set
    adds = [c for c in plan if c[2:4] == ["add", "user"]]
    for user in setup.users:
        add = next(c for c in adds if c[4] == user.name and user.account in c[5])
        assert f"QOS={','.join(user.qos)}" in add and f"DefaultQOS={user.default_qos}" in add
        assert (f"DefaultAccount={user.account}" in add) == (user.default_account == user.account)


def test_one_user_in_two_teams_is_added_once_with_the_first_team_as_default() -> None:
    """root in team-a and team-b with the same QOS: one call, Account=team-a,team-b."""
    setup = _dgx()
    root = next(u for u in setup.users if u.name == "root")
    two = dataclasses.replace(setup, users=(
        root, dataclasses.replace(root, account="other", default_account=root.account)))
    adds = [c for c in plan_changes(two, AccountingSnapshot()) if c[2:4] == ["add", "user"]]
    assert len(adds) == 1
    assert adds[0][5:8] == [f"Account={root.account},other", "Cluster=dgx",
                            f"DefaultAccount={root.account}"]


def test_a_cap_that_is_no_longer_wanted_is_cleared() -> None:
    """An account that holds a GrpTRES the description dropped gets GrpTRES=gres/gpu=-1."""
    setup = _dgx()
    infra = next(a for a in setup.accounts if a.name == "infra")
    qos = ",".join(infra.qos)
    snap = parse_snapshot("dgx", "dgx\n", "", f"infra|{infra.description}\n",
                          f"dgx|infra||{qos}||gres/gpu=8\n")
    mods = [c for c in plan_changes(setup, snap) if "name=infra" in c]
    assert mods[0][-3:] == ["GrpTRES=gres/gpu=-1", f"Description={infra.description}",
                            f"QOS={qos}"]


def test_snapshot_parsing_tolerates_odd_account_lines() -> None:
    """Short account/association lines and other clusters are skipped, never fatal."""
    snap = parse_snapshot("c", "c\n\n", "high|3|low|requeue|00:00:30\n", "a\n",
                          "c|a|u|high|high|\nother|a|u|||\nc|a\n")
    assert snap.qos["high"] == QosSetting("high", 3, "REQUEUE", 30, frozenset({"low"}))
    assert snap.accounts == {"a": ""} and list(snap.assocs) == [("a", "u")]


@pytest.mark.parametrize(("qos_out", "words"), [
    ("high|x|low|REQUEUE|00:00:30\n", r"qos high: Priority: expected a number, got 'x'"),
    ("high|3|low|REQUEUE|bad\n", r"qos high: GraceTime: cannot read duration 'bad'"),
    ("short\n", r"line 1: expected 5 columns"),
])
def test_snapshot_qos_rows_are_read_by_the_adapters_reader(qos_out: str, words: str) -> None:
    """QOS rows go through the one QOS reader: an unreadable row is an error naming it."""
    with pytest.raises(SlurmError, match=words):
        parse_snapshot("c", "c\n", qos_out, "", "")


def test_snapshot_grace_time_is_seconds_and_modes_compare_in_one_case() -> None:
    """A database holding exactly the wanted QOS (sacctmgr's lower-case mode, GraceTime as
    D-HH:MM:SS) needs no QOS call; a bare GraceTime number is seconds, not minutes."""
    want = QosSetting("q", 10, "REQUEUE", 90, frozenset())
    snap = parse_snapshot("c", "c\n", "q|10||requeue|00:01:30\n", "", "")
    assert snap.qos["q"] == want
    assert parse_snapshot("c", "c\n", "q|10||requeue|90\n", "", "").qos["q"] == want


def test_nothing_to_do_answers_are_harmless() -> None:
    """sacctmgr's "Nothing modified"/"Nothing new added" count as success, errors do not."""
    assert harmless(" Nothing modified\n") and harmless("Nothing new added.")
    assert not harmless("sacctmgr: error: Unknown option: GrpTRES=gres/gpu=-1")
