"""Record real ``sacct`` exports for the ``simulate --sacct`` reader's tests.

    hai-slurm testbed up --nodes 2 --gpus-per-node 4 --state-dir /var/tmp/rec      # 22.05, local
    .venv/bin/python tests/data/sacct/record.py --slurm-conf /var/tmp/rec/etc/slurm.conf

    hai-slurm testbed up --docker --slurm trixie --nodes 2 --gpus-per-node 4 \
        --state-dir /var/tmp/rec                                                        # 24.11
    .venv/bin/python tests/data/sacct/record.py --state-dir /var/tmp/rec

Submits a small job mix as root (accounts ``team-a`` and ``team-b`` of the testbed), waits until
every job has ended, and writes into ``tests/data/sacct/<series>/``:

* ``sacct.json`` -- ``sacct --json --allusers --starttime=T`` (re-indented, otherwise unedited);
* ``sacct-allocations.txt`` -- ``sacct --allusers --allocations --parsable2 --starttime=T
  --format=<FIELDS>``, the command the docs tell admins to run;
* ``sacct-steps.txt`` -- the same without ``--allocations`` (step rows included);
* ``command.txt`` -- the exact command lines and the Slurm version.

The mix: ``done-high`` (``#HAI --priority=HIGH``, gpu:2), ``qos-low`` (``--qos=low``, gpu:1),
``multi`` (2 nodes x gpu:1), ``failed`` (exit 3), ``cancelled`` (cancelled while running),
``never-ran`` (held, then cancelled), ``requeued`` (requeued once, then completes), ``cpu-only``,
a 3-task array ``array`` (gpu:1 each), and two jobs as a site without hai-slurm has them (no
``#HAI`` record in the admin comment): ``no-record`` (QOS ``high``) and ``qos-debug`` (a QOS
``debug`` that is no class's, created for it).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hai_slurm.testbed.waiting import LocalRunner, Runner, check, show_job

HERE = Path(__file__).resolve().parent
FIELDS = ("JobIDRaw,JobID,JobName,User,Account,QOS,Partition,Submit,Start,End,State,NNodes,"
          "ReqTRES,AllocTRES,AdminComment")
SCRIPT_DIR = "/tmp/hai-sacct-record"


def sbatch(run: Runner, name: str, body: str, *args: str) -> str:
    """Write a batch script ``name``.sh with ``body`` and submit it; return the job id."""
    path = f"{SCRIPT_DIR}/{name}.sh"
    text = "#!/bin/bash\n" + body
    check(run, ["sh", "-c", f"mkdir -p {SCRIPT_DIR} && printf %s {shlex.quote(text)} > {path}"])
    out = check(run, ["sbatch", "--parsable", "--output=/dev/null", f"--job-name={name}", *args,
                      path])
    return out.strip().split(";")[0]


def wait(what: str, ok: Callable[[], bool], timeout: float = 90) -> None:
    """Poll until ``ok`` holds."""
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            sys.exit(f"{what} not reached within {timeout:g} s")
        time.sleep(0.3)


def state(run: Runner, job: str) -> str:
    """JobState of ``job`` ("" when gone)."""
    return (show_job(run, job) or {}).get("JobState", "")


def active(run: Runner) -> int:
    """Jobs still pending, running or completing."""
    return len(check(run, ["squeue", "--noheader", "--format=%i"]).split())


def record(run: Runner, root: Path) -> Path:
    """Submit the mix, wait for its end, write the exports; return the folder written."""
    version = check(run, ["sacct", "--version"]).strip()
    series = ".".join(version.split()[-1].split(".")[:2])
    folder = root / series
    folder.mkdir(parents=True, exist_ok=True)
    since = check(run, ["date", "+%Y-%m-%dT%H:%M:%S"]).strip()
    jobs: list[str] = []
    try:
        jobs.append(sbatch(run, "done-high", "#HAI --priority=HIGH\nsleep 3\n",
                           "--account=team-a", "--gres=gpu:2"))
        jobs.append(sbatch(run, "qos-low", "sleep 2\n", "--account=team-b", "--qos=low",
                           "--gres=gpu:1"))
        jobs.append(sbatch(run, "multi", "srun sleep 3\n", "--account=team-a", "--nodes=2",
                           "--gres=gpu:1"))
        jobs.append(sbatch(run, "failed", "sleep 1\nexit 3\n", "--account=team-b",
                           "--gres=gpu:1"))
        cancelled = sbatch(run, "cancelled", "sleep 300\n", "--account=team-a", "--gres=gpu:1")
        never = sbatch(run, "never-ran", "sleep 1\n", "--account=team-b", "--gres=gpu:4",
                       "--hold")
        requeued = sbatch(run, "requeued", "#HAI --priority=LOW --team=team-a\nsleep 4\n",
                          "--account=team-a", "--gres=gpu:1")
        jobs += [cancelled, never, requeued]
        jobs.append(sbatch(run, "cpu-only", "sleep 2\n", "--account=team-b"))
        jobs.append(sbatch(run, "array", "sleep 2\n", "--account=team-b", "--gres=gpu:1",
                           "--array=0-2"))
        # As on a site without hai-slurm: no #HAI record, and a QOS that is no class's.
        plain = sbatch(run, "no-record", "sleep 2\n", "--account=team-b", "--qos=high",
                       "--gres=gpu:1", "--hold")
        debug = sbatch(run, "qos-debug", "sleep 2\n", "--account=team-a", "--gres=gpu:1",
                       "--hold")
        jobs += [plain, debug]
        run(["sacctmgr", "--immediate", "add", "qos", "debug"])  # fails if it exists: fine
        check(run, ["sacctmgr", "--immediate", "modify", "account", "team-a", "set",
                    "qos+=debug"])
        check(run, ["scontrol", "update", f"JobId={plain}", "AdminComment="])
        check(run, ["scontrol", "update", f"JobId={debug}", "QOS=debug", "AdminComment="])
        check(run, ["scontrol", "release", plain, debug])
        wait("cancelled RUNNING", lambda: state(run, cancelled) == "RUNNING")
        wait("requeued RUNNING", lambda: state(run, requeued) == "RUNNING")
        time.sleep(1.0)
        check(run, ["scontrol", "requeue", requeued])
        check(run, ["scancel", cancelled, never])
        wait("every job ended", lambda: active(run) == 0, timeout=180)
        time.sleep(2.0)  # slurmctld sends the last records to slurmdbd
        base = ["sacct", "--allusers", f"--starttime={since}"]
        as_json = [*base, "--json"]
        allocations = [*base, "--allocations", "--parsable2", f"--format={FIELDS}"]
        steps = [*base, "--parsable2", f"--format={FIELDS}"]
        (folder / "sacct.json").write_text(
            json.dumps(json.loads(check(run, as_json)), indent=1) + "\n")
        (folder / "sacct-allocations.txt").write_text(check(run, allocations))
        (folder / "sacct-steps.txt").write_text(check(run, steps))
        (folder / "command.txt").write_text(
            f"{version}\n" + "".join(shlex.join(c) + "\n" for c in (as_json, allocations, steps)))
    finally:
        run(["scancel", *jobs])
    return folder


def main() -> None:
    """Command line entry."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", type=Path, help="a Docker testbed's state dir")
    where.add_argument("--slurm-conf", help="slurm.conf of a local testbed")
    ap.add_argument("--out", type=Path, default=HERE, help="root of the per-version folders")
    args = ap.parse_args()
    if args.slurm_conf:
        run: Runner = LocalRunner(args.slurm_conf)
    else:
        from hai_slurm.testbed import docker_mode
        run = docker_mode.runner(args.state_dir)
    print(f"wrote {record(run, args.out)}")


if __name__ == "__main__":
    main()
