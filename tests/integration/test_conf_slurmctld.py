"""The real Slurm daemons accept generated configurations, and report what the description says.

Each test starts its own throwaway munged + slurmctld (+ one slurmd per node type) under
/var/tmp/hai-conf-XXXX on free loopback ports, and stops exactly those processes afterwards.
The sacctmgr test runs the generated script twice against the session testbed's slurmdbd, with
its own cluster, QOS and account names, and deletes them again.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hai_slurm.conf.deployment import Deployment, NodeEndpoint, PreemptionMode
from hai_slurm.conf.description import load
from hai_slurm.conf.gen_slurm import render_slurm_conf
from hai_slurm.conf.generate import render_all, write_all
from hai_slurm.conf.model import ClusterDescription

GOLDEN = Path(__file__).parents[1] / "unit" / "golden" / "conf"
SHAPES = ["pcie8-2socket", "dgx-a100-nvlink", "mixed-2leaf"]

pytestmark = pytest.mark.skipif(shutil.which("slurmctld") is None or
                                (shutil.which("munged") is None and
                                not Path("/usr/sbin/munged").exists()),
                                reason="Slurm daemons are not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """Our own daemons; ``stop`` ends only the processes started here."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf")}
        for d in ("etc", "state/ctld", "log", "run", "munge", "dev"):
            (root / d).mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)  # mkdtemp makes it 0700; munged wants its socket reachable by all
        (root / "munge").chmod(0o755)

    def deployment(self, desc: ClusterDescription, base: Deployment) -> Deployment:
        host = socket.gethostname()
        eps = {n: NodeEndpoint("127.0.0.1", _free_port(), host) for n, _ in desc.nodes()}
        r = self.root
        return dataclasses.replace(
            base, accounting=False, preemption=PreemptionMode.DAEMON, controller_host=host,
            controller_addr="127.0.0.1", controller_port=_free_port(), slurm_user="root",
            state_dir=f"{r}/state/ctld", spool_dir=f"{r}/state/d", log_dir=f"{r}/log",
            run_dir=f"{r}/run", munge_socket=f"{r}/munge/munge.socket", multiple_slurmd=True,
            config_overrides=True, proctrack_type="proctrack/linuxproc", task_plugin="task/none",
            job_submit_lua=False, endpoints=eps)

    def fake_devices(self, desc: ClusterDescription) -> ClusterDescription:
        """Point every node's GPU files at symlinks to /dev/null under our folder."""
        types = tuple(dataclasses.replace(nt, device_pattern=f"{self.root}/dev/{{node}}/"
                                          "nvidia{index}") for nt in desc.node_types)
        for node, nt in dataclasses.replace(desc, node_types=types).nodes():
            (self.root / "dev" / node).mkdir(exist_ok=True)
            for g in range(nt.gpu_count):
                (self.root / "dev" / node / f"nvidia{g}").symlink_to("/dev/null")
        return dataclasses.replace(desc, node_types=types)

    def _start(self, argv: list[str], log: str) -> None:
        out = (self.root / "log" / log).open("wb")
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                           env=self.env, cwd=self.root))

    def start(self, nodes: list[str]) -> None:
        r = self.root
        subprocess.run(["mungekey", "-c", "-f", "-b", "1024", "-k", f"{r}/munge/munge.key"],
                       check=True, capture_output=True, timeout=30)
        self._start(["/usr/sbin/munged", "-F", f"--socket={r}/munge/munge.socket",
                     f"--key-file={r}/munge/munge.key", f"--pid-file={r}/run/munged.pid",
                     f"--seed-file={r}/munge/munged.seed", f"--log-file={r}/log/munged.log"],
                    "munged.out")
        self.wait(lambda: (r / "munge" / "munge.socket").exists(), "munged socket", 10)
        self._start(["slurmctld", "-D", "-f", self.env["SLURM_CONF"]], "slurmctld.out")
        self.wait(lambda: self.run(["scontrol", "ping"]).returncode == 0, "slurmctld UP", 20)
        for node in nodes:
            self._start(["slurmd", "-D", "-N", node, "-f", self.env["SLURM_CONF"]],
                        f"slurmd-{node}.out")

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=30,
                              check=False)

    def wait(self, cond: object, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(cond) and cond():
                return
            time.sleep(0.2)
        log = (self.root / "log" / "slurmctld.log")
        tail = log.read_text()[-2000:] if log.exists() else "(no slurmctld log)"
        raise AssertionError(f"{what} not reached within {timeout:.0f} s; slurmctld log:\n{tail}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A private set of daemons in a short path (munge's socket path must stay short)."""
    root = Path(tempfile.mkdtemp(prefix="hai-conf-", dir="/var/tmp"))
    c = Cluster(root)
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def _show_nodes(c: Cluster) -> dict[str, dict[str, str]]:
    out = {}
    for line in c.run(["scontrol", "-o", "show", "node"]).stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        out[fields["NodeName"]] = fields
    return out


@pytest.mark.parametrize("shape", SHAPES)
def test_slurmctld_accepts_generated_config(cluster: Cluster, shape: str) -> None:
    """slurmctld starts on the generated files; scontrol agrees with the description; one
    slurmd per node type registers IDLE with its GPUs (gres.conf accepted, not INVAL)."""
    desc, base = load(GOLDEN / shape / "description.toml")
    desc = cluster.fake_devices(desc)
    dep = cluster.deployment(desc, base)
    write_all(render_all(desc, dep), cluster.root / "etc")
    first = [next(n for n, t in desc.nodes() if t.name == nt.name) for nt in desc.node_types]
    cluster.start(first)
    nodes = dict(desc.nodes())
    cluster.wait(lambda: all("IDLE" in _show_nodes(cluster)[n]["State"] for n in first),
                 f"nodes {first} IDLE", 30)
    shown = _show_nodes(cluster)
    assert set(shown) == set(nodes)
    for name, nt in nodes.items():
        f = shown[name]
        assert (int(f["CPUTot"]), int(f["Sockets"]), int(f["CoresPerSocket"]),
                int(f["ThreadsPerCore"]), int(f["RealMemory"])) == (
            nt.cpus, len(nt.sockets), nt.cores_per_socket, nt.threads_per_core, nt.memory_mb)
        assert re.match(rf"gpu:{nt.gpu_count}\b", f["Gres"]), f["Gres"]
    topo = cluster.run(["scontrol", "show", "topology"]).stdout
    for sw in desc.switches:
        m = re.search(rf"SwitchName={sw.name} .*", topo)
        assert m, topo
        if sw.nodes:
            assert f"Nodes={sw.nodes} " in m.group(0) + " "
        else:
            assert "Switches=" in m.group(0)


def test_native_preemption_keys_accepted(cluster: Cluster) -> None:
    """22.05 takes preempt/qos with preempt_send_user_signal in SchedulerParameters."""
    desc, base = load(GOLDEN / "dgx-a100-nvlink" / "description.toml")
    desc = cluster.fake_devices(desc)
    daemon = cluster.deployment(desc, base)
    dep = dataclasses.replace(daemon, preemption=PreemptionMode.NATIVE)
    files = render_all(desc, daemon)
    # Accounting stays off here (no slurmdbd in this throwaway cluster), so render slurm.conf
    # directly: render_all refuses native preemption without accounting, as it should.
    files["slurm.conf"] = render_slurm_conf(desc, dep, "# native keys test")
    write_all(files, cluster.root / "etc")
    cluster.start([])
    config = cluster.run(["scontrol", "show", "config"]).stdout
    assert re.search(r"PreemptType\s+= preempt/qos", config)
    assert re.search(r"SchedulerParameters\s+= .*preempt_send_user_signal", config)


# Per-run names: a reused testbed keeps deleted QOS rows, and nothing here may collide with them.
P = f"hct{os.getpid() % 100000}"


def _sacctmgr_script(tmp_path: Path, mode: PreemptionMode) -> Path:
    desc, dep = load(GOLDEN / "dgx-a100-nvlink" / "description.toml")
    classes = tuple(dataclasses.replace(cp, qos=f"{P}_{cp.qos}") for cp in desc.classes)
    teams = tuple(dataclasses.replace(t, name=f"{P}-{t.name}", users=("root",))
                  for t in desc.teams)
    desc = dataclasses.replace(desc, name="haiconftest", classes=classes, teams=teams)
    script = tmp_path / f"setup-{mode.value}.sh"
    script.write_text(render_all(desc, dataclasses.replace(dep, preemption=mode))
                      ["sacctmgr-setup.sh"])
    return script


def _qos_rows() -> dict[str, list[str]]:
    shown = subprocess.run(["sacctmgr", "-n", "-P", "show", "qos",
                            "format=name,priority,preempt,gracetime,preemptmode"],
                           capture_output=True, text=True, timeout=30, check=True).stdout
    return {r.split("|")[0]: r.split("|") for r in shown.splitlines() if r.startswith(f"{P}_")}


@pytest.mark.slow
def test_sacctmgr_script_is_idempotent(testbed: object, tmp_path: Path) -> None:
    """The generated script runs again and again on a real slurmdbd, repairs drift, and switches
    between native and daemon preemption (lists emptied, then set again)."""
    native = _sacctmgr_script(tmp_path, PreemptionMode.NATIVE)
    daemon = _sacctmgr_script(tmp_path, PreemptionMode.DAEMON)
    high = [f"{P}_{c}" for c in ("above_normal", "below_normal", "low", "normal", "under_normal")]
    try:
        for step, script in enumerate([native, native, "drift", native, daemon, native]):
            if script == "drift":  # an admin changed a list by hand; the next run repairs it
                subprocess.run(["sacctmgr", "-i", "modify", "qos", "where", f"name={P}_high",
                                "set", f"Preempt={P}_low"], timeout=30, check=True,
                               capture_output=True)
                continue
            res = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                                 timeout=300, check=False)
            assert res.returncode == 0, f"step {step} ({Path(str(script)).name}): {res.stderr}"
            rows = _qos_rows()
            assert rows[f"{P}_extreme_high"][1] == "50" and rows[f"{P}_low"][1] == "0"
            if script == native:
                assert sorted(rows[f"{P}_high"][2].split(",")) == high
                assert rows[f"{P}_low"][2] == "" and rows[f"{P}_extreme_high"][3] == "00:10:00"
            else:  # preempt/none ignores QOS lists; the script leaves them and resets the mode
                assert all(r[4] == "cluster" and r[3] == "00:00:00" for r in rows.values())
        acct = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc", "cluster=haiconftest",
                               "format=account,user,grptres"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
        assert f"{P}-llm||gres/gpu=64" in acct
    finally:
        for argv in (["delete", "account", f"{P}-llm", f"{P}-infra", "cluster=haiconftest"],
                     ["delete", "cluster", "haiconftest"],
                     ["delete", "qos", ",".join(_qos_rows())]):
            subprocess.run(["sacctmgr", "-i", *argv], capture_output=True, timeout=60,
                           check=False)
