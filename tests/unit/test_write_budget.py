"""The write budget: a cycle writes at most ``writes_per_cycle`` priorities, the top of the
queue first, and Slurm's order above the line it stops at is exactly the policy's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from daemon_helpers import rig
from hypothesis import given, settings
from hypothesis import strategies as st

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.config.loader import parse_config
from hai_slurm.priority.daemon.metrics import sample
from hai_slurm.priority.policy.scoring import budget_writes

_values = st.integers(min_value=1, max_value=60)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(1, 80), st.tuples(st.none() | _values, _values),
                       min_size=1, max_size=40),
       st.integers(min_value=1, max_value=40))
def test_the_queue_above_the_line_is_the_policys_order(
        jobs: dict[int, tuple[int | None, int]], limit: int) -> None:
    """Whatever the old and new values: after the budgeted writes, every job whose new value is
    above the line has it in Slurm, and no job left unwritten sits above the line."""
    current = {j: old for j, (old, _) in jobs.items()}
    wanted = {j: new for j, (_, new) in jobs.items()}
    needed = {j: v for j, v in wanted.items() if current[j] != v}
    chosen = budget_writes(current, needed, limit)
    assert len(chosen) == min(limit, len(needed))
    assert all(chosen[j] == needed[j] for j in chosen)
    if not chosen:
        return
    line = min(max(current[j] or 0, chosen[j]) for j in chosen)
    after = {j: chosen.get(j, current[j] or 0) for j in jobs}
    for j in jobs:
        if wanted[j] > line:
            assert after[j] == wanted[j], (j, jobs[j], line)
        if after[j] > line:
            assert after[j] == wanted[j], (j, jobs[j], line)


def test_a_job_falling_from_high_is_written_before_it_stays_above_a_written_one() -> None:
    """A demoted job (old 50 -> new 5) goes before new jobs at 40 and 30 with a budget of 2:
    left unwritten, it would stay at 50 above the job just written at 40."""
    assert budget_writes({1: 50, 2: None, 3: None}, {1: 5, 2: 40, 3: 30}, 2) == {1: 5, 2: 40}


def test_no_limit_and_a_budget_bigger_than_the_writes_write_everything() -> None:
    writes = {1: 5, 2: 40, 3: 30}
    assert budget_writes({}, writes, 0) == writes
    assert budget_writes({}, writes, 3) == writes


def test_equal_ranks_go_to_the_lower_job_id() -> None:
    """Ties are broken as Slurm orders equal priorities: the lower job id first."""
    assert budget_writes({}, {7: 10, 3: 10, 5: 10}, 2) == {3: 10, 5: 10}


def test_the_first_cycle_writes_the_top_of_the_queue_and_the_rest_follow(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """30 pending jobs, a budget of 12: the first cycle writes the 12 the policy ranks highest
    (the HIGH jobs, then the oldest NORMAL ones), says how many are left, and the next cycles
    write the rest; then nothing more is written."""
    r = rig(tmp_path, writes_per_cycle=12)
    jobs = []
    for i in range(30):
        jobs.append(r.submit(PriorityClass.HIGH if i % 5 == 4 else PriorityClass.NORMAL))
        r.tick(10)
    d = r.daemon()
    with caplog.at_level(logging.INFO, logger="hai_slurm.priority.daemon.loop"):
        first = d.run_once()
    assert first.writes == 12
    assert sample(d.metrics, "hai_priority_writes_deferred") == 18
    assert "18 left for later cycles, writes_per_cycle 12" in caplog.text
    written = {j for j in jobs if r.slurm.jobs[j].priority > 1}
    wanted = first.decision.result.priorities if first.decision else {}
    top = sorted(jobs, key=lambda j: -wanted[j])[:12]
    assert written == set(top)
    highs = [j for i, j in enumerate(jobs) if i % 5 == 4]
    assert set(highs) <= written  # the HIGH jobs are on top
    unwritten_max = max(r.slurm.jobs[j].priority for j in jobs if j not in written)
    assert unwritten_max < min(r.slurm.jobs[j].priority for j in written)

    r.tick(10)
    assert d.run_once().writes == 12
    r.tick(10)
    third = d.run_once()
    assert third.writes == 6
    assert sample(d.metrics, "hai_priority_writes_deferred") == 0
    r.tick(10)
    assert d.run_once().writes == 0
    final = {j: r.slurm.jobs[j].priority for j in jobs}
    assert sorted(jobs, key=lambda j: -final[j]) == sorted(jobs, key=lambda j: -wanted[j])


def test_the_budget_is_read_from_intervals_and_checked() -> None:
    assert parse_config("").intervals.writes_per_cycle == 1000
    assert parse_config("[intervals]\nwrites_per_cycle = 0\n").intervals.writes_per_cycle == 0
    with pytest.raises(ConfigError) as err:
        parse_config("[intervals]\nwrites_per_cycle = -5\n", source="d.toml")
    assert "intervals.writes_per_cycle" in str(err.value)
    assert "0 for no limit" in str(err.value)


def test_config_check_names_the_budget() -> None:
    from hai_slurm.priority.cli.admin import summary
    assert any("at most 1,000 priority writes each (the top of the queue first)" in line
               for line in summary(parse_config("")))
    assert any("every priority written each" in line
               for line in summary(parse_config("[intervals]\nwrites_per_cycle = 0\n")))
