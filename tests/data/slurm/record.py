"""Record real Slurm output for the parser tests from a running Docker testbed.

    hai-slurm testbed up --docker --slurm trixie --nodes 2 --gpus-per-node 4 \
        --state-dir /var/tmp/rec
    .venv/bin/python tests/data/slurm/record.py --state-dir /var/tmp/rec
    hai-slurm testbed down --docker --state-dir /var/tmp/rec

Writes into ``tests/data/slurm/<series>/`` (series read from ``scontrol version``): a queue with
running, multi-node, pending, held, no-requeue, requeued and completed jobs (``squeue-mixed.json``),
a job array (``squeue-array.json``), the node and partition documents, sacctmgr's QOS rows in the
adapter's format, and the version strings. Needs the testbed's shape: 2 nodes x 4 GPUs, accounting.
The jobs are cancelled at the end. Files are written unedited (JSON re-indented).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hai_slurm.slurm_plugins.version import QOS_COMMAND
from hai_slurm.testbed import docker_mode
from hai_slurm.testbed.waiting import Runner, check, show_job

HERE = Path(__file__).resolve().parent


def sbatch(run: Runner, *args: str, wrap: str = "sleep 600") -> str:
    """Submit and return the job id."""
    out = check(run, ["sbatch", "--parsable", "--output=/dev/null", *args, f"--wrap={wrap}"])
    return out.strip().split(";")[0]


def wait(what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
    """Poll until ``ok`` holds."""
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            sys.exit(f"{what} not reached within {timeout:g} s")
        time.sleep(0.3)


def state(run: Runner, job: str) -> str:
    """JobState of ``job`` ("" when gone)."""
    return (show_job(run, job) or {}).get("JobState", "")


def save_json(folder: Path, name: str, text: str) -> None:
    """Re-indent and write a JSON document."""
    (folder / name).write_text(json.dumps(json.loads(text), indent=1) + "\n")


def record(run: Runner, root: Path) -> Path:
    """Submit the job mix, write the files, cancel the jobs; return the folder written."""
    version = check(run, ["scontrol", "version"])
    series = ".".join(version.split()[-1].split(".")[:2])
    folder = root / series
    folder.mkdir(exist_ok=True)
    (folder / "scontrol-version.txt").write_text(version)
    (folder / "sinfo-version.txt").write_text(check(run, ["sinfo", "--version"]))
    jobs: list[str] = []
    try:
        done = sbatch(run, "--job-name=done", wrap="true")
        jobs.append(done)
        wait("short job COMPLETED", lambda: state(run, done) == "COMPLETED")
        train = sbatch(run, "--job-name=train-a", "--nodes=1", "--gres=gpu:2",
                       "--comment=user note")
        multi = sbatch(run, "--job-name=multi", "--nodes=2", "--gres=gpu:1", "--time=30")
        requeued = sbatch(run, "--job-name=requeued", "--nodes=1")
        norequeue = sbatch(run, "--job-name=norequeue", "--nodes=1")
        # as root (an admin): job_submit.lua refuses --no-requeue to a class that must stay
        # preemptible, and Requeue=0 to other users
        check(run, ["scontrol", "update", f"JobId={norequeue}", "Requeue=0"])
        jobs += [train, multi, requeued, norequeue]
        for job in jobs[1:]:
            wait(f"job {job} RUNNING", lambda j=job: state(run, j) == "RUNNING")  # type: ignore[misc]
        check(run, ["scontrol", "update", f"JobId={train}", "AdminComment=hai:class=HIGH"])
        check(run, ["scontrol", "requeue", requeued])
        waits = sbatch(run, "--job-name=waits", "--nodes=2", "--gres=gpu:4")
        held = sbatch(run, "--job-name=held", "--gpus=4", "--hold")
        per_task = sbatch(run, "--job-name=per-task", "--ntasks=2", "--gpus-per-task=2")
        jobs += [waits, held, per_task]
        wait("requeued job PENDING", lambda: state(run, requeued) == "PENDING")
        time.sleep(1.5)  # one scheduling pass for the pending jobs' reasons
        save_json(folder, "squeue-mixed.json", check(run, ["squeue", "--json"]))
        save_json(folder, "sinfo.json", check(run, ["sinfo", "--json"]))
        for name, argv in (("scontrol-show-nodes.json", ["scontrol", "show", "nodes", "--json"]),
                           ("scontrol-show-partitions.json",
                            ["scontrol", "show", "partitions", "--json"]),
                           ("scontrol-show-jobs.json", ["scontrol", "show", "jobs", "--json"])):
            res = run(argv)
            if res.returncode == 0:
                save_json(folder, name, res.stdout)
        (folder / "scontrol-show-partition.txt").write_text(
            check(run, ["scontrol", "--oneliner", "show", "partition"]))
        (folder / "squeue-states.txt").write_text(check(
            run, ["squeue", "--noheader", "--states=all", "--format=%A|%T", "--jobs=" +
                  ",".join(jobs)]))
        (folder / "sacctmgr-show-qos.txt").write_text(check(run, list(QOS_COMMAND)))
        check(run, ["scancel", *jobs])
        wait("jobs ended", lambda: all(state(run, j) not in ("RUNNING", "PENDING",
                                                               "COMPLETING") for j in jobs))
        array = sbatch(run, "--job-name=array", "--array=0-5", "--nodes=1", "--gres=gpu:2")
        jobs.append(array)
        wait("4 array tasks RUNNING", lambda: check(
            run, ["squeue", "--noheader", "--states=R", "--format=%i", f"--jobs={array}"]
        ).count("\n") >= 4)
        time.sleep(1.0)
        save_json(folder, "squeue-array.json", check(run, ["squeue", "--json"]))
    finally:
        run(["scancel", *jobs])
    return folder


def main() -> None:
    """Command line entry."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, required=True, help="the Docker testbed's state dir")
    ap.add_argument("--out", type=Path, default=HERE, help="root of the per-version folders")
    args = ap.parse_args()
    print(f"wrote {record(docker_mode.runner(args.state_dir), args.out)}")


if __name__ == "__main__":
    main()
