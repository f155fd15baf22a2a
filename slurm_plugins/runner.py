"""Running Slurm's commands: argument lists, a timeout, SLURM_CONF, errors as SlurmError."""

from __future__ import annotations

import locale
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hai_slurm.errors import SlurmError


@dataclass(frozen=True, slots=True)
class Completed:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


_ENCODING = "utf-8" if sys.flags.utf8_mode else locale.getencoding()
"""What text mode decodes a command's output with (``subprocess``'s own choice)."""


class CommandRunner(Protocol):
    """Runs one command; the CLI backend's only door to the outside world."""

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        """Run ``argv`` and return its result (a non-zero exit code is not raised here)."""
        ...


class SubprocessRunner:
    """Runs Slurm commands with ``subprocess.run`` (never a shell).

    ``slurm_conf`` (or ``$SLURM_CONF``) is exported to every command; ``timeout`` (seconds)
    bounds each one. A missing program or a timeout raises SlurmError naming the command.
    ``SQUEUE_*`` variables are not passed on: squeue reads them as options (``SQUEUE_ARRAY``
    is ``--array`` and wins over ``--array-unique``, ``SQUEUE_STATES`` or ``SQUEUE_USERS``
    would filter the listing), so a daemon started with one would lose or split jobs.
    """

    def __init__(self, slurm_conf: str | os.PathLike[str] | None = None, *,
                 timeout: float = 30.0, bin_dir: str | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        base = {k: v for k, v in (os.environ if env is None else env).items()
                if not k.startswith("SQUEUE_")}
        conf = os.fspath(slurm_conf) if slurm_conf is not None else base.get("SLURM_CONF")
        if conf:
            base["SLURM_CONF"] = conf
        base.setdefault("LC_ALL", "C")
        # The zone /etc/localtime gives, as with TZ unset, but read once per command: unset,
        # glibc checks the file again for every time it formats (squeue prints two per job,
        # 0.05 s of a 0.19 s listing of 12,000 jobs).
        base.setdefault("TZ", ":/etc/localtime")
        self.env = base
        self.timeout = timeout
        self.bin_dir = bin_dir

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None,
                 stdin: str | None = None, env: Mapping[str, str] | None = None,
                 exact: bool = False) -> Completed:
        """Run ``argv`` (the program is looked up in ``bin_dir`` or on PATH); ``stdin`` is
        piped in (else the command inherits this process's stdin, as before); ``env`` adds
        variables for this command only. ``exact`` keeps the output's ``\\r`` as printed (text
        mode turns ``\\r`` and ``\\r\\n`` into ``\\n``, so a job name read from ``squeue -o``
        would differ from the same name in ``squeue --json``)."""
        args = list(argv)
        if self.bin_dir and "/" not in args[0]:
            args[0] = str(Path(self.bin_dir) / args[0])
        limit = self.timeout if timeout is None else timeout
        try:
            proc = subprocess.run(args, capture_output=True, text=not exact,
                                  env={**self.env, **env} if env else self.env,
                                  timeout=limit, check=False,
                                  input=stdin.encode(_ENCODING) if exact and stdin is not None
                                  else stdin)
        except FileNotFoundError as exc:
            raise SlurmError(f"{args[0]} not found: install Slurm's client commands or pass "
                             "bin_dir", command=args) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{' '.join(args)} did not finish within {limit:g} s; is "
                             "slurmctld up and reachable (scontrol ping)?", command=args) from exc
        if exact:
            return Completed(tuple(args), proc.returncode, proc.stdout.decode(_ENCODING),
                             proc.stderr.decode(_ENCODING))
        return Completed(tuple(args), proc.returncode, proc.stdout, proc.stderr)


class DockerExecRunner:
    """Runs Slurm commands inside a container with ``docker exec`` (the Docker testbed's way in).

    The host needs only the ``docker`` client: the adapter on the host drives the Slurm in the
    testbed's controller container, whose ``/etc/slurm/slurm.conf`` the clients find by default.
    Each command is wrapped in coreutils ``timeout`` inside the container (a hung client ends
    there too); ``user`` runs it as that user (``docker exec -u``), ``workdir`` is its cwd and
    ``stdin`` (per call) is piped in, e.g. a batch script for ``sbatch``. A timeout or an
    unreachable container raises SlurmError naming the container.
    """

    def __init__(self, container: str, *, timeout: float = 30.0, user: str | None = None,
                 workdir: str | None = None, docker: str = "docker") -> None:
        self.container = container
        self.timeout = timeout
        self.user = user
        self.workdir = workdir
        self.docker = docker

    def as_user(self, user: str | None) -> DockerExecRunner:
        """The same runner, running commands as ``user`` (None: the container's default)."""
        return DockerExecRunner(self.container, timeout=self.timeout, user=user,
                                workdir=self.workdir, docker=self.docker)

    def __call__(self, argv: Sequence[str], *, timeout: float | None = None,
                 stdin: str | None = None) -> Completed:
        """Run ``argv`` in the container; ``Completed.argv`` is ``argv`` as given."""
        limit = self.timeout if timeout is None else timeout
        cmd = [self.docker, "exec", "-i", *(["-u", self.user] if self.user else []),
               *(["-w", self.workdir] if self.workdir else []), self.container,
               "timeout", "-k", "2", f"{limit:g}", *argv]
        what = f"{' '.join(argv)} (in container {self.container})"
        try:
            proc = subprocess.run(cmd, input=stdin if stdin is not None else "",
                                  capture_output=True, text=True, timeout=limit + 15,
                                  check=False)
        except FileNotFoundError as exc:
            raise SlurmError(f"{self.docker} not found: install the Docker client "
                             "(apt-get install -y docker.io)", command=cmd) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{what} did not finish within {limit:g} s", command=cmd) from exc
        if proc.returncode == 124:
            raise SlurmError(f"{what} did not finish within {limit:g} s; is slurmctld up "
                             "(scontrol ping)?", command=list(argv), returncode=124)
        if proc.returncode in (125, 126, 127) or (
                proc.returncode != 0 and proc.stderr.startswith("Error response from daemon")):
            raise SlurmError(f"docker exec failed for {what}: {proc.stderr.strip()}",
                             command=cmd, returncode=proc.returncode, stderr=proc.stderr)
        return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def check(result: Completed, what: str) -> Completed:
    """Raise SlurmError carrying Slurm's message unless the command succeeded."""
    if result.returncode != 0:
        msg = result.stderr.strip() or result.stdout.strip() or "no message"
        raise SlurmError(f"{what} failed (exit {result.returncode}): {msg}",
                         command=list(result.argv), returncode=result.returncode,
                         stderr=result.stderr)
    return result
