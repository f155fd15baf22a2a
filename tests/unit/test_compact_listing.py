"""The compact listing with kept details: which jobs need a full record, and when."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from test_adapter_parse import _COMPACT

from hai_slurm.slurm_plugins.compact_listing import DETAIL_REFRESH, CompactListing
from hai_slurm.slurm_plugins.parse import compact_job_records


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
