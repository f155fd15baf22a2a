"""The ``#HAI`` directive grammar, and the job record job_submit.lua writes into ``admin_comment``.

This module is the Python twin of ``job_submit.lua``: the same grammar, the same normalization
and the same messages, byte for byte (the unit tests run both over one list of cases). Keep them in
step.

Grammar (sbatch's own ``#SBATCH`` placement rule):

- Directives are read from the top of the script. The ``#!`` line, blank lines and other ``#``
  lines (comments, ``#SBATCH``) may sit before and between directives. Reading stops at the first
  command line; ``#HAI`` lines after it are ignored (and reported as a warning).
- A directive line starts with ``#HAI`` (leading blanks allowed), then one or more options, each
  ``--name=VALUE`` or ``--name VALUE``; a word starting with ``#`` ends the line (a trailing
  comment).
  Values cannot contain blanks. Option names are case-sensitive, like sbatch's.
- ``--priority=CLASS``: one of :data:`CLASS_NAMES` or ``AUTO``, any letter case, stored upper case.
- ``--team=NAME``: letters, digits, ``_ . -``; any case, stored lower case (Slurm lowercases
  account names, and a team defaults to the account).
- ``--checkpoint-dir=PATH``: an absolute path.
- ``--preemptible=yes|no``: any letter case.
- ``--grace=SECONDS``: a whole number from 1 to 999999999.
- Each option at most once. ``#hai`` (wrong case), ``#HAI--x`` (no blank) and ``#HAI`` followed
  by a non-ASCII character (a non-breaking space pasted from a web page looks like a blank) are
  errors rather than silently ignored comments.

All text handling is ASCII-only (upper/lower case, blanks) and edit distances count UTF-8 bytes,
because that is what Lua 5.1 does.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from hai_slurm.classes import ClassOrigin, PriorityClass
from hai_slurm.errors import DirectiveError

#: The eight classes, highest first, with hai-platform's values.
CLASS_VALUES: tuple[tuple[str, int], ...] = tuple((c.value, c.weight) for c in PriorityClass)
CLASS_NAMES: tuple[str, ...] = tuple(name for name, _ in CLASS_VALUES)
AUTO = "AUTO"
OPTIONS: tuple[str, ...] = ("priority", "team", "checkpoint-dir", "preemptible", "grace")
PREFIX = "#HAI"
REJECT_HEADER = "hai-slurm: job rejected, fix these #HAI directives:"
MAX_GRACE_DIGITS = 9
MAX_DIR_BYTES = 4095
"""The longest ``--checkpoint-dir`` in bytes (PATH_MAX less its NUL)."""
MAX_SUGGEST_LEN = 64
TEAM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_EXPANDED_RE = re.compile(r"\$[A-Za-z_{(]|%[AaJjNnstuxb]")
"""What a shell ($VAR, ${VAR}, $(cmd)) or sbatch's file names (%j, %A, %u, ...) would expand,
and a ``#HAI`` line does not."""

_BLANKS = " \t\n\v\f\r"
_SPLIT_RE = re.compile(r"[ \t\n\v\f\r]+")
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_upper(text: str) -> str:
    """Upper-case ASCII letters only, as Lua's ``string.upper`` does in the C locale."""
    return text.translate(_UPPER)


def ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only, as Lua's ``string.lower`` does in the C locale."""
    return text.translate(_LOWER)


def edit_distance(a: str, b: str) -> int:
    """Edit distance between the UTF-8 bytes of ``a`` and ``b``.

    Insertions, deletions, substitutions and swaps of two neighbours count one each (optimal
    string alignment), so ``HIHG`` is one edit from ``HIGH``.
    """
    x, y = a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape")
    before: list[int] = []
    previous = list(range(len(y) + 1))
    for i in range(1, len(x) + 1):
        current = [i] + [0] * len(y)
        for j in range(1, len(y) + 1):
            cost = 0 if x[i - 1] == y[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and x[i - 1] == y[j - 2] and x[i - 2] == y[j - 1]:
                current[j] = min(current[j], before[j - 2] + 1)
        before, previous = previous, current
    return previous[len(y)]


def suggest(word: str, candidates: tuple[str, ...]) -> str | None:
    """The nearest candidate if it is close enough to be a typo of ``word``, else ``None``.

    Nearest by :func:`edit_distance`, first candidate on ties; close enough means at most
    ``max(1, len(candidate) // 3)`` edits. Words longer than 64 bytes get no suggestion.
    """
    if len(word.encode("utf-8", "surrogateescape")) > MAX_SUGGEST_LEN:
        return None
    best: str | None = None
    best_distance = 0
    for candidate in candidates:
        distance = edit_distance(word, candidate)
        if best is None or distance < best_distance:
            best, best_distance = candidate, distance
    if best is not None and best_distance <= max(1, len(best) // 3):
        return best
    return None


def did_you_mean(word: str, candidates: tuple[str, ...], shown: tuple[str, ...]) -> str:
    """`` (did you mean 'X'?)`` for a near miss (``shown`` is how each candidate is written)."""
    hit = suggest(word, candidates)
    if hit is None:
        return ""
    return f" (did you mean '{shown[candidates.index(hit)]}'?)"


@dataclass(frozen=True)
class DirectiveLine:
    """Where one option was given: line number (1-based) and the stripped line text."""

    number: int
    text: str


@dataclass(frozen=True)
class Directives:
    """The options found in a script, normalized; ``None`` when not given.

    ``where`` maps each given option name to its line; ``warnings`` lists ``#HAI`` lines that were
    ignored because they come after the first command.
    """

    priority: str | None = None
    team: str | None = None
    checkpoint_dir: str | None = None
    preemptible: bool | None = None
    grace: int | None = None
    where: tuple[tuple[str, DirectiveLine], ...] = ()
    warnings: tuple[str, ...] = ()

    def line_of(self, option: str) -> DirectiveLine | None:
        """The line an option was given on, or ``None``."""
        for name, line in self.where:
            if name == option:
                return line
        return None


def problem_at(line: DirectiveLine, problem: str) -> str:
    """One problem line as shown to the user."""
    return f"line {line.number} ({line.text}): {problem}"


def rejection(problems: list[str]) -> DirectiveError:
    """The error for a rejected job, with the exact text job_submit.lua shows."""
    message = "\n".join([REJECT_HEADER, *("  " + p for p in problems)])
    return DirectiveError(message, problems=tuple(problems))


def _check_value(option: str, raw: str) -> tuple[str | bool | int | None, str | None]:
    """Normalize one option's value: ``(value, None)`` or ``(None, problem)``."""
    if '"' in raw or "'" in raw:
        return None, (f"the value {raw} of --{option} is quoted: #HAI values are taken as "
                      f"written (no shell reads them); write --{option}=VALUE without quotes")
    if option == "priority":
        upper = ascii_upper(raw)
        if upper in CLASS_NAMES or upper == AUTO:
            return upper, None
        choices = (*CLASS_NAMES, AUTO)
        hint = did_you_mean(upper, choices, choices)
        return None, (f"unknown priority class '{raw}'{hint}; allowed: " + ", ".join(choices))
    if option == "team":
        if TEAM_RE.fullmatch(raw) is None:
            return None, (f"invalid team name '{raw}': use 1 to 64 letters, digits, '_', '.' or "
                          "'-', starting with a letter or digit")
        return ascii_lower(raw), None
    if option == "checkpoint-dir":
        if not raw.startswith("/"):
            return None, f"checkpoint directory '{raw}' must be an absolute path (start with /)"
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
            return None, f"checkpoint directory '{raw}' contains a control character"
        if _EXPANDED_RE.search(raw) is not None:
            return None, (f"checkpoint directory '{raw}' would be taken literally: #HAI lines are "
                          "not expanded ($VAR, %j); write the path out")
        size = len(raw.encode("utf-8", "surrogateescape"))
        if size > MAX_DIR_BYTES:
            return None, (f"checkpoint directory is {size} bytes long; at most {MAX_DIR_BYTES} "
                          "(a path longer than PATH_MAX cannot be opened)")
        return raw, None
    if option == "preemptible":
        lower = ascii_lower(raw)
        if lower in ("yes", "no"):
            return lower == "yes", None
        hint = did_you_mean(lower, ("yes", "no"), ("yes", "no"))
        return None, f"invalid value '{raw}' for --preemptible{hint}; allowed: yes, no"
    # grace
    if (re.fullmatch(r"[0-9]+", raw) is None or len(raw) > MAX_GRACE_DIGITS
            or int(raw) == 0):
        return None, (f"invalid value '{raw}' for --grace: give a whole number of seconds "
                      "from 1 to 999999999")
    return int(raw), None


def _parse_options(rest: str, line: DirectiveLine, found: dict[str, tuple[object, DirectiveLine]],
                   problems: list[str]) -> None:
    """Parse the options of one ``#HAI`` line into ``found``; stop at the line's first problem."""
    words = [w for w in _SPLIT_RE.split(rest) if w]
    if not words or words[0].startswith("#"):
        problems.append(problem_at(line, "no option after #HAI; expected one of "
                                   + ", ".join("--" + o for o in OPTIONS)))
        return
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("#"):
            return
        if not word.startswith("--"):
            problems.append(problem_at(line, f"expected an option such as --priority=HIGH, "
                                       f"got '{word}'"))
            return
        name, eq, value = word[2:].partition("=")
        if name not in OPTIONS:
            shown = tuple("--" + o for o in OPTIONS)
            hint = did_you_mean(ascii_lower(name), OPTIONS, shown)
            problems.append(problem_at(line, f"unknown option '--{name}'{hint}; allowed: "
                                       + ", ".join(shown)))
            return
        if not eq and i < len(words) and not words[i].startswith(("--", "#")):
            value = words[i]
            i += 1
        if value == "":
            problems.append(problem_at(line, f"--{name} needs a value, e.g. --{name}="
                                       + _EXAMPLES[name]))
            return
        if name in found:
            problems.append(problem_at(line, f"--{name} given twice (first on line "
                                       f"{found[name][1].number})"))
            return
        normalized, problem = _check_value(name, value)
        if problem is not None:
            problems.append(problem_at(line, problem))
            return
        found[name] = (normalized, line)


_EXAMPLES = {"priority": "HIGH", "team": "my-team", "checkpoint-dir": "/path/to/ckpt",
             "preemptible": "yes", "grace": "60"}


def _non_ascii_after_prefix(rest: str) -> str:
    what = ("a non-breaking space (U+00A0, often pasted from a web page or a word processor)"
            if rest[0] == "\u00a0" else "a non-ASCII character")
    return f"put a plain space after {PREFIX}, not {what}"


def parse_script(text: str) -> Directives:
    """Read the ``#HAI`` directives of a batch script (grammar in the module docstring).

    Raises :class:`~hai_slurm.errors.DirectiveError` listing every problem, one per line.
    """
    found: dict[str, tuple[object, DirectiveLine]] = {}
    problems: list[str] = []
    warnings: list[str] = []
    first_command: int | None = None
    for number, raw_line in enumerate(text.split("\n"), start=1):
        stripped = raw_line.strip(_BLANKS)
        if stripped == "":
            continue
        head, rest = stripped[:4], stripped[4:]
        is_directive = ascii_upper(head) == PREFIX and (
            rest == "" or rest[0] in _BLANKS + "-" or ord(rest[0]) >= 0x80)
        if first_command is not None:
            if is_directive:
                warnings.append(f"hai-slurm: line {number} ({stripped}): ignored, it comes after "
                                f"the first command on line {first_command} (like #SBATCH, "
                                "#HAI is only read above it)")
            continue
        if not stripped.startswith("#"):
            first_command = number
            continue
        if not is_directive:
            continue
        line = DirectiveLine(number, stripped)
        if head != PREFIX:
            problems.append(problem_at(line, f"write the prefix as {PREFIX} (upper case), "
                                       f"not {head}"))
        elif rest.startswith("-"):
            problems.append(problem_at(line, f"put a blank between {PREFIX} and the option"))
        elif rest and ord(rest[0]) >= 0x80:
            problems.append(problem_at(line, _non_ascii_after_prefix(rest)))
        else:
            _parse_options(rest, line, found, problems)
    if problems:
        raise rejection(problems)
    values = {name: value for name, (value, _) in found.items()}
    priority, team, ckpt = values.get("priority"), values.get("team"), values.get("checkpoint-dir")
    preemptible, grace = values.get("preemptible"), values.get("grace")
    return Directives(
        priority=priority if isinstance(priority, str) else None,
        team=team if isinstance(team, str) else None,
        checkpoint_dir=ckpt if isinstance(ckpt, str) else None,
        preemptible=preemptible if isinstance(preemptible, bool) else None,
        grace=grace if isinstance(grace, int) and not isinstance(grace, bool) else None,
        where=tuple((name, line) for name, (_, line) in found.items()),
        warnings=tuple(warnings),
    )



@dataclass(frozen=True)
class HaiJobInfo:
    """What job_submit.lua decided for a job, as recorded in its ``admin_comment``.

    ``priority`` is what was asked for (a class name or ``AUTO``); ``job_class`` the class whose
    QOS the job was given at submit time (for ``AUTO``, a provisional class the daemon replaces).
    """

    priority: str
    job_class: str
    team: str
    preemptible: bool
    grace: int
    source: ClassOrigin
    checkpoint_dir: str | None = None


RECORD_PREFIX = "hai:v1:"
RECORD_ORIGINS = frozenset({ClassOrigin.DIRECTIVE, ClassOrigin.QOS, ClassOrigin.DEFAULT})
"""The ``source`` values job_submit.lua writes into a record."""
SEGMENT_SEP = "|"
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:@+,~-")


def encode_value(value: str) -> str:
    """Percent-encode every byte outside ``[A-Za-z0-9_./:@+,~-]`` (so ``; = | %`` never appear)."""
    out: list[str] = []
    for byte in value.encode("utf-8", "surrogateescape"):
        char = chr(byte)
        out.append(char if char in _SAFE else f"%{byte:02X}")
    return "".join(out)


def decode_value(value: str) -> str:
    """Inverse of :func:`encode_value`."""
    if "%" not in value:
        return value  # nothing encoded: the common case, and the text is already what it means
    raw = value.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i : i + 1] == b"%" and re.fullmatch(rb"[0-9A-Fa-f]{2}", raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def format_record(info: HaiJobInfo) -> str:
    """The ``hai:v1:`` record, fields in a fixed order (``checkpoint_dir`` only when set)."""
    fields = [("priority", info.priority), ("class", info.job_class), ("team", info.team),
              ("preemptible", "yes" if info.preemptible else "no"), ("grace", str(info.grace))]
    if info.checkpoint_dir is not None:
        fields.append(("checkpoint_dir", info.checkpoint_dir))
    fields.append(("source", info.source.value))
    return RECORD_PREFIX + ";".join(f"{k}={encode_value(v)}" for k, v in fields)


def format_admin_comment(info: HaiJobInfo, existing: str | None = None) -> str:
    """``existing`` with any ``hai:`` segment removed and our record appended after ``|``.

    Segments are separated by ``|``. Other content (an admin's note) is kept byte for byte; a
    ``hai:`` segment someone put there before job_submit ran is dropped, so only ours is trusted.
    """
    kept = [s for s in (existing or "").split(SEGMENT_SEP)
            if not s.strip(_BLANKS).startswith("hai:")]
    rest = SEGMENT_SEP.join(kept)
    record = format_record(info)
    return record if rest.strip(_BLANKS) == "" else rest + SEGMENT_SEP + record


@functools.lru_cache(maxsize=65536)
def parse_admin_comment(text: str | None) -> HaiJobInfo | None:
    """The last valid ``hai:v1:`` record in an ``admin_comment``, or ``None``.

    Other segments, unknown fields and records of other versions are ignored; a v1 record that
    lacks a required field or has a bad value counts as absent.

    Cached (the daemon reads the same comments every cycle): the result depends on ``text``
    alone and :class:`HaiJobInfo` is frozen, so sharing one value between callers is safe.
    """
    if not text:
        return None
    for segment in reversed(text.split(SEGMENT_SEP)):
        segment = segment.strip(_BLANKS)
        if not segment.startswith(RECORD_PREFIX):
            continue
        fields: dict[str, str] = {}
        for item in segment[len(RECORD_PREFIX):].split(";"):
            key, eq, value = item.partition("=")
            if eq:
                fields[key] = decode_value(value)
        info = _info_from_fields(fields)
        if info is not None:
            return info
    return None


def _info_from_fields(fields: dict[str, str]) -> HaiJobInfo | None:
    try:
        priority, job_class, team = fields["priority"], fields["class"], fields["team"]
        preemptible, grace = fields["preemptible"], fields["grace"]
        source = ClassOrigin(fields["source"])
    except (KeyError, ValueError):
        return None
    if source not in RECORD_ORIGINS:  # aging, decay, demotion are the daemon's, never a record's
        return None
    if (priority not in (*CLASS_NAMES, AUTO) or job_class not in CLASS_NAMES
            or preemptible not in ("yes", "no") or re.fullmatch(r"[0-9]{1,9}", grace) is None):
        return None
    return HaiJobInfo(priority=priority, job_class=job_class, team=team,
                      preemptible=preemptible == "yes", grace=int(grace), source=source,
                      checkpoint_dir=fields.get("checkpoint_dir"))
