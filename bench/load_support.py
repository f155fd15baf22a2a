"""Shared by ``bench/load`` and ``tests/integration/test_load_users.py``: real unprivileged Unix
users who submit jobs with sbatch in bursts, ``hai-slurm daemon`` as a child process, its cycle
times read from its log, ``sdiag`` RPC counts, and the Slurm limits of the generated slurm.conf.

The users are made as ``tests/integration/test_security_users.py`` makes its own (``useradd``,
removed afterwards), each given an association in one of the testbed's accounts that allows every
class QOS (as ``test_directives_sbatch.py`` does for ``nobody``). Each one submits through
``runuser`` with the system's ``python3`` running ``sbatch`` once per job (so every refusal is
seen with sbatch's own message); the batch scripts come on standard input, with ``#HAI`` lines of
mixed classes, so slurmctld's job_submit.lua reads them as it reads anyone's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from hai_slurm.slurm_plugins.entitlements import demo_entitlements

HAI_SLURM = str(Path(sys.executable).with_name("hai-slurm"))
PYTHON = "/usr/bin/python3"
CLASS_QOS = ",".join(c.qos for c in demo_entitlements().classes)
BACKGROUND = ("NORMAL", "UNDER_NORMAL", "BELOW_NORMAL", "LOW", "AUTO", "NORMAL", "LOW")
"""Classes of the queued jobs, in turn: none above NORMAL, so none of them can preempt the NORMAL
training jobs (the planner preempts strictly lower classes only); the urgent HIGH jobs do."""

# Slurm's own defaults (slurm.conf(5), 22.05) of the size limits the generator may set: what
# "raised" is measured against. The values the generated file has are read from it.
SLURM_DEFAULTS = {"MaxJobCount": "10000", "MinJobAge": "300", "MaxArraySize": "1001",
                  "MessageTimeout": "10", "SchedulerParameters": "(none)"}


# ------------------------------------------------------------------------------------- users
@dataclass(frozen=True)
class LoadUsers:
    """The users (name -> account), removed by :meth:`remove`."""

    accounts: Mapping[str, str]
    slurm_conf: str

    @property
    def names(self) -> list[str]:
        return list(self.accounts)

    def sbatch_many(self, user: str, scripts: Sequence[tuple[str, Sequence[str]]],
                    timeout: float = 900) -> list[tuple[bool, str]]:
        """Submit each (script, sbatch args) as ``user``, one sbatch each, in one ``runuser``;
        per job (True, job id) or (False, sbatch's message)."""
        code = textwrap.dedent("""
            import json, subprocess, sys
            for line in sys.stdin:
                script, args = json.loads(line)
                r = subprocess.run(["sbatch", "--parsable", *args], input=script, text=True,
                                   capture_output=True)
                ok = r.returncode == 0
                print(json.dumps([ok, (r.stdout.strip().split(";")[0] if ok
                                       else (r.stderr.strip() or r.stdout.strip()))]),
                      flush=True)
        """)
        lines = "".join(json.dumps([s, list(a)]) + "\n" for s, a in scripts)
        res = subprocess.run(["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.slurm_conf}",
                              PYTHON, "-c", code], input=lines, text=True, capture_output=True,
                             timeout=timeout, check=False, cwd="/")
        out = [tuple(json.loads(ln)) for ln in res.stdout.splitlines() if ln.startswith("[")]
        if len(out) < len(scripts):  # the helper itself failed: count the rest as refused
            why = res.stderr.strip()[-300:] or f"runuser exited {res.returncode}"
            out += [(False, why)] * (len(scripts) - len(out))
        return [(bool(ok), str(msg)) for ok, msg in out]

    def remove(self, timeout: float = 180) -> None:
        """Cancel what they still have, wait until slurmctld has none of their jobs active
        (sacctmgr refuses to delete a user with active jobs), remove their associations and
        the Unix users."""
        if not self.accounts:
            return
        names = ",".join(self.accounts)
        env = dict(os.environ, SLURM_CONF=self.slurm_conf)
        subprocess.run(["scancel", f"--user={names}"], check=False, capture_output=True,
                       timeout=300, env=env)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            left = subprocess.run(["squeue", "--noheader", f"--user={names}", "--Format=JobID"],
                                  capture_output=True, text=True, timeout=300, check=False,
                                  env=env).stdout.split()
            if not left:
                break
            time.sleep(2)
        # slurmdbd learns of the cancels a little later; until then it refuses ("Job(s) active").
        while True:
            try:
                _sacctmgr(self.slurm_conf, "delete", "user", "where", f"name={names}")
                break
            except RuntimeError as err:
                if time.monotonic() > end + 60:
                    print(f"warning: associations of {names} left: "
                          f"{str(err).splitlines()[0][-200:]}", file=sys.stderr)
                    break
                time.sleep(5)
        # A job whose batch shell died of a signal can leave its children running with
        # proctrack/linuxproc (the local testbed's): they belong to these throwaway users only.
        for name in self.accounts:
            pids = subprocess.run(["ps", "-o", "pid=,args=", "-u", name], capture_output=True,
                                  text=True, check=False).stdout.splitlines()
            for line in pids:
                pid, _, cmd = line.strip().partition(" ")
                print(f"warning: process {pid} of {name} left after its job ended: {cmd}",
                      file=sys.stderr)
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            if pids:
                time.sleep(0.5)
            subprocess.run(["userdel", name], check=False, capture_output=True)


def _sacctmgr(slurm_conf: str, *args: str) -> None:
    res = subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=120,
                         check=False, env=dict(os.environ, SLURM_CONF=slurm_conf))
    if res.returncode != 0 and "Nothing" not in res.stdout + res.stderr:
        raise RuntimeError(f"sacctmgr {' '.join(args)}: {res.stderr.strip() or res.stdout}")


def make_users(slurm_conf: str, count: int, accounts: Sequence[str], tag: str) -> LoadUsers:
    """``count`` throwaway users ``haiload<tag>u<NN>``, spread over ``accounts``, each allowed
    every class QOS in its account."""
    by_user = {f"haiload{tag}u{i:02d}": accounts[i % len(accounts)] for i in range(count)}
    made: dict[str, str] = {}
    users = LoadUsers(made, slurm_conf)
    try:
        for name, account in by_user.items():
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name],
                           check=True, capture_output=True)
            made[name] = account
        for account in accounts:
            names = ",".join(n for n, a in by_user.items() if a == account)
            _sacctmgr(slurm_conf, "add", "user", names, f"account={account}")
            _sacctmgr(slurm_conf, "modify", "user", "where", f"name={names}",
                      f"account={account}", "set", f"qos={CLASS_QOS}", "defaultqos=normal")
    except BaseException:
        users.remove()
        raise
    return users


# ------------------------------------------------------------------------------------ bursts
def background_script(i: int, seconds: int) -> str:
    cls = BACKGROUND[i % len(BACKGROUND)]
    return f"#!/bin/bash\n#HAI --priority={cls}\nsleep {seconds}\n"


@dataclass
class Submitted:
    """Every sbatch of the load: job ids accepted, refusals with sbatch's message."""

    ids: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    burst_seconds: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, results: Iterable[tuple[bool, str]]) -> None:
        with self.lock:
            for ok, msg in results:
                if ok and msg.isdigit():
                    self.ids.append(int(msg))
                else:
                    self.refused.append(msg)


def burst(users: LoadUsers, per_user: int, start: int, out: Submitted, *,
          shape: Sequence[str], seconds: int, parallel: int = 4) -> None:
    """Each user submits ``per_user`` jobs (numbered from ``start`` for the class mix), at most
    ``parallel`` users at once."""
    t0 = time.monotonic()

    def one(k: int) -> None:
        user = users.names[k]
        scripts = [(background_script(start + k * per_user + j, seconds),
                    ["--output=/dev/null", "--chdir=/", "--job-name=hai-load", *shape])
                   for j in range(per_user)]
        out.add(users.sbatch_many(user, scripts))

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(len(users.names))))
    out.burst_seconds.append(time.monotonic() - t0)


# ------------------------------------------------------------------------------------ daemon
@dataclass
class DaemonChild:
    """``hai-slurm -v daemon --config CFG`` as a child process, its log in a file."""

    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, config: Path, log: Path, slurm_conf: str, *, cli: bool = False
              ) -> DaemonChild:
        """``cli``: the CLI backend even where pyslurm is installed (the daemon picks pyslurm
        when it imports; a ``pyslurm`` package that fails to import, first on PYTHONPATH, is
        what a site without pyslurm has)."""
        env = dict(os.environ, SLURM_CONF=slurm_conf)
        if cli:
            stub = log.parent / "no-pyslurm" / "pyslurm"
            stub.mkdir(parents=True, exist_ok=True)
            (stub / "__init__.py").write_text(
                'raise ImportError("pyslurm hidden by bench/load_support.py (CLI backend)")\n')
            env["PYTHONPATH"] = os.pathsep.join(
                [str(stub.parent), *filter(None, [env.get("PYTHONPATH")])])
        with log.open("ab") as out:
            proc = subprocess.Popen([HAI_SLURM, "-v", "daemon", "--config", str(config)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        return cls(proc, log)

    def backend(self) -> str:
        """The backend line the daemon logged."""
        m = re.search(r"Slurm backend: (.*)", self.text())
        return m.group(1) if m else "?"

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        """SIGTERM (the current cycle finishes), then SIGKILL after 120 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(timeout=30)


def daemon_config(path: Path, state_dir: Path, redis_url: str, extra: str = "") -> Path:
    """The shipped defaults plus what the testbed adds (its SQLite store, its Redis) and
    ``extra``; 0600 (the Redis URL holds a password)."""
    path.write_text(f'state_dir = "{state_dir}"\n'
                    f'database_url = "sqlite:///{state_dir}/hai-slurm.db"\n'
                    f'redis_url = "{redis_url}"\nmetrics_port = 0\n{extra}\n')
    path.chmod(0o600)
    return path


_CYCLE = re.compile(r"^(\S+ \S+) INFO \S+: cycle: (\d+) pending, (\d+) running, (\d+) priorities "
                    r"written, ([\d.]+) s$", re.MULTILINE)


@dataclass(frozen=True)
class Cycle:
    """One committed cycle from the daemon's log."""

    end: float
    pending: int
    running: int
    writes: int
    seconds: float

    @property
    def start(self) -> float:
        return self.end - self.seconds


def cycles(log_text: str) -> list[Cycle]:
    """The daemon's committed cycles (its INFO line at the end of each)."""
    out = []
    for m in _CYCLE.finditer(log_text):
        end = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append(Cycle(end, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                         float(m.group(5))))
    return out


def late_starts(cs: Sequence[Cycle], interval: float) -> list[float]:
    """How late each cycle started after the previous one's end plus the interval (the wait
    between cycles steps open plans; a step that overruns delays the next cycle)."""
    return [b.start - a.end - interval for a, b in itertools.pairwise(cs)]


def cycle_line(cs: Sequence[Cycle], interval: float) -> str:
    if not cs:
        return "no cycle committed"
    secs = [c.seconds for c in cs]
    late = late_starts(cs, interval)
    most = max(c.pending for c in cs)
    return (f"{len(cs)} cycles (up to {most} pending): median {statistics.median(secs):.2f} s, "
            f"max {max(secs):.2f} s, against the {interval:g} s interval "
            f"({sum(s >= interval for s in secs)} over it); next cycle started late by at most "
            f"{max(late, default=0.0):.2f} s")


def skipped(log_text: str) -> list[str]:
    return re.findall(r"cycle skipped, nothing written: (.*)", log_text)


# ------------------------------------------------------------------------------------- sdiag
def sdiag_counts(slurm_conf: str) -> dict[str, int]:
    """RPC counts by message type from ``sdiag``."""
    out = subprocess.run(["sdiag"], text=True, capture_output=True, timeout=60, check=True,
                         env=dict(os.environ, SLURM_CONF=slurm_conf)).stdout
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s+(REQUEST_\w+|MESSAGE_\w+)\s+\(\s*\d+\)\s+count:(\d+)",
                                 out, re.MULTILINE)}


def rpc_window(slurm_conf: str, seconds: float) -> tuple[float, dict[str, int]]:
    """RPCs slurmctld got during ``seconds`` (minus the one ``sdiag`` that ends the window):
    the rate per second and the counts by type."""
    before = sdiag_counts(slurm_conf)
    t0 = time.monotonic()
    time.sleep(seconds)
    after = sdiag_counts(slurm_conf)
    took = time.monotonic() - t0
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    diff["REQUEST_STATS_INFO"] = diff.get("REQUEST_STATS_INFO", 0) - 1
    diff = {k: v for k, v in diff.items() if v > 0}
    return sum(diff.values()) / took, diff


Window = tuple[float, dict[str, int]]


def rpc_table(windows: Mapping[str, Window], seconds: float) -> str:
    """One column per window (the first is the baseline the others are compared with)."""
    names = list(windows)
    keys = sorted({k for _, c in windows.values() for k in c},
                  key=lambda k: -max(c.get(k, 0) for _, c in windows.values()))
    rows = [f"  {'RPC type (counts in ' + format(seconds, 'g') + ' s)':<36}"
            + "".join(f" {n:>16}" for n in names)]
    rows += [f"  {k.removeprefix('REQUEST_'):<36}"
             + "".join(f" {windows[n][1].get(k, 0):>16}" for n in names) for k in keys]
    rows.append(f"  {'RPC/s':<36}" + "".join(f" {windows[n][0]:>16.2f}" for n in names))
    base = windows[names[0]][0]
    rows.append(f"  {'added by the daemon, RPC/s':<36} {'':>16}"
                + "".join(f" {windows[n][0] - base:>16.2f}" for n in names[1:]))
    return "\n".join(rows)


# ------------------------------------------------------------------------------------ limits
def conf_values(path: Path) -> dict[str, str]:
    """``Key=Value`` lines of a slurm.conf (the first word of the value)."""
    return dict(re.findall(r"^(\w+)=(\S+)", path.read_text(), re.MULTILINE))


def live_values(slurm_conf: str) -> dict[str, str]:
    """What slurmctld runs with (``scontrol show config``)."""
    text = subprocess.run(["scontrol", "show", "config"], text=True, capture_output=True,
                          timeout=60, check=False,
                          env=dict(os.environ, SLURM_CONF=slurm_conf)).stdout
    return dict(re.findall(r"^(\w+)\s+=\s+(.*?)\s*$", text, re.MULTILINE))


def site_conf(description: Path, into: Path) -> Path:
    """``hai-slurm conf generate DESCRIPTION -o INTO``: the slurm.conf a site gets."""
    subprocess.run([HAI_SLURM, "conf", "generate", str(description), "-o", str(into)],
                   check=True, capture_output=True, timeout=120)
    return into / "slurm.conf"


def limits_table(site: Mapping[str, str], testbed: Mapping[str, str],
                 live: Mapping[str, str]) -> str:
    """The size limits the generated files set (read from them), against Slurm's defaults."""
    out = [f"  {'key':<20} {'Slurm default':<14} {'site (generated)':<18} {'testbed':<18} "
           "testbed's slurmctld runs with"]
    for key, default in SLURM_DEFAULTS.items():
        value = site.get(key, "-")
        raised = ""
        if value.isdigit() and default.isdigit() and int(value) != int(default):
            raised = f"   site: x{int(value) / int(default):g} Slurm's default"
        out.append(f"  {key:<20} {default:<14} {value:<18} {testbed.get(key, '-'):<18} "
                   f"{live.get(key, '?')}{raised}")
    return "\n".join(out)


# ------------------------------------------------------------------------------------- state
@dataclass(frozen=True)
class Census:
    """What became of the accepted jobs: by state, the ones Slurm no longer knows, the held."""

    states: Mapping[str, int]
    missing: tuple[int, ...]
    held: tuple[int, ...]


def census(slurm_conf: str, ids: Sequence[int]) -> Census:
    """One ``squeue --states=all`` of every job (not by id: the list may be long)."""
    out = subprocess.run(["squeue", "--noheader", "--states=all",
                          "--Format=JobID:|,State:|,Reason:"], text=True, capture_output=True,
                         timeout=300, check=True,
                         env=dict(os.environ, SLURM_CONF=slurm_conf)).stdout
    known: dict[int, tuple[str, str]] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and parts[0].isdigit():
            known[int(parts[0])] = (parts[1], parts[2])
    states: dict[str, int] = {}
    missing, held = [], []
    for jid in ids:
        if jid not in known:
            missing.append(jid)
            continue
        state, reason = known[jid]
        states[state] = states.get(state, 0) + 1
        if state == "PENDING" and reason in ("JobHeldAdmin", "JobHeldUser"):
            held.append(jid)
    return Census(states, tuple(missing), tuple(held))


def cancel(slurm_conf: str, ids: Sequence[int]) -> None:
    for i in range(0, len(ids), 1000):
        subprocess.run(["scancel", *map(str, ids[i:i + 1000])], timeout=300, check=False,
                       capture_output=True, env=dict(os.environ, SLURM_CONF=slurm_conf))


def quote(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
