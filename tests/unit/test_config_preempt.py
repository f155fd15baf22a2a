"""The daemon file's [planner] and [executor] tables: defaults, values, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hai_slurm.classes import PriorityClass as P
from hai_slurm.errors import ConfigError
from hai_slurm.priority.cli.admin import summary
from hai_slurm.priority.config.loader import load_config, parse_config
from hai_slurm.priority.executor.types import ExecutorSettings
from hai_slurm.priority.planner.types import PlannerConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "priority" / "examples" / "daemon.toml"


def test_without_the_tables_preemption_is_on_with_the_code_defaults() -> None:
    """No [planner]/[executor]: enabled, PlannerConfig() and ExecutorSettings(), no Redis."""
    pre = parse_config("").preempt
    assert pre.enabled is True
    assert pre.planner == PlannerConfig()
    assert pre.executor == ExecutorSettings()
    assert pre.redis is False  # no redis_url


def test_values_in_every_accepted_form_reach_the_settings() -> None:
    """Durations with units, numbers, booleans, class weights and the signal name are read."""
    cfg = parse_config("""
redis_url = "redis://127.0.0.1:6379/0"
[planner]
enabled = true
min_run_time = "90s"
urgent_min_run_time = "20s"
restart_cost = "1m"
restart_cost_per_node = 5
benefit_threshold = 0.25
max_staleness = "30s"
max_plans = 2
max_searches = 10
max_candidates_per_node = 4
allow_cross_leaf = true
[planner.class_weights]
HIGH = 100
[executor]
default_grace = "45s"
saving_extension = "2m"
start_timeout = 30
signal = "SIGUSR2"
redis = true
""")
    pl, ex = cfg.preempt.planner, cfg.preempt.executor
    assert (pl.min_run_time, pl.restart_cost, pl.restart_cost_per_node) == (90, 60, 5)
    assert pl.urgent_min_run_time == 20
    assert (pl.min_run_for(P.LOW), pl.min_run_for(P.LOW, urgent=True)) == (90, 20)
    assert (pl.benefit_threshold, pl.max_staleness, pl.max_plans) == (0.25, 30, 2)
    assert (pl.max_searches, pl.max_candidates_per_node, pl.allow_cross_leaf) == (10, 4, True)
    assert pl.class_weights[P.HIGH] == 100 and pl.class_weights[P.LOW] == 0
    assert (ex.default_deadline, ex.saving_extension, ex.start_timeout) == (45, 120, 30)
    assert ex.signal == "USR2" and cfg.preempt.redis is True


def test_redis_false_turns_the_messages_off_even_with_a_url() -> None:
    """[executor] redis = false: signals only."""
    cfg = parse_config('redis_url = "redis://h:1/0"\n[executor]\nredis = false\n')
    assert cfg.redis_url is not None and cfg.preempt.redis is False


def test_enabled_false_turns_preemption_off() -> None:
    """[planner] enabled = false: the daemon runs the policy only."""
    assert parse_config("[planner]\nenabled = false\n").preempt.enabled is False


@pytest.mark.parametrize(("text", "pattern"), [
    ('[planner]\nmin_run_time = "soon"',
     r"d\.toml, line 2: planner\.min_run_time = 'soon': .*allowed: seconds"),
    ("[planner]\nbenefit_threshold = -1",
     r"line 2: planner\.benefit_threshold = -1: out of range; allowed: a number >= 0"),
    ("[planner]\nvictim_age_wait = -0.5",
     r"line 2: planner\.victim_age_wait = -0\.5: out of range; allowed: a number >= 0"),
    ("[planner]\nborrowed_discount = 1.5",
     r"line 2: planner\.borrowed_discount = 1\.5: out of range; allowed: a number from 0 "
     r"to 1"),
    ('[planner]\nborrowed_discount = "half"',
     r"planner\.borrowed_discount = 'half': expected a number, got str"),
    ("[planner]\nmax_plans = 1.5",
     r"planner\.max_plans = 1\.5: expected an integer, got float; allowed: an integer >= 0"),
    ("[planner]\nmax_candidates_per_node = 20",
     r"planner\.max_candidates_per_node = 20: out of range; allowed: an integer from 1 to 16"),
    ('[planner]\nenabled = "yes"',
     r"planner\.enabled = 'yes': expected true or false"),
    ("[planner]\nenabeld = true",
     r"planner\.enabeld: unknown key \(did you mean 'enabled'\?\); known keys here: "),
    ('[planner]\nurgent_min_run_time = "-1m"',
     r"planner\.urgent_min_run_time = '-1m': .*allowed: seconds"),
    ("[planner.class_weights]\nHIHG = 2",
     r"planner\.class_weights\.HIHG: unknown priority class 'HIHG' \(did you mean 'HIGH'\?\)"),
    ("[planner.class_weights]\nHIGH = -2",
     r"planner\.class_weights\.HIGH = -2: out of range; allowed: a number >= 0"),
    ("[executor]\nstart_timeout = 0",
     r"executor\.start_timeout = 0: must be longer than 0; allowed: .*> 0"),
    ('[executor]\ndefault_grace = "-5s"',
     r"executor\.default_grace = '-5s': .*allowed: seconds"),
    ('[executor]\nsignal = "USR1"',
     r"executor\.signal = 'USR1': USR1 is taken by NCCL; allowed: a signal name such as USR2"),
    ('[executor]\nsignal = "FOO"',
     r"executor\.signal = 'FOO': unknown signal 'FOO'"),
    ("[executor]\nredis = 1",
     r"executor\.redis = 1: expected true or false"),
    ("[executor]\ndeadline = 5",
     r"executor\.deadline: unknown key; known keys here: clock_skew, default_grace, "),
    ("planner = 3", r"planner = 3: expected a table \(\[planner\]\)"),
])
def test_bad_values_name_file_line_key_value_and_what_is_allowed(text: str,
                                                                 pattern: str) -> None:
    """Each bad setting is a ConfigError naming the file, dotted key, value and the rule."""
    with pytest.raises(ConfigError, match=pattern):
        parse_config(text + "\n", source="d.toml")


def test_example_documents_both_tables_with_the_defaults() -> None:
    """priority/examples/daemon.toml has [planner] and [executor], set to the built-in values."""
    text = EXAMPLE.read_text()
    assert "\n[planner]\n" in text and "\n[executor]\n" in text
    pre = load_config(EXAMPLE).preempt
    assert pre.enabled is True
    assert pre.planner == PlannerConfig()
    assert pre.executor == ExecutorSettings()


def test_config_check_summary_mentions_planner_and_executor() -> None:
    """``hai-slurm config check`` prints the preemption settings, or that preemption is off."""
    on = "\n".join(summary(parse_config(
        'redis_url = "redis://h:1/0"\n[planner]\nmin_run_time = "90s"\n'
        '[executor]\ndefault_grace = "45s"\n[classes.HIGH]\non_deadline = "force"\n')))
    assert "preemption: on; planner: victims run >= 1m30s (1m for urgent work)" in on
    assert "checkpoint request by SIGUSR2 + Redis" in on and "(default 45s)" in on
    assert "HIGH force" in on and "LOW force" in on
    off = summary(parse_config("[planner]\nenabled = false\n"))
    assert off[-1].startswith("preemption: off")


def test_save_cost_is_read_and_checked() -> None:
    """``[planner] save_cost`` takes a duration (the save time of a victim that saves on
    request without a grace of its own); a negative one is refused with the key named."""
    assert parse_config('[planner]\nsave_cost = "2m"\n').preempt.planner.save_cost == 120
    with pytest.raises(ConfigError, match="save_cost"):
        parse_config("[planner]\nsave_cost = -5\n")


def test_urgent_no_save_wait_is_read_checked_and_summarised() -> None:
    """``[planner] urgent_no_save_wait`` takes a duration or "off" (None: the benefit test
    decides); ``config check`` says which; a negative one is refused with the key named."""
    assert PlannerConfig().urgent_no_save_wait == 7.0
    cfg = parse_config('[planner]\nurgent_no_save_wait = "1m"\n')
    assert cfg.preempt.planner.urgent_no_save_wait == 60
    assert "1m (a victim that cannot)" in "\n".join(summary(cfg))
    off = parse_config('[planner]\nurgent_no_save_wait = "off"\n')
    assert off.preempt.planner.urgent_no_save_wait is None
    assert "the benefit test decides (a victim that cannot)" in "\n".join(summary(off))
    with pytest.raises(ConfigError, match=r"urgent_no_save_wait = '-5s'.*or 'off'"):
        parse_config('[planner]\nurgent_no_save_wait = "-5s"\n')


def test_bound_no_save_wait_is_read_checked_and_summarised() -> None:
    """``[planner] bound_no_save_wait`` is off by default (a job past its bound takes only
    victims that save) and takes a duration; ``config check`` says which; a negative one is
    refused with the key named, here and by PlannerConfig itself (the simulator's --set)."""
    assert PlannerConfig().bound_no_save_wait is None
    assert "past its bound never takes a victim that cannot save" in "\n".join(
        summary(parse_config("")))
    cfg = parse_config('[planner]\nbound_no_save_wait = "2h"\n')
    assert cfg.preempt.planner.bound_no_save_wait == 7200
    assert "takes a victim that cannot save once it waited 2h" in "\n".join(summary(cfg))
    assert parse_config('[planner]\nbound_no_save_wait = "off"\n'
                        ).preempt.planner.bound_no_save_wait is None
    with pytest.raises(ConfigError, match=r"bound_no_save_wait = '-5s'.*or 'off'"):
        parse_config('[planner]\nbound_no_save_wait = "-5s"\n')
    with pytest.raises(ConfigError, match="bound_no_save_wait"):
        PlannerConfig(bound_no_save_wait=-1.0)


def test_borrowed_discount_is_read_and_summarised() -> None:
    """``[planner] borrowed_discount`` reaches the planner's settings and ``config check``
    prints it; PlannerConfig itself refuses a weight outside 0..1 (the simulator's --set path)."""
    cfg = parse_config("[planner]\nborrowed_discount = 0.25\n")
    assert cfg.preempt.planner.borrowed_discount == 0.25
    assert "borrowed victims' loss counted 0.25 x" in "\n".join(summary(cfg))
    with pytest.raises(ConfigError, match="borrowed_discount"):
        PlannerConfig(borrowed_discount=-0.1)
