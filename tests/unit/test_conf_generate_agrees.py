"""`conf validate` refuses what `conf generate` would, extra lines never repeat a generated key,
discovery never prints a memory size that passes for real, and what validation accepts Slurm's
own parser (scontrol, when installed) reads."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.conf import generate
from hai_slurm.conf.deployment import Deployment, PreemptionMode
from hai_slurm.conf.description import load, parse_description
from hai_slurm.conf.discover_run import memory_mb
from hai_slurm.conf.generate import render_all, write_all
from hai_slurm.conf.model import ClusterDescription, Partition
from hai_slurm.errors import ConfigError

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "conf" / "examples" / "cluster.toml"
TOPO = ROOT / "tests" / "data" / "topo"


def _with_extra(tmp_path: Path, lines: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(EXAMPLE.read_text() + f"\n[deployment.extra]\n{lines}\n")
    return path


def _both(path: Path, tmp_path: Path, *options: str) -> tuple[str, str]:
    """Output of `conf validate` and of `conf generate`, each expected to fail."""
    outputs = []
    for args in (["validate", str(path)], ["generate", str(path), "-o", str(tmp_path / "o")]):
        res = CliRunner().invoke(cli, ["conf", *args, *options])
        assert res.exit_code == 1, res.output
        outputs.append(res.output)
    return outputs[0], outputs[1]


def test_validate_renders_what_generate_renders(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A renderer's refusal reaches `conf validate` as it reaches `conf generate`."""
    def refuse(desc: ClusterDescription, _dep: Deployment, _header: str) -> str:
        raise ConfigError("cannot render this", source=desc.source, key="broken")

    monkeypatch.setitem(generate.RENDERERS, "broken.conf", refuse)
    checked, generated = _both(EXAMPLE, tmp_path)
    assert f"error: {EXAMPLE}: broken: cannot render this" in checked
    assert checked == generated


@pytest.mark.parametrize(("extra", "fragment"), [
    ("SelectTypeParameters = \"CR_Core\"",
     "deployment.extra.SelectTypeParameters: SelectTypeParameters is written by the generator "
     "(SelectTypeParameters=CR_Core_Memory); remove the extra line"),
    ("MinJobAge = 300", "deployment.extra.MinJobAge: MinJobAge is written by the generator "
     "(MinJobAge=3900); set deployment.min_job_age instead"),
    ("schedulerparameters = \"bf_interval=30\"", "set deployment.scheduler_parameters instead"),
])
def test_extra_line_for_a_generated_key_is_refused_by_validate_and_generate(
        tmp_path: Path, extra: str, fragment: str) -> None:
    """An extra Key=Value the generator writes itself would put the key in slurm.conf twice."""
    checked, generated = _both(_with_extra(tmp_path, extra), tmp_path)
    assert fragment in checked and checked == generated


def test_extra_line_for_a_key_the_mode_does_not_write_is_kept() -> None:
    """Native mode writes no MinJobAge, so an extra one is the only one."""
    desc, dep = load(EXAMPLE)
    dep = dataclasses.replace(dep, preemption=PreemptionMode.NATIVE,
                              extra_settings=(("MinJobAge", "600"), ("MessageTimeout", "20")))
    text = render_all(desc, dep)["slurm.conf"]
    assert re.findall(r"^MinJobAge=.*$", text, re.MULTILINE) == ["MinJobAge=600"]
    assert text.index("MessageTimeout=20") < text.index("# ---- hai-slurm: scheduling")


def test_validate_takes_the_target_release_as_generate_does(tmp_path: Path) -> None:
    """--slurm-version is checked by validate too."""
    checked, generated = _both(EXAMPLE, tmp_path, "--slurm-version", "21.08")
    assert "Slurm 21.08 is older than the oldest release" in checked and checked == generated
    ok = CliRunner().invoke(cli, ["conf", "validate", str(EXAMPLE), "--slurm-version", "24.11"])
    assert ok.exit_code == 0 and "Slurm 24.11" in ok.output and "5 files render" in ok.output


def test_discover_without_memory_prints_a_value_validation_refuses() -> None:
    """Saved outputs say nothing about memory: discovery writes memory_mb = 0 with a comment,
    warns on stderr, and the description is refused until someone fills it in."""
    res = CliRunner().invoke(cli, ["conf", "discover", "--topo", str(TOPO / "dgx-a100.txt"),
                                   "--lscpu", str(TOPO / "dgx-a100.lscpu.txt"), "--name", "dgx"])
    assert res.exit_code == 0, res.output
    assert "memory_mb = 0  # FILL IN: the node's memory in MiB" in res.stdout
    assert "warning: the node's memory is unknown: fill in the node's memory" in res.stderr
    data = tomllib.loads(res.stdout + '[cluster]\nname = "c"\n[[nodes]]\nnames = "n1"\n'
                         'type = "dgx"\n')
    with pytest.raises(ConfigError, match=r"node_types\.dgx\.memory_mb: 0 MiB: fill in the "
                                          r"node's memory in MiB"):
        parse_description(data, "node.toml")


def test_discover_warns_about_a_memory_size_validation_refuses() -> None:
    """An explicit --memory-mb below 1 GiB is printed as given, with the same warning."""
    res = CliRunner().invoke(cli, ["conf", "discover", "--topo", str(TOPO / "dgx-a100.txt"),
                                   "--memory-mb", "1"])
    assert res.exit_code == 0, res.output
    assert "warning: memory_mb = 1 is below 1024 MiB: fill in the node's memory" in res.stderr
    assert "memory_mb = 1  # FILL IN" in res.stdout


def test_unreadable_meminfo_gives_the_unknown_memory(tmp_path: Path) -> None:
    """The live path's fallback is the refused 0, not a plausible-looking 1."""
    assert memory_mb(str(tmp_path / "missing")) == 0
    (tmp_path / "meminfo").write_text("MemTotal:       16384000 kB\n")
    assert memory_mb(str(tmp_path / "meminfo")) == 15200


# ---- Slurm's own parser ----------------------------------------------------------------------
SCONTROL = shutil.which("scontrol")
needs_scontrol = pytest.mark.skipif(SCONTROL is None, reason="scontrol (slurm-client) missing")


def _slurm_reads(desc: ClusterDescription, dep: Deployment, folder: Path) -> str:
    """'' when scontrol parses the generated slurm.conf (no daemon runs), else its error."""
    write_all(render_all(desc, dep), folder)
    res = subprocess.run([str(SCONTROL), "show", "hostnames", "n1"], capture_output=True,
                         text=True, timeout=30, check=False,
                         env={**os.environ, "SLURM_CONF": str(folder / "slurm.conf")})
    return "" if res.returncode == 0 else res.stderr


@needs_scontrol
def test_values_validation_refuses_break_slurms_parser(tmp_path: Path) -> None:
    """The refused values are refused for a reason: rendered anyway (validation bypassed),
    scontrol cannot read the slurm.conf."""
    desc, dep = load(EXAMPLE)
    pcie = dataclasses.replace(desc.node_types[0], gpu_model="Tesla V100 SXM2")
    broken = {
        "feature": dataclasses.replace(desc, node_types=(pcie, *desc.node_types[1:])),
        "cluster": dataclasses.replace(desc, name="HAI Cluster"),
        "partition": dataclasses.replace(desc, partitions=(Partition("gpu batch"),)),
        "max_time": dataclasses.replace(desc, partitions=(Partition("gpu", max_time="48h"),)),
    }
    for name, bad in broken.items():
        error = _slurm_reads(bad, dep, tmp_path / name)
        assert "Parse error" in error or "Bad value" in error, name
    assert _slurm_reads(desc, dep, tmp_path / "example") == ""


@needs_scontrol
@pytest.mark.parametrize("max_time", ["2-00:00:00", "2-0", "48:00:00", "90", "1:30",
                                      "UNLIMITED"])
def test_values_validation_accepts_parse_in_slurm(tmp_path: Path, max_time: str) -> None:
    """Edge names and every time format pass validation and scontrol alike."""
    data = tomllib.loads(EXAMPLE.read_text())
    data["cluster"]["name"] = "hai-01_" + "x" * 33
    data["node_types"]["pcie8"]["gpu_model"] = "V100-SXM2_16.GB"
    data["partition"] = [{"name": "GPU.batch-1", "default": True, "max_time": max_time}]
    desc = parse_description(data, "edge.toml")
    assert _slurm_reads(desc, Deployment(), tmp_path) == ""


@pytest.mark.parametrize(("change", "key"), [
    ({"log_dir": "/var/log/my slurm"}, "deployment.log_dir"),
    ({"controller_host": "ctl#1"}, "deployment.controller_host"),
    ({"scheduler_parameters": ("bf_continue", "a b")}, "deployment.scheduler_parameters"),
    ({"extra_settings": (("MessageTimeout", "30\nSlurmUser=root"),)},
     "deployment.extra.MessageTimeout"),
    ({"extra_settings": (("Message Timeout", "30"),)}, "deployment.extra.Message Timeout"),
])
def test_deployment_values_slurm_conf_takes_as_they_are_are_one_word(
        change: dict[str, object], key: str) -> None:
    """A space, '#' or line break in a value written verbatim would end it, start a comment or
    add a slurm.conf line of its own (an extra value of 30, a line break and SlurmUser=root
    did): refused."""
    with pytest.raises(ConfigError, match=re.escape(key)):
        dataclasses.replace(Deployment(), **change).check()   # type: ignore[arg-type]


def test_an_extra_line_with_a_line_break_is_refused_when_read(tmp_path: Path) -> None:
    """The same through the description file, as `conf validate` reads it."""
    path = _with_extra(tmp_path, r'MessageTimeout = "30\nSlurmUser=root"')
    with pytest.raises(ConfigError, match=r"deployment\.extra\.MessageTimeout"):
        load(path)
