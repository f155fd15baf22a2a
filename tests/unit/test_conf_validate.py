"""Every validation error names the file, the key and the value; sound descriptions load."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.description import load, parse_deployment, parse_description
from hai_slurm.conf.topology import Topology
from hai_slurm.errors import ConfigError

EXAMPLE = Path(__file__).parents[2] / "conf" / "examples" / "cluster.toml"


def _base() -> dict[str, Any]:
    """Two 4-GPU nodes under one leaf, two teams: a small, valid description."""
    return {
        "cluster": {"name": "c"},
        "node_types": {"t4": {
            "cores_per_socket": 8, "memory_mb": 16000, "gpus": 4,
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


def _with_n3_under(*switches: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A third node and ``switches`` (which place it)."""
    def change(d: dict[str, Any]) -> None:
        d["nodes"].append({"names": "n3", "type": "t4"})
        d["switch"].extend(switches)
    return change


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
    # Free text that reaches slurm.conf/topology.conf/sacctmgr: slurmctld fails to parse it.
    ("gpu model with spaces", _set("node_types/t4/gpu_model", "Tesla V100 SXM2"),
     "node_types.t4.gpu_model", "write e.g. 'V100-SXM2'", "Tesla V100 SXM2"),
    ("gpu model with a comma", _set("node_types/t4/gpu_model", "A100,PCIe"),
     "node_types.t4.gpu_model", "write e.g. 'A100-PCIe'", "A100,PCIe"),
    ("node type name with a space", lambda d: d.update(
        {"node_types": {"t 4": d["node_types"]["t4"]},
         "nodes": [{"names": "n[1-2]", "type": "t 4"}]}),
     "node_types.t 4", "write e.g. 't-4'", "t 4"),
    ("cluster name with a space", _set("cluster/name", "HAI Cluster"), "cluster.name",
     "1-40 lower-case letters, digits, '_', '-' (slurm.conf(5)", "HAI Cluster"),
    ("cluster name in upper case", _set("cluster/name", "HAI"), "cluster.name",
     "write e.g. 'hai'", "HAI"),
    ("cluster name over 40 characters", _set("cluster/name", "c" * 41), "cluster.name",
     "1-40 lower-case", "c" * 41),
    ("partition name with a space", lambda d: d.update({"partition": [{"name": "gpu batch"}]}),
     "partition[0].name", "write e.g. 'gpu-batch'", "gpu batch"),
    ("partition called DEFAULT", lambda d: d.update({"partition": [{"name": "Default"}]}),
     "partition[0].name", "PartitionName=DEFAULT sets defaults", "Default"),
    ("switch name with a space", _set("switch/0/name", "leaf 1"), "switch[0].name",
     "write e.g. 'leaf-1'", "leaf 1"),
    ("switch name with a hostlist bracket", _set("switch/0/name", "leaf[1]"), "switch[0].name",
     "a switch name (topology.conf SwitchName) is letters", "leaf[1]"),
    ("QOS name with a space", lambda d: d.update({"classes": {"HIGH": {"qos": "high prio"}}}),
     "classes.HIGH.qos", "write e.g. 'high-prio'", "high prio"),
    ("QOS name in mixed case", lambda d: d.update({"classes": {"HIGH": {"qos": "High"}}}),
     "classes.HIGH.qos", "sacctmgr lower-cases QOS names", "High"),
    # MaxTime Slurm cannot read
    ("max_time in words", lambda d: d.update({"partition": [{"name": "p", "max_time": "2 days"}]}),
     "partition[0].max_time", "D-H:M:S (\"2-00:00:00\" is two days)", "2 days"),
    ("max_time with a unit", lambda d: d.update({"partition": [{"name": "p", "max_time": "48h"}]}),
     "partition[0].max_time", "is not a Slurm time limit", "48h"),
    ("max_time empty", lambda d: d.update({"partition": [{"name": "p", "max_time": ""}]}),
     "partition[0].max_time", "is not a Slurm time limit", ""),
    # device patterns str.format cannot fill (a KeyError traceback before)
    ("device pattern with an unknown placeholder",
     _set("node_types/t4/device_pattern", "/dev/nvidia{gpu}{index}"),
     "node_types.t4.device_pattern", "'{gpu}' is not a placeholder", "/dev/nvidia{gpu}{index}"),
    ("device pattern with a positional placeholder",
     _set("node_types/t4/device_pattern", "/dev/{}nvidia{index}"),
     "node_types.t4.device_pattern", "'{}' is not a placeholder", "/dev/{}nvidia{index}"),
    ("device pattern with an unclosed brace",
     _set("node_types/t4/device_pattern", "/dev/nvidia{index}{node"),
     "node_types.t4.device_pattern", "'{node' is not a placeholder", "/dev/nvidia{index}{node"),
    ("device pattern with a space", _set("node_types/t4/device_pattern", "/dev/my gpu{index}"),
     "node_types.t4.device_pattern", "a device path has no spaces", "/dev/my gpu{index}"),
    # topology/tree: one parent per switch, one tree
    ("switch under two spines", _with_n3_under(
        {"name": "leaf2", "nodes": "n3"}, {"name": "sp1", "switches": ["leaf", "leaf2"]},
        {"name": "sp2", "switches": ["leaf"]}, {"name": "top", "switches": ["sp1", "sp2"]}),
     "switch[3].switches", "switch 'leaf' is listed under 'sp1' too", ["leaf"]),
    ("switch twice under one spine", lambda d: d["switch"].append(
        {"name": "sp", "switches": ["leaf", "leaf"]}),
     "switch[1].switches", "switch 'leaf' is listed twice here", ["leaf", "leaf"]),
    ("two trees", _with_n3_under({"name": "leaf2", "nodes": "n3"}), "switch",
     "the switches form 2 separate trees (roots: leaf, leaf2)", ["leaf", "leaf2"]),
    # memory: a placeholder would become the whole cluster's DefMemPerCPU
    ("memory placeholder", _set("node_types/t4/memory_mb", 1), "node_types.t4.memory_mb",
     "fill in the node's memory in MiB", 1),
    ("memory below 1 GiB", _set("node_types/t4/memory_mb", 1023), "node_types.t4.memory_mb",
     "at least 1024", 1023),
    # a PCIe switch's cores on another socket (22.05 and 23.02+ would bind different cores)
    ("switch cores on the other socket",
     _set("node_types/t4/socket/0/pcie_switch/0/cores", "8-11"),
     "node_types.t4.socket[0].pcie_switch[0].cores",
     "core(s) 8-11 are not on socket 0 (cores 0-7)", "8-11"),
    ("switch cores partly on the other socket",
     _set("node_types/t4/socket/1/pcie_switch/0/cores", "6-9"),
     "node_types.t4.socket[1].pcie_switch[0].cores",
     "core(s) 6-7 are not on socket 1 (cores 8-15)", "6-9"),
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


@pytest.mark.parametrize("max_time", ["2-00:00:00", "2-0", "48:00:00", "90", "1:30",
                                      "INFINITE", "UNLIMITED"])
def test_slurm_time_formats_are_accepted(max_time: str) -> None:
    """Every one of Slurm's time formats is a valid MaxTime."""
    data = {**_base(), "partition": [{"name": "p", "max_time": max_time}]}
    assert parse_description(data).partitions[0].max_time == max_time


def test_names_slurm_takes_are_accepted() -> None:
    """Letters, digits, '_', '.', '-' (lower case where sacctmgr lower-cases) all load."""
    data = _base()
    data["cluster"]["name"] = "hai-01_" + "x" * 33                 # 40 characters
    data["node_types"]["t4"]["gpu_model"] = "V100-SXM2_16.GB"
    data["node_types"]["t4"]["device_pattern"] = "/tmp/dev/{node}/nvidia{index}"
    data["switch"][0]["name"] = "Leaf.1-a_b"
    data["partition"] = [{"name": "GPU.batch-1"}]
    data["classes"] = {"HIGH": {"qos": "high.prio-1_a"}}
    desc = parse_description(data)
    assert desc.name == data["cluster"]["name"]
    assert desc.class_policy(PriorityClass.HIGH).qos == "high.prio-1_a"


def test_one_spine_above_several_leaves_counts_each_gpu_once() -> None:
    """With the spine the two-root example loads, and the model holds every GPU once."""
    data = _base()
    data["nodes"].append({"names": "n3", "type": "t4"})
    data["switch"] += [{"name": "leaf2", "nodes": "n3"},
                       {"name": "spine", "switches": ["leaf", "leaf2"]}]
    gpus = Topology.from_description(parse_description(data)).gpus
    assert len(gpus) == len(set(gpus)) == 12
    data["switch"].append({"name": "spine2", "switches": ["leaf"]})
    with pytest.raises(ConfigError, match="listed under 'spine' too"):
        parse_description(data)  # else leaf's GPUs would be in the model twice


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
