"""The SlurmClient contract run against FakeSlurm (unit tier: no Slurm needed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from slurm_client_contract import Harness, SlurmClientContract

from hai_slurm.slurm_plugins.adapter import Job, JobState, SlurmClient
from hai_slurm.slurm_plugins.fake import FakeNode, FakeSlurm
from hai_slurm.slurm_plugins.types import SwitchInfo


class FakeHarness:
    """Drives FakeSlurm: time advances one second per wait step, the allocator runs each step."""

    def __init__(self) -> None:
        self.fake = FakeSlurm([FakeNode(f"n{i}", gpus=8) for i in range(1, 5)], requeue_delay=2,
                              switches=(SwitchInfo("leaf1", 0, ("n1", "n2")),
                                        SwitchInfo("leaf2", 0, ("n3", "n4")),
                                        SwitchInfo("spine", 1, (), ("leaf1", "leaf2"))))
        self.client: SlurmClient = self.fake

    def submit(self, *, name: str, gpus: int = 1, hold: bool = False, begin_in: int = 0,
               comment: str = "", nodelist: str = "", exclude: str = "",
               exclusive: str = "", time_limit: int = 0) -> int:
        """Queue a job in the fake."""
        return self.fake.submit(name=name, gpus_per_node=gpus, hold=hold, comment=comment,
                                begin_time=self.fake.now + begin_in if begin_in else None,
                                nodelist=nodelist, exclude=exclude, exclusive=exclusive,
                                time_limit=time_limit or None)

    def forbid_requeue(self, job_id: int) -> None:
        """``Requeue=0`` on the fake's job."""
        self.fake.jobs[job_id].requeue = False

    def admin_reservation(self, name: str, node: str, start_in: int, minutes: int) -> None:
        """An admin's reservation in the fake."""
        self.fake.admin_reservation(name, [node], ["root"], start=self.fake.now + start_in,
                                    minutes=minutes)

    def wait_for(self, job_id: int, what: str, ok: Callable[[Job | None], bool],
                 timeout: float = 30.0) -> Job | None:
        """Step the fake's clock and scheduler until ``ok`` holds (at most ``timeout`` steps)."""
        for _ in range(int(timeout)):
            job = self.fake.snapshot().job(job_id)
            if ok(job):
                return job
            self.fake.schedule(self.fake.now + 1)
        pytest.fail(f"job {job_id} did not become {what} within {timeout:g} fake seconds "
                    f"(now {self.fake.snapshot().job(job_id)})")

    def signals_seen(self, job_id: int) -> list[str]:
        """Signals the fake recorded for the job."""
        return [s.signal for s in self.fake.signals if s.job_id == job_id]

    def make_exit(self, job_id: int, code: int) -> None:
        """The job fails (any non-zero code) or completes (0) at once."""
        self.fake.finish(job_id, JobState.FAILED if code else JobState.COMPLETED)


class TestFakeSlurmContract(SlurmClientContract):
    """FakeSlurm honours the SlurmClient contract."""

    @pytest.fixture
    def harness(self) -> Harness:
        """A fresh four-node, 8-GPU fake cluster per test."""
        return FakeHarness()
