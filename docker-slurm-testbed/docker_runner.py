"""Run commands inside a testbed container (``docker exec``), as a :class:`~.waiting.Runner`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import docker.errors

from .waiting import Result

SHARED_DIR = "/shared"
"""The shared volume's mount point on the controller and every node (job output, checkpoints)."""


@dataclass(frozen=True)
class DockerRunner:
    """A :class:`~.waiting.Runner` that runs argv in a container (``docker exec``).

    The command is wrapped in coreutils ``timeout`` inside the container, so a hung client ends;
    exit code 124 then, as with the local runner. The working directory is ``/shared`` by default
    (on the controller and every node), so batch jobs start in a directory every node has.
    """

    client: Any
    container: str
    workdir: str = SHARED_DIR

    def __call__(self, argv: Sequence[str], *, timeout: float = 30.0) -> Result:
        """Run ``argv``; an unreachable or stopped container becomes exit code 125."""
        wrapped = ["timeout", "-k", "2", f"{timeout:g}", *argv]
        try:
            box = self.client.containers.get(self.container)
            code, (out, err) = box.exec_run(wrapped, demux=True, workdir=self.workdir)
        except docker.errors.DockerException as exc:
            return Result(125, "", f"docker exec in {self.container} failed: {exc}")
        text_out = (out or b"").decode(errors="replace")
        text_err = (err or b"").decode(errors="replace")
        if code == 124:
            text_err += f"\n{argv[0]} timed out after {timeout:g} s"
        return Result(int(code), text_out, text_err)
