"""The testbed's configuration: conf's generators on the testbed's description, slurmdbd.conf, and
the sacctmgr changes from a snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from hai_slurm.classes import PriorityClass
from hai_slurm.conf.accounting import (
    SNAPSHOT_QUERIES,
    AccountingSnapshot,
    QosSetting,
    parse_snapshot,
)
from hai_slurm.conf.topology import GpuRef, Level, Topology
from hai_slurm.errors import ConfigError
from hai_slurm.testbed.describe import cluster_description
from hai_slurm.testbed.layout import Ports, local_layout
from hai_slurm.testbed.render import (
    accounting,
    accounting_plan,
    render_configs,
    sacctmgr_commands,
)
from hai_slurm.testbed.shape import ClusterShape, PreemptionMode, parse_grace_times

ALL_QOS = tuple(c.qos for c in PriorityClass)


def _layout(shape: ClusterShape):
    return local_layout(shape, Ports(), Path("/srv/tb"), "host1", "pw")


def render_slurm_conf(shape: ClusterShape, layout) -> str:
    return render_configs(shape, layout)["slurm.conf"]


def render_gres_conf(shape: ClusterShape, layout) -> str:
    return render_configs(shape, layout)["gres.conf"]


def wanted_qos(shape: ClusterShape) -> tuple[QosSetting, ...]:
    setup = accounting(shape)
    assert setup is not None
    return setup.qos


def _conf(text: str) -> dict[str, str]:
    """Single-valued lines of a Slurm config (first key=value of each line)."""
    out = {}
    for line in text.splitlines():
        line = line.split("  #")[0].strip()  # conf puts short comments after some values
        if line and not line.startswith("#") and not line.startswith(("NodeName", "Partition")):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_priority_classes_have_the_platform_weights_in_rank_order():
    """EXTREME_HIGH 50 ... LOW 0, QOS names lower case, iteration from highest to lowest."""
    assert [c.weight for c in PriorityClass] == [50, 40, 30, 20, 10, 8, 5, 0]
    assert PriorityClass.ABOVE_NORMAL.qos == "above_normal"
    assert PriorityClass.HIGH.outranks(PriorityClass.NORMAL)
    assert not PriorityClass.LOW.outranks(PriorityClass.LOW)


def test_slurm_conf_daemon_mode_never_preempts():
    """Daemon mode: preempt/none, lua job_submit, munge socket and short cred_expire."""
    shape = ClusterShape()
    conf = _conf(render_slurm_conf(shape, _layout(shape)))
    assert conf["PreemptType"] == "preempt/none"
    assert conf["PreemptMode"] == "OFF"
    assert conf["JobSubmitPlugins"] == "lua"
    assert conf["AuthInfo"] == "socket=/srv/tb/munge/munge.socket,cred_expire=10"
    assert conf["AccountingStoragePass"] == "/srv/tb/munge/munge.socket"
    assert "bf_interval=1" in conf["SchedulerParameters"].split(",")
    assert "PreemptParameters" not in conf  # not a Slurm 22.05 key: every daemon would die


def test_slurm_conf_native_mode_requeues_by_qos():
    """Native mode: preempt/qos, REQUEUE, user signal in SchedulerParameters."""
    shape = ClusterShape(preemption=PreemptionMode.NATIVE)
    conf = _conf(render_slurm_conf(shape, _layout(shape)))
    assert conf["PreemptType"] == "preempt/qos"
    assert conf["PreemptMode"] == "REQUEUE"
    assert "preempt_send_user_signal" in conf["SchedulerParameters"].split(",")


def test_slurm_conf_without_accounting_has_no_slurmdbd():
    """No accounting: accounting_storage/none and no slurmdbd.conf at all."""
    shape = ClusterShape(accounting=False)
    files = render_configs(shape, _layout(shape))
    assert _conf(files["slurm.conf"])["AccountingStorageType"] == "accounting_storage/none"
    assert "slurmdbd.conf" not in files
    assert sacctmgr_commands(shape) == []


def test_slurm_conf_node_lines_carry_port_and_shape():
    """One NodeName line per node with its own port, all on 127.0.0.1."""
    shape = ClusterShape(nodes=3, gpus_per_node=4, sockets=2, cores_per_socket=6)
    text = render_slurm_conf(shape, _layout(shape))
    nodes = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert len(nodes) == 3
    assert "NodeName=n2 NodeHostname=host1 NodeAddr=127.0.0.1 Port=16902 " in nodes[1]
    assert "Sockets=2 CoresPerSocket=6" in nodes[1] and "Gres=gpu:4" in nodes[1]
    assert "PartitionName=main Nodes=ALL Default=YES" in text


def test_gres_conf_ties_gpus_to_socket_cores_and_switch_links():
    """8 GPUs, 2 sockets x 2 switches: 2 GPUs per switch, Cores= per socket, Links by distance."""
    shape = ClusterShape()
    lines = [ln for ln in render_gres_conf(shape, _layout(shape)).splitlines()
             if ln.startswith("NodeName=")]
    assert len(lines) == 8
    assert lines[0] == ("NodeName=n[1-4] Name=gpu File=/srv/tb/dev/nvidia0 Cores=0-7 "
                        "Links=-1,2,1,1,0,0,0,0")
    assert lines[5] == ("NodeName=n[1-4] Name=gpu File=/srv/tb/dev/nvidia5 Cores=8-15 "
                        "Links=0,0,0,0,2,-1,1,1")


def test_gres_conf_spreads_few_gpus_over_sockets():
    """2 GPUs on 2 sockets x 2 switches: one GPU per socket."""
    shape = ClusterShape(gpus_per_node=2)
    assert [p.socket for p in shape.gpu_placements()] == [0, 1]


def test_topology_conf_splits_nodes_evenly_under_a_spine():
    """5 nodes under 2 leaves: 3 + 2, both under the spine."""
    shape = ClusterShape(nodes=5, leaf_switch_count=2)
    text = render_configs(shape, _layout(shape))["topology.conf"]
    assert [ln for ln in text.splitlines() if not ln.startswith("#")] == [
        "SwitchName=leaf1 Nodes=n[1-3]",
        "SwitchName=leaf2 Nodes=n[4-5]",
        "SwitchName=spine Switches=leaf[1-2]",
    ]


def test_slurmdbd_conf_uses_our_database_and_munge_socket():
    """slurmdbd.conf points at the local MariaDB port and our munged."""
    shape = ClusterShape()
    conf = _conf(render_configs(shape, _layout(shape))["slurmdbd.conf"])
    assert conf["StoragePort"] == "16806"
    assert conf["StoragePass"] == "pw"
    assert conf["AuthInfo"] == "socket=/srv/tb/munge/munge.socket"
    assert conf["DbdPort"] == "16819"


def test_native_qos_preempt_every_lower_class_with_grace_times():
    """Native: each class QOS preempts all lower ones by requeue, with its own GraceTime."""
    shape = ClusterShape(preemption=PreemptionMode.NATIVE).with_grace_times(
        parse_grace_times(["5", "LOW=30"]))
    specs = {s.name: s for s in wanted_qos(shape)}
    assert specs["extreme_high"].preempt == frozenset(ALL_QOS) - {"extreme_high"}
    assert specs["normal"].preempt == frozenset({"under_normal", "below_normal", "low"})
    assert specs["low"].preempt == frozenset()
    assert specs["low"].grace_time == 30 and specs["high"].grace_time == 5
    assert {s.preempt_mode for s in specs.values()} == {"REQUEUE"}
    assert [s.priority for s in wanted_qos(shape)] == [50, 40, 30, 20, 10, 8, 5, 0]


def test_accounting_plan_for_fresh_database_creates_everything():
    """Empty database: cluster, 8 QOS, 7 QOS settings (LOW keeps sacctmgr's defaults), both
    accounts in one call and root in both in one call: 11 calls (each costs ~0.3 s)."""
    cmds = sacctmgr_commands(ClusterShape())
    verbs = [(c[2], c[3]) for c in cmds]
    assert verbs[:2] == [("add", "cluster"), ("add", "qos")]
    assert verbs.count(("modify", "qos")) == 7
    assert verbs[-2:] == [("add", "account"), ("add", "user")] and len(cmds) == 11
    assert all(c[:2] == ["sacctmgr", "-i"] for c in cmds)
    # Daemon mode never touches Preempt lists: emptying one trips a 22.05 sacctmgr quirk.
    assert not any(arg.startswith("Preempt=") for c in cmds for arg in c)
    assert cmds[-1][2:9] == ["add", "user", "root", "Account=team-a,team-b", "Cluster=hai",
                             "DefaultAccount=team-a", f"QOS={','.join(ALL_QOS)}"]


def _snapshot(shape: ClusterShape, preempt: dict[str, str] | None = None) -> AccountingSnapshot:
    """The sacctmgr outputs of a database that holds what ``shape`` wants (Preempt lists from
    ``preempt`` when given)."""
    lists = preempt or {}
    qos_out = "\n".join(
        f"{q.name}|{q.priority}|{lists.get(q.name, ','.join(sorted(q.preempt or ())))}|"
        f"{q.preempt_mode.upper()}|00:00:{q.grace_time:02d}" for q in wanted_qos(shape))
    all_qos = ",".join(sorted(ALL_QOS))
    assoc_out = "".join(f"hai|{team}||{all_qos}|||\nhai|{team}|root|{all_qos}|normal||\n"
                        for team in ("team-a", "team-b"))
    accounts = "root|default root account\nteam-a|hai no quota\nteam-b|HAI NO QUOTA\n"
    return parse_snapshot("hai", "hai\n", qos_out, accounts, assoc_out)


def test_accounting_plan_is_empty_when_database_already_matches():
    """A database that already holds the wanted state needs no command at all."""
    assert len(SNAPSHOT_QUERIES) == 4
    daemon = ClusterShape()
    assert accounting_plan(daemon, _snapshot(daemon)) == []
    native = ClusterShape(preemption=PreemptionMode.NATIVE)
    assert accounting_plan(native, _snapshot(native)) == []
    changed = accounting_plan(native, _snapshot(daemon))
    assert len(changed) == 8  # every QOS gets PreemptMode=requeue (and all but LOW a list)
    assert all(c[2:4] == ["modify", "qos"] for c in changed)
    assert sum(any(a.startswith("Preempt=") for a in c) for c in changed) == 7


def test_daemon_mode_leaves_preempt_lists_alone():
    """Going back to daemon mode keeps native's lists (preempt/none ignores them)."""
    native = ClusterShape(preemption=PreemptionMode.NATIVE)
    daemon = ClusterShape()
    plan = accounting_plan(daemon, _snapshot(native))
    assert plan and not any(a.startswith("Preempt=") for c in plan for a in c)


def test_native_mode_sets_only_lists_that_differ_and_empties_only_when_needed():
    """One wrong list is replaced in one go; a list that must become empty is emptied."""
    native = ClusterShape(preemption=PreemptionMode.NATIVE)
    plan = accounting_plan(native, _snapshot(native, {"high": "low", "low": "normal"}))
    assert plan == [
        ["sacctmgr", "-i", "modify", "qos", "where", "name=high", "set",
         "Preempt=above_normal,below_normal,low,normal,under_normal"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=low", "set", "Preempt="],
    ]


def test_description_of_the_shape_matches_its_topology():
    """The testbed's description gives conf's topology model the shape's cells."""
    shape = ClusterShape(nodes=3, gpus_per_node=4, leaf_switch_count=2)
    desc = cluster_description(shape, "/srv/tb/dev")
    topo = Topology.from_description(desc)
    assert len(topo.gpus) == 12
    assert [c.id for c in topo.cells_at(Level.LEAF_SWITCH)] == ["leaf1", "leaf2"]
    assert topo.cell("n1/socket1/pcie0").gpus == (GpuRef("n1", 2),)
    assert [cp.qos for cp in desc.classes] == list(ALL_QOS)
    assert desc.class_policy(PriorityClass.LOW).preempts == ()


def test_accounting_plan_adds_only_missing_qos():
    """Only the QOS that do not exist yet are added."""
    snap = AccountingSnapshot(clusters=frozenset({"hai"}))
    add = [c for c in accounting_plan(ClusterShape(), snap) if c[2:4] == ["add", "qos"]]
    assert add == [["sacctmgr", "-i", "add", "qos", ",".join(ALL_QOS)]]


@pytest.mark.parametrize(("kwargs", "key", "words"), [
    ({"nodes": 0}, "nodes", "from 1 to 256, got 0"),
    ({"leaf_switch_count": 0}, "leaf_switch_count", "at least 1 leaf switch"),
    ({"nodes": 2, "leaf_switch_count": 3}, "leaf_switch_count", "cannot spread 2 node(s)"),
    ({"accounting": False, "preemption": PreemptionMode.NATIVE}, "preemption",
     "QOS needs accounting"),
    ({"cred_expire": 1}, "cred_expire", "from 5 to 3600"),
    ({"cluster_name": "bad name"}, "cluster_name", "letters, digits"),
])
def test_bad_shape_is_refused_with_key_and_reason(kwargs, key, words):
    """Every invalid shape names the setting and says what is allowed."""
    with pytest.raises(ConfigError) as err:
        ClusterShape(**kwargs)
    assert err.value.key == key
    assert words in str(err.value)


def test_bad_grace_time_names_the_item():
    """An unknown class or a non-number in --grace-time is refused with the item."""
    with pytest.raises(ConfigError, match="unknown priority class 'URGENT'"):
        parse_grace_times(["URGENT=3"])
    with pytest.raises(ConfigError, match="seconds must be an integer") as err:
        parse_grace_times(["LOW=soon"])
    assert err.value.value == "LOW=soon"


def test_shape_round_trips_through_json():
    """The state file's shape reads back equal, grace times included."""
    shape = ClusterShape(nodes=3, preemption=PreemptionMode.NATIVE).with_grace_times(
        {PriorityClass.LOW: 7})
    assert ClusterShape.from_json(shape.to_json()) == shape
    with pytest.raises(ConfigError, match="unknown cluster shape key"):
        ClusterShape.from_json({"gpus": 3})
