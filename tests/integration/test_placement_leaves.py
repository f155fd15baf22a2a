"""The planner frees the nodes Slurm then uses, on 1-, 2- and 4-leaf testbeds.

Each case is its own testbed (``hai-slurm testbed up --nodes N --leaf-switches L``), every node
filled by a LOW job in the README's script shape; the daemon runs as ``hai-slurm daemon`` with
the first-try file the README names (only the testbed's own database and Redis added). A HIGH
``-N2 --gres=gpu:8`` job then preempts two LOW jobs and starts on exactly the nodes they held:
under one leaf when one leaf has two nodes, across the spine when none has (4 leaves of 1 node).
A HIGH job in a partition of one node frees that node, not the one the tie-break would pick.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed, bring_up, claim_slot
from daemon_support import DaemonProcess, wait_until
from preempt_support import Bed

from hai_slurm.priority.store import PlanState, VictimState
from hai_slurm.priority.store.engine import make_engine
from hai_slurm.priority.store.repository import Repository
from hai_slurm.testbed import local
from hai_slurm.testbed.shape import ClusterShape
from hai_slurm.testbed.waiting import check

pytestmark = pytest.mark.slow
FIRST_TRY = Path(__file__).resolve().parents[2] / "priority" / "examples" / "first-try.toml"


@pytest.fixture(params=[(2, 1), (2, 2), (4, 4)], ids=["1-leaf", "2-leaf", "4-leaf"])
def shaped(request: pytest.FixtureRequest) -> Iterator[Testbed]:
    """A testbed of N nodes x 8 GPUs under L leaf switches, in a slot of its own."""
    nodes, leaves = request.param
    with claim_slot("hai-slurm-testbed-shape", 19000) as (state_dir, ports):
        bed = bring_up(state_dir, ClusterShape(nodes=nodes, leaf_switch_count=leaves), ports)
        try:
            yield bed
        finally:
            local.down(bed.state_dir)


def _daemon_config(tmp: Path, bed: Testbed) -> Path:
    """The first-try file, plus only where this testbed's database and Redis are."""
    path = tmp / "daemon.toml"
    path.write_text(f'state_dir = "{tmp}"\ndatabase_url = "sqlite:///{tmp}/hai-slurm.db"\n'
                    f'redis_url = "{bed.redis_url}"\nmetrics_port = 0\n'
                    + FIRST_TRY.read_text())
    path.chmod(0o600)  # it holds the Redis password
    return path


def test_a_two_node_high_job_starts_on_the_nodes_its_victims_freed(shaped: Testbed,
                                                                    tmp_path: Path) -> None:
    """Two LOW jobs give way; the HIGH job runs on their two nodes (one leaf if one can hold
    it, else across the spine); the victims were requeued and none is left held."""
    work = tmp_path / "jobs"
    work.mkdir()
    bed = Bed(shaped, work)
    daemon = None
    try:
        lows = [bed.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"])
                for i in range(shaped.shape.nodes)]
        for job in lows:
            bed.wait(job, "RUNNING", timeout=60)
        held_before = {j.job_id: bed.nodes_of(j) for j in lows}
        daemon = DaemonProcess.start(_daemon_config(tmp_path, shaped), tmp_path / "daemon.log",
                                     shaped)
        high = bed.toy("high", steps=100, priority="HIGH", account="team-b",
                       sbatch=["-N2", "--gres=gpu:8"])
        bed.wait(high, "RUNNING", "COMPLETED", timeout=90)
        used = bed.nodes_of(high)
        repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
        plan = wait_until(lambda: next((p for p in repo.history()
                                        if p.state is PlanState.DONE), None),
                          30, f"no plan done; log:\n{daemon.text()[-3000:]}")
        victims = {v.job_id for v in plan.victims}
        assert len(victims) == 2 and all(v.state is VictimState.REQUEUED for v in plan.victims)
        assert used == set().union(*(held_before[v] for v in victims)), (used, held_before)
        for v in victims:  # requeued, and running again once the HIGH job is done
            assert bed.facts(v).restart_count == 1
        assert bed.held_jobs() == []
    finally:
        if daemon is not None:
            daemon.kill()
        bed.cleanup()


@pytest.fixture
def two_nodes() -> Iterator[Testbed]:
    """A testbed of 2 nodes x 8 GPUs under one leaf switch, in a slot of its own."""
    with claim_slot("hai-slurm-testbed-shape", 19000) as (state_dir, ports):
        bed = bring_up(state_dir, ClusterShape(nodes=2, leaf_switch_count=1), ports)
        try:
            yield bed
        finally:
            local.down(bed.state_dir)


def test_a_job_in_a_partition_of_one_node_frees_that_node(two_nodes: Testbed,
                                                         tmp_path: Path) -> None:
    """Both nodes hold an equal LOW job (the planner's tie-break picks the first node); the
    HIGH job is submitted to a partition of the second node only (``scontrol create
    partition``, as an admin adds one): the plan takes the second node's job, and the HIGH
    job runs there."""
    work = tmp_path / "jobs"
    work.mkdir()
    bed = Bed(two_nodes, work)
    names = sorted(two_nodes.shape.node_names)
    check(two_nodes.run, ["scontrol", "create", "PartitionName=only-last",
                          f"Nodes={names[-1]}", "State=UP"])
    daemon = None
    try:
        lows = [bed.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"]) for i in range(2)]
        for job in lows:
            bed.wait(job, "RUNNING", timeout=60)
        on = {next(iter(bed.nodes_of(j))): j.job_id for j in lows}
        daemon = DaemonProcess.start(_daemon_config(tmp_path, two_nodes),
                                     tmp_path / "daemon.log", two_nodes)
        high = bed.toy("high", steps=100, priority="HIGH", account="team-b",
                       sbatch=["-N1", "--gres=gpu:8", "--partition=only-last"])
        bed.wait(high, "RUNNING", "COMPLETED", timeout=90)
        assert bed.nodes_of(high) in (set(), {names[-1]})
        repo = Repository(make_engine(f"sqlite:///{tmp_path}/hai-slurm.db"))
        plan = wait_until(lambda: next((p for p in repo.history()
                                        if p.state is PlanState.DONE), None),
                          30, f"no plan done; log:\n{daemon.text()[-3000:]}")
        assert [v.job_id for v in plan.victims] == [on[names[-1]]], (plan, on)
        assert len(repo.history()) == 1, "one plan, no failed one first"
        assert bed.held_jobs() == []
    finally:
        if daemon is not None:
            daemon.kill()
        bed.cleanup()
