"""Every validation error names the file, the key and the value; sound descriptions load."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.conf.description import load, parse_deployment, parse_description
from hai_slurm.conf.topology import Topology
from hai_slurm.errors import ConfigError

EXAMPLE = Path(__file__).parents[2] / "conf" / "examples" / "cluster.toml"


def _base() -> dict[str, Any]:
    """Two 4-GPU nodes under one leaf, two teams: a small, valid description."""
    return {
        "cluster": {"name": "c"},
        "node_types": {"t4": {
            "cores_per_socket": 8, "memory_mb": 1000, "gpus": 4,
            "socket": [{"pcie_switch": [{"gpus": [0, 1]}]}, {"pcie_switch": [{"gpus": [2, 3]}]}],
        }},
        "nodes": [{"names": "n[1-2]", "type": "t4"}],
        "switch": [{"name": "leaf", "nodes": "n[1-2]"}],
        "teams": {"a": {"gpu_quota": 4, "classes": ["HIGH", "NORMAL"]}},
    }


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = d
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def _add_node_group(names: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["nodes"].append({"names": names, "type": "t4"})


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, str, object]] = [
    # (case id, change, key in message, message fragment, offending value)
    ("unknown node in switch", _set("switch/0/nodes", "n[1-3]"), "switch[0].nodes",
     "unknown node 'n3'", "n[1-3]"),
    ("gpu count vs gres", _set("node_types/t4/gpus", 8), "node_types.t4.gpus",
     "says 8 GPUs but the socket/pcie_switch layout lists 4", 8),
    ("overlapping ranges", _add_node_group("n[2-5]"), "nodes[1].names",
     "node 'n2' is also in nodes[0] (n[1-2])", "n[2-5]"),
    ("switch cycle", lambda d: d["switch"].extend([
        {"name": "s1", "switches": ["s2"]}, {"name": "s2", "switches": ["s1"]}]),
     "switch[2].switches", "switch cycle s1 -> s2 -> s1", ["s1"]),
    ("unknown class in team", _set("teams/a/classes", ["HIGH", "URGENT"]), "teams.a.classes",
     "unknown priority class 'URGENT'", "URGENT"),
    ("unknown class table", lambda d: d.setdefault("classes", {}).update({"MEDIUM": {}}),
     "classes.MEDIUM", "unknown priority class 'MEDIUM'", "MEDIUM"),
    ("unknown class in preempts", lambda d: d.setdefault("classes", {}).update(
        {"HIGH": {"preempts": ["LOWEST"]}}), "classes.HIGH.preempts",
     "unknown priority class 'LOWEST'", "LOWEST"),
    ("preempts a higher class", lambda d: d.setdefault("classes", {}).update(
        {"LOW": {"preempts": ["HIGH"]}}), "classes.LOW.preempts",
     "LOW may only preempt lower classes, not HIGH", "HIGH"),
    ("quota over capacity", _set("teams/a/gpu_quota", 9), "teams.a.gpu_quota",
     "more than the cluster's 8 GPUs", 9),
    ("quotas add up over capacity", lambda d: d["teams"].update(
        {"b": {"gpu_quota": 5}}), "teams.b.gpu_quota", "quotas add up to 9 GPUs", 5),
    ("limit below quota", _set("teams/a/gpu_limit", 2), "teams.a.gpu_limit",
     "gpu_limit 2 is below gpu_quota 4", 2),
    ("unknown node type", _set("nodes/0/type", "t8"), "nodes[0].type",
     "unknown node type 't8'", "t8"),
    ("node in no leaf", _add_node_group("m1"), "switch", "are under no leaf switch", ["m1"]),
    ("node in two leaves", lambda d: d["switch"].append({"name": "leaf2", "nodes": "n2"}),
     "switch[1].nodes", "already under leaf switch 'leaf'", "n2"),
    ("unknown child switch", lambda d: d["switch"].append({"name": "sp", "switches": ["x"]}),
     "switch[1].switches", "unknown switch 'x'", ["x"]),
    ("duplicate gpu", _set("node_types/t4/socket/1/pcie_switch/0/gpus", [1, 2]),
     "node_types.t4.socket[1].pcie_switch[0].gpus", "GPU 1 is listed twice", [1, 2]),
    ("nvlink to missing gpu", _set("node_types/t4/nvlink", [{"gpus": [0, 7], "links": 2}]),
     "node_types.t4.nvlink[0].gpus", "unknown GPU(s) [7]", [0, 7]),
    ("cores out of range", _set("node_types/t4/socket/0/pcie_switch/0/cores", "0-31"),
     "node_types.t4.socket[0].pcie_switch[0].cores", "core 31 does not exist", "0-31"),
    ("typo key", _set("node_types/t4/cores_per_sockets", 8), "node_types.t4.cores_per_sockets",
     "unknown key", 8),
    ("wrong type", _set("node_types/t4/memory_mb", "1G"), "node_types.t4.memory_mb",
     "must be an integer", "1G"),
    ("bad hostlist", _set("nodes/0/names", "n[1-"), "nodes[0].names", "never closed", "n[1-"),
    ("partition unknown node", lambda d: d.update(
        {"partition": [{"name": "p", "nodes": "n9"}]}), "partition[0].nodes",
     "unknown node 'n9'", "n9"),
    ("team name not an account name", lambda d: d["teams"].update({"Team A": {}}),
     "teams.Team A", "a team (Slurm account) name is 1-64 lower-case", "Team A"),
    ("device pattern without index", _set("node_types/t4/device_pattern", "/dev/nvidia0"),
     "node_types.t4.device_pattern", "must contain {index}", "/dev/nvidia0"),
]


@pytest.mark.parametrize(("change", "key", "fragment", "value"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validation_error(change: Callable[[dict[str, Any]], None], key: str, fragment: str,
                          value: object) -> None:
    """The error names the file and key, says what is wrong and carries the bad value."""
    data = copy.deepcopy(_base())
    change(data)
    with pytest.raises(ConfigError) as err:
        parse_description(data, "cluster.toml")
    assert str(err.value).startswith(f"cluster.toml: {key}: "), str(err.value)
    assert fragment in str(err.value)
    assert err.value.source == "cluster.toml" and err.value.key == key
    assert err.value.value == value


def test_base_description_is_valid() -> None:
    """The unchanged base loads, so each case above fails for its own change only."""
    desc = parse_description(_base(), "cluster.toml")
    assert desc.total_gpus == 8
    assert desc.classes[0].cls.value == "EXTREME_HIGH"


def test_example_description_loads() -> None:
    """conf/examples/cluster.toml is valid and builds a topology."""
    desc, dep = load(EXAMPLE)
    assert desc.total_gpus == 64 and dep.slurm_version.series == "22.05"
    assert len(Topology.from_description(desc).gpus) == 64


@pytest.mark.parametrize(("deployment", "key", "fragment"), [
    ({"preemption": "sometimes"}, "deployment.preemption", "must be \"daemon\" or \"native\""),
    ({"preemption": "native", "accounting": False}, "deployment.preemption",
     "needs accounting"),
    ({"slurm_version": "latest"}, "deployment.slurm_version", "not a Slurm version"),
    ({"cred_expire": 0}, "deployment.cred_expire", "at least 1 second"),
    ({"controller_port": "6817"}, "deployment.controller_port", "must be an integer"),
    ({"nodes": {}}, "deployment.nodes", "unknown key"),
])
def test_deployment_errors(deployment: dict[str, Any], key: str, fragment: str) -> None:
    """Deployment settings are checked with the same kind of message."""
    with pytest.raises(ConfigError) as err:
        parse_deployment({"deployment": deployment}, "cluster.toml")
    assert f"cluster.toml: {key}: " in str(err.value) and fragment in str(err.value)


def test_endpoint_for_unknown_node(tmp_path: Path) -> None:
    """[deployment.node.X] must name a node of the description."""
    text = EXAMPLE.read_text() + '\n[deployment.node.ghost]\nport = 1\n'
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError,
                       match=r"c\.toml: deployment\.node\.ghost: unknown node 'ghost'"):
        load(path)


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    """Unreadable files and TOML syntax errors name the file."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster\nname = 1\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load(bad)
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot read"):
        load(tmp_path / "missing.toml")
