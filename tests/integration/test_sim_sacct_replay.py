"""``simulate --sacct`` on this testbed's own accounting, with the sacct commands of
priority/sim/README.md: jobs run, are exported with sacct (JSON and -P) and replayed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Submitter, Testbed

from hai_slurm.priority.sim.sacct import SACCT_FORMAT
from hai_slurm.testbed.waiting import check, wait_for

ROOT = Path(__file__).parents[2]
CLUSTER = ROOT / "tests" / "data" / "sim_cluster.toml"
HAI_SLURM = str(Path(sys.executable).parent / "hai-slurm")  # the command the README runs


def test_replay_of_this_clusters_jobs(testbed: Testbed, submit: Submitter,
                                      tmp_path: Path) -> None:
    """Two GPU jobs (a #HAI HIGH one, a --qos=low one) come back from both exports with their
    account and class, and every policy replays them."""
    since = check(testbed.run, ["date", "+%Y-%m-%dT%H:%M:%S"]).strip()
    high = submit("#!/bin/bash\n#HAI --priority=HIGH\nsleep 2\n",
                  args=["--account=team-a", "--gres=gpu:2", "--job-name=replay-high"])
    low = submit("#!/bin/bash\nsleep 1\n",
                 args=["--account=team-b", "--qos=low", "--gres=gpu:1", "--job-name=replay-low"])
    for job in (high, low):
        submit.wait(job, "COMPLETED", timeout=60)
    env = {**os.environ, "SLURM_CONF": testbed.slurm_conf}
    readme = (ROOT / "priority" / "sim" / "README.md").read_text()
    assert f"--format={SACCT_FORMAT}" in readme
    as_json = tmp_path / "history.json"
    as_text = tmp_path / "history.txt"

    def export() -> bool:
        common = f"--allusers --starttime={since} --endtime=now"
        subprocess.run(f"sacct {common} --json > {as_json}", shell=True, check=True, env=env)
        subprocess.run(f"TZ=UTC sacct {common} --allocations --parsable2 "
                       f"--format={SACCT_FORMAT} > {as_text}", shell=True, check=True, env=env)
        text = as_text.read_text()
        # slurmdbd may store the job before job_submit's #HAI record (AdminComment) reaches it
        high_line = next((ln for ln in text.splitlines() if ln.startswith(f"{high}|")), "")
        jobs = json.loads(as_json.read_text()).get("jobs", [])
        json_high = next((j for j in jobs if str(j.get("job_id")) == high), {})
        # both exports must carry the record: the JSON one runs first and can miss it alone
        return ("class=HIGH" in high_line and f"{low}|" in text and "COMPLETED" in text
                and "class=HIGH" in json.dumps(json_high.get("comment", "")))

    wait_for(export, timeout=30, interval=1.0, describe=lambda: "sacct did not list both jobs")
    for path in (as_json, as_text):
        out = tmp_path / path.stem
        res = subprocess.run([HAI_SLURM, "simulate", "--sacct",
                              str(path), "--cluster", str(CLUSTER), "--policy", "all",
                              "--no-plots", "-q", "-o", str(out)],
                             capture_output=True, text=True, check=False, timeout=300)
        assert res.returncode == 0, res.stderr
        result = json.loads((out / "result-hai-slurm.json").read_text())
        assert result["classes"]["HIGH"]["jobs"] >= 1 and result["classes"]["LOW"]["jobs"] >= 1
        assert {"team-a", "team-b"} <= set(result["teams"])
        assert "== fifo" in res.stdout and "== hai-slurm" in res.stdout
