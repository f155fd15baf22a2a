"""Preemption modes: native (Slurm requeues lower QOS jobs) versus daemon (Slurm never preempts)."""

from __future__ import annotations

import pytest
from conftest import Submitter, bring_up, claim_slot

from hai_slurm.testbed import local
from hai_slurm.testbed.shape import ClusterShape, PreemptionMode

LOOP = "while :; do sleep 1; done"


@pytest.fixture(scope="module")
def native_testbed():
    """A small second testbed in native preemption mode, on its own ports and state dir."""
    shape = ClusterShape(nodes=2, gpus_per_node=2, preemption=PreemptionMode.NATIVE)
    with claim_slot("hai-slurm-testbed-pytest-native", 18000) as (state_dir, ports):
        bed = bring_up(state_dir, shape, ports)
        try:
            yield bed
        finally:
            local.down(bed.state_dir)


def test_native_mode_requeues_the_lower_class_job(native_testbed, tmp_path):
    """A HIGH job preempts a LOW job holding every GPU; the LOW job is requeued and runs again."""
    submit = Submitter(native_testbed.run, tmp_path)
    try:
        shape = native_testbed.shape
        low = submit(wrap=LOOP, args=["--qos=low", f"--nodes={shape.nodes}",
                                      f"--gres=gpu:{shape.gpus_per_node}"])
        submit.wait(low, "RUNNING", timeout=30)
        high = submit(wrap="sleep 2", args=["--qos=high", "--nodes=1",
                                             f"--gres=gpu:{shape.gpus_per_node}"])
        submit.wait(high, "RUNNING", timeout=30)
        info = submit.wait(low, ["PENDING", "REQUEUED"], timeout=30)
        assert int(info["Restarts"]) >= 1
        submit.wait(high, "COMPLETED", timeout=30)
        # A requeued job may start again only after cred_expire (+1 s).
        again = submit.wait(low, "RUNNING", timeout=shape.cred_expire + 30)
        assert int(again["Restarts"]) >= 1
    finally:
        submit.cleanup()


def test_daemon_mode_leaves_the_lower_class_job_running(testbed, submit):
    """With --preemption daemon a HIGH job waits while a LOW job holds the GPUs."""
    shape = testbed.shape
    assert shape.preemption is PreemptionMode.DAEMON
    low = submit(wrap=LOOP, args=["--qos=low", f"--nodes={shape.nodes}",
                                  f"--gres=gpu:{shape.gpus_per_node}"])
    submit.wait(low, "RUNNING", timeout=30)
    high = submit(wrap="sleep 1", args=["--qos=high", "--nodes=1",
                                         f"--gres=gpu:{shape.gpus_per_node}"])
    # Several scheduling passes (sched_interval=1, bf_interval=1) go by without a preemption.
    with pytest.raises(TimeoutError, match="did not reach RUNNING"):
        submit.wait(high, "RUNNING", timeout=6)
    assert submit.info(high)["JobState"] == "PENDING"
    low_info = submit.info(low)
    assert low_info["JobState"] == "RUNNING"
    assert int(low_info["Restarts"]) == 0
