"""Generator settings keyed by the target Slurm release (verified on 22.05.8, 24.11.5, 26.05.5).

tests/matrix/test_matrix_conf.py starts each release's slurmctld and slurmd on the output; these
are the fast checks of the switch itself.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from hai_slurm.conf.deployment import PreemptionMode
from hai_slurm.conf.description import load
from hai_slurm.conf.generate import render_all
from hai_slurm.errors import ConfigError
from hai_slurm.slurm_formats import SlurmVersion

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "examples" / "cluster.toml"


def dgx_cores(version: str) -> list[str]:
    """Cores= of the example's dgx node type (PCIe switches with their own core ranges)."""
    desc, dep = load(EXAMPLE, version)
    gres = render_all(desc, dep)["gres.conf"]
    return re.findall(r"NodeName=dgx\S* Name=gpu .*Cores=(\S+)", gres)


def test_2205_keeps_each_pcie_switch_cores() -> None:
    """22.05 accepts sub-socket ranges, so the switch's own cores are kept (finer binding)."""
    assert dgx_cores("22.05") == ["48-63", "48-63", "16-31", "16-31",
                                  "112-127", "112-127", "80-95", "80-95"]


@pytest.mark.parametrize("version", ["23.02", "24.11", "26.05"])
def test_newer_releases_get_whole_sockets(version: str) -> None:
    """24.11 and 26.05 drain a node whose Cores= stop inside a socket: whole sockets there."""
    assert dgx_cores(version) == ["0-63"] * 4 + ["64-127"] * 4
    desc, dep = load(EXAMPLE, version)
    assert "# Cores= are whole sockets" in render_all(desc, dep)["gres.conf"]


@pytest.mark.parametrize(("version", "key"), [("22.05", "SchedulerParameters"),
                                              ("24.11", "PreemptParameters"),
                                              ("26.05", "PreemptParameters")])
def test_send_user_signal_lives_where_the_release_reads_it(version: str, key: str) -> None:
    """PreemptParameters from 23.02; before, preempt_send_user_signal in SchedulerParameters."""
    assert SlurmVersion.parse(version).has_preempt_parameters == (key == "PreemptParameters")
    desc, dep = load(EXAMPLE, version)
    native = dataclasses.replace(dep, preemption=PreemptionMode.NATIVE)
    lines = [ln for ln in render_all(desc, native)["slurm.conf"].splitlines()
             if "send_user_signal" in ln and not ln.startswith("#")]
    assert [ln.split("=", 1)[0] for ln in lines] == [key]


def test_release_older_than_2205_is_refused_naming_file_and_key() -> None:
    """A release the generators do not know is an error, not a config that kills slurmctld."""
    with pytest.raises(ConfigError, match=r"cluster\.toml: deployment\.slurm_version: .*"
                                          r"Slurm 21\.08 is older than the oldest release"):
        load(EXAMPLE, "21.08")


def test_max_job_count_is_written_and_checked() -> None:
    """MaxJobCount is the deployment's (default 100000, far above Slurm's 10000, which refuses
    sbatch at 10,000 queued + 2,000 running jobs); nonsense and an extra line are refused."""
    from hai_slurm.conf.deployment import Deployment
    from hai_slurm.conf.gen_slurm import render_slurm_conf

    desc, _dep = load(EXAMPLE)
    text = render_slurm_conf(desc, Deployment(), "# header")
    assert re.search(r"^MaxJobCount=100000$", text, re.MULTILINE)
    text = render_slurm_conf(desc, Deployment(max_job_count=250000), "# h")
    assert re.search(r"^MaxJobCount=250000$", text, re.MULTILINE)
    with pytest.raises(ConfigError, match="max_job_count"):
        Deployment(max_job_count=0).check()
    with pytest.raises(ConfigError, match="MaxJobCount is written by the generator"):
        render_slurm_conf(desc, Deployment(extra_settings=(("MaxJobCount", "5"),)), "# h")
