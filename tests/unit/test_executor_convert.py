"""Planner plans become executor requests; the optional Redis channel; the daemon hook."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest
from executor_world import Behaviour, make_world

from hai_slurm.classes import PriorityClass
from hai_slurm.errors import ConfigError
from hai_slurm.priority.executor.notify import NoNotifier, RedisNotifier, channel, make_notifier
from hai_slurm.priority.executor.requests import request_from_plan, requests_from
from hai_slurm.priority.executor.types import ExecutionRequest
from hai_slurm.priority.hooks import CycleView
from hai_slurm.priority.planner.types import PlanningResult, PreemptionPlan, Victim
from hai_slurm.priority.policy.settings import ClassPolicy, DeadlineAction, PolicyConfig
from hai_slurm.priority.policy.state import PolicyResult, PolicyState
from hai_slurm.priority.store import PlanState


def policy(**changes: ClassPolicy) -> PolicyConfig:
    """The default policy with some classes replaced."""
    base = PolicyConfig()
    classes = dict(base.classes)
    for name, cp in changes.items():
        classes[PriorityClass[name]] = cp
    return dataclasses.replace(base, classes=MappingProxyType(classes))


def plan_for(bene: int, victims: list[int]) -> PreemptionPlan:
    """A planner plan with LOW victims for a HIGH beneficiary on n1, n2."""
    return PreemptionPlan(
        beneficiary=bene, beneficiary_class=PriorityClass.HIGH, team="team-b",
        victims=tuple(Victim(v, "team-a", PriorityClass.LOW, 8, False, 30.0, 240.0, "cheapest")
                      for v in victims),
        placement=(), nodes=("n1", "n2"), gpus_per_node=8, lost_work=480.0, benefit=9e5,
        reason="HIGH job waits 10m")


def test_plan_converts_with_capped_deadlines_and_the_beneficiary_class_policy(
        tmp_path: Path) -> None:
    """Deadline = the victim's #HAI grace capped by its class's grace_cap; on_miss from the
    beneficiary's class."""
    world = make_world(tmp_path)
    v1 = world.victim("v1", grace=30)
    v2 = world.victim("v2", grace=500)
    bene = world.pending("bene", gpus=8, nodes=2)
    cfg = policy(LOW=ClassPolicy(86400, 120, False),
                 HIGH=ClassPolicy(600, 600, True, DeadlineAction.FORCE))
    req = request_from_plan(plan_for(bene, [v1, v2]), world.fake.snapshot(), cfg)
    assert req.deadlines == {v1: 30.0, v2: 120.0}
    assert req.on_miss is DeadlineAction.FORCE
    assert req.nodes == ("n1", "n2") and req.lost_work == 480.0
    assert requests_from(PlanningResult(plans=(plan_for(bene, [v1]),)),
                         world.fake.snapshot(), PolicyConfig())[0].on_miss is DeadlineAction.FORCE
    assert requests_from(req, world.fake.snapshot(), cfg) == (req,)
    with pytest.raises(ConfigError, match="cannot run a dict"):
        requests_from({"beneficiary": 1}, world.fake.snapshot(), cfg)


def test_daemon_hook_runs_the_plan_and_audits_refusals(tmp_path: Path) -> None:
    """execute(): a plan is started without waiting and carried out by the next calls (one
    step each); a stale one is refused and audited, nothing done."""
    world = make_world(tmp_path)
    v1 = world.victim("v1", Behaviour(ack_after=0.3))
    bene = world.pending("bene", gpus=8)
    ex = world.executor()
    view = CycleView(now=world.clock.now, snapshot=world.fake.snapshot(), pending=(),
                     running=(), result=PolicyResult({}, {}, {}, {}, PolicyState(), (), (), (),
                                                         frozenset()), tracked={},
                     config=PolicyConfig(), slurm=world.fake, repository=world.repo)
    extras = ex.execute(ExecutionRequest(bene, (v1,)), view)
    assert extras.audit == ()
    (plan,) = world.repo.history()
    assert plan.state is PlanState.SIGNALLED  # started; the cycle did not wait for the ack
    for _ in range(30):  # the next cycles' steps (0.1 s apart)
        world.clock.wait(ex.stop, 0.1)
        ex.execute(None, view)
    (plan,) = world.repo.history()
    assert plan.state is PlanState.DONE
    extras = ex.execute(ExecutionRequest(bene, (v1,)), view)  # bene runs now, v1 pending
    assert [a.kind for a in extras.audit] == ["plan-refused"]
    assert "not pending any more (RUNNING)" in extras.audit[0].message
    assert len(world.repo.history()) == 1


class FakeRedis:
    """Records publishes; fails on demand."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.published: list[tuple[str, str]] = []

    def publish(self, chan: str, text: str) -> int:
        if self.fail:
            raise ConnectionError("Connection refused")
        self.published.append((chan, text))
        return 1


def test_redis_message_per_job_and_failures_never_raise(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    """One JSON message on hai:checkpoint:<job>; a dead Redis is logged, not raised."""
    client = FakeRedis()
    n = RedisNotifier("redis://127.0.0.1:1/0", client=client)
    assert n.notify(42, plan_id=7, signal="USR2", deadline=100.0)
    chan, text = client.published[0]
    assert chan == channel(42) == "hai:checkpoint:42"
    assert json.loads(text) == {"version": 1, "kind": "checkpoint", "job_id": "42",
                                "plan_id": 7, "signal": "USR2", "deadline": 100.0}
    dead = RedisNotifier("redis://127.0.0.1:1/0", client=FakeRedis(fail=True))
    assert not dead.notify(42, plan_id=7, signal="USR2", deadline=100.0)
    assert "could not publish the checkpoint request of job 42" in caplog.text
    assert isinstance(make_notifier(None), NoNotifier)
