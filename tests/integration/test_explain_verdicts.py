"""``hai-slurm priority explain JOBID`` shows each planner verdict on real jobs of the testbed.

Four LOW jobs (the README's script shape) fill the 4 x 8 GPUs; a HIGH one-node job and a HIGH
three-node job with ``--switches=1`` wait. After one ``hai-slurm daemon --once``, ``explain``
(read-only) is asked with daemon files that differ only in the planner's settings, so the same
queue gives NO_VICTIMS (victims too young), NOT_WORTH (benefit below the threshold), PREEMPT
(with its victims), IMPOSSIBLE (no leaf has three nodes), and for a running job whether it may
be a victim now. A second queue of LOW jobs without a checkpoint directory shows a job past its
bound refused them (``bound_no_save_wait``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Testbed
from daemon_support import HAI_SLURM
from preempt_support import Bed, bed_for

pytestmark = pytest.mark.slow


@pytest.fixture
def bed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The testbed with toy-job helpers; cancels what it submitted."""
    yield from bed_for(testbed, tmp_path_factory)


def _config(tmp: Path, name: str, planner: str) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(f'state_dir = "{tmp}"\ndatabase_url = "sqlite:///{tmp}/hai-slurm.db"\n'
                    f"metrics_port = 0\n[planner]\n{planner}\n")
    return path


def _explain(job: int, config: Path) -> str:
    res = subprocess.run([HAI_SLURM, "priority", "explain", str(job), "--config", str(config)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_explain_gives_every_verdict_kind(bed: Bed, tmp_path: Path) -> None:
    """Each verdict in plain words, from the same queue."""
    lows = [bed.toy(f"low{i}", sbatch=["-N1", "--gres=gpu:8"]) for i in range(4)]
    for job in lows:
        bed.wait(job, "RUNNING", timeout=60)
    high = bed.toy("high", steps=40, priority="HIGH", account="team-b",
                   sbatch=["-N1", "--gres=gpu:8"])
    wide = bed.toy("wide", steps=40, priority="HIGH", account="team-b",
                   sbatch=["-N3", "--gres=gpu:8", "--switches=1@1:00:00"])
    young = _config(tmp_path, "young", 'min_run_time = "1h"\nurgent_min_run_time = "1h"')
    res = subprocess.run([HAI_SLURM, "daemon", "--config", str(young), "--once",
                          "--no-preempt"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stderr

    text = _explain(high.job_id, young)
    assert "Planner: NO_VICTIMS: needs 8 GPUs on one node, none free" in text
    assert "running jobs left out: 4 too young" in text
    stingy = _config(tmp_path, "stingy", 'min_run_time = "0s"\nbenefit_threshold = 1e9\n'
                     'urgent_benefit_wait = "1h"\nurgent_no_save_wait = "1h"')
    text = _explain(high.job_id, stingy)
    assert "Planner: NOT_WORTH:" in text and "is not more than 1e+09 x that" in text
    eager = _config(tmp_path, "eager", 'min_run_time = "0s"\nbenefit_threshold = 0.0')
    text = _explain(high.job_id, eager)
    assert f"Planner: PREEMPT: job {high.job_id} (HIGH" in text and "  victim job" in text
    text = _explain(wide.job_id, eager)
    assert "Planner: IMPOSSIBLE: needs 3 x 8 GPUs on at most 1 leaf switch (--switches)" in text
    assert "Planner: not a victim now: too young" in _explain(lows[0].job_id, young)
    assert "Planner: may give way now to a job of a class higher than LOW" in _explain(
        lows[0].job_id, eager)


def test_a_job_past_its_bound_takes_only_victims_that_save(bed: Bed, tmp_path: Path) -> None:
    """Four LOW jobs without ``#HAI --checkpoint-dir`` (they cannot save on request) fill the
    testbed; an ABOVE_NORMAL job waits past its bound (5 s here). It overrides protection, but
    takes only victims that save: NOT_WORTH, saying so. With ``bound_no_save_wait = "0s"`` it
    takes one of them (PREEMPT), as a HIGH job does after ``urgent_no_save_wait``."""
    script = bed.workdir / "nosave.sh"
    script.write_text("#!/bin/bash\n#HAI --priority=LOW --team=team-a\nsleep 600\n")
    lows = []
    for i in range(4):
        jid = bed.slurm.submit_script(script, [f"--job-name=nosave{i}", "--account=team-a",
                                               "-N1", "--gres=gpu:8",
                                               f"--output={bed.workdir / f'nosave{i}.out'}"])
        bed.jobs.append(jid)
        lows.append(jid)
    for jid in lows:
        bed.wait(jid, "RUNNING", timeout=60)
    waiting = bed.workdir / "bound.sh"
    waiting.write_text("#!/bin/bash\n#HAI --priority=ABOVE_NORMAL --team=team-b\nsleep 5\n")
    submitted = time.monotonic()
    above = bed.slurm.submit_script(waiting, ["--job-name=bound", "--account=team-b", "-N1",
                                              "--gres=gpu:8",
                                              f"--output={bed.workdir / 'bound.out'}"])
    bed.jobs.append(above)
    bound = '[classes.ABOVE_NORMAL]\nmax_wait = "5s"\n'
    kept = _config(tmp_path, "kept", 'min_run_time = "0s"\n' + bound)
    res = subprocess.run([HAI_SLURM, "daemon", "--config", str(kept), "--once",
                          "--no-preempt"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stderr
    time.sleep(max(0.0, 8.0 - (time.monotonic() - submitted)))   # past its 5-s bound
    text = _explain(above, kept)
    assert "Planner: NOT_WORTH:" in text, text
    assert ("past its bound it takes only victims that save on request (bound_no_save_wait "
            "off), and one here cannot") in text, text
    taking = _config(tmp_path, "taking",
                     'min_run_time = "0s"\nbound_no_save_wait = "0s"\n' + bound)
    text = _explain(above, taking)
    assert f"Planner: PREEMPT: job {above} (ABOVE_NORMAL" in text, text
    assert ">= bound_no_save_wait 0s" in text and "  victim job" in text, text
