"""Submissions run through both job_submit.lua and its Python twin (shared by the unit tests).

Each case is a submission against the demo entitlements table (team-a up to VERY_HIGH, team-b up to
HIGH, root and ``*`` everything). ``expect`` is a fragment that must appear in the outcome: in the
``admin_comment`` for accepted jobs, in the message for rejected ones, so a case cannot pass by both
sides being wrong in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One submission and a fragment its outcome must contain."""

    id: str
    script: str | None
    account: str | None = "team-a"
    qos: str | None = None
    admin_comment: str | None = None
    default_account: str | None = None
    accepted: bool = True
    expect: str = ""
    #: The batch job's submitted environment (NAME, value) pairs; None: not given (job_submit
    #: then sets no variable, as for a job without batch script).
    environment: tuple[tuple[str, str], ...] | None = None
    #: ``sbatch --requeue`` (True), ``--no-requeue`` (False) or neither (None).
    requeue: bool | None = None
    #: The component's index in a heterogeneous job (None: not one).
    het_offset: int | None = None


SH = "#!/bin/bash\n"
#: The README's example job script ("Using it"), byte for byte.
README_SCRIPT = (SH + "#SBATCH --gres=gpu:8 -N 2\n"
                 "#HAI --priority=HIGH            # EXTREME_HIGH VERY_HIGH HIGH ABOVE_NORMAL "
                 "NORMAL UNDER_NORMAL BELOW_NORMAL LOW, or AUTO\n"
                 "#HAI --team=vision              # default: the Slurm account\n"
                 "#HAI --checkpoint-dir=/shared/ckpt/run42\n"
                 "#HAI --grace=120                # seconds the job needs to save (capped per "
                 "class)\nsrun python train.py\n")

CASES: tuple[Case, ...] = (
    # accepted
    Case("no-directives", SH + "srun hostname\n", expect="priority=NORMAL;class=NORMAL;"
         "team=team-a;preemptible=yes;grace=60;source=default"),
    Case("no-script", None, expect="source=default"),
    Case("inherited-grace-differs", SH + "#HAI --priority=LOW --grace=30\nx\n",
         environment=(("HAI_CHECKPOINT_GRACE", "60"),), expect="grace=30;"),
    Case("inherited-grace-differs-from-default", SH + "x\n",
         environment=(("HAI_CHECKPOINT_GRACE", "900"),), expect="grace=60;"),
    Case("inherited-grace-same", SH + "#HAI --grace=45\nx\n",
         environment=(("HAI_CHECKPOINT_GRACE", "45.0"),), expect="grace=45;"),
    Case("inherited-grace-hex", SH + "#HAI --grace=16\nx\n",
         environment=(("HAI_CHECKPOINT_GRACE", "0x10"),), expect="grace=16;"),
    Case("inherited-grace-blanks", SH + "#HAI --grace=16\nx\n",
         environment=(("HAI_CHECKPOINT_GRACE", " 16. "),), expect="grace=16;"),
    Case("no-requeue-very-high", SH + "#HAI --priority=VERY_HIGH\nx\n", requeue=False,
         expect="priority=VERY_HIGH;class=VERY_HIGH;team=team-a;preemptible=no;"),
    Case("requeue-normal", SH + "x\n", requeue=True, expect="class=NORMAL;team=team-a;"
         "preemptible=yes"),
    Case("empty-script", "", expect="priority=NORMAL"),
    Case("high", SH + "#HAI --priority=HIGH\nsrun x\n", expect="priority=HIGH;class=HIGH;"),
    Case("lower-case-class", SH + "#HAI --priority=very_high\nx\n", expect="priority=VERY_HIGH"),
    Case("space-form", SH + "#HAI --priority HIGH --grace 120\nx\n",
         expect="priority=HIGH;class=HIGH;team=team-a;preemptible=yes;grace=120;"),
    Case("several-lines-with-comments", SH + "#SBATCH -N 1\n# a comment\n\n#HAI --priority=LOW\n"
         "#SBATCH --gres=gpu:1\n#HAI --grace=30 # trailing comment\nsrun x\n",
         expect="priority=LOW;class=LOW;team=team-a;preemptible=yes;grace=30;source=directive"),
    Case("all-options", SH + "#HAI --priority=VERY_HIGH --team=TEAM-A --preemptible=No "
         "--grace=1800 --checkpoint-dir=/ckpt/run\nx\n",
         expect="hai:v1:priority=VERY_HIGH;class=VERY_HIGH;team=team-a;preemptible=no;"
         "grace=1800;checkpoint_dir=/ckpt/run;source=directive"),
    Case("ckpt-dir-encoded", SH + "#HAI --checkpoint-dir=/a;b|c=d%e/\u00e9\nx\n",
         expect="checkpoint_dir=/a%3Bb%7Cc%3Dd%25e/%C3%A9"),
    Case("crlf", "#!/bin/bash\r\n#HAI --priority=HIGH\r\nsrun x\r\n", expect="priority=HIGH"),
    Case("indented-directive", SH + "   #HAI --priority=HIGH\nx\n", expect="priority=HIGH"),
    Case("after-command-ignored", SH + "#HAI --priority=HIGH\nsrun x\n#HAI --priority=BOGUS\n",
         expect="priority=HIGH"),
    Case("many-ignored", SH + "#HAI --priority=LOW\n\nsrun x # #HAI --grace=1\n  #HAI --grace=2\r\n"
         "\t#hai x\necho '#HAI'\n##HAI\n#HAIKU\n\n#HAI", expect="priority=LOW"),
    Case("command-on-line-one", "srun x\n#HAI --priority=HIGH\n", expect="priority=NORMAL"),
    Case("haiku-comment-not-directive", SH + "#HAIKU: old pond\nx\n", expect="priority=NORMAL"),
    Case("auto", SH + "#HAI --priority=auto\nx\n",
         expect="priority=AUTO;class=NORMAL;team=team-a;preemptible=yes;grace=60;"),
    Case("auto-grace-at-cap", SH + "#HAI --priority=AUTO --grace=600\nx\n", expect="grace=600"),
    Case("qos-selects-class", SH + "x\n", qos="high",
         expect="priority=HIGH;class=HIGH;team=team-a;preemptible=yes;grace=60;source=qos"),
    Case("qos-agrees", SH + "#HAI --priority=HIGH\nx\n", qos="HIGH", expect="source=directive"),
    Case("default-account", SH + "#HAI --priority=HIGH\nx\n", account=None,
         default_account="team-b", expect="team=team-b"),
    Case("no-account-uses-star", SH + "#HAI --priority=EXTREME_HIGH\nx\n", account=None,
         expect="team=default"),
    # An empty --account= is no account: the default account's rule, not '*' (Lua's "" is true)
    Case("empty-account-uses-default", SH + "#HAI --priority=HIGH\nx\n", account="",
         default_account="team-b", expect="team=team-b"),
    Case("empty-account-above-default-limit", SH + "#HAI --priority=EXTREME_HIGH\nx\n",
         account="", default_account="team-b", accepted=False, expect="account 'team-b'"),
    Case("empty-account-no-default-uses-star", SH + "#HAI --priority=EXTREME_HIGH\nx\n",
         account="", expect="team=default"),
    Case("hai-prefix-of-a-word", SH + "#HAIKU five seven five\nx\n", expect="source=default"),
    Case("unknown-account-uses-star", SH + "#HAI --priority=EXTREME_HIGH --team=team-a\nx\n",
         account="physics", expect="team=team-a"),
    Case("root-any-team", SH + "#HAI --team=team-b\nx\n", account="root", expect="team=team-b"),
    Case("admin-note-kept", SH + "x\n", admin_comment="ticket 42 | owner=ops",
         expect="ticket 42 | owner=ops|hai:v1:priority=NORMAL"),
    Case("forged-record-dropped", SH + "#HAI --priority=LOW\nx\n",
         admin_comment="note|hai:v1:priority=EXTREME_HIGH;class=EXTREME_HIGH;team=x;"
         "preemptible=no;grace=9;source=directive", expect="note|hai:v1:priority=LOW;class=LOW"),
    Case("only-forged-record", SH + "x\n", admin_comment=" hai:v9:whatever ",
         expect="hai:v1:priority=NORMAL"),
    # rejected: grammar
    Case("typo-class", SH + "#HAI --priority=HIGHT\nx\n", accepted=False,
         expect="line 2 (#HAI --priority=HIGHT): unknown priority class 'HIGHT' (did you mean "
         "'HIGH'?); allowed: EXTREME_HIGH, VERY_HIGH, HIGH, ABOVE_NORMAL, NORMAL, UNDER_NORMAL, "
         "BELOW_NORMAL, LOW, AUTO"),
    Case("far-class", SH + "#HAI --priority=urgent\nx\n", accepted=False,
         expect="unknown priority class 'urgent'; allowed:"),
    Case("dash-class", SH + "#HAI --priority=very-high\nx\n", accepted=False,
         expect="(did you mean 'VERY_HIGH'?)"),
    Case("typo-option", SH + "#HAI --priorty=HIGH\nx\n", accepted=False,
         expect="unknown option '--priorty' (did you mean '--priority'?); allowed: --priority, "
         "--team, --checkpoint-dir, --preemptible, --grace"),
    Case("underscore-option", SH + "#HAI --checkpoint_dir=/x\nx\n", accepted=False,
         expect="(did you mean '--checkpoint-dir'?)"),
    Case("capital-option", SH + "#HAI --Grace=5\nx\n", accepted=False,
         expect="(did you mean '--grace'?)"),
    Case("not-an-option", SH + "#HAI priority=HIGH\nx\n", accepted=False,
         expect="expected an option such as --priority=HIGH, got 'priority=HIGH'"),
    Case("empty-directive", SH + "#HAI\nx\n", accepted=False, expect="no option after #HAI"),
    Case("comment-only-directive", SH + "#HAI # nothing\nx\n", accepted=False,
         expect="no option after #HAI"),
    Case("lower-prefix", SH + "#hai --priority=HIGH\nx\n", accepted=False,
         expect="line 2 (#hai --priority=HIGH): write the prefix as #HAI (upper case), not #hai"),
    # A pasted non-breaking space looks like a blank: rejected, never a silently ignored comment
    Case("nbsp-after-prefix", SH + "#HAI\u00a0--priority=HIGH\nx\n", accepted=False,
         expect="put a plain space after #HAI, not a non-breaking space (U+00A0"),
    Case("nbsp-after-lower-case-prefix", SH + "#hai\u00a0--priority=HIGH\nx\n",
         accepted=False, expect="write the prefix as #HAI"),
    Case("other-unicode-space-after-prefix", SH + "#HAI\u3000--priority=HIGH\nx\n",
         accepted=False, expect="not a non-ASCII character"),
    Case("no-blank", SH + "#HAI--priority=HIGH\nx\n", accepted=False,
         expect="put a blank between #HAI and the option"),
    Case("missing-value", SH + "#HAI --priority=\nx\n", accepted=False,
         expect="--priority needs a value, e.g. --priority=HIGH"),
    Case("missing-value-space", SH + "#HAI --grace --priority=HIGH\nx\n", accepted=False,
         expect="--grace needs a value, e.g. --grace=60"),
    Case("duplicate", SH + "#HAI --priority=HIGH\n#SBATCH -N1\n#HAI --priority=LOW\nx\n",
         accepted=False, expect="line 4 (#HAI --priority=LOW): --priority given twice (first on "
         "line 2)"),
    Case("bad-team", SH + "#HAI --team=team/a\nx\n", accepted=False,
         expect="invalid team name 'team/a'"),
    Case("relative-ckpt", SH + "#HAI --checkpoint-dir=ckpt\nx\n", accepted=False,
         expect="checkpoint directory 'ckpt' must be an absolute path (start with /)"),
    Case("bad-preemptible", SH + "#HAI --preemptible=ye\nx\n", accepted=False,
         expect="invalid value 'ye' for --preemptible (did you mean 'yes'?); allowed: yes, no"),
    Case("bad-preemptible-far", SH + "#HAI --preemptible=maybe\nx\n", accepted=False,
         expect="invalid value 'maybe' for --preemptible; allowed: yes, no"),
    Case("grace-zero", SH + "#HAI --grace=0\nx\n", accepted=False,
         expect="invalid value '0' for --grace"),
    Case("grace-negative", SH + "#HAI --grace -5\nx\n", accepted=False,
         expect="invalid value '-5' for --grace"),
    Case("grace-huge", SH + "#HAI --grace=1234567890\nx\n", accepted=False,
         expect="invalid value '1234567890' for --grace"),
    Case("grace-float", SH + "#HAI --grace=1.5\nx\n", accepted=False,
         expect="invalid value '1.5' for --grace"),
    Case("several-problems", SH + "#HAI --priority=HIHG\n#HAI --grace=soon\nx\n", accepted=False,
         expect="hai-slurm: job rejected, fix these #HAI directives:\n  line 2 (#HAI "
         "--priority=HIHG): unknown priority class 'HIHG' (did you mean 'HIGH'?)"),
    Case("percent-in-value", SH + "#HAI --priority=50%s\nx\n", accepted=False,
         expect="unknown priority class '50%s'"),
    Case("non-ascii-value", SH + "#HAI --priority=H\u00cfGH\nx\n", accepted=False,
         expect="unknown priority class 'H\u00cfGH'"),
    # rejected: entitlements
    Case("class-not-allowed", SH + "#HAI --priority=EXTREME_HIGH\nx\n", accepted=False,
         expect="line 2 (#HAI --priority=EXTREME_HIGH): account 'team-a' may not use class "
         "EXTREME_HIGH; allowed: VERY_HIGH, HIGH, ABOVE_NORMAL, NORMAL, UNDER_NORMAL, "
         "BELOW_NORMAL, LOW, AUTO"),
    Case("team-b-very-high", SH + "#HAI --priority=VERY_HIGH\nx\n", account="team-b",
         accepted=False, expect="account 'team-b' may not use class VERY_HIGH"),
    Case("team-not-allowed", SH + "#HAI --team=team-a\nx\n", account="team-b", accepted=False,
         expect="account 'team-b' may not act for team 'team-a'; allowed: team-b"),
    Case("preemptible-no-not-allowed", SH + "#HAI --priority=HIGH --preemptible=no\nx\n",
         accepted=False, expect="class HIGH does not allow --preemptible=no; classes that do: "
         "EXTREME_HIGH, VERY_HIGH"),
    Case("preemptible-no-default-class", SH + "#HAI --preemptible=no\nx\n", accepted=False,
         expect="class NORMAL does not allow --preemptible=no"),
    Case("no-requeue-normal", SH + "srun x\n", requeue=False, accepted=False,
         expect="sbatch --no-requeue makes a job non-preemptible (Slurm cannot requeue it "
         "after it saves), which class NORMAL does not allow; drop --no-requeue, or use a "
         "class that allows it: EXTREME_HIGH, VERY_HIGH"),
    Case("no-requeue-auto", SH + "#HAI --priority=AUTO\nx\n", requeue=False, accepted=False,
         expect="which class HIGH does not allow (AUTO may choose it"),
    Case("no-requeue-and-directive", SH + "#HAI --preemptible=no\nx\n", requeue=False,
         accepted=False, expect="class NORMAL does not allow --preemptible=no"),
    Case("ckpt-dir-quoted", SH + '#HAI --checkpoint-dir="/shared/ckpt/run42"\nx\n',
         accepted=False, expect='the value "/shared/ckpt/run42" of --checkpoint-dir is quoted: '
         "#HAI values are taken as written (no shell reads them); write "
         "--checkpoint-dir=VALUE without quotes"),
    Case("priority-quoted", SH + "#HAI --priority='HIGH'\nx\n", accepted=False,
         expect="write --priority=VALUE without quotes"),
    Case("ckpt-dir-user-var", SH + "#HAI --checkpoint-dir=/scratch/$USER/ckpt\nx\n",
         accepted=False, expect="checkpoint directory '/scratch/$USER/ckpt' would be taken "
         "literally: #HAI lines are not expanded ($VAR, %j); write the path out"),
    Case("ckpt-dir-slurm-pattern", SH + "#HAI --checkpoint-dir=/ckpt/%j\nx\n",
         accepted=False, expect="would be taken literally"),
    Case("ckpt-dir-control-char", SH + "#HAI --checkpoint-dir=/ck/run\x01\nx\n",
         accepted=False, expect="contains a control character"),
    Case("ckpt-dir-too-long", SH + "#HAI --checkpoint-dir=/" + "a" * 5000 + "\nx\n",
         accepted=False, expect="checkpoint directory is 5001 bytes long; at most 4095"),
    Case("ckpt-dir-dollar-kept", SH + "#HAI --checkpoint-dir=/ckpt/cost$\nx\n",
         expect="checkpoint_dir=/ckpt/cost%24"),
    Case("het-with-directives", SH + "#HAI --priority=HIGH\n#SBATCH hetjob\nx\n",
         het_offset=0, accepted=False, expect="#HAI directives are not supported in a "
         "heterogeneous job"),
    Case("het-component-without-script", None, het_offset=1,
         expect="priority=NORMAL;class=NORMAL;team=team-a;preemptible=yes"),
    Case("het-without-directives", SH + "#SBATCH hetjob\nx\n", het_offset=0,
         expect="priority=NORMAL"),
    Case("auto-preemptible-no", SH + "#HAI --priority=AUTO --preemptible=no\nx\n",
         accepted=False, expect="class HIGH does not allow --preemptible=no (AUTO may choose it "
         "for account 'team-a')"),
    Case("grace-over-cap", SH + "#HAI --priority=LOW --grace=121\nx\n", accepted=False,
         expect="--grace=121 exceeds the cap of 120 s for class LOW; use --grace=120 or less"),
    Case("auto-grace-over-cap", SH + "#HAI --priority=AUTO --grace=601\nx\n", accepted=False,
         expect="cap of 600 s for class ABOVE_NORMAL (AUTO may choose it for account 'team-a')"),
    Case("qos-contradicts", SH + "#HAI --priority=HIGH\nx\n", qos="low", accepted=False,
         expect="--qos=low contradicts this line: class HIGH uses QOS high"),
    Case("qos-with-auto", SH + "#HAI --priority=AUTO\nx\n", qos="low", accepted=False,
         expect="--qos=low cannot be combined with AUTO"),
    Case("qos-unknown", SH + "x\n", qos="debug", accepted=False,
         expect="--qos=debug is not the QOS of a priority class; use #HAI --priority=CLASS "
         "instead (class QOS: extreme_high, very_high"),
    Case("qos-not-allowed", SH + "x\n", qos="extreme_high", accepted=False,
         expect="--qos=extreme_high (class EXTREME_HIGH): account 'team-a' may not use class"),
    Case("team-and-class-problems", SH + "#HAI --team=team-a --priority=VERY_HIGH\nx\n",
         account="team-b", accepted=False,
         expect="may not act for team 'team-a'; allowed: team-b\n  line 2 (#HAI --team=team-a "
         "--priority=VERY_HIGH): account 'team-b' may not use class VERY_HIGH"),
    # the job environment (batch jobs): see ENV_EXPECTED
    Case("env-readme", README_SCRIPT, account="root", environment=(("PATH", "/usr/bin"),),
         expect="checkpoint_dir=/shared/ckpt/run42"),
    Case("env-class-default-grace", SH + "#HAI --priority=LOW\nx\n", environment=(),
         expect="grace=60"),
    Case("env-user-dir-kept", README_SCRIPT, account="root",
         environment=(("HAI_CHECKPOINT_DIR", "/mine"), ("HAI_CHECKPOINT_GRACE", "7")),
         expect="checkpoint_dir=/shared/ckpt/run42"),
    Case("env-user-same-dir", README_SCRIPT, account="root",
         environment=(("HAI_CHECKPOINT_DIR", "/shared/ckpt/run42"),), expect="grace=120"),
    Case("env-dir-encoded-in-record-not-in-env", SH + "#HAI --checkpoint-dir=/a;b|c\nx\n",
         environment=(), expect="checkpoint_dir=/a%3Bb%7Cc"),
    Case("env-rejected-untouched", SH + "#HAI --grace=0\nx\n", environment=(("A", "1"),),
         accepted=False, expect="--grace"),
    Case("env-no-script", None, environment=(("A", "1"),), expect="source=default"),
)

#: The job environment each env-* case ends with (both sides must agree on it too).
ENV_EXPECTED: dict[str, dict[str, str]] = {
    "env-readme": {"PATH": "/usr/bin", "HAI_CHECKPOINT_DIR": "/shared/ckpt/run42",
                   "HAI_CHECKPOINT_GRACE": "120"},
    "env-class-default-grace": {"HAI_CHECKPOINT_GRACE": "60"},
    "env-user-dir-kept": {"HAI_CHECKPOINT_DIR": "/mine", "HAI_CHECKPOINT_GRACE": "7"},
    "env-user-same-dir": {"HAI_CHECKPOINT_DIR": "/shared/ckpt/run42",
                          "HAI_CHECKPOINT_GRACE": "120"},
    "env-dir-encoded-in-record-not-in-env": {"HAI_CHECKPOINT_DIR": "/a;b|c",
                                             "HAI_CHECKPOINT_GRACE": "60"},
    "env-rejected-untouched": {"A": "1"},
    "env-no-script": {"A": "1"},
}
