"""Who may use which priority class: the data, its checks, and ``hai_entitlements.lua``.

job_submit.lua loads ``hai_entitlements.lua`` from its own directory at every submission (so a
regenerated table takes effect without restarting slurmctld). The file is a Lua chunk that returns
one table; it is data only and is produced by :func:`render_entitlements`, never edited by hand.

Per class: its QOS, its value, whether ``--preemptible=no`` is allowed, the largest ``--grace`` and
the grace used when none is given. Per account: the classes it may use, its default class, the
order in which ``AUTO`` tries classes (empty: ``AUTO`` not allowed), and the teams other than
itself it may act for (``*``: any team). An account entry named ``*`` applies to every account
without its own entry. ``admin_uids`` may change a job's QOS after submission (see job_submit.lua).

The table shipped for the testbed is :func:`demo_entitlements`; regenerate it with
``python -m hai_slurm.slurm_plugins.entitlements slurm_plugins/hai_entitlements.lua``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hai_slurm.errors import ConfigError
from hai_slurm.slurm_plugins.directives import CLASS_NAMES, CLASS_VALUES, TEAM_RE, ascii_lower

ANY = "*"
FILE_NAME = "hai_entitlements.lua"
_SOURCE = "entitlements"
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_QOS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class ClassRule:
    """One priority class as the cluster configures it."""

    name: str
    qos: str
    value: int
    allow_non_preemptible: bool
    max_grace: int
    default_grace: int


@dataclass(frozen=True)
class AccountRule:
    """What one Slurm account (or ``*``: any other account) may ask for."""

    account: str
    classes: tuple[str, ...]
    default_class: str
    auto: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entitlements:
    """The whole table: the eight classes (highest first) and the account rules."""

    classes: tuple[ClassRule, ...]
    accounts: tuple[AccountRule, ...]
    default_team: str = "default"
    admin_uids: tuple[int, ...] = (0,)

    def class_rule(self, name: str) -> ClassRule:
        """The rule of class ``name`` (a validated table has all eight)."""
        for rule in self.classes:
            if rule.name == name:
                return rule
        raise ConfigError(f"no class {name!r} in the table", source=_SOURCE, key="classes")

    def class_of_qos(self, qos: str) -> ClassRule | None:
        """The class whose QOS is ``qos`` (ASCII letter case ignored, as job_submit.lua
        compares), or ``None``: the one QOS -> class mapping (submissions, sacct replays)."""
        wanted = ascii_lower(qos)
        for rule in self.classes:
            if ascii_lower(rule.qos) == wanted:
                return rule
        return None

    def account_rule(self, account: str) -> AccountRule | None:
        """The rule for ``account`` (already lower case), else the ``*`` rule, else ``None``."""
        fallback = None
        for rule in self.accounts:
            if rule.account == account:
                return rule
            if rule.account == ANY:
                fallback = rule
        return fallback


def _fail(key: str, value: object, message: str) -> ConfigError:
    return ConfigError(f"{message} (got {value!r})", source=_SOURCE, key=key, value=value)


def _check_classes(classes: tuple[ClassRule, ...]) -> None:
    names = tuple(c.name for c in classes)
    if names != CLASS_NAMES:
        raise _fail("classes", names, "must list the eight classes, highest first: "
                    + ", ".join(CLASS_NAMES))
    seen_qos: dict[str, str] = {}
    for i, rule in enumerate(classes):
        key = f"classes.{rule.name}"
        if _QOS_RE.fullmatch(rule.qos) is None:
            raise _fail(key + ".qos", rule.qos, "a QOS name is 1-64 letters, digits, '_', '.', '-'")
        if rule.qos.lower() in seen_qos:
            raise _fail(key + ".qos", rule.qos, f"already the QOS of {seen_qos[rule.qos.lower()]}")
        seen_qos[rule.qos.lower()] = rule.name
        if i > 0 and rule.value >= classes[i - 1].value:
            raise _fail(key + ".value", rule.value,
                        f"must be lower than {classes[i - 1].name}'s {classes[i - 1].value}")
        if rule.max_grace < 1:
            raise _fail(key + ".max_grace", rule.max_grace, "must be at least 1 second")
        if not 1 <= rule.default_grace <= rule.max_grace:
            raise _fail(key + ".default_grace", rule.default_grace,
                        f"must be from 1 to max_grace ({rule.max_grace})")


def _check_account(rule: AccountRule) -> None:
    key = f"accounts.{rule.account}"
    if rule.account != ANY and _NAME_RE.fullmatch(rule.account) is None:
        raise _fail(key, rule.account, "an account is '*' or 1-64 lower-case letters, digits, "
                    "'_', '.', '-'")
    for field, names in (("classes", rule.classes), ("auto", rule.auto)):
        for name in names:
            if name not in CLASS_NAMES:
                raise _fail(f"{key}.{field}", name, "allowed: " + ", ".join(CLASS_NAMES))
        if len(set(names)) != len(names):
            raise _fail(f"{key}.{field}", names, "lists a class twice")
    if not rule.classes:
        raise _fail(key + ".classes", rule.classes, "must allow at least one class")
    if rule.default_class not in rule.classes:
        raise _fail(key + ".default_class", rule.default_class,
                    "must be one of the account's classes: " + ", ".join(rule.classes))
    for name in rule.auto:
        if name not in rule.classes:
            raise _fail(key + ".auto", name, "AUTO may only choose the account's classes: "
                        + ", ".join(rule.classes))
    for team in rule.teams:
        if team != ANY and (TEAM_RE.fullmatch(team) is None or team != team.lower()):
            raise _fail(key + ".teams", team, "a team is '*' or 1-64 lower-case letters, "
                        "digits, '_', '.', '-'")


def validate_entitlements(table: Entitlements) -> None:
    """Raise :class:`ConfigError` naming the key and value of the first problem."""
    _check_classes(table.classes)
    seen: set[str] = set()
    for rule in table.accounts:
        if rule.account in seen:
            raise _fail(f"accounts.{rule.account}", rule.account, "account listed twice")
        seen.add(rule.account)
        _check_account(rule)
    if TEAM_RE.fullmatch(table.default_team) is None or table.default_team != \
            table.default_team.lower():
        raise _fail("default_team", table.default_team, "a lower-case team name")
    for uid in table.admin_uids:
        if uid < 0:
            raise _fail("admin_uids", uid, "a uid is 0 or more")


def _lua_str(text: str) -> str:
    out = ['"']
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\' or byte < 32 or byte >= 127:
            out.append(f"\\{byte:03d}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _lua_list(items: tuple[str, ...]) -> str:
    return "{" + ", ".join(_lua_str(i) for i in items) + "}"


def render_entitlements(table: Entitlements) -> str:
    """The text of ``hai_entitlements.lua`` for ``table`` (validated first)."""
    validate_entitlements(table)
    lines = [
        "-- hai_entitlements.lua: which Slurm accounts may use which hai-slurm priority classes.",
        "-- Generated by hai_slurm.slurm_plugins.entitlements.render_entitlements: do not edit by",
        "-- hand. job_submit.lua (in this directory) loads it at every submission.",
        "return {",
        "  version = 1,",
        f"  default_team = {_lua_str(table.default_team)},",
        "  admin_uids = {" + ", ".join(str(u) for u in table.admin_uids) + "},",
        "  classes = {",
    ]
    for c in table.classes:
        lines.append(
            f"    {{name = {_lua_str(c.name)}, value = {c.value}, qos = {_lua_str(c.qos)}, "
            f"allow_non_preemptible = {'true' if c.allow_non_preemptible else 'false'}, "
            f"max_grace = {c.max_grace}, default_grace = {c.default_grace}}},")
    lines.append("  },")
    lines.append("  accounts = {")
    for a in table.accounts:
        lines.append(f"    [{_lua_str(a.account)}] = {{")
        lines.append(f"      classes = {_lua_list(a.classes)},")
        lines.append(f"      default_class = {_lua_str(a.default_class)},")
        lines.append(f"      auto = {_lua_list(a.auto)},")
        lines.append(f"      teams = {_lua_list(a.teams)},")
        lines.append("    },")
    lines += ["  },", "}", ""]
    return "\n".join(lines)


_DEMO_GRACE = {"EXTREME_HIGH": 1800, "VERY_HIGH": 1800, "HIGH": 900, "ABOVE_NORMAL": 600,
               "NORMAL": 600, "UNDER_NORMAL": 300, "BELOW_NORMAL": 300, "LOW": 120}


def demo_entitlements() -> Entitlements:
    """The testbed's table.

    Classes use the QOS the testbed creates (the class name in lower case); ``--preemptible=no``
    is allowed for EXTREME_HIGH and VERY_HIGH only; grace caps fall from 1800 s to 120 s,
    default 60 s.
    ``team-a`` may use VERY_HIGH and below, ``team-b`` HIGH and below; ``root`` and every other
    account (``*``) may use all classes and act for any team (a testbed convenience: a production
    table should give ``*`` little). Default class NORMAL everywhere; AUTO tries the account's
    classes from the highest down to NORMAL.
    """
    classes = tuple(
        ClassRule(name=name, qos=name.lower(), value=value,
                  allow_non_preemptible=name in ("EXTREME_HIGH", "VERY_HIGH"),
                  max_grace=_DEMO_GRACE[name], default_grace=60)
        for name, value in CLASS_VALUES)

    def upto(top: str) -> tuple[str, ...]:
        return CLASS_NAMES[CLASS_NAMES.index(top):]

    def auto(top: str) -> tuple[str, ...]:
        return CLASS_NAMES[CLASS_NAMES.index(top):CLASS_NAMES.index("NORMAL") + 1]

    accounts = (
        AccountRule("root", upto("EXTREME_HIGH"), "NORMAL", auto("EXTREME_HIGH"), (ANY,)),
        AccountRule("team-a", upto("VERY_HIGH"), "NORMAL", auto("VERY_HIGH")),
        AccountRule("team-b", upto("HIGH"), "NORMAL", auto("HIGH")),
        AccountRule(ANY, upto("EXTREME_HIGH"), "NORMAL", auto("EXTREME_HIGH"), (ANY,)),
    )
    return Entitlements(classes=classes, accounts=accounts)


def main(argv: list[str] | None = None) -> int:
    """Write the demo table to the path given (``-``: standard output)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m hai_slurm.slurm_plugins.entitlements PATH|- "
              f"(e.g. slurm_plugins/{FILE_NAME})", file=sys.stderr)
        return 2
    text = render_entitlements(demo_entitlements())
    if args[0] == "-":
        sys.stdout.write(text)
    else:
        Path(args[0]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
