"""make_client and choose_backend: which backend the daemon gets, and why (fakes only)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from hai_slurm.errors import SlurmError
from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.slurm_plugins import pyslurm_backend
from hai_slurm.slurm_plugins.adapter import CliSlurmClient, SlurmClient, make_client
from hai_slurm.slurm_plugins.pyslurm_backend import (
    BackendChoice,
    PyslurmClient,
    choose_backend,
    load_pyslurm,
    pyslurm_series,
)
from hai_slurm.slurm_plugins.runner import Completed

V2205 = SlurmVersion(22, 5, 8)


def _never() -> SlurmVersion:
    raise AssertionError("the cluster version must not be asked")


def _no_load(conf: str | None) -> Any:
    raise AssertionError("pyslurm must not be imported")


def _cli_only(reason: str) -> Callable[[Callable[[], SlurmVersion], str | None], BackendChoice]:
    return lambda version, conf: BackendChoice("cli", reason)


def test_make_client_cli_and_bad_names() -> None:
    """"cli" builds the CLI backend without running anything; an unknown name is refused."""
    client = make_client("cli", slurm_conf="/nonexistent/slurm.conf")
    assert isinstance(client, CliSlurmClient) and isinstance(client, SlurmClient)
    with pytest.raises(ValueError, match="backend must be auto, cli or pyslurm"):
        make_client("rest")


def test_auto_falls_back_to_the_cli_and_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    """auto without a usable pyslurm gives the CLI backend and logs the reason; "pyslurm"
    raises with the same reason."""
    with caplog.at_level(logging.INFO, logger="hai_slurm.slurm_plugins.adapter"):
        client = make_client(choose=_cli_only("pyslurm is not installed"))
    assert isinstance(client, CliSlurmClient)
    assert "Slurm backend: CLI (pyslurm is not installed)" in caplog.text
    with pytest.raises(SlurmError, match="pyslurm backend unavailable: pyslurm is not installed"):
        make_client("pyslurm", choose=_cli_only("pyslurm is not installed"))


def test_a_runner_means_the_cli_backend(caplog: pytest.LogCaptureFixture) -> None:
    """Commands through a custom runner (Docker) cannot be replaced by pyslurm."""
    def runner(argv: Any, *, timeout: float | None = None) -> Completed:
        raise AssertionError("nothing runs while choosing")

    with caplog.at_level(logging.INFO):
        client = make_client(runner=runner, choose=lambda v, c: _no_load(c))
    assert isinstance(client, CliSlurmClient)
    assert "custom runner" in caplog.text


def test_choose_without_pyslurm_runs_nothing() -> None:
    """Not installed: the CLI, and neither the cluster is asked nor anything imported."""
    choice = choose_backend(_never, installed=lambda: None, load=_no_load)
    assert (choice.backend, choice.reason) == ("cli", "pyslurm is not installed")


def test_choose_names_both_versions_on_a_mismatch() -> None:
    """pyslurm 25.11 on a 22.05 cluster: the CLI, saying which versions were found."""
    choice = choose_backend(lambda: V2205, installed=lambda: "25.11.0", load=_no_load)
    assert choice.backend == "cli"
    assert "pyslurm 25.11.0 is for Slurm 25.11" in choice.reason
    assert "Slurm 22.05.8" in choice.reason and "22.5.x branch" in choice.reason


def test_choose_refuses_26_05() -> None:
    """Slurm 26.05 has no pyslurm at all, whatever is installed."""
    choice = choose_backend(lambda: SlurmVersion(26, 5, 5), installed=lambda: "25.11.0",
                            load=_no_load)
    assert choice.backend == "cli" and "Slurm 26.05.5 has no pyslurm" in choice.reason


def test_choose_a_matching_pyslurm_that_loads() -> None:
    """A 22.5.x pyslurm on 22.05 is imported (with the given slurm.conf) and chosen."""
    loaded: list[str | None] = []
    module = object()

    def load(conf: str | None) -> Any:
        loaded.append(conf)
        return module

    choice = choose_backend(lambda: V2205, "/etc/x/slurm.conf", installed=lambda: "22.5.3",
                            load=load)
    assert choice == BackendChoice("pyslurm", "pyslurm 22.5.3 matches Slurm 22.05.8", module)
    assert loaded == ["/etc/x/slurm.conf"]


def test_choose_a_matching_pyslurm_that_fails_to_import() -> None:
    """An import error (built against another libslurm) falls back to the CLI, saying so."""
    def load(conf: str | None) -> Any:
        raise ImportError("libslurm.so.38: cannot open shared object file")

    choice = choose_backend(lambda: V2205, installed=lambda: "22.5.3", load=load)
    assert choice.backend == "cli" and "libslurm.so.38" in choice.reason
    assert "pyslurm 22.5.3 matches Slurm 22.05.8 but does not load" in choice.reason


def test_pyslurm_series() -> None:
    """pyslurm numbers its releases YY.M.N for Slurm YY.0M."""
    assert pyslurm_series("22.5.3") == SlurmVersion(22, 5)
    assert pyslurm_series("24.11.0") == SlurmVersion(24, 11)
    with pytest.raises(ValueError, match="cannot read a pyslurm version"):
        pyslurm_series("dev")


def test_load_refuses_a_missing_slurm_conf(tmp_path: Any) -> None:
    """A missing slurm.conf is refused before slurm_init() could end the process."""
    with pytest.raises(SlurmError, match="does not exist"):
        load_pyslurm(str(tmp_path / "missing.conf"))


def test_load_refuses_a_second_cluster(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once pyslurm is bound to one slurm.conf, another one is refused (slurm_init runs once),
    naming both and the way out; whichever order the tests ran in."""
    first, second = tmp_path / "a.conf", tmp_path / "b.conf"
    first.write_text("ClusterName=a\n")
    second.write_text("ClusterName=b\n")
    monkeypatch.setattr(pyslurm_backend, "_BOUND", {"conf": str(first)})
    with pytest.raises(SlurmError, match=r"already talks to the cluster of .*a\.conf; it "
                       r"cannot switch to .*b\.conf .*backend='cli'"):
        load_pyslurm(str(second))


class _FakeCli(CliSlurmClient):
    def __init__(self, version: SlurmVersion) -> None:
        super().__init__(runner=lambda argv, timeout=None: Completed(tuple(argv), 1, "", ""))
        self._version = version


def test_pyslurm_client_refuses_26_05_and_a_mismatch() -> None:
    """The backend itself refuses 26.05 and a pyslurm built for another series."""
    class Module:
        __version__ = "22.5.3"

    with pytest.raises(SlurmError, match=r"cannot run on Slurm 26\.05\.5: no pyslurm exists"):
        PyslurmClient(module=Module(), cli=_FakeCli(SlurmVersion(26, 5, 5)))
    with pytest.raises(SlurmError, match=r"pyslurm 22\.5\.3 does not match Slurm 24\.11\.5"):
        PyslurmClient(module=Module(), cli=_FakeCli(SlurmVersion(24, 11, 5)))
    assert PyslurmClient(module=Module(), cli=_FakeCli(V2205)).pyslurm_version == "22.5.3"
