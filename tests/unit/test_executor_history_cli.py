"""``hai-slurm preempt history``: plans from the daemon's database, newest first, by team."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.priority.policy.settings import DeadlineAction
from hai_slurm.priority.store import PlanJob, PlanState, VictimState
from hai_slurm.priority.store.engine import default_sqlite_url, upgrade
from hai_slurm.priority.store.repository import Repository

T = 1_800_000_000.0


def fill(state_dir: Path) -> None:
    """Two plans: one done (team-a gave way to team-b), one aborted (team-c, a miss)."""
    repo = Repository(upgrade(default_sqlite_url(state_dir)))
    p = repo.create_plan(at=T, beneficiaries=[PlanJob(10, "team-b", "bob", 16)],
                         victims=[PlanJob(1, "team-a", "ann", 8), PlanJob(2, "team-a", "al", 8)],
                         reason="HIGH job 10 waits")
    repo.update_victims(p.plan_id, [1, 2], VictimState.ASKED, at=T + 0.1)
    repo.transition_plan(p.plan_id, PlanState.SIGNALLED, at=T + 0.1)
    repo.update_victims(p.plan_id, [1], VictimState.ACKED, at=T + 0.5, ack_step=254)
    repo.update_victims(p.plan_id, [2], VictimState.ACKED, at=T + 0.7, ack_step=253)
    repo.transition_plan(p.plan_id, PlanState.ALL_ACKED, at=T + 0.7)
    repo.update_victims(p.plan_id, [1, 2], VictimState.REQUEUED, at=T + 0.8)
    repo.transition_plan(p.plan_id, PlanState.REQUEUED, at=T + 0.8)
    repo.transition_plan(p.plan_id, PlanState.DONE, at=T + 1.2, note="beneficiary 10 started")
    q = repo.create_plan(at=T + 60, beneficiaries=[PlanJob(11, "team-b", "bob", 8)],
                         victims=[PlanJob(3, "team-c", "cy", 8)], reason="HIGH job 11 waits",
                         on_miss=DeadlineAction.ABORT)
    repo.update_victims(q.plan_id, [3], VictimState.ASKED, at=T + 60)
    repo.transition_plan(q.plan_id, PlanState.SIGNALLED, at=T + 60)
    repo.update_victims(q.plan_id, [3], VictimState.MISSED, at=T + 65)
    repo.transition_plan(q.plan_id, PlanState.ABORTED, at=T + 65,
                         note="victim(s) [3] missed the deadline; nobody requeued")


def test_history_lists_newest_first_with_victims_and_steps(tmp_path: Path) -> None:
    """Both plans, the aborted (newer) one first, each with its victims' fate and its steps."""
    fill(tmp_path)
    res = CliRunner().invoke(cli, ["preempt", "history", "--state-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.index("plan 2") < out.index("plan 1")
    assert "job 1 (team-a, ann, 8 GPUs): saved at step 254, requeued (0.4 s to save)" in out
    assert "job 3 (team-c, cy, 8 GPUs): missed its deadline" in out
    assert ("steps planned +0.0s -> signalled +0.1s -> all_acked +0.7s -> requeued +0.8s -> "
            "done +1.2s") in out
    assert "end   victim(s) [3] missed the deadline; nobody requeued" in out


def test_history_filters_by_team(tmp_path: Path) -> None:
    """--team keeps plans where the team gained or lost a job."""
    fill(tmp_path)
    run = CliRunner()
    a = run.invoke(cli, ["preempt", "history", "--state-dir", str(tmp_path), "--team", "team-a"])
    assert "plan 1" in a.output and "plan 2" not in a.output
    b = run.invoke(cli, ["preempt", "history", "--state-dir", str(tmp_path), "--team", "team-b"])
    assert "plan 1" in b.output and "plan 2" in b.output
    z = run.invoke(cli, ["preempt", "history", "--state-dir", str(tmp_path), "--team", "zz"])
    assert z.exit_code == 0 and z.output.strip() == "no preemption plans recorded for team zz"


def test_history_without_a_daemon_database_says_what_to_do(tmp_path: Path) -> None:
    """An empty state dir: a clear error, exit code 1, no traceback."""
    (tmp_path / "hai-slurm.db").touch()
    res = CliRunner().invoke(cli, ["preempt", "history", "--state-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "holds no daemon state yet; start the daemon" in res.output


def test_history_in_an_empty_state_dir_creates_no_database(tmp_path: Path) -> None:
    """A read-only command never creates the daemon's SQLite file (it would be the caller's,
    root's say, and keep the daemon's user from writing it)."""
    res = CliRunner().invoke(cli, ["preempt", "history", "--state-dir", str(tmp_path)])
    assert res.exit_code == 1 and "holds no daemon state yet" in res.output, res.output
    assert list(tmp_path.iterdir()) == []
