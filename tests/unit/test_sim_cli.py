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


def test_a_sweep_over_several_policies_names_each_and_finds_each_front(tmp_path: Path) -> None:
    """With --policy all, each row names its policy, and each policy gets a front of its
    own (the baselines ignore planner.* settings: their rows tie, and mixing them into one
    front compared unlike things)."""
    code, out, err = simulate("--synthetic", SPEC, "--seed", "1", "-o", str(tmp_path),
                              "--policy", "hai-platform", "--policy", "hai-slurm",
                              "--sweep", "planner.benefit_threshold=0.5,4")
    assert code == 0, err
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    for policy in ("hai-platform", "hai-slurm"):
        assert any(r["pareto"] for r in rows if r["policy"] == policy), rows
        assert sum(line.startswith(policy) for line in out.splitlines()) == 2, out


def test_an_output_directory_that_cannot_be_written_fails_before_any_run(
        tmp_path: Path) -> None:
    """-o under a file: a clear error at once (it came as a traceback after the runs)."""
    (tmp_path / "afile").write_text("")
    code, out, err = simulate("--synthetic", SPEC, "-o", str(tmp_path / "afile" / "sub"))
    assert code == 1 and "-o/--outdir" in err and "cannot write results there" in err, err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(("setting", "message"), [
    ("intervals.cycle=-30", "must be a finite number >= 0"),
    ("classes.HIGH.max_wait=0", "must be longer than 0"),
    ("planner.benefit_threshold=nan", "must be a finite number >= 0"),
])
def test_set_checks_values_as_the_config_file_does(tmp_path: Path, setting: str,
                                                   message: str) -> None:
    """A value the daemon's file refuses is refused by --set too (it ran with it silently)."""
    code, _, err = simulate("--synthetic", SPEC, "-o", str(tmp_path), "--set", setting)
    assert code == 1 and message in err, err


def test_what_the_replay_changes_about_the_trace_is_said_before_the_runs(
        tmp_path: Path) -> None:
    """Rows left out and jobs whose GPUs are rounded up (9 on 2 nodes run as 2 x 5) are
    printed on stderr (they were in the JSON only), and kept in the result's notes."""
    trace = tmp_path / "t.csv"
    trace.write_text("submit,duration,gpus,nodes,team,class\n0,600,9,2,a,NORMAL\n"
                     "10,600,4,0,a,NORMAL\n")
    code, _, err = simulate("--trace", str(trace), "--no-plots", "-o", str(tmp_path / "o"),
                            "--policy", "fifo", cluster=CLUSTER)
    assert code == 0, err
    assert "trace: 1 jobs spread over several nodes run with the same GPU count" in err, err
    notes = json.loads((tmp_path / "o" / "result-fifo.json").read_text())["trace"]["notes"]
    assert any("rounded up" in n for n in notes)


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
