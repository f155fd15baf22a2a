"""The decision job_submit.lua makes for one submission, in pure Python.

:func:`evaluate_submission` mirrors ``slurm_job_submit`` in ``job_submit.lua`` step by step, with
the same messages (the unit tests compare the two on a shared list of cases). It is what
``priority explain`` and the tests use to say what job_submit would do with a script.

Decisions, in order:

1. The account is ``--account`` or, when that is absent or empty, the user's default account
   (Slurm fills the latter in ``job_desc.default_account``; :func:`submission_account`), lower
   case; its rule is its own entry, else the ``*`` entry.
2. Team: ``--team`` must be the account itself or one of the rule's ``teams`` (``*``: any);
   without ``--team`` the team is the account (or the table's ``default_team`` if there is none).
3. Class: ``--priority`` must be one of the account's classes (``AUTO``: the rule must have an
   AUTO order). Without it, an explicit ``sbatch --qos`` naming a class's QOS chooses that class
   (same checks); any other ``--qos`` is rejected. Neither: the account's default class. With
   ``--priority``, an explicit ``--qos`` must be that class's QOS; ``AUTO`` takes no ``--qos``.
4. ``AUTO`` is recorded as asked; the job gets a provisional class now (the account's default
   class if AUTO may choose it, else the last class AUTO may choose) and the daemon resolves it
   against live quota. Because the daemon may pick any class of the AUTO order, ``--preemptible=no``
   and ``--grace`` must suit every one of them.
5. ``--preemptible=no`` only where the class allows it; default ``yes``. ``sbatch --no-requeue``
   makes the job non-preemptible too (Slurm will not requeue it, so no plan can take it): the
   same rule, with its own message. ``--grace`` above the
   class's cap is rejected (the message names the cap); default is the class's default grace
   (for AUTO capped by the smallest cap of the order).
6. The job's environment (batch jobs, ``job_desc.environment``): ``HAI_CHECKPOINT_DIR`` (when
   ``--checkpoint-dir`` is given) and ``HAI_CHECKPOINT_GRACE`` (always: the recorded grace) are
   added unless the submission already has that variable, so an explicit setting of the user's
   (``sbatch --export=HAI_CHECKPOINT_DIR=...``, or inherited from the submitting shell) wins. A
   kept ``HAI_CHECKPOINT_DIR`` that differs from ``--checkpoint-dir`` gets a warning: the daemon
   looks for acknowledgements under the directive's directory; so does a kept
   ``HAI_CHECKPOINT_GRACE`` that differs from the recorded grace (a job that resubmits itself
   inherits its own): the job drops a request after it, the daemon waits by the record's.

Before all that, a heterogeneous job (``#SBATCH hetjob``) with ``#HAI`` lines is rejected:
slurmctld runs job_submit once per component and only the first carries the script, so the
others would run with the account's defaults.

Every problem is reported, not only the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hai_slurm.checkpoint.env import parse_seconds
from hai_slurm.classes import ClassOrigin
from hai_slurm.slurm_plugins.directives import (
    AUTO,
    Directives,
    HaiJobInfo,
    ascii_lower,
    format_admin_comment,
    parse_script,
    problem_at,
    rejection,
)
from hai_slurm.slurm_plugins.entitlements import ANY, AccountRule, ClassRule, Entitlements


@dataclass(frozen=True)
class Accepted:
    """An accepted submission: the record, the QOS and ``admin_comment`` to set, warnings, and
    the variables to add to the job's environment (in order)."""

    info: HaiJobInfo
    qos: str
    admin_comment: str
    message: str | None
    environment: tuple[tuple[str, str], ...] = ()


#: Job environment variables job_submit.lua sets from the record (read by hai_slurm.checkpoint).
ENV_CHECKPOINT_DIR = "HAI_CHECKPOINT_DIR"
ENV_GRACE = "HAI_CHECKPOINT_GRACE"


def job_environment(info: HaiJobInfo, environment: Mapping[str, str] | None,
                    directives: Directives) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    """The variables to add to a batch job's environment, and warnings (decision 6).

    ``environment`` is the submission's (``None`` for a job without batch script: nothing is
    added).
    """
    if environment is None:
        return (), []
    wanted: list[tuple[str, str]] = []
    if info.checkpoint_dir is not None:
        wanted.append((ENV_CHECKPOINT_DIR, info.checkpoint_dir))
    wanted.append((ENV_GRACE, str(info.grace)))
    added: list[tuple[str, str]] = []
    warnings: list[str] = []
    for name, value in wanted:
        have = environment.get(name)
        if have is None:
            added.append((name, value))
        elif name == ENV_CHECKPOINT_DIR and have != value:
            line = directives.line_of("checkpoint-dir")
            where = f" (line {line.number})" if line is not None else ""
            warnings.append(f"hai-slurm: {name}={have} from the submission is kept in the job's "
                            f"environment, but hai-slurm looks for the job's acknowledgements "
                            f"under #HAI --checkpoint-dir={value}{where}; unset {name} before "
                            "sbatch or make the two agree")
        elif name == ENV_GRACE and parse_seconds(have) != info.grace:
            line = directives.line_of("grace")
            said = (f"#HAI --grace={value} (line {line.number})" if line is not None
                    else f"the class's grace of {value} s")
            warnings.append(f"hai-slurm: {name}={have} from the submission is kept in the "
                            "job's environment (the job drops a checkpoint request after that "
                            "many seconds), but hai-slurm waits for the job's save by "
                            f"{said}; unset {name} before sbatch or make the two agree")
    return tuple(added), warnings


def _allowed_classes(rule: AccountRule) -> str:
    names = list(rule.classes)
    if rule.auto:
        names.append(AUTO)
    return ", ".join(names)


def submission_account(account: str | None, default_account: str | None) -> str | None:
    """The account a submission is checked against: ``--account``, or the user's default account
    when it is absent or empty (an empty ``--account=`` is no account, as for Slurm), as
    job_submit.lua's ``submission_account`` does."""
    return default_account if account is None or account == "" else account


def evaluate_submission(script: str | None, *, account: str | None, qos: str | None,
                        admin_comment: str | None, table: Entitlements,
                        environment: Mapping[str, str] | None = None,
                        requeue: bool | None = None, het_offset: int | None = None
                        ) -> Accepted:
    """Accept or reject one submission as job_submit.lua does (see the module docstring).

    ``environment`` is the batch job's submitted environment (``None``: not a batch job);
    ``requeue`` is ``sbatch --requeue`` (True), ``--no-requeue`` (False) or neither (None);
    ``het_offset`` the component's index in a heterogeneous job (None: not one).

    Raises :class:`~hai_slurm.errors.DirectiveError` with the user's message on rejection.
    """
    directives = parse_script(script or "")
    if het_offset is not None and directives.where:
        raise rejection(["#HAI directives are not supported in a heterogeneous job (#SBATCH "
                         "hetjob, --het-group): only its first component would get them; "
                         "submit the components as separate jobs, or drop the #HAI lines"])
    acct = ascii_lower(account or "")
    who = f"account '{acct}'" if acct else "a job without account"
    rule = table.account_rule(acct)
    if rule is None:
        raise rejection([f"{who} has no entry in the priority entitlements table and there is "
                         "no '*' entry; ask an administrator"])
    problems: list[str] = []

    team = acct if acct else table.default_team
    team_line = directives.line_of("team")
    if directives.team is not None and team_line is not None:
        team = directives.team
        if team != acct and team not in rule.teams and ANY not in rule.teams:
            allowed = ([acct] if acct else []) + list(rule.teams)
            problems.append(problem_at(team_line, f"{who} may not act for team '{team}'; "
                                       "allowed: " + (", ".join(allowed) or "none")))

    priority: str | None = None
    source = ClassOrigin.DEFAULT
    prio_line = directives.line_of("priority")
    if directives.priority is not None and prio_line is not None:
        source = ClassOrigin.DIRECTIVE
        asked = directives.priority
        if asked == AUTO and not rule.auto:
            problems.append(problem_at(prio_line, f"{who} may not use AUTO; allowed: "
                                       + _allowed_classes(rule)))
        elif asked != AUTO and asked not in rule.classes:
            problems.append(problem_at(prio_line, f"{who} may not use class {asked}; allowed: "
                                       + _allowed_classes(rule)))
        elif qos is not None and asked == AUTO:
            problems.append(problem_at(prio_line, f"--qos={qos} cannot be combined with AUTO, "
                                       "which lets hai-slurm choose the QOS; drop --qos"))
        elif qos is not None and ascii_lower(qos) != ascii_lower(table.class_rule(asked).qos):
            problems.append(problem_at(prio_line, f"--qos={qos} contradicts this line: class "
                                       f"{asked} uses QOS {table.class_rule(asked).qos}; drop "
                                       "--qos or make them agree"))
        else:
            priority = asked
    elif qos is not None:
        source = ClassOrigin.QOS
        match = table.class_of_qos(qos)
        if match is None:
            problems.append(f"--qos={qos} is not the QOS of a priority class; use #HAI "
                            "--priority=CLASS instead (class QOS: "
                            + ", ".join(c.qos for c in table.classes) + ")")
        elif match.name not in rule.classes:
            problems.append(f"--qos={qos} (class {match.name}): {who} may not use class "
                            f"{match.name}; allowed: " + _allowed_classes(rule))
        else:
            priority = match.name
    else:
        priority = rule.default_class

    if priority is None:
        raise rejection(problems)

    if priority == AUTO:
        job_class = rule.default_class if rule.default_class in rule.auto else rule.auto[-1]
        candidates = [table.class_rule(name) for name in rule.auto]
        note = f" (AUTO may choose it for {who})"
    else:
        job_class = priority
        candidates = [table.class_rule(priority)]
        note = ""

    pre_line = directives.line_of("preemptible")
    said_no = directives.preemptible is False and pre_line is not None
    preemptible = not said_no and requeue is not False
    if not preemptible:
        for c in candidates:
            if not c.allow_non_preemptible:
                able = ", ".join(x.name for x in table.classes if x.allow_non_preemptible)
                if said_no:
                    assert pre_line is not None
                    problems.append(problem_at(pre_line, f"class {c.name} does not allow "
                                               f"--preemptible=no{note}; classes that do: "
                                               + (able or "none")))
                else:
                    problems.append("sbatch --no-requeue makes a job non-preemptible (Slurm "
                                    "cannot requeue it after it saves), which class "
                                    f"{c.name} does not allow{note}; drop --no-requeue, or use "
                                    "a class that allows it: " + (able or "none"))
                break

    tightest: ClassRule = min(candidates, key=lambda c: c.max_grace)  # first on ties
    grace = min(table.class_rule(job_class).default_grace, tightest.max_grace)
    grace_line = directives.line_of("grace")
    if directives.grace is not None and grace_line is not None:
        grace = directives.grace
        if grace > tightest.max_grace:
            problems.append(problem_at(grace_line, f"--grace={grace} exceeds the cap of "
                                       f"{tightest.max_grace} s for class {tightest.name}{note}; "
                                       f"use --grace={tightest.max_grace} or less"))

    if problems:
        raise rejection(problems)
    info = HaiJobInfo(priority=priority, job_class=job_class, team=team, preemptible=preemptible,
                      grace=grace, source=source, checkpoint_dir=directives.checkpoint_dir)
    added, env_warnings = job_environment(
        info, environment if script is not None else None, directives)
    return Accepted(info=info, qos=table.class_rule(job_class).qos,
                    admin_comment=format_admin_comment(info, admin_comment),
                    message="\n".join([*directives.warnings, *env_warnings]) or None,
                    environment=added)
