"""``priority explain``: the plain-words text, and the command on a JSON snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hai_slurm.classes import ClassOrigin
from hai_slurm.classes import PriorityClass as P
from hai_slurm.cli import cli
from hai_slurm.priority.policy.explain import explain, explain_running
from hai_slurm.priority.policy.priorities import compute_priorities
from hai_slurm.priority.policy.settings import PolicyConfig, TeamQuota
from hai_slurm.priority.policy.state import AUTO, EventKind, FairnessEvent, Resources
from hai_slurm.priority.policy.testing import NOW, pending_job, running_job

CLUSTER = Resources(16, 256, 16 * 256 * 1024)
CONFIG = PolicyConfig(teams={"vision": TeamQuota(gpus=8, class_gpus={P.HIGH: 4})})


def test_explain_names_class_origin_aging_order_compensation_quota_and_wait() -> None:
    """An aged, requeued LOW job: every part of its story is in the text."""
    job = pending_job(42, P.LOW, team="vision", user="ana", submit=NOW - 600,
                      first_submit_time=NOW - 90_000, prior_wait=86_000, restarts=3, preemptions=2,
                      slurm_reason="Resources")
    running = [running_job(1, P.NORMAL, team="vision", gpus=10)]
    events = [FairnessEvent(EventKind.PREEMPTED, "vision", "ana", NOW - 60)]
    result = compute_priorities([job], running, config=CONFIG, cluster=CLUSTER, events=events,
                                now=NOW)
    text = explain(job, result.pending[42], result.teams["vision"], config=CONFIG, jobs_ahead=3)
    assert "Job 42 (user ana, team vision) is pending at priority" in text
    assert "requested LOW with #HAI --priority" in text
    assert "promoted 1 class to BELOW_NORMAL" in text
    assert "Aging orders the queue only: LOW preempts nothing." in text
    assert "round robin between teams" in text
    assert "requeued by the daemon) 2 times" in text and "age restored" in text
    assert "Requeued 1 time not by the daemon" in text
    assert "runs 10 of its 8 GPU quota (2 GPUs borrowed" in text
    assert "was preempted 1 time and preempted others 0 times" in text
    assert "Waiting for: Resources; 3 pending jobs ahead of it." in text


def test_explain_says_an_aged_job_preempts_as_its_own_class_past_its_bound() -> None:
    """A NORMAL job that waited past its 2-h bound is aged; it preempts below NORMAL."""
    job = pending_job(43, P.NORMAL, team="vision", submit=NOW - 8000)
    result = compute_priorities([job], [], config=CONFIG, cluster=CLUSTER, now=NOW)
    assert result.pending[43].reason.aging_steps
    text = explain(job, result.pending[43], config=CONFIG)
    assert "past the bound of NORMAL it preempts jobs below NORMAL" in text, text
    assert "as urgent work does, protected teams' jobs too" in text


def test_explain_default_and_auto_classes_and_fair_share() -> None:
    """Default class and AUTO are told apart; fair-share classes show the team's share."""
    default = pending_job(1, P.NORMAL, team="vision", source=ClassOrigin.DEFAULT)
    auto = pending_job(2, AUTO, team="vision", gpus=2)
    result = compute_priorities([default, auto], [], config=CONFIG, cluster=CLUSTER, now=NOW)
    text = explain(default, result.pending[1], config=CONFIG)
    assert "NORMAL is the default class" in text
    assert "dominant share of its quota (GPU, CPU, memory) is 0.00" in text
    assert "resolved to HIGH" in explain(auto, result.pending[2], config=CONFIG)


def test_explain_running_job_tells_decay_borrowed_and_protection() -> None:
    """A decayed, borrowed running job of a protected team."""
    job = running_job(5, P.ABOVE_NORMAL, team="vision", gpus=12, start=NOW - 3600)
    events = [FairnessEvent(EventKind.PREEMPTED, "vision", "ana", NOW - 60 * i)
              for i in range(1, 6)]
    result = compute_priorities([], [job], config=CONFIG, cluster=CLUSTER, events=events,
                                now=NOW)
    text = explain_running(job, result.running[5], result.teams["vision"], config=CONFIG,
                           now=NOW)
    assert "running in class NORMAL" in text
    assert "ABOVE_NORMAL counts as NORMAL after 30m" in text and "it has run 1h" in text
    assert "It is protected" in text
    assert "except for urgent jobs (HIGH and above) and jobs past their class bound" in text
    assert "borrowed GPUs" in text


def test_explain_running_names_every_way_a_job_is_not_preemptible() -> None:
    """A job no plan may take is told so, with the three ways it gets there: the directive,
    --no-requeue, and an interactive job (the daemon makes the last two non-preemptible as
    Slurm refuses to requeue them)."""
    job = running_job(6, P.LOW, team="vision", preemptible=False)
    result = compute_priorities([], [job], config=CONFIG, cluster=CLUSTER, now=NOW)
    text = explain_running(job, result.running[6], config=CONFIG, now=NOW)
    assert "It is not preemptible: #HAI --preemptible=no, sbatch --no-requeue, or an " \
        "interactive srun or salloc job" in text
    assert "may preempt it" not in text


def test_explain_running_counts_the_run_time_until_now() -> None:
    """A job kept as (run time before its current stretch, stretch start) is explained with its
    whole run time at the decision's time: 20 min before a requeue plus 15 min since."""
    job = running_job(5, P.ABOVE_NORMAL, team="vision", start=NOW - 900, run_time=1200.0,
                      running_since=NOW - 900)
    result = compute_priorities([], [job], config=CONFIG, cluster=CLUSTER, now=NOW)
    assert result.running[5].decayed
    text = explain_running(job, result.running[5], config=CONFIG, now=NOW)
    assert "it has run 35m" in text
    assert "once they have waited past their class bound" in text


def test_explain_says_how_much_a_borrowed_jobs_loss_counts() -> None:
    """The words on borrowed jobs follow the planner's borrowed_discount: first (0), at a
    discount with the 1/w ratio (0.5), no preference (1), or the setting named (unknown)."""
    job = running_job(5, P.NORMAL, team="vision", gpus=12, start=NOW - 3600)
    result = compute_priorities([], [job], config=CONFIG, cluster=CLUSTER, now=NOW)

    def text(weight: float | None) -> str:
        return explain_running(job, result.running[5], result.teams["vision"], config=CONFIG,
                               now=NOW, borrowed_discount=weight)

    assert "borrowed jobs give way first when a team under its quota" in text(0.0)
    half = text(0.5)
    assert "their lost work counts 0.5 x against jobs within quota" in half
    assert "only when the borrowed one would lose over 2 x its work" in half
    assert "give way first" not in half
    assert "borrowed jobs give way like jobs within quota" in text(1.0)
    assert "[planner] borrowed_discount" in text(None)


def test_explain_tells_aged_in_yield_and_relative_protection() -> None:
    """A NORMAL job running as HIGH by aging yields to jobs that asked for HIGH; a pending
    job's protected team is explained with the share-relative rule."""
    job = running_job(6, P.NORMAL, team="vision", start_class=P.HIGH)
    result = compute_priorities([], [job], config=CONFIG, cluster=CLUSTER, now=NOW)
    text = explain_running(job, result.running[6], config=CONFIG, now=NOW)
    assert "running in class HIGH" in text
    assert "reached HIGH by aging" in text and "counts as ABOVE_NORMAL" in text
    # above HIGH every class is urgent: no word about bounds
    assert "Jobs of a class above HIGH may preempt it." in text
    events = [FairnessEvent(EventKind.PREEMPTED, "vision", "ana", NOW - 60 * i)
              for i in range(1, 6)]
    result = compute_priorities([], [job], config=CONFIG, cluster=CLUSTER, events=events,
                                now=NOW)
    text = explain_running(job, result.running[6], result.teams["vision"], config=CONFIG,
                           now=NOW)
    assert "more than 2 x as often per quota GPU as the other teams" in text


def snapshot(tmp_path: Path) -> Path:
    data = {
        "now": NOW, "cluster": {"gpus": 16, "cpus": 256, "memory_mb": 1048576},
        "pending": [
            {"job_id": 7, "user": "ana", "team": "vision", "requested": "HIGH",
             "submit_time": NOW - 100, "resources": {"gpus": 2, "cpus": 16}},
            {"job_id": 8, "user": "bo", "team": "nlp", "requested": "NORMAL",
             "submit_time": NOW - 900, "slurm_reason": "Priority"},
        ],
        "running": [{"job_id": 3, "user": "bo", "team": "nlp", "requested": "LOW",
                     "submit_time": NOW - 2000, "start_time": NOW - 1000}],
    }
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return path


def test_cli_explain_pending_and_running_jobs(tmp_path: Path) -> None:
    """The command computes the policy on the snapshot and prints the explanation."""
    snap = snapshot(tmp_path)
    out = CliRunner().invoke(cli, ["priority", "explain", "8", "--snapshot", str(snap)])
    assert out.exit_code == 0, out.output
    assert "Job 8 (user bo, team nlp) is pending" in out.output
    assert "Waiting for: Priority; 1 pending job ahead of it." in out.output
    out = CliRunner().invoke(cli, ["priority", "explain", "3", "--snapshot", str(snap)])
    assert out.exit_code == 0 and "is running in class LOW" in out.output


def test_cli_explain_unknown_job_and_bad_snapshot(tmp_path: Path) -> None:
    """An unknown job id or a bad field is an error naming it, exit code 1."""
    snap = snapshot(tmp_path)
    out = CliRunner().invoke(cli, ["priority", "explain", "99", "--snapshot", str(snap)])
    assert out.exit_code == 1 and "job 99 is neither pending nor running" in out.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"now": NOW, "pending": [
        {"job_id": 1, "user": "a", "team": "t", "requested": "HIHG", "submit_time": 1}]}))
    out = CliRunner().invoke(cli, ["priority", "explain", "1", "--snapshot", str(bad)])
    assert out.exit_code == 1
    assert "pending[0].requested" in out.output and "did you mean 'HIGH'" in out.output
