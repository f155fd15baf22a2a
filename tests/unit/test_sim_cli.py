"""``hai-slurm simulate``: determinism, outputs, sweeps and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.errors import ConfigError
from hai_slurm.priority.sim.sweep import pareto

DATA = Path(__file__).parent.parent / "data" / "traces"
CLUSTER = DATA.parent / "sim_cluster.toml"
ONE_NODE = DATA.parent / "sim_one_node.toml"
SPEC = "jobs=150,rate=0.01,duration=1800,sizes=1:4/2:2/4:1/8:1,teams=3"


def simulate(*args: str, cluster: Path = CLUSTER) -> tuple[int, str, str]:
    runner = CliRunner()
    res = runner.invoke(cli, ["simulate", "--cluster", str(cluster), "-q", *args])
    return res.exit_code, res.stdout, res.stderr


def test_same_seed_gives_byte_identical_json(tmp_path: Path) -> None:
    """Two runs with seed 3 write the same bytes for every policy; seed 4 differs."""
    outs = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        code, _, err = simulate("--synthetic", SPEC, "--policy", "all", "--seed", seed,
                                "--no-plots", "-o", str(tmp_path / name))
        assert code == 0, err
        outs.append({p.name: p.read_bytes() for p in sorted((tmp_path / name).glob("*.json"))})
    assert len(outs[0]) == 4
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]
    res = json.loads(outs[0]["result-hai-slurm.json"])
    assert res["seed"] == 3 and res["totals"]["ended"] == 150


def test_outputs_table_json_and_plots(tmp_path: Path) -> None:
    """One run prints the class table and writes the JSON and three PNG figures."""
    code, out, err = simulate("--trace", str(DATA / "one_node_contention.csv"),
                              "--policy", "fifo", "--policy", "hai-platform",
                              "-o", str(tmp_path), cluster=ONE_NODE)
    assert code == 0, err
    assert "== fifo" in out and "== hai-platform" in out and "HIGH" in out
    for name in ("delay_cdf.png", "allocation.png", "lost_gpu_hours.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads((tmp_path / "result-hai-platform.json").read_text())
    assert res["totals"]["preemptions"] == 1
    assert res["classes"]["LOW"]["preemptions_per_job"]["max"] == 1


def test_saves_what_if_changes_what_a_victim_loses(tmp_path: Path) -> None:
    """--saves none: hai-platform's victim A cannot save: requeued 2 s after the request, it
    loses its 20 s of work too; the result's notes say which what-if ran. As traced (every
    generic row saves) A loses its 70-s save and 70-s restart only."""
    lost = {}
    for saves in ("as-traced", "none"):
        code, _, err = simulate("--trace", str(DATA / "one_node_contention.csv"), "--policy",
                                "hai-platform", "--saves", saves, "--no-plots", "-o",
                                str(tmp_path / saves), cluster=ONE_NODE)
        assert code == 0, err
        res = json.loads((tmp_path / saves / "result-hai-platform.json").read_text())
        lost[saves] = res["classes"]["LOW"]["gpu_hours_lost"] * 3600 / 8
        assert ("no job taken to save on request (--saves none)" in res["trace"]["notes"]) \
            is (saves == "none")
    assert [round(v) for v in lost.values()] == [70 + 70, 20 + 2 + 70]


def test_sweep_prints_the_pareto_front(tmp_path: Path) -> None:
    """Two values of one planner setting: two rows in sweep.json, the front marked with *."""
    code, out, err = simulate("--synthetic", SPEC, "--seed", "1", "-o", str(tmp_path),
                              "--sweep", "planner.benefit_threshold=0.5,4")
    assert code == 0, err
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert [r["params"] for r in rows] == [{"planner.benefit_threshold": "0.5"},
                                           {"planner.benefit_threshold": "4"}]
    assert any(r["pareto"] for r in rows)
    assert "*" in out and "planner.benefit_threshold=" in out


def test_bad_sweep_parameter_is_a_clear_error(tmp_path: Path) -> None:
    """An unknown setting fails before any run, naming it and the known ones."""
    code, _, err = simulate("--synthetic", SPEC, "-o", str(tmp_path),
                            "--sweep", "planner.benefit=1,2")
    assert code == 1
    assert "unknown setting 'benefit'" in err and "benefit_threshold" in err


def test_node_sampling_on_a_description_names_the_option(tmp_path: Path) -> None:
    """--keep-one-node-in only applies to an Alibaba node list: the error says which option."""
    code, _, err = simulate("--synthetic", SPEC, "-o", str(tmp_path), "--keep-one-node-in", "2")
    assert code == 1
    assert f"error: {CLUSTER}: --keep-one-node-in: keeping one node in N works on an Alibaba " \
        "node list (.csv) only" in err


def test_malformed_trace_is_a_clear_error_and_skip_bad_continues(tmp_path: Path) -> None:
    """Line 3's bad value stops the command; --skip-bad runs the two good rows."""
    code, _, err = simulate("--trace", str(DATA / "malformed.csv"), "-o", str(tmp_path))
    assert code == 1 and "line 3" in err
    code, out, err = simulate("--trace", str(DATA / "malformed.csv"), "--skip-bad",
                              "--no-plots", "-o", str(tmp_path), "--policy", "fifo")
    assert code == 0, err
    assert "2 jobs" in out


def test_pareto_front_keeps_the_undominated_points() -> None:
    """(1,1,1) dominates (2,2,2); (0,5,0) trades off and stays."""
    assert pareto([(1, 1, 1), (2, 2, 2), (0, 5, 0), (1, 1, 1)]) == [True, False, True, True]


def test_json_does_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """Two processes with different PYTHONHASHSEED (set/dict order of strings) write the same
    bytes: nothing in a run depends on hash order."""
    import os
    import subprocess
    import sys

    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        script = str(Path(sys.executable).parent / "hai-slurm")
        subprocess.run([script, "simulate", "--cluster",
                        str(CLUSTER), "-q", "--synthetic", SPEC, "--policy", "all", "--seed",
                        "5", "--no-plots", "-o", str(out)], check=True, env=env, timeout=300,
                       capture_output=True)
        outs.append({p.name: p.read_bytes() for p in sorted(out.glob("*.json"))})
    assert len(outs[0]) == 4 and outs[0] == outs[1]


def test_settings_reach_every_part_of_the_setup() -> None:
    """Dotted names change the planner, costs, multifactor and daemon configuration."""
    from hai_slurm.classes import PriorityClass
    from hai_slurm.priority.sim.runner import Setup, apply_param

    s = Setup()
    s = apply_param(s, "planner.min_run_time", "5m")
    s = apply_param(s, "costs.grace_time", "30")
    s = apply_param(s, "multifactor.weight_age", "5000")
    s = apply_param(s, "classes.HIGH.max_wait", "15m")
    s = apply_param(s, "aging.max_class", "VERY_HIGH")
    s = apply_param(s, "intervals.cycle", "60")
    assert s.planner_config().min_run_time == 300.0
    assert s.costs.grace_time == 30 and s.multifactor.weight_age == 5000
    policy = s.config.policy
    assert policy.classes[PriorityClass.HIGH].max_wait == 900.0
    assert policy.classes[PriorityClass.LOW].max_wait == 86400.0
    assert policy.aging.max_class is PriorityClass.VERY_HIGH
    assert s.config.intervals.cycle == 60.0
    off = apply_param(s, "planner.urgent_no_save_wait", "off")
    assert off.planner_config().urgent_no_save_wait is None
    assert apply_param(off, "planner.urgent_no_save_wait", "20s").planner_config(
        ).urgent_no_save_wait == 20.0
    with pytest.raises(ConfigError, match="bad value"):
        apply_param(s, "planner.min_run_time", "off")   # not an optional setting
    # an optional whole number (None by default) takes a whole number, not a float
    cpus = apply_param(s, "team_default.cpus", "8").config.policy.team_default.cpus
    assert cpus == 8 and isinstance(cpus, int)
    assert apply_param(s, "team_default.cpus", "off").config.policy.team_default.cpus is None
