"""Optional second channel for checkpoint requests: a Redis message per job.

The signal through Slurm (``scancel --signal=USR2 --full``) is what every job gets. Jobs that
prefer a message (e.g. a training framework already connected to Redis) can subscribe to
``hai:checkpoint:<job id>``; the executor publishes one JSON message there per request::

    {"version": 1, "kind": "checkpoint", "job_id": "42", "plan_id": 7, "signal": "USR2",
     "deadline": 1764400060.0}

Without ``redis_url`` in the daemon's configuration nothing is published (:class:`NoNotifier`).
A failed publish is logged and never stops a plan: the signal is the channel that counts.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from hai_slurm.errors import ConfigError
from hai_slurm.urls import mask_password

log = logging.getLogger("hai_slurm.priority.executor.notify")

CHANNEL_PREFIX = "hai:checkpoint:"


def channel(job_id: int) -> str:
    """The Redis channel of one job."""
    return f"{CHANNEL_PREFIX}{job_id}"


class CheckpointNotifier(Protocol):
    """Tells one job that a checkpoint is requested (besides the signal)."""

    def notify(self, job_id: int, *, plan_id: int, signal: str, deadline: float) -> bool:
        """Send the request; True if it went out (failures are logged, never raised)."""
        ...


class NoNotifier:
    """Redis not configured: nothing to send."""

    def notify(self, job_id: int, *, plan_id: int, signal: str, deadline: float) -> bool:
        """Do nothing."""
        return False


def message(job_id: int, *, plan_id: int, signal: str, deadline: float) -> str:
    """The JSON text published for one request."""
    return json.dumps({"version": 1, "kind": "checkpoint", "job_id": str(job_id),
                       "plan_id": plan_id, "signal": signal, "deadline": deadline},
                      sort_keys=True)


class RedisNotifier:
    """Publishes on ``hai:checkpoint:<job id>`` with redis-py (extra ``hai-slurm[daemon]``)."""

    def __init__(self, url: str, *, timeout: float = 2.0, client: Any = None) -> None:
        if client is None:
            try:
                import redis
            except ImportError as err:
                raise ConfigError("redis_url is set but the Python package 'redis' is missing; "
                                  "pip install redis (or remove redis_url)",
                                  key="redis_url", value=mask_password(url)) from err
            client = redis.Redis.from_url(url, socket_timeout=timeout,
                                          socket_connect_timeout=timeout)
        self.url = mask_password(url)  # for messages: the password never reaches a log
        self._client = client
        self.sent: list[tuple[str, str]] = []

    def notify(self, job_id: int, *, plan_id: int, signal: str, deadline: float) -> bool:
        """PUBLISH the request; a Redis failure is logged and reported as False."""
        text = message(job_id, plan_id=plan_id, signal=signal, deadline=deadline)
        try:
            self._client.publish(channel(job_id), text)
        except Exception as err:  # any Redis failure: the signal still went out
            log.warning("could not publish the checkpoint request of job %d to Redis (%s): %s",
                        job_id, self.url, err)
            return False
        self.sent.append((channel(job_id), text))
        return True


def make_notifier(redis_url: str | None) -> CheckpointNotifier:
    """A RedisNotifier when ``redis_url`` is set, else NoNotifier."""
    return RedisNotifier(redis_url) if redis_url else NoNotifier()
