"""make_client: which backend the daemon gets."""

from __future__ import annotations

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_plugins.adapter import CliSlurmClient, SlurmClient, make_client


def test_make_client_defaults_to_the_cli_backend() -> None:
    """The CLI backend is built without running anything; pyslurm explains why it is not used."""
    client = make_client(slurm_conf="/nonexistent/slurm.conf")
    assert isinstance(client, CliSlurmClient) and isinstance(client, SlurmClient)
    assert isinstance(make_client("cli"), CliSlurmClient)
    with pytest.raises(SlurmError, match="pyslurm backend unavailable: pyslurm is not installed"):
        make_client("pyslurm")
    with pytest.raises(ValueError, match="backend must be auto, cli or pyslurm"):
        make_client("rest")
