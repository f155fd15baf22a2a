"""Trace readers: generic CSV, Alibaba v2023, synthetic generator; malformed rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hai_slurm.classes import PriorityClass as P
from hai_slurm.errors import ConfigError
from hai_slurm.priority.sim.cluster import alibaba_description, load_topology
from hai_slurm.priority.sim.synthetic import generate, parse_spec
from hai_slurm.priority.sim.trace import (
    ALIBABA_QOS,
    alibaba_team,
    compress,
    load_trace,
    read_alibaba,
    read_generic,
)

DATA = Path(__file__).parent.parent / "data" / "traces"
PODS = DATA / "openb_pod_list_default.csv"
NODES = DATA / "openb_node_list_gpu_node.csv"


def test_generic_trace_reads_every_column() -> None:
    """Three rows become three jobs with their class, team and size."""
    trace = read_generic(DATA / "one_node_contention.csv")
    assert [(j.submit, j.duration, j.gpus, j.team, j.cls) for j in trace.jobs] == [
        (0, 1000, 8, "t1", P.LOW), (10, 50, 8, "t2", P.HIGH), (20, 10, 4, "t2", P.NORMAL)]


def test_malformed_row_stops_the_read_with_file_line_and_column() -> None:
    """The bad GPU count on line 3 is reported with the file, line, column and value."""
    with pytest.raises(ConfigError) as err:
        read_generic(DATA / "malformed.csv")
    text = str(err.value)
    assert "malformed.csv" in text and "line 3" in text and "'gpus'" in text
    assert "'eight'" in text and "--skip-bad" in text


def test_malformed_rows_are_skipped_and_counted_on_request() -> None:
    """With skip_bad the two bad rows (lines 3 and 5) are counted, the others kept."""
    trace = read_generic(DATA / "malformed.csv", skip_bad=True)
    assert [j.submit for j in trace.jobs] == [0, 20]
    assert trace.skipped == {"malformed": 2}


def test_unknown_class_names_the_nearest_class(tmp_path: Path) -> None:
    """A misspelt class is an error on its line that suggests the right name."""
    path = tmp_path / "t.csv"
    path.write_text("submit,duration,gpus,nodes,team,class\n0,10,1,0,a,NORMAL\n"
                    "5,10,1,0,a,HIHG\n")
    with pytest.raises(ConfigError, match=r"line 3, column 'class'.*did you mean 'HIGH'"):
        read_generic(path)


def test_generic_saves_column_says_which_jobs_save_on_request(tmp_path: Path) -> None:
    """``saves`` is optional (absent or empty: the job saves); 0/no/false: it cannot; any other
    value is an error on its line."""
    path = tmp_path / "t.csv"
    path.write_text("submit,duration,gpus,nodes,team,class,saves\n0,10,1,0,a,LOW,0\n"
                    "1,10,1,0,a,LOW,\n2,10,1,0,a,LOW,No\n3,10,1,0,a,LOW,yes\n")
    assert [j.saves for j in read_generic(path).jobs] == [False, True, False, True]
    assert all(j.saves for j in read_generic(DATA / "one_node_contention.csv").jobs)
    path.write_text("submit,duration,gpus,nodes,team,class,saves\n0,10,1,0,a,LOW,maybe\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'saves'.*1/0, yes/no"):
        read_generic(path)


def test_missing_header_column_is_named(tmp_path: Path) -> None:
    """A header without 'team' says which columns are required."""
    path = tmp_path / "t.csv"
    path.write_text("submit,duration,gpus,nodes,class\n0,10,1,0,LOW\n")
    with pytest.raises(ConfigError, match=r"line 1: header lacks column.s. team"):
        read_generic(path)


def test_alibaba_trace_counts_what_it_leaves_out() -> None:
    """8,152 pods: 1,088 CPU-only and 861 never-scheduled GPU pods are left out, 6,203 kept."""
    trace = read_alibaba(PODS)
    assert len(trace.jobs) == 6203
    assert trace.skipped == {"cpu-only (num_gpu 0)": 1088,
                             "never scheduled in the trace (no duration)": 861}
    assert {j.cls for j in trace.jobs} == set(ALIBABA_QOS.values())
    assert [j.submit for j in trace.jobs] == sorted(j.submit for j in trace.jobs)
    assert load_trace(PODS).jobs == trace.jobs  # the format is recognised from the header


def test_alibaba_first_pod_maps_as_documented() -> None:
    """openb-pod-0000: LS -> HIGH, 1 GPU, 12,537,496 s from scheduling to deletion."""
    first = next(j for j in read_alibaba(PODS).jobs if j.name == "openb-pod-0000")
    assert (first.submit, first.duration, first.gpus, first.cls) == (0, 12537496, 1, P.HIGH)
    shape = {"cpu_milli": "12000", "memory_mib": "16384", "num_gpu": "1", "gpu_milli": "1000"}
    assert first.team == alibaba_team(shape, 8)


def test_alibaba_teams_are_deterministic_and_spread() -> None:
    """Team derivation depends on the row only: two reads agree, and 8 buckets are all used."""
    a, b = read_alibaba(PODS, teams=8), read_alibaba(PODS, teams=8)
    assert [j.team for j in a.jobs] == [j.team for j in b.jobs]
    assert len(a.teams) == 8


def test_alibaba_bad_qos_names_the_line(tmp_path: Path) -> None:
    """An unknown QoS value is reported with its line; skip_bad counts it instead."""
    lines = PODS.read_text().splitlines()[:4]
    lines[2] = lines[2].replace(",LS,", ",Premium,")
    path = tmp_path / "pods.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"line 3, column 'qos'.*unknown QoS"):
        read_alibaba(path)
    assert read_alibaba(path, skip_bad=True).skipped == {"malformed": 1}


def test_alibaba_cluster_keeps_every_gpu() -> None:
    """1,213 GPU nodes with 6,212 GPUs; one node in 10 keeps the node mix at a tenth."""
    topo = load_topology(NODES)
    assert len(topo.gpus) == 6212
    small = alibaba_description(NODES, every=10)
    assert len(small.nodes()) == 122


def test_compress_brings_arrivals_closer_and_keeps_durations() -> None:
    """Factor 10: the gap between submits shrinks tenfold, durations stay."""
    trace = read_generic(DATA / "one_node_contention.csv")
    fast = compress(trace, 10)
    assert [j.submit for j in fast.jobs] == [0, 1, 2]
    assert [j.duration for j in fast.jobs] == [j.duration for j in trace.jobs]


def test_synthetic_trace_is_the_same_for_the_same_seed() -> None:
    """Same spec and seed: same jobs; another seed: other jobs; mixes are respected."""
    spec = parse_spec("jobs=300,rate=0.1,sizes=1:1/8:1,classes=HIGH:1/LOW:3,teams=3")
    a, b, c = generate(spec, 1), generate(spec, 1), generate(spec, 2)
    assert a.jobs == b.jobs and a.jobs != c.jobs
    assert {j.gpus for j in a.jobs} == {1, 8}
    assert {j.cls for j in a.jobs} == {P.HIGH, P.LOW}
    assert len(a.teams) == 3


def test_synthetic_no_save_share_changes_only_which_jobs_save() -> None:
    """``no_save`` marks about that share of the jobs as unable to save on request; the jobs'
    other values are those of the same spec without it (a random stream of its own)."""
    spec = parse_spec("jobs=400,rate=0.1,teams=3")
    some = generate(parse_spec("jobs=400,rate=0.1,teams=3,no_save=0.3"), 7)
    plain = generate(spec, 7)
    assert all(j.saves for j in plain.jobs)
    assert [replace(j, saves=True) for j in some.jobs] == list(plain.jobs)
    assert 0.2 < sum(not j.saves for j in some.jobs) / 400 < 0.4
    with pytest.raises(ConfigError, match=r"synthetic\.no_save.*between 0 and 1"):
        parse_spec("no_save=1.5")


def test_synthetic_spec_errors_name_the_key() -> None:
    """Unknown keys and bad weights are ConfigErrors naming the key."""
    with pytest.raises(ConfigError, match="synthetic"):
        parse_spec("jobz=3")
    with pytest.raises(ConfigError, match=r"synthetic\.classes"):
        parse_spec("classes=HIGH")
