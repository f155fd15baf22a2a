"""The Docker testbed: the same cluster shape as the local mode, one container per role and node.

Containers (all from ``hai-slurm-testbed:SUITE``, see the Dockerfile) on a private, *internal*
bridge network (no route out of the host):

* ``database`` (with accounting): munged + MariaDB + slurmdbd, hostname ``slurmdb``;
* ``controller``: munged + Redis + slurmctld, hostname ``slurmctl``;
* one ``compute`` container per node: munged + slurmd, hostname = node name (``n1`` ...).

The configuration comes from :mod:`.render` with :func:`docker_layout`, is copied into every
container with ``put_archive`` before it starts (together with a munge key made once per state
dir), and a named volume is mounted at ``/shared`` on the controller and every node (job output,
checkpoints). Slurm clients run inside the controller: :func:`run_in_controller` /
:class:`DockerRunner` (``docker exec``). Every container, the network and the volume carry the
label ``hai-slurm.testbed=<id>`` (id from the state dir), so :func:`down` removes exactly them.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from hai_slurm.conf.accounting import AccountingSnapshot, harmless
from hai_slurm.conf.deployment import DEFAULT_SLURM_VERSION
from hai_slurm.errors import TestbedError
from hai_slurm.slurm_formats import SlurmVersion

from . import docker_files, docker_images, docker_jobpkg, health, services
from .docker_runner import SHARED_DIR, DockerRunner
from .layout import Layout, NodeLayout
from .render import accounting_plan, render_configs
from .shape import ClusterShape
from .status import ComponentStatus, Status
from .waiting import Result, Runner

LABEL = "hai-slurm.testbed"
STATE_FILE = "docker-testbed.json"
CONTROLLER_HOST = "slurmctl"
DATABASE_HOST = "slurmdb"

Echo = Callable[[str], None]


def testbed_id(state_dir: Path) -> str:
    """A short id derived from the state dir's absolute path (names and labels use it)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]


def docker_layout(shape: ClusterShape, storage_pass: str,
                  slurm_version: SlurmVersion = DEFAULT_SLURM_VERSION) -> Layout:
    """Container hostnames, Slurm's default ports and the image's fixed paths."""
    nodes = tuple(NodeLayout(name, name, name, None) for name in shape.node_names)
    return Layout(
        controller_hostname=CONTROLLER_HOST, controller_addr=CONTROLLER_HOST,
        controller_port=6817, nodes=nodes,
        dbd_hostname=DATABASE_HOST, dbd_addr=DATABASE_HOST, dbd_port=6819,
        storage_host="127.0.0.1", storage_port=3306, storage_user="slurm",
        storage_pass=storage_pass, storage_db="slurm_acct_db",
        etc_dir="/etc/slurm", state_save_dir="/var/spool/slurmctld", log_dir="/var/log/slurm",
        run_dir="/run/slurm", device_dir="/opt/hai-testbed/dev",
        spool_dir="/var/spool/slurmd", multiple_slurmd=False, munge_socket=None,
        slurm_version=slurm_version,
    )


@dataclass(frozen=True)
class DockerState:
    """What ``docker-testbed.json`` records: the shape, suite and container names by role."""

    testbed_id: str
    suite: str
    image: str
    shape: ClusterShape
    storage_pass: str
    ready: bool

    @property
    def prefix(self) -> str:
        """Name prefix of the network, volume and containers."""
        return f"hai-slurm-{self.testbed_id}"

    @property
    def controller(self) -> str:
        """Name of the controller container."""
        return f"{self.prefix}-ctl"

    @property
    def database(self) -> str | None:
        """Name of the database container (None without accounting)."""
        return f"{self.prefix}-db" if self.shape.accounting else None

    def node(self, name: str) -> str:
        """Name of node ``name``'s container."""
        return f"{self.prefix}-{name}"

    def containers(self) -> list[str]:
        """Every container name, database first."""
        names = [self.database] if self.database else []
        return [*names, self.controller, *(self.node(n) for n in self.shape.node_names)]

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict (the file is 0600: it holds the DB password)."""
        return {"mode": "docker", "testbed_id": self.testbed_id, "suite": self.suite,
                "image": self.image, "shape": self.shape.to_json(),
                "storage_pass": self.storage_pass, "ready": self.ready,
                "containers": self.containers()}


def load_state(state_dir: Path) -> DockerState | None:
    """The Docker testbed recorded in ``state_dir``, or None."""
    path = state_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
        shape = data["shape"]
        return DockerState(testbed_id=str(data["testbed_id"]), suite=str(data["suite"]),
                           image=str(data["image"]), shape=ClusterShape.from_json(shape),
                           storage_pass=str(data["storage_pass"]), ready=bool(data["ready"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TestbedError(f"{path} is unreadable ({err}); remove the containers labelled "
                           f"{LABEL}={testbed_id(state_dir)} by hand and delete the file") from None


def _save(state_dir: Path, state: DockerState) -> None:
    tmp = state_dir / (STATE_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(state.to_json(), fh, indent=1)
    tmp.replace(state_dir / STATE_FILE)


def runner(state_dir: Path) -> Runner:
    """A runner for Slurm clients in the controller container of the testbed in ``state_dir``."""
    state = _require(state_dir)
    return DockerRunner(docker_images.connect(), state.controller)


def run_in_controller(argv: list[str], *, state_dir: Path, timeout: float = 30.0) -> Result:
    """Run one Slurm client (or any program) in the controller container, e.g. ``["sinfo"]``."""
    return runner(state_dir)(argv, timeout=timeout)


def _require(state_dir: Path) -> DockerState:
    state = load_state(state_dir.resolve())
    if state is None:
        raise TestbedError(f"no Docker testbed in {state_dir}; start one with: "
                           f"hai-slurm testbed up --docker --state-dir {state_dir}")
    return state


def _labels(state: DockerState, role: str, state_dir: Path) -> dict[str, str]:
    return {LABEL: state.testbed_id, f"{LABEL}.role": role, f"{LABEL}.state-dir": str(state_dir)}


def _create(client: Any, state: DockerState, state_dir: Path, role: str, name: str,
            hostname: str, command: list[str], archive: bytes, shared: bool) -> Any:
    network = state.prefix
    endpoint = client.api.create_endpoint_config(aliases=[hostname])
    volumes = {state.prefix: {"bind": SHARED_DIR, "mode": "rw"}} if shared else None
    box = client.containers.create(
        state.image, command, name=name, hostname=hostname, init=True, detach=True,
        labels=_labels(state, role, state_dir), network=network,
        networking_config={network: endpoint}, volumes=volumes,
        # On an internal network Docker's DNS cannot forward unknown names and the resolver's
        # defaults wait 20 s per lookup; Slurm looks names up at start and retries on failure.
        dns_opt=["timeout:1", "attempts:1"])
    if not box.put_archive("/", archive):
        raise TestbedError(f"could not copy the configuration into container {name}")
    return box


def _wait(what: str, probe: Callable[[], bool], boxes: list[Any], timeout: float,
          logs: Callable[[], list[str]]) -> None:
    """Poll ``probe`` until true; fail at once if one of ``boxes`` stopped, else at the deadline."""
    deadline = time.monotonic() + timeout
    while not probe():
        for box in boxes:
            box.reload()
            if box.status not in ("created", "running"):
                raise TestbedError(f"container {box.name} stopped ({box.status}) while waiting "
                                   f"for {what}", log_lines=logs())
        if time.monotonic() >= deadline:
            raise TestbedError(f"{what} not ready within {timeout:g} s", log_lines=logs())
        time.sleep(0.1)


def _setup_accounting(run: Runner, shape: ClusterShape, logs: Callable[[], list[str]]) -> int:
    """Create cluster, QOS and accounts; the database container is always new, so no snapshot."""
    plan = accounting_plan(shape, AccountingSnapshot())
    for argv in plan:
        res = run(argv, timeout=30)
        text = (res.stdout + res.stderr).strip()
        if res.returncode != 0 and not harmless(text):
            raise TestbedError(f"{' '.join(argv)} failed (exit {res.returncode})",
                               log_lines=[*text.splitlines()[-8:], *logs()])
    return len(plan)


def healthy(client: Any, state: DockerState) -> bool:
    """Every container running and every node in a usable state."""
    if not state.ready:
        return False
    for name in state.containers():
        try:
            if client.containers.get(name).status != "running":
                return False
        except docker.errors.NotFound:
            return False
    return health.nodes_problem(DockerRunner(client, state.controller),
                                state.shape.node_names) is None


def up(shape: ClusterShape, *, state_dir: Path, suite: str = "bookworm", build: bool = True,
       timeout: float = 120.0, keep_on_failure: bool = False,
       echo: Echo = lambda _msg: None, image: str | None = None) -> bool:
    """Bring the Docker testbed up; False if it was already up and healthy (nothing done).

    Makes the base image and builds the testbed image first unless ``build`` is False. Returns
    only when every node is idle and a GPU job on all nodes completed; otherwise raises
    :class:`TestbedError` with container and Slurm log lines and removes what it created
    (unless ``keep_on_failure``: then the containers stay for a look, ``down`` removes them).
    ``image`` runs the containers from another image built on the suite's one (the pyslurm
    layer of :mod:`.docker_pyslurm`); it must exist.
    """
    client = docker_images.connect()
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    old = load_state(state_dir)
    if old is not None and healthy(client, old):
        if old.shape != shape or old.suite != suite:
            raise TestbedError(f"a Docker testbed with another shape or suite is up in "
                               f"{state_dir}; stop it first: hai-slurm testbed down --docker "
                               f"--state-dir {state_dir}")
        echo(f"Docker testbed already up in {state_dir}")
        return False
    _remove(client, testbed_id(state_dir))
    t0 = time.monotonic()

    def step(msg: str) -> None:
        echo(f"{time.monotonic() - t0:6.2f} s  {msg}")

    if build:
        times = docker_images.prepare_images(client, suite)
        step(f"images ready (base {times.base_image:.1f} s, build {times.build:.1f} s)")
    image = image or docker_images.image_tag(suite)
    if not docker_images.has_image(client, image):
        raise TestbedError(f"image {image} is missing; `hai-slurm testbed up --docker --slurm "
                           f"{suite}` makes it (docker_mode.up with build=True)")
    state = DockerState(testbed_id(state_dir), suite, image, shape,
                        old.storage_pass if old else secrets.token_hex(16), ready=False)
    _save(state_dir, state)
    series = docker_images.SLURM_SERIES.get(suite)
    version = SlurmVersion.parse(series) if series else DEFAULT_SLURM_VERSION
    layout = docker_layout(shape, state.storage_pass, version)
    files = docker_files.etc_files(shape, render_configs(shape, layout))
    key = docker_files.munge_key(state_dir)
    docker_files.write_copies(state_dir, files)
    labels = _labels(state, "testbed", state_dir)

    def logs() -> list[str]:
        return docker_files.collect_logs(client, state.containers(), state_dir)

    try:
        client.networks.create(state.prefix, driver="bridge", internal=True, labels=labels)
        client.volumes.create(state.prefix, labels=labels)
        common = docker_files.archive(files, key)
        db = None
        if state.database:
            db = _create(client, state, state_dir, "database", state.database, DATABASE_HOST,
                         ["database"], common, shared=False)
        ctl_archive = docker_files.archive(files, key,
                                           redis_password=services.redis_password(state_dir))
        ctl = _create(client, state, state_dir, "controller", state.controller, CONTROLLER_HOST,
                      ["controller"], ctl_archive, shared=True)
        node_archive = docker_files.archive(files, key, gpus=shape.gpus_per_node,
                                            device_dir=layout.device_dir)
        nodes = [_create(client, state, state_dir, "compute", state.node(n), n, ["compute", n],
                         node_archive, shared=True) for n in shape.node_names]
        step("network, volume and containers created")
        if db is not None:
            db.start()
            dbrun = DockerRunner(client, db.name, workdir="/")
            _wait("slurmdbd (sacctmgr show cluster)",
                  lambda: dbrun(["sacctmgr", "-n", "-P", "show", "cluster"],
                                timeout=10).returncode == 0, [db], timeout, logs)
            _setup_accounting(dbrun, shape, logs)
            step("mariadb + slurmdbd ready, cluster/QOS/accounts set")
        # Together: slurmctld resolves every NodeAddr at start, and a container's name is in
        # the network's DNS only while it runs; slurmd retries until slurmctld answers.
        for box in (*nodes, ctl):
            box.start()
        run = DockerRunner(client, ctl.name)
        _wait("slurmctld (scontrol ping)",
              lambda: "UP" in run(["scontrol", "ping"], timeout=10).stdout, [ctl, *nodes],
              timeout, logs)
        step("slurmctld ready")
        # Jobs may `import hai_slurm.checkpoint` with PYTHONPATH=/shared/hai-py.
        docker_jobpkg.install_job_package(client, ctl.name)
        health.wait_nodes_idle(run, shape.node_names, timeout=timeout, logs=logs)
        step(f"{shape.nodes} nodes idle")
        lines = health.run_gpu_smoke_job(run, shape, f"{SHARED_DIR}/smoke-%j.out",
                                         timeout=timeout, logs=logs)
        step(f"GPU job done: {'; '.join(lines)}")
    except BaseException:
        if not keep_on_failure:
            _remove(client, state.testbed_id)
            (state_dir / STATE_FILE).unlink(missing_ok=True)
        raise
    _save(state_dir, DockerState(**{**state.__dict__, "ready": True}))
    return True


def _remove(client: Any, tid: str) -> list[str]:
    """Remove every container, network and volume labelled with ``tid``; return their names."""
    flt = {"label": f"{LABEL}={tid}"}
    removed: list[str] = []
    for box in client.containers.list(all=True, filters=flt):
        try:
            box.remove(force=True, v=True)
        except docker.errors.NotFound:
            continue
        removed.append(box.name)
    for net in client.networks.list(filters=flt):
        try:
            net.remove()
        except docker.errors.NotFound:
            continue
        removed.append(f"network {net.name}")
    for vol in client.volumes.list(filters=flt):
        try:
            vol.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed.append(f"volume {vol.name}")
    return removed


def down(state_dir: Path, *, echo: Echo = lambda _msg: None) -> list[str]:
    """Remove the Docker testbed of ``state_dir`` (by label); [] quietly when nothing is there.

    Keeps the munge key and the copies of the configuration and logs under ``state_dir/docker``.
    """
    state_dir = state_dir.resolve()
    tid = testbed_id(state_dir)
    state_file = state_dir / STATE_FILE
    if not state_file.exists():
        # No record: still clean up anything labelled for this state dir, if an engine answers.
        try:
            client = docker_images.connect()
        except TestbedError:
            return []
    else:
        client = docker_images.connect()
    removed = _remove(client, tid)
    state_file.unlink(missing_ok=True)
    for name in removed:
        echo(f"removed {name}")
    return removed


def status(state_dir: Path) -> Status:
    """Each container (by role, with its init's host PID), then ``sinfo`` from the controller."""
    state_dir = state_dir.resolve()
    state = load_state(state_dir)
    if state is None:
        return Status(state_dir, up=False)
    client = docker_images.connect()
    comps = []
    for name in state.containers():
        role = name.removeprefix(f"{state.prefix}-")
        try:
            box = client.containers.get(name)
            comps.append(ComponentStatus(role, int(box.attrs["State"].get("Pid") or 0),
                                         box.status == "running"))
        except docker.errors.NotFound:
            comps.append(ComponentStatus(role, 0, False))
    shape = state.shape
    details = [f"  Docker containers {state.prefix}-*, image {state.image}",
               f"  shape: {shape.nodes} nodes x {shape.gpus_per_node} GPUs, preemption "
               f"{shape.preemption.value}, accounting {'on' if shape.accounting else 'off'}",
               f"  clients: eval \"$(hai-slurm testbed env --docker --state-dir {state_dir})\"",
               f"  redis: {CONTROLLER_HOST}:6379 on the testbed network (password in "
               f"{state_dir / 'redis' / 'password'}, mode 0600)"]
    if not state.ready:
        details.append("  up did not finish: run `hai-slurm testbed down --docker` and up again")
    run = DockerRunner(client, state.controller)
    res = run(["sinfo", "-N", "-o", "%N %T %G"], timeout=10)
    details += [f"  {ln}" for ln in (res.stdout or res.stderr).strip().splitlines()]
    problem = ("it did not finish starting" if not state.ready else
               health.nodes_problem(run, shape.node_names))
    return Status(state_dir, up=True, components=tuple(comps), details=tuple(details),
                  problem=problem)


CLIENTS = ("sinfo", "squeue", "sbatch", "srun", "salloc", "scancel", "scontrol", "sacct",
           "sacctmgr", "sprio", "sshare", "sstat")


def env_lines(state_dir: Path) -> list[str]:
    """Shell functions that run the Slurm clients in the controller (``eval "$(... env)"``).

    Files named on the command line must exist inside the container: pipe a batch script in
    (``sbatch < job.sh``) or put it under the shared volume (``/shared``).
    """
    state = _require(state_dir)
    box = state.controller
    lines = [f"# Slurm clients run in the controller container {box} (cwd /shared)."]
    lines += [f'{cmd}() {{ docker exec -i -w {SHARED_DIR} {box} {cmd} "$@"; }}'
              for cmd in CLIENTS]
    return lines
