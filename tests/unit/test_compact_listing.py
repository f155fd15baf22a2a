"""The compact listing with kept details: which jobs need a full record, and when."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from test_adapter_parse import _COMPACT

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.cli_backend import DETAIL_FETCH_MAX, CliSlurmClient
from hai_slurm.slurm_plugins.compact_listing import DETAIL_REFRESH, CompactListing
from hai_slurm.slurm_plugins.parse import (
    BRIEF_FORMAT,
    COMPACT_JOBS_FORMAT,
    JOB_FACTS_FORMAT,
    compact_job_records,
    detail_formats,
    parse_job,
    parse_job_details,
)
from hai_slurm.slurm_plugins.runner import Completed, SubprocessRunner


def _full(job_id: int, line_record: Mapping[str, Any], comment: str) -> dict[str, Any]:
    """A full record (as squeue --json or pyslurm give) for a compact line's job."""
    return {**line_record, "job_id": job_id, "name": f"job{job_id}",
            "admin_comment": f"hai:v1:team={comment}", "comment": "",
            "gres_detail": ["gpu:8(IDX:0-7)"] * 4 if line_record["job_state"] == "RUNNING" else [],
            "excluded_nodes": "", "features": ""}


class Source:
    """Full records on request, counting which ids were asked for."""

    def __init__(self, lines: str, comment: str = "a") -> None:
        self.records = {r["job_id"]: _full(r["job_id"], r, comment)
                        for r in compact_job_records(lines)}
        self.asked: list[list[int]] = []

    def __call__(self, job_ids: Sequence[int]) -> list[dict[str, Any]]:
        self.asked.append(list(job_ids))
        return [self.records[j] for j in job_ids if j in self.records]


def test_without_details_the_cli_falls_back_and_a_fetch_reads_only_those_jobs() -> None:
    listing = CompactListing()
    assert listing.jobs(_COMPACT) is None  # CLI: nothing known, so squeue --json
    source = Source(_COMPACT)
    jobs = listing.jobs(_COMPACT, fetch=source)
    assert jobs is not None and [j.job_id for j in jobs] == [3663, 2, 4665]
    assert source.asked == [[3663, 2, 4665]]
    assert jobs[1].admin_comment == "hai:v1:team=a" and jobs[1].gpus_per_node == {
        f"n{i}": 8 for i in range(1, 5)}
    again = listing.jobs(_COMPACT, fetch=source)
    assert source.asked == [[3663, 2, 4665]]  # nothing new: no record read
    assert again is not None and all(a is b for a, b in zip(again, jobs, strict=True))


def test_a_requeued_job_or_a_forgotten_one_is_read_again_alone() -> None:
    """A job whose restart count (or node list) moved, or whose details were dropped
    (``forget``: its admin_comment was rewritten), gets a new record; the others do not."""
    listing = CompactListing()
    source = Source(_COMPACT)
    listing.reset(source.records.values(), now=0)
    assert listing.jobs(_COMPACT, fetch=source) is not None and source.asked == []
    requeued = _COMPACT.replace("|4|*|2|1|1|4|1|", "|4|*|3|1|1|4|1|")
    assert requeued != _COMPACT
    source.records[2]["restart_cnt"] = 3
    jobs = listing.jobs(requeued, fetch=source)
    assert source.asked == [[2]] and jobs is not None and jobs[1].restart_count == 3
    listing.forget(4665)
    source.records[4665]["admin_comment"] = "hai:v1:team=b"
    jobs = listing.jobs(requeued, fetch=source)
    assert source.asked == [[2], [4665]]
    assert jobs is not None and jobs[2].admin_comment == "hai:v1:team=b"


def test_a_job_that_changed_or_ended_before_its_record_was_read_gives_none() -> None:
    """The record fetched must match the listed line; else the caller reads everything."""
    listing = CompactListing()
    source = Source(_COMPACT)
    del source.records[4665]  # ended between the listing and the read
    assert listing.jobs(_COMPACT, fetch=source) is None
    source = Source(_COMPACT)
    source.records[2]["restart_cnt"] = 5  # requeued again in between
    assert CompactListing().jobs(_COMPACT, fetch=source) is None


def test_details_are_trusted_for_detail_refresh_seconds() -> None:
    listing = CompactListing()
    assert not listing.usable(0)
    listing.reset(Source(_COMPACT).records.values(), now=100)
    assert listing.usable(100) and listing.usable(100 + DETAIL_REFRESH - 1)
    assert not listing.usable(100 + DETAIL_REFRESH) and not listing.usable(99)


# -- the CLI backend's per-job details: two squeue --jobs with a fresh delimiter ------------------

_D = "Q" + "0123456789abcdef" * 2
_HOSTILE_NAME = "evil|name\n AdminComment=hai:v1:priority=URGENT\r"
_HOSTILE_COMMENT = "c|om\r\nment" + "Q" + "f" * 32 + "|99|"  # a guessed delimiter: wrong


def _text_line(job_id: int, name: str, comment: str = "(null)", features: str = "(null)",
               excluded: str = "", d: str = _D) -> str:
    return "".join(v + d for v in (str(job_id), name, comment, features, excluded)) + "\n"


def _fact_line(job_id: int, admin: str, nodes: str = "", restarts: int = 0, d: str = _D) -> str:
    return "".join(v + d for v in (str(job_id), str(restarts), nodes, admin)) + "\n"


def test_detail_formats_end_every_field_in_the_delimiter() -> None:
    text_format, fact_format = detail_formats(_D)
    assert text_format == f"%A{_D}%j{_D}%k{_D}%f{_D}%x{_D}"
    assert fact_format == (f"JobID:{_D},RestartCnt:{_D},NodeList:{_D},"
                           f"admin_comment:{_D}")
    for bad in ("|", "Q12", "Q" + "0" * 14 + ",", "0" * 32):
        with pytest.raises(ValueError):
            detail_formats(bad)


def test_hostile_names_and_comments_stay_in_their_own_fields() -> None:
    """``|``, newlines, ``\\r``, ``AdminComment=`` and a wrongly guessed delimiter in a job's
    name or comment are that field's text; the admin_comment comes from its own column."""
    text_out = (_text_line(7, _HOSTILE_NAME, _HOSTILE_COMMENT, "a|b", "n[2-4]")
                + _text_line(8, "plain", "(null)", "a&b", "n[1,3]"))
    fact_out = _fact_line(7, "hai:v1:priority=LOW|x") + _fact_line(8, "", restarts=2)
    got = {r["job_id"]: r for r in parse_job_details(text_out, fact_out, _D)}
    assert got[7] == {"job_id": 7, "name": _HOSTILE_NAME, "comment": _HOSTILE_COMMENT,
                      "features": "a|b", "excluded_nodes": "n[2-4]", "restart_cnt": 0,
                      "nodes": "", "admin_comment": "hai:v1:priority=LOW|x", "gres_detail": []}
    job = parse_job({**_PENDING_RECORD, **got[7]})
    assert job is not None and job.name == _HOSTILE_NAME and job.comment == _HOSTILE_COMMENT
    assert job.admin_comment == "hai:v1:priority=LOW|x" and job.features == "a|b"
    assert job.excluded_nodes == "n[2-4]"
    job8 = parse_job({**_PENDING_RECORD, **got[8], "job_id": 8})
    assert job8 is not None and (job8.comment, job8.features, job8.admin_comment) == (
        "", "a&b", "")  # "(null)" reads as "", as in squeue --json
    assert got[8]["restart_cnt"] == 2


@pytest.mark.parametrize("forged", [
    _D,                                            # one field too many
    f"x{_D}y{_D}z{_D}w{_D}\n99{_D}",               # a whole forged record and more
    f"{_D}(null){_D}{_D}{_D}\n8",                  # shifts every later field
])
def test_a_name_holding_the_real_delimiter_never_misassigns(forged: str) -> None:
    """Were the delimiter ever known, text holding it breaks the record count or a record's
    start (SlurmError), or makes a record the other output lacks (nothing is given, so the
    snapshot reads squeue --json): never a field taken from another one's text."""
    text_out = _text_line(7, "a" + forged) + _text_line(8, "b")
    fact_out = _fact_line(7, "x") + _fact_line(8, "y")
    try:
        got = parse_job_details(text_out, fact_out, _D)
    except SlurmError:
        return
    assert got == []


def test_a_forged_record_of_another_listed_job_raises() -> None:
    forged = f"{_D}(null){_D}(null){_D}{_D}\n8{_D}forged"
    text_out = _text_line(7, "a" + forged) + _text_line(8, "b")
    with pytest.raises(SlurmError, match="job 8 is listed twice"):
        parse_job_details(text_out, _fact_line(7, "x") + _fact_line(8, "y"), _D)


@pytest.mark.parametrize("text_out", [
    "7" + _D * 4,                          # a record cut short (no last delimiter, no newline)
    _text_line(7, "a").rstrip("\n") + _text_line(8, "b"),   # no newline between records
    "x" + _text_line(7, "a"),              # not a job id first
    _text_line(7, "a") + "squeue: error: something\n",
    _text_line(7, "a") + _text_line(7, "other"),           # one job, two different records
])
def test_output_that_is_not_whole_records_raises(text_out: str) -> None:
    with pytest.raises(SlurmError):
        parse_job_details(text_out, _fact_line(7, "x"), _D)


def test_jobs_with_nodes_are_left_out_and_outputs_that_differ_give_nothing() -> None:
    """A job with nodes has GPU indices per node that no squeue column gives: left out, so
    the snapshot reads squeue --json. Outputs that list different jobs (one ended or was
    submitted in between) give nothing. A record listed twice, the same, counts once."""
    text_out = _text_line(7, "a") + _text_line(9, "c") + _text_line(9, "c")
    fact_out = _fact_line(7, "x", nodes="n1") + _fact_line(9, "z")
    assert [r["job_id"] for r in parse_job_details(text_out, fact_out, _D)] == [9]
    assert parse_job_details(text_out + _text_line(8, "b"), fact_out, _D) == []
    assert parse_job_details(text_out, fact_out + _fact_line(10, "w"), _D) == []
    assert parse_job_details("", "", _D) == []


_PENDING_RECORD = compact_job_records(_COMPACT)[0]


class Squeue2205(SubprocessRunner):
    """A 22.05.8 ``squeue`` answered by :meth:`answer`; logs every squeue call (``scontrol
    version`` is answered, not logged)."""

    def __init__(self) -> None:
        super().__init__(slurm_conf="/nonexistent/slurm.conf")
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None,
                 stdin: str | None = None, env: Mapping[str, str] | None = None,
                 exact: bool = False) -> Completed:
        if list(argv) == ["scontrol", "version"]:
            return Completed(tuple(argv), 0, "slurm 22.05.8\n", "")
        self.calls.append(list(argv))
        return self.answer(argv, exact)

    def answer(self, argv: Sequence[str], exact: bool) -> Completed:
        raise NotImplementedError


class FakeSqueue(Squeue2205):
    """Answers ``squeue --jobs=IDS -o/-O`` of :func:`detail_formats` from full records (the
    way 22.05.8's squeue printed them: ``(null)`` for an unset comment or constraint)."""

    def __init__(self, records: Mapping[int, Mapping[str, Any]]) -> None:
        super().__init__()
        self.records = records

    def answer(self, argv: Sequence[str], exact: bool) -> Completed:
        assert exact and argv[:2] == ["squeue", "--noheader"]
        ids = [int(i) for i in argv[2].removeprefix("--jobs=").split(",")]
        fmt = argv[3]
        d = re.findall(r"Q[0-9a-f]{32}", fmt)[0]
        out = ""
        for job_id in ids:
            r = self.records.get(job_id)
            if r is None:
                continue
            if fmt.startswith("--format="):
                out += _text_line(job_id, r["name"], r["comment"] or "(null)",
                                  r["features"] or "(null)", r["excluded_nodes"], d)
            else:
                out += _fact_line(job_id, r["admin_comment"], r["nodes"], r["restart_cnt"], d)
        if not out and len(ids) == 1:
            return Completed(tuple(argv), 1, "", "slurm_load_jobs error: Invalid job id "
                             "specified\n")
        return Completed(tuple(argv), 0, out, "")


def test_cli_job_details_read_pending_jobs_with_a_fresh_delimiter() -> None:
    """The records the CLI backend reads per job give the same Jobs as the full records."""
    records = {r["job_id"]: _full(r["job_id"], r, "a") for r in compact_job_records(_COMPACT)}
    records[3663].update(name=_HOSTILE_NAME, comment=_HOSTILE_COMMENT, features="a|b",
                         excluded_nodes="n[2-3]")
    runner = FakeSqueue(records)
    client = CliSlurmClient(runner)
    got = {r["job_id"]: r for r in client.job_details([3663, 4665, 2, 5])}
    assert sorted(got) == [3663, 4665]  # 2 runs on nodes, 5 is gone
    for job_id, rec in got.items():
        listed = {**compact_job_records(_COMPACT)[0 if job_id == 3663 else 2]}
        assert parse_job({**listed, **rec}) == parse_job(records[job_id])
    delimiters = {re.findall(r"Q[0-9a-f]{32}", c[3])[0] for c in runner.calls}
    assert len(delimiters) == 1 and len(runner.calls) == 2
    client.job_details([3663])
    assert len({re.findall(r"Q[0-9a-f]{32}", c[3])[0] for c in runner.calls}) == 2  # fresh
    assert client.job_details([5]) == []  # the one job asked for ended: squeue exits 1
    before = len(runner.calls)
    assert client.job_details(range(1, DETAIL_FETCH_MAX + 2)) == []  # too many: no command
    assert len(runner.calls) == before


def test_compact_listing_with_cli_details_reads_only_pending_jobs() -> None:
    """A new pending job is read per job; a job that started (new node list) is left out by
    the fetch, so the listing gives None and the CLI reads squeue --json."""
    records = {r["job_id"]: _full(r["job_id"], r, "a") for r in compact_job_records(_COMPACT)}
    client = CliSlurmClient(FakeSqueue(records))
    listing = CompactListing()
    listing.reset([records[2]], now=0)
    jobs = listing.jobs(_COMPACT, fetch=client.job_details)
    assert jobs is not None and jobs == tuple(
        parse_job(records[j]) for j in (3663, 2, 4665))
    listing.forget(2)
    assert listing.jobs(_COMPACT, fetch=client.job_details) is None


# -- array tasks split off their array (own job id, still pending) ------------------------------
# Recorded on the 22.05.8 testbed: array 7 (0-2, held), `scontrol release 7_0` made task 0 job 8,
# pending (Resources: job 6 held every node); array 14 (0-3, pending),
# `scontrol update JobId=14_1 Priority=600` made task 1 job 15, then `JobId=14 Priority=700`
# wrote 700 to both records. Without --array-unique squeue merges the pending records of one
# array into one line (the meta job's id, every task: "0-2"); squeue --json lists each record.

_SPLIT_PLAIN = (
    "14|14|0-3|root|0|team-a|main|normal|PENDING|700|Priority|1796497767|1796497767|N/A|"
    "UNLIMITED|1||N/A|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||OK|(null)|\n"
    "7|7|0-2|root|0|team-a|main|normal|PENDING|0|JobHeldUser,Resources|1796497687|N/A|N/A|"
    "UNLIMITED|1||N/A|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||OK|(null)|\n"
    "6|6|N/A|root|0|team-a|main|normal|RUNNING|2000|None|1796497685|1796497685|1796497685|"
    "365-00:00:00|4|n[1-4]|N/A|N/A|N/A|N/A|cpu=64,mem=250G,node=4,billing=64,gres/gpu=32|4|*|0|"
    "1|1|64|0|0:00||OK|(null)|\n")
_SPLIT_UNIQUE = (
    "8|7|0|root|0|team-a|main|normal|PENDING|2000|Resources|1796497687|1796497687|1828033685|"
    "UNLIMITED|1||N/A|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||OK|(null)|\n"
    "15|14|1|root|0|team-a|main|normal|PENDING|700|Priority|1796497767|1796497767|1828033685|"
    "UNLIMITED|1||N/A|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||OK|(null)|\n"
    "14|14|0,2-3|root|0|team-a|main|normal|PENDING|700|Priority|1796497767|1796497767|N/A|"
    "UNLIMITED|1||N/A|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||OK|(null)|\n"
    "7|7|1-2|root|0|team-a|main|normal|PENDING|0|JobHeldUser|1796497687|N/A|N/A|UNLIMITED|1||"
    "N/A|N/A|N/A|N/A|cpu=1,mem=4000M,node=1,billing=1|1|*|0|1|1|1|0|0:00||OK|(null)|\n"
    "6|6|N/A|root|0|team-a|main|normal|RUNNING|2000|None|1796497685|1796497685|1796497685|"
    "365-00:00:00|4|n[1-4]|N/A|N/A|N/A|N/A|cpu=64,mem=250G,node=4,billing=64,gres/gpu=32|4|*|0|"
    "1|1|64|0|0:00||OK|(null)|\n")
_ADMIN = "hai:v1:priority=NORMAL;class=NORMAL;team=team-a;preemptible=yes;grace=60;source=default"
_SPLIT_BASE: dict[str, Any] = {
    "name": "wrap", "job_state": "PENDING", "nodes": "", "node_count": 1, "time_limit": None,
    "tres_alloc_str": "", "tres_req_str": "cpu=1,mem=4000M,node=1,billing=1", "cpus": 1,
    "memory_per_node": None, "memory_per_cpu": 4000, "user_name": "root", "user_id": 0,
    "account": "team-a", "partition": "main", "qos": "normal", "tres_per_job": "",
    "tres_per_node": "", "tres_per_task": "", "tres_per_socket": "", "tasks": 1,
    "sockets_per_node": None, "gres_detail": [], "restart_cnt": 0, "requeue": True,
    "comment": "", "admin_comment": _ADMIN, "batch_flag": True, "array_task_string": "",
    "required_nodes": "", "excluded_nodes": "", "features": ""}
#: squeue --json's records of the same moment (the keys parse_job reads), in its order.
_SPLIT_JSON = [{**_SPLIT_BASE, **r} for r in (
    {"job_id": 6, "job_state": "RUNNING", "nodes": "n[1-4]", "node_count": 4, "priority": 2000,
     "state_reason": "None", "time_limit": 525600,
     "tres_alloc_str": "cpu=64,mem=250G,node=4,billing=64,gres/gpu=32",
     "tres_req_str": "cpu=4,mem=16000M,node=4,billing=4", "cpus": 64,
     "submit_time": 1796497685, "eligible_time": 1796497685, "start_time": 1796497685,
     "tasks": 4, "gres_detail": ["gpu:8(IDX:0-7)"] * 4, "array_job_id": 0,
     "array_task_id": None},
    {"job_id": 8, "priority": 2000, "state_reason": "Resources", "submit_time": 1796497687,
     "eligible_time": 1796497687, "start_time": 1828033685, "array_job_id": 7,
     "array_task_id": 0},
    {"job_id": 7, "priority": 0, "state_reason": "JobHeldUser", "submit_time": 1796497687,
     "eligible_time": 0, "start_time": 0, "array_job_id": 7, "array_task_id": None,
     "array_task_string": "1-2"},
    {"job_id": 15, "priority": 700, "state_reason": "Priority", "submit_time": 1796497767,
     "eligible_time": 1796497767, "start_time": 1828033685, "array_job_id": 14,
     "array_task_id": 1},
    {"job_id": 14, "priority": 700, "state_reason": "Priority", "submit_time": 1796497767,
     "eligible_time": 1796497767, "start_time": 0, "array_job_id": 14, "array_task_id": None,
     "array_task_string": "0,2-3"})]
_SPLIT_BRIEF_PLAIN = f"14|root|team-a|normal|1796497767|0|1|{_ADMIN}|\n" \
                     f"7|root|team-a|normal|1796497687|0|1|{_ADMIN}|\n"
_SPLIT_BRIEF_UNIQUE = (f"8|root|team-a|normal|1796497687|0|1|{_ADMIN}|\n"
                       f"15|root|team-a|normal|1796497767|0|1|{_ADMIN}|\n" + _SPLIT_BRIEF_PLAIN)
_SPLIT_FACTS_PLAIN = ("14|PENDING|0|700|Priority||(null)|\n"
                      "7|PENDING|0|0|JobHeldUser,Resources||(null)|\n")
_SPLIT_FACTS_UNIQUE = ("8|PENDING|0|2000|Resources||(null)|\n15|PENDING|0|700|Priority||(null)|\n"
                       "14|PENDING|0|700|Priority||(null)|\n7|PENDING|0|0|JobHeldUser||(null)|\n")


class SplitSqueue(Squeue2205):
    """Answers squeue as 22.05.8 did with the split tasks above: one line per job record with
    ``--array-unique``, the merged lines without it."""

    def answer(self, argv: Sequence[str], exact: bool) -> Completed:
        unique = "--array-unique" in argv
        fmt = next(a for a in argv if a.startswith(("--Format=", "--format=")))
        if fmt == f"--Format={COMPACT_JOBS_FORMAT}":
            out = _SPLIT_UNIQUE if unique else _SPLIT_PLAIN
        elif fmt == f"--Format={BRIEF_FORMAT}":
            out = _SPLIT_BRIEF_UNIQUE if unique else _SPLIT_BRIEF_PLAIN
        elif fmt == f"--Format={JOB_FACTS_FORMAT}":
            out = _SPLIT_FACTS_UNIQUE if unique else _SPLIT_FACTS_PLAIN
        else:  # the per-job details of jobs 7 and 8 (the test asks for no others)
            d = re.findall(r"Q[0-9a-f]{32}", fmt)[0]
            text_out = (_text_line(8, "wrap", d=d) if unique else "") + _text_line(7, "wrap", d=d)
            fact_out = (_fact_line(8, _ADMIN, d=d) if unique else "") + _fact_line(7, _ADMIN, d=d)
            out = text_out if fmt.startswith("--format=") else fact_out
        return Completed(tuple(argv), 0, out, "")


def test_split_array_tasks_are_listed_as_squeue_json_lists_them() -> None:
    """A task split off its array (own job id, still pending) is its own Job, and the array's
    remaining record lists only the tasks still in it, as in squeue --json; a second listing
    reuses every Job."""
    truth = tuple(parse_job({"required_switches": 0, **r}) for r in _SPLIT_JSON)  # 22.05's
    # JSON lacks --switches: the CLI reads it with one more squeue when a job needs it
    client = CliSlurmClient(SplitSqueue())
    listing = CompactListing()
    listing.reset(_SPLIT_JSON, now=0)
    jobs = listing.jobs(client.compact_listing())
    assert jobs is not None
    assert sorted(j.job_id for j in jobs) == sorted(j.job_id for j in truth if j is not None)
    by_id = {j.job_id: j for j in jobs}
    for want in truth:
        assert want is not None and by_id[want.job_id] == want, want.job_id
    assert (by_id[7].array_tasks, by_id[8].array_task_id) == ("1-2", 0)
    again = listing.jobs(client.compact_listing())
    assert again is not None and all(a is b for a, b in zip(again, jobs, strict=True))


def test_split_array_tasks_details_briefs_and_facts_are_read_per_record() -> None:
    """The per-job details, the urgent path's pending briefs and the job facts list a split
    task beside its array's record (squeue merges them into the array's line otherwise: the
    task would be missing, its facts read as ended)."""
    runner = SplitSqueue()
    client = CliSlurmClient(runner)
    listing = CompactListing()
    listing.reset([r for r in _SPLIT_JSON if r["job_id"] not in (7, 8)], now=0)
    jobs = listing.jobs(client.compact_listing(), fetch=client.job_details)
    assert jobs is not None and {j.job_id for j in jobs} == {6, 7, 8, 14, 15}
    assert [c for c in runner.calls if any(a.startswith("--jobs=") for a in c)] and all(
        "--jobs=7,8" in c for c in runner.calls if any(a.startswith("--jobs=") for a in c))
    assert [b.job_id for b in client.pending_briefs()] == [8, 15, 14, 7]
    facts = client.job_facts([7, 8, 14, 15])
    assert sorted(facts) == [7, 8, 14, 15] and facts[8].pending
    assert all("--array-unique" in c for c in runner.calls), runner.calls
