"""``simulate --sacct``: real sacct exports of Slurm 22.05, 24.11 and 26.05 as traces.

The files under ``tests/data/sacct/`` were recorded on real clusters (see its README); every
expectation below follows from the job mix ``tests/data/sacct/record.py`` submits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.classes import PriorityClass
from hai_slurm.cli import cli
from hai_slurm.conf.description import load_description
from hai_slurm.conf.gen_entitlements import entitlements_of
from hai_slurm.conf.topology import Topology
from hai_slurm.errors import ConfigError
from hai_slurm.priority.sim.runner import Setup, run_policy
from hai_slurm.priority.sim.sacct import SACCT_FORMAT, read_sacct
from hai_slurm.priority.sim.trace import Trace, TraceJob

DATA = Path(__file__).parent.parent / "data"
SACCT = DATA / "sacct"
CLUSTER = DATA / "sim_cluster.toml"
VERSIONS = ("22.05", "24.11", "26.05")
FILES = ("sacct.json", "sacct-allocations.txt", "sacct-steps.txt")


def by_name(trace: Trace) -> dict[str, list[TraceJob]]:
    out: dict[str, list[TraceJob]] = {}
    for job in trace.jobs:
        out.setdefault(job.name, []).append(job)
    return out


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_exports_give_the_job_mix(version: str, name: str) -> None:
    """Every recorded export: GPU jobs with team, class, GPUs and nodes as submitted."""
    trace = read_sacct(SACCT / version / name)
    jobs = by_name(trace)
    assert sorted(jobs) == ["array", "cancelled", "done-high", "failed", "multi", "no-record",
                            "qos-debug", "qos-low", "requeued"]
    assert len(jobs["array"]) == 3 and len({j.job_id for j in jobs["array"]}) == 3
    shape = {n: (js[0].team, js[0].cls, js[0].gpus, js[0].nodes) for n, js in jobs.items()}
    high, low, normal = PriorityClass.HIGH, PriorityClass.LOW, PriorityClass.NORMAL
    assert shape == {
        "done-high": ("team-a", high, 2, 1),      # #HAI --priority=HIGH (the record)
        "qos-low": ("team-b", low, 1, 1),          # --qos=low, recorded by job_submit.lua
        "multi": ("team-a", normal, 2, 2),         # 2 nodes x gpu:1
        "failed": ("team-b", normal, 1, 1),
        "cancelled": ("team-a", normal, 1, 1),
        "requeued": ("team-a", low, 1, 1),
        "array": ("team-b", normal, 1, 1),
        "no-record": ("team-b", high, 1, 1),       # no record: the class of QOS high
        "qos-debug": ("team-a", normal, 1, 1),     # QOS debug is no class's: default class
    }
    assert all(j.user == "root" and j.duration >= 1 for j in trace.jobs)
    assert trace.jobs[0].submit == 0
    assert [j.submit for j in trace.jobs] == sorted(j.submit for j in trace.jobs)
    assert trace.skipped.get("cpu-only (no gres/gpu)") == 1
    steps = trace.skipped.get("job step rows (export with --allocations)", 0)
    assert (steps > 0) == (name == "sacct-steps.txt")
    assert "jobs whose QOS is no class's (debug: 1) replayed at the default class NORMAL" in (
        " ".join(trace.notes))
    assert "9 jobs take team and class from their #HAI record" in trace.notes


@pytest.mark.parametrize("version", VERSIONS)
def test_json_and_parsable_exports_agree(version: str) -> None:
    """The JSON and the -P export of one cluster give the same jobs (durations included);
    only the requeued job's submit may differ: JSON of 22.05 lists its first run too."""
    def key(trace: Trace) -> dict[int, tuple[object, ...]]:
        return {j.job_id: (j.duration, j.gpus, j.nodes, j.team, j.cls, j.name)
                for j in trace.jobs}

    as_json = read_sacct(SACCT / version / "sacct.json")
    parsable = read_sacct(SACCT / version / "sacct-allocations.txt")
    assert key(as_json) == key(parsable)
    submits = {j.job_id: j.submit for j in parsable.jobs}
    for job in as_json.jobs:
        if job.name != "requeued":
            assert job.submit == submits[job.job_id], job
        else:
            assert job.submit <= submits[job.job_id]


def test_json_of_22_05_merges_the_runs_of_a_requeued_job() -> None:
    """22.05 lists a requeued job once per run: one job, first submission, last run."""
    doc = json.loads((SACCT / "22.05" / "sacct.json").read_text())
    runs = [j for j in doc["jobs"] if j["name"] == "requeued"]
    assert len(runs) == 2
    trace = read_sacct(SACCT / "22.05" / "sacct.json")
    (job,) = by_name(trace)["requeued"]
    first = min(r["time"]["submission"] for r in runs)
    last = max(runs, key=lambda r: r["time"]["start"])
    start = min(r["time"]["submission"] for r in doc["jobs"])
    assert job.submit == first - start
    assert job.duration == last["time"]["end"] - last["time"]["start"]
    assert "1 requeued jobs replayed once: first submission, last run" in trace.notes


def test_site_qos_names_come_from_the_cluster_description(tmp_path: Path) -> None:
    """[classes.HIGH] qos = "debug": the debug job is HIGH; QOS high is now no class's."""
    desc = tmp_path / "cluster.toml"
    desc.write_text(CLUSTER.read_text() + '\n[classes.HIGH]\nqos = "debug"\n')
    table = entitlements_of(load_description(desc))
    trace = read_sacct(SACCT / "26.05" / "sacct.json", table=table,
                       default_class=PriorityClass.LOW)
    jobs = by_name(trace)
    assert jobs["qos-debug"][0].cls is PriorityClass.HIGH
    assert jobs["no-record"][0].cls is PriorityClass.LOW
    assert jobs["done-high"][0].cls is PriorityClass.HIGH   # the record wins over the QOS


def test_simulate_replays_a_sacct_export(tmp_path: Path) -> None:
    """The README's command: every policy replays the site's jobs, notes in the result."""
    res = CliRunner().invoke(cli, [
        "simulate", "--sacct", str(SACCT / "24.11" / "sacct-allocations.txt"),
        "--cluster", str(CLUSTER), "--policy", "all", "--no-plots", "-q", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "result-hai-slurm.json").read_text())
    assert out["trace"]["jobs"] == 11
    assert out["totals"]["ended"] == 11
    assert sorted(out["teams"]) == ["team-a", "team-b"]
    assert out["trace"]["notes"][0].startswith("sacct -P: 11 GPU jobs replayed")


def test_simulate_takes_the_default_class_and_qos_from_the_config(tmp_path: Path) -> None:
    """--config: its default_class and its cluster description's QOS names are used."""
    desc = tmp_path / "cluster.toml"
    desc.write_text(CLUSTER.read_text() + '\n[classes.HIGH]\nqos = "debug"\n')
    config = tmp_path / "daemon.toml"
    config.write_text('cluster = "cluster.toml"\ndefault_class = "LOW"\n')
    res = CliRunner().invoke(cli, [
        "simulate", "--sacct", str(SACCT / "22.05" / "sacct.json"), "--cluster", str(CLUSTER),
        "--config", str(config), "--policy", "fifo", "--no-plots", "-q", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "result-fifo.json").read_text())
    assert out["classes"]["HIGH"]["jobs"] == 2   # done-high (its record), qos-debug (QOS)
    assert out["classes"]["LOW"]["jobs"] == 3    # qos-low, requeued, no-record (QOS high)
    assert "jobs whose QOS is no class's (high: 1) replayed at the default class LOW" in (
        " ".join(out["trace"]["notes"]))


def test_simulate_wants_one_source(tmp_path: Path) -> None:
    """--trace and --sacct together are refused with a usage error."""
    res = CliRunner().invoke(cli, [
        "simulate", "--sacct", str(SACCT / "22.05" / "sacct.json"), "--synthetic", "jobs=3",
        "--cluster", str(CLUSTER), "-o", str(tmp_path)])
    assert res.exit_code == 2
    assert "give one of --trace FILE, --sacct FILE or --synthetic SPEC" in res.output


# ---- bad files: a clear error naming the line or job and the field ----

def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "export"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


HEADER = SACCT_FORMAT.replace(",", "|")
ROW = ("7|train|alice|vision|high|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T11:05:00|"
       "COMPLETED|1|cpu=8,gres/gpu=4,node=1|cpu=8,gres/gpu=4,node=1|")


def test_a_minimal_parsable_export_is_read(tmp_path: Path) -> None:
    """The documented --format: one row, team = account, class of its QOS, hour-long job."""
    trace = read_sacct(write(tmp_path, f"{HEADER}\n{ROW}\n"))
    assert trace.jobs == (TraceJob(7, 0, 3600, 4, "vision", PriorityClass.HIGH, 1, "alice",
                                   "train", saves=False),)


def test_a_job_saves_on_request_when_its_record_names_a_checkpoint_directory(
        tmp_path: Path) -> None:
    """As the daemon sees it: a #HAI record with a checkpoint directory saves on request; one
    without (or with an empty one, as ``save_estimates`` reads it), and a job without a record,
    do not. The notes count them."""
    record = "hai:v1:priority=LOW;class=LOW;team=nlp;preemptible=yes;grace=60;"
    rows = [ROW + record + "checkpoint_dir=/ckpt/a;source=directive",
            ROW.replace("7|", "8|", 1) + record + "source=directive",
            ROW.replace("7|", "9|", 1),
            ROW.replace("7|", "10|", 1) + record + "checkpoint_dir=;source=directive"]
    trace = read_sacct(write(tmp_path, "\n".join([HEADER, *rows]) + "\n"))
    assert [(j.job_id, j.saves) for j in trace.jobs] == [(7, True), (8, False), (9, False),
                                                         (10, False)]
    assert any(n.startswith("1 of 4 jobs save on request") for n in trace.notes)
    assert not any("no job has a #HAI record" in n for n in trace.notes)


def test_an_export_without_hai_records_says_why_no_job_saves(tmp_path: Path) -> None:
    """Without the AdminComment column (or job_submit.lua), no job has a #HAI record, so none
    saves on request: the notes say so, and what to do."""
    header = HEADER.replace("|AdminComment", "")
    trace = read_sacct(write(tmp_path, f"{header}\n{ROW[:-1]}\n"))
    assert [j.saves for j in trace.jobs] == [False]
    hint = next(n for n in trace.notes if "no job has a #HAI record" in n)
    assert "AdminComment" in hint and "--saves all" in hint


def test_parsable_with_trailing_bar_and_posix_times(tmp_path: Path) -> None:
    """--parsable (a '|' ends every line) and SLURM_TIME_FORMAT=%s are read alike."""
    row = ROW.replace("2026-11-01T10:00:00", "1793527200").replace(
        "2026-11-01T10:05:00", "1793527500").replace("2026-11-01T11:05:00", "1793531100")
    trace = read_sacct(write(tmp_path, f"{HEADER}|\n{row}|\n"))
    assert [(j.job_id, j.duration) for j in trace.jobs] == [(7, 3600)]


def test_bar_inside_the_last_admin_comment_is_kept(tmp_path: Path) -> None:
    """AdminComment last may hold '|' (an admin note before the #HAI record)."""
    row = ROW + "note|hai:v1:priority=LOW;class=LOW;team=nlp;preemptible=yes;grace=60;" \
                "source=directive"
    (job,) = read_sacct(write(tmp_path, f"{HEADER}\n{row}\n")).jobs
    assert (job.team, job.cls) == ("nlp", PriorityClass.LOW)


def test_bar_in_a_column_that_is_not_last_is_an_error(tmp_path: Path) -> None:
    """With AdminComment not last, extra fields cannot be placed: the error says what to do."""
    header = "JobIDRaw|AdminComment|Account|QOS|Submit|Start|End|NNodes|AllocTRES"
    row = "7|a|b|vision|high|1|2|3|1|gres/gpu=1"
    with pytest.raises(ConfigError, match=r"line 2: .*has 10 fields, the header 9 .*put "
                                          r"AdminComment last in --format"):
        read_sacct(write(tmp_path, f"{header}\n{row}\n"))


@pytest.mark.parametrize(("content", "message"), [
    (b"JobIDRaw|Account\n\xe9\n", r"not UTF-8 text \(sacct exports must be UTF-8\): byte 0xe9 "
                                  r"at line 2"),
    ("", "the sacct export is empty"),
    ("JobID|Account|QOS\n1|a|b\n", r"line 1: header lacks JobIDRaw, Submit, Start, End, "
                                   r"NNodes, AllocTRES or ReqTRES; .*--format=JobIDRaw,"),
    (f"{HEADER}\n{ROW.replace('2026-11-01T10:05:00', 'yesterday')}\n",
     r"line 2, field 'Start': expected a time such as 2026-12-02T00:51:26 .*got 'yesterday'"),
    (f"{HEADER}\n{ROW.replace('|1|cpu', '|two|cpu')}\n",
     r"line 2, field 'NNodes': expected a whole number \(got 'two'\)"),
    (f"{HEADER}\n{ROW.replace('gres/gpu=4,node=1|', 'gres/gpu=x,node=1|')}\n",
     r"line 2, field 'AllocTRES': gres/gpu=x: expected a whole number of GPUs"),
    (f"{HEADER}\n{ROW.replace('7|train', 'seven|train')}\n",
     r"line 2, field 'JobIDRaw': expected a job id"),
    ('{"jobs": 3}', r"not a sacct --json export: the document has no 'jobs' list"),
    ('{"jobs": [\n{"job_id": 1,}]}',
     r"line 2, column 14: not valid JSON \(Expecting property name"),
    ('{"jobs": [{"job_id": 4, "account": "a", "qos": "high", "time": {"submission": 1}}]}',
     r"jobs\[0\] \(job 4\), field 'time.start': missing \(is this a sacct --json export\?\)"),
    ('{"jobs": [{"job_id": 4, "account": "a", "qos": "high", "time": {"submission": 1, '
     '"start": "soon", "end": 3}}]}',
     r"jobs\[0\] \(job 4\), field 'time.start': expected a number"),
    ('{"jobs": [[1]]}', r"jobs\[0\]: expected a job object"),
    (f"{HEADER}\n{ROW.replace('2026-11-01T11:05:00', '2026-11-01T09:05:00')}\n",
     r"line 2, field 'End': ends 3600 s before it starts \(sacct prints local times"),
])
def test_bad_files_name_the_line_or_job_and_the_field(tmp_path: Path, content: str | bytes,
                                                      message: str) -> None:
    """Each malformed export stops the read with a ConfigError saying where and what."""
    with pytest.raises(ConfigError, match=message) as info:
        read_sacct(write(tmp_path, content))
    assert str(tmp_path / "export") in str(info.value)


def test_skip_bad_counts_malformed_jobs(tmp_path: Path) -> None:
    """--skip-bad: bad rows are counted, good ones replayed."""
    bad = ROW.replace("2026-11-01T10:05:00", "yesterday").replace("7|", "8|", 1)
    trace = read_sacct(write(tmp_path, f"{HEADER}\n{ROW}\n{bad}\n"), skip_bad=True)
    assert [j.job_id for j in trace.jobs] == [7]
    assert trace.skipped == {"malformed": 1}


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A path that does not exist: the error names it."""
    with pytest.raises(ConfigError, match="cannot read the sacct export"):
        read_sacct(tmp_path / "nope.json")


def test_recorded_files_are_unedited_copies() -> None:
    """Each folder says how it was made (the exact command and the Slurm version)."""
    for version in VERSIONS:
        lines = (SACCT / version / "command.txt").read_text().splitlines()
        assert lines[0].startswith(f"slurm-wlm {version}.")
        assert any("--json" in line for line in lines)
        meta = json.loads((SACCT / version / "sacct.json").read_text())["meta"]
        slurm = meta.get("Slurm") or meta["slurm"]
        assert slurm["release"].startswith(version + ".")


def test_a_job_that_said_preemptible_no_is_kept_by_every_policy(tmp_path: Path) -> None:
    """A LOW job whose #HAI record says preemptible=no holds all 8 GPUs; a HIGH job comes 10
    min later. The daemon never takes such a job, so neither may its replay (it was
    submitted preemptible): no policy preempts it, and the notes count it."""
    record = "hai:v1:priority=LOW;class=LOW;team=nlp;preemptible=no;grace=60;" \
             "checkpoint_dir=/ckpt;source=directive"
    low = ROW.replace("|high|", "|low|").replace("gres/gpu=4", "gres/gpu=8") + record
    high = ROW.replace("7|", "8|", 1).replace("10:00:00", "10:10:00").replace(
        "10:05:00", "10:15:00").replace("11:05:00", "11:15:00")
    trace = read_sacct(write(tmp_path, f"{HEADER}\n{low}\n{high}\n"))
    assert [(j.job_id, j.preemptible) for j in trace.jobs] == [(7, False), (8, True)]
    assert "1 jobs said #HAI --preemptible=no: no policy takes them" in trace.notes
    topology = Topology.from_description(load_description(DATA / "sim_one_node.toml"))
    for policy in ("hai-slurm", "hai-platform", "slurm-multifactor"):
        result, _ = run_policy(policy, trace, topology, Setup(), seed=0)
        assert result["totals"]["preemptions"] == 0, policy


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" (and some editors) start the file with a BOM: the header still
    names JobIDRaw (it named "\\ufeffJobIDRaw", so the column looked missing)."""
    trace = read_sacct(write(tmp_path, ("\ufeff" + f"{HEADER}\n{ROW}\n").encode("utf-8")))
    assert [j.job_id for j in trace.jobs] == [7]
