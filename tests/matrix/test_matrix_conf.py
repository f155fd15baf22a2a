"""Generated configuration is accepted by each release's own slurmctld and slurmd.

For every suite: ``conf/examples/cluster.toml`` is generated for that suite's Slurm series
(``--slurm-version``), adapted only in where things live (one throwaway container from the suite's
testbed image, every slurmd on 127.0.0.1 with its own port, fake GPUs as /dev/null links, no
accounting), then ``slurmctld -D`` and one ``slurmd -N`` per node type start on it. The nodes must
register IDLE with the generated GPUs (gres.conf accepted) and ``scontrol show topology`` must show
the switches. A second test renders the native-preemption keys for the release (PreemptParameters
from 23.02 on, SchedulerParameters=preempt_send_user_signal before) and checks slurmctld takes them.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SuiteCluster

from hai_slurm.conf.deployment import Deployment, NodeEndpoint, PreemptionMode
from hai_slurm.conf.description import load
from hai_slurm.conf.gen_slurm import render_slurm_conf
from hai_slurm.conf.generate import render_all
from hai_slurm.conf.model import ClusterDescription
from hai_slurm.slurm_formats import SlurmVersion
from hai_slurm.testbed.docker_mode import LABEL

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "examples" / "cluster.toml"
ETC = "/etc/hai-conf"
HOST = "confctl"


class ConfBox:
    """A throwaway container of a suite's image for starting Slurm daemons by hand.

    It joins the suite testbed's *internal* network although every daemon talks over 127.0.0.1:
    with only a loopback interface (``network_mode="none"``) slurmctld 24.11 cannot open its port
    (``getaddrinfo((null):6817) failed`` - address lookups skip families with no non-loopback
    address), so a container needs one real interface.
    """

    def __init__(self, docker: Any, image: str, network: str) -> None:
        self.box = docker.containers.run(
            image, ["sleep"], detach=True, hostname=HOST, network=network, init=True,
            dns_opt=["timeout:1", "attempts:1"],  # as the testbed: no 10 s lookups at start
            labels={LABEL: "conf-test", f"{LABEL}.role": "conf"},
            name=f"hai-slurm-conf-{uuid.uuid4().hex[:8]}")

    def sh(self, script: str, *, detach: bool = False) -> str:
        """Run a bash script as root; its output (asserting success unless detached)."""
        env = {"SLURM_CONF": f"{ETC}/slurm.conf"}
        if detach:
            self.box.exec_run(["bash", "-c", script], detach=True, environment=env)
            return ""
        code, out = self.box.exec_run(["bash", "-c", script], environment=env)
        text = (out or b"").decode(errors="replace")
        assert code == 0, f"{script}: exit {code}\n{text}"
        return text

    def put(self, files: dict[str, str]) -> None:
        """Write ``files`` into ETC."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(data))
        self.sh(f"mkdir -p {ETC}")
        assert self.box.put_archive(ETC, buf.getvalue())

    def start(self, nodes: list[str]) -> None:
        """munged, slurmctld (until scontrol ping answers), then ``slurmd -N`` for ``nodes``."""
        self.sh("mkdir -p /run/munge /var/log/slurm /var/spool/hai /run/slurm"
                " && chown munge:munge /run/munge"
                " && mungekey -c -f -k /etc/munge/munge.key && chown munge:munge "
                "/etc/munge/munge.key && runuser -u munge -- /usr/sbin/munged")
        self.sh(f"slurmctld -D -f {ETC}/slurm.conf > /var/log/slurm/ctld.out 2>&1", detach=True)
        self.wait("slurmctld to answer", "scontrol ping | grep -q UP", 30)
        for node in nodes:
            self.sh(f"slurmd -D -N {node} -f {ETC}/slurm.conf > /var/log/slurm/d-{node}.out 2>&1",
                    detach=True)

    def wait(self, what: str, test: str, timeout: float, give_up: str = "false") -> None:
        """Poll the shell ``test`` until it succeeds; fail with slurmctld's last log lines at the
        deadline, or at once when the shell test ``give_up`` succeeds."""
        deadline = time.monotonic() + timeout
        env = {"SLURM_CONF": f"{ETC}/slurm.conf"}
        while self.box.exec_run(["bash", "-c", test], environment=env)[0] != 0:
            if self.box.exec_run(["bash", "-c", give_up], environment=env)[0] == 0:
                _, shown = self.box.exec_run(["bash", "-c", "scontrol -o show node"],
                                             environment=env)
                pytest.fail(f"{what}: a node was refused:\n"
                            f"{(shown or b'').decode(errors='replace')}")
            if time.monotonic() > deadline:
                _, log = self.box.exec_run(["bash", "-c", "tail -n 25 /var/log/slurm/*"])
                pytest.fail(f"{what}: not within {timeout:g} s\n"
                            f"{(log or b'').decode(errors='replace')}")
            time.sleep(0.3)

    def remove(self) -> None:
        """Remove the container."""
        self.box.remove(force=True)


@pytest.fixture
def confbox(suite_cluster: SuiteCluster) -> Iterator[ConfBox]:
    """A throwaway container of the suite's image; removed after the test."""
    box = ConfBox(suite_cluster.docker, f"hai-slurm-testbed:{suite_cluster.suite}",
                  suite_cluster.prefix)
    try:
        yield box
    finally:
        box.remove()


def in_container(desc: ClusterDescription, base: Deployment,
                 series: str) -> tuple[ClusterDescription, Deployment]:
    """The description with fake GPU files, and a deployment for one container, for ``series``."""
    types = tuple(dataclasses.replace(nt, device_pattern="/opt/dev/{node}/nvidia{index}")
                  for nt in desc.node_types)
    desc = dataclasses.replace(desc, node_types=types)
    eps = {n: NodeEndpoint("127.0.0.1", 17000 + i, HOST) for i, (n, _) in enumerate(desc.nodes())}
    dep = dataclasses.replace(
        base, slurm_version=SlurmVersion.parse(series), accounting=False,
        preemption=PreemptionMode.DAEMON, controller_host=HOST, controller_addr="127.0.0.1",
        slurm_user="root", state_dir="/var/spool/hai/ctld", spool_dir="/var/spool/hai/d",
        log_dir="/var/log/slurm", run_dir="/run/slurm", multiple_slurmd=True,
        config_overrides=True, proctrack_type="proctrack/linuxproc", task_plugin="task/none",
        job_submit_lua=False, endpoints=eps)
    return desc, dep


def fake_gpus(box: ConfBox, desc: ClusterDescription, nodes: list[str]) -> None:
    """/dev/null links where gres.conf's File= points, for ``nodes``."""
    types = dict(desc.nodes())
    box.sh(" && ".join(f"mkdir -p /opt/dev/{n} && for i in $(seq 0 {types[n].gpu_count - 1}); "
                       f"do ln -sf /dev/null /opt/dev/{n}/nvidia$i; done" for n in nodes))


def show_nodes(box: ConfBox) -> dict[str, dict[str, str]]:
    """``scontrol -o show node`` as fields by node name."""
    out = {}
    for line in box.sh("scontrol -o show node").splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        out[fields["NodeName"]] = fields
    return out


def test_example_config_runs_on_the_release(suite_cluster: SuiteCluster, confbox: ConfBox) -> None:
    """slurmctld and one slurmd per node type start on the generated files; nodes IDLE with GPUs."""
    desc, base = load(EXAMPLE, suite_cluster.series)
    assert base.slurm_version.series == suite_cluster.series
    desc, dep = in_container(desc, base, suite_cluster.series)
    files = render_all(desc, dep)
    confbox.put({k: v for k, v in files.items() if k.endswith(".conf")})
    first = [next(n for n, t in desc.nodes() if t.name == nt.name) for nt in desc.node_types]
    fake_gpus(confbox, desc, first)
    confbox.start(first)
    cond = " && ".join(f"scontrol -o show node {n} | grep -qE 'State=IDLE( |$)'" for n in first)
    confbox.wait(f"nodes {first} IDLE", cond, 40,
                 give_up="scontrol -o show node | grep -qE 'State=[A-Z+_]*(INVAL|DRAIN)'")
    shown = show_nodes(confbox)
    types = dict(desc.nodes())
    assert set(shown) == set(types)
    for name in first:
        nt = types[name]
        assert re.match(rf"gpu:{nt.gpu_count}\b", shown[name]["Gres"]), shown[name]["Gres"]
        assert int(shown[name]["CPUTot"]) == nt.cpus
    topo = confbox.sh("scontrol show topology")
    for sw in desc.switches:
        assert f"SwitchName={sw.name} " in topo, topo
    log = confbox.sh("cat /var/log/slurm/slurmctld.log").splitlines()
    # The image has no mail program, which every release reports; anything else is ours.
    bad = [ln for ln in log if re.search(r"fatal|unknown|invalid|deprecated", ln, re.IGNORECASE)
           and "MailProg" not in ln]
    assert not bad, "\n".join(bad)


def test_native_preemption_keys_for_the_release(suite_cluster: SuiteCluster,
                                                confbox: ConfBox) -> None:
    """preempt/qos with the release's form of send_user_signal is accepted by its slurmctld."""
    desc, base = load(EXAMPLE, suite_cluster.series)
    desc, dep = in_container(desc, base, suite_cluster.series)
    files = {k: v for k, v in render_all(desc, dep).items() if k.endswith(".conf")}
    # No slurmdbd here: render slurm.conf directly, since render_all rightly refuses native
    # preemption without accounting.
    files["slurm.conf"] = render_slurm_conf(
        desc, dataclasses.replace(dep, preemption=PreemptionMode.NATIVE), "# native keys")
    confbox.put(files)
    confbox.start([])
    config = confbox.sh("scontrol show config")
    assert re.search(r"PreemptType\s+= preempt/qos", config)
    if dep.slurm_version.has_preempt_parameters:
        assert re.search(r"PreemptParameters\s+= .*send_user_signal", config), config
    else:
        assert re.search(r"SchedulerParameters\s+= .*preempt_send_user_signal", config), config
