"""The one exception hierarchy of hai-slurm.

Every error the package raises on purpose derives from :class:`HaiSlurmError`. Messages say what
went wrong *and* what to do next; the CLI turns them into click errors at its boundary only.
Standard library only: the job-side checkpoint package imports this module.
"""

from __future__ import annotations


class HaiSlurmError(Exception):
    """Base class of every error hai-slurm raises on purpose."""


class ConfigError(HaiSlurmError):
    """A configuration file, cluster description or directive is invalid.

    ``source`` names the file (or ``<string>``), ``key`` the setting, ``value`` the bad value.
    """

    def __init__(
        self, message: str, *, source: str | None = None, key: str | None = None,
        value: object = None,
    ) -> None:
        self.source = source
        self.key = key
        self.value = value
        where = ": ".join(p for p in (source, key) if p)
        super().__init__(f"{where}: {message}" if where else message)


class DirectiveError(ConfigError):
    """``#HAI`` directives in a batch script are invalid or not allowed for the job's account.

    ``problems`` holds one line per problem (``line N (#HAI ...): what is wrong; what is allowed``);
    the message is exactly what job_submit.lua shows the user through sbatch.
    """

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        self.problems = problems
        super().__init__(message)


class SlurmError(HaiSlurmError):
    """A Slurm command failed. Carries the command and Slurm's own message."""

    def __init__(self, message: str, *, command: list[str] | None = None,
                 returncode: int | None = None, stderr: str = "") -> None:
        self.command = command or []
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(message)


class TestbedError(HaiSlurmError):
    """The test cluster could not be brought up, queried or torn down.

    ``log_lines`` holds the log lines that show why (they are printed under the message).
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, message: str, *, log_lines: list[str] | None = None) -> None:
        self.log_lines = log_lines or []
        text = message
        if self.log_lines:
            text += "\n" + "\n".join("    " + line for line in self.log_lines)
        super().__init__(text)


class CheckpointError(HaiSlurmError):
    """A checkpoint could not be written, or no valid checkpoint could be read."""


class StateError(HaiSlurmError):
    """The daemon's database or lock is unusable."""


class PlanRefusedError(StateError):
    """A preemption request cannot start: its jobs are no longer as planned (the beneficiary
    does not wait, a victim does not run) or Slurm would not make its beneficiary a job of its
    own. Nothing was done; the next cycle plans again."""
