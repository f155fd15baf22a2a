"""The production files (priority/deploy/) match the code: alert rules and the dashboard use only
metrics the daemon exports, the rules pass promtool, the systemd unit uses flags that exist."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hai_slurm.cli import cli
from hai_slurm.priority.daemon.metrics import DaemonMetrics

DEPLOY = Path(__file__).resolve().parents[2] / "priority" / "deploy"
RULES = DEPLOY / "prometheus-rules.yml"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
UNIT = DEPLOY / "hai-slurm.service"
NAME = re.compile(r"\bhai_[a-z0-9_]+\b")


def exported() -> set[str]:
    """Every sample name the daemon's registry can export."""
    names: set[str] = set()
    for family in DaemonMetrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names


def rules() -> list[dict[str, str]]:
    """The alert rules (PyYAML comes with the test tools; skip, saying so, without it)."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the alert rules")
    data = yaml.safe_load(RULES.read_text())
    return [r for g in data["groups"] for r in g["rules"]]


def test_exported_names_are_found() -> None:
    """The helper sees the daemon's metrics (else the checks below would pass vacuously)."""
    names = exported()
    assert {"hai_priority_cycles_total", "hai_priority_cycle_seconds_bucket",
            "hai_priority_leader", "hai_preemption_victims_total",
            "hai_preemption_resume_seconds_count"} <= names
    assert len(names) > 30


def test_alert_rules_use_only_exported_metrics_and_cover_the_four_cases() -> None:
    """Each rule names at least one metric, every name is exported; storm, near bound, not
    cycling and plan stuck are there."""
    names = exported()
    found = rules()
    for rule in found:
        used = set(NAME.findall(rule["expr"]))
        assert used, f"alert {rule['alert']} names no hai_ metric"
        assert used <= names, f"alert {rule['alert']} uses {sorted(used - names)}, not exported"
        assert rule["labels"]["severity"] in ("critical", "warning")
    alerts = {r["alert"] for r in found}
    assert {"HaiSlurmPreemptionStorm", "HaiSlurmClassNearBound", "HaiSlurmDaemonNotCycling",
            "HaiSlurmPlanStuck"} <= alerts


def test_dashboard_uses_only_exported_metrics() -> None:
    """Every panel's query names exported metrics only, and every panel has a query."""
    names = exported()
    dash = json.loads(DASHBOARD.read_text())
    assert dash["panels"]
    for panel in dash["panels"]:
        exprs = [t["expr"] for t in panel["targets"]]
        assert exprs, f"panel {panel['title']!r} has no query"
        used = {n for e in exprs for n in NAME.findall(e)}
        assert used, f"panel {panel['title']!r} names no hai_ metric"
        assert used <= names, f"panel {panel['title']!r} uses {sorted(used - names)}"


def test_promtool_accepts_the_rules() -> None:
    """``promtool check rules`` (Debian: apt-get install prometheus)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus); rules not linted")
    res = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(rules())} rules found" in res.stdout


def _unit() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_systemd_unit_runs_check_first_and_is_hardened() -> None:
    """Not root, restarted on failure for as long as it takes, --check before start, the
    usual hardening; the flags it uses exist in the command."""
    unit = _unit()
    assert unit["User"] == ["hai-slurm"] and unit["Restart"] == ["on-failure"]
    # systemd never stops restarting it (a burst limit inside the interval gave up for good)
    assert unit["StartLimitIntervalSec"] == ["0"]
    assert unit["ExecStartPre"][0].endswith("hai-slurm daemon --check")
    assert unit["ExecStart"][0].endswith("hai-slurm daemon")
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                       ("PrivateTmp", "yes"), ("CapabilityBoundingSet", "")):
        assert unit[key] == [value], key
    help_text = CliRunner().invoke(cli, ["daemon", "--help"]).output
    assert "--check" in help_text and "--shadow" in help_text


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """``systemd-analyze verify`` finds nothing wrong (hai-slurm's path set to this one)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed; unit not verified")
    exe = str(Path(sys.executable).with_name("hai-slurm"))
    unit = tmp_path / "hai-slurm.service"
    unit.write_text(UNIT.read_text().replace("/opt/hai-slurm/bin/hai-slurm", exe))
    res = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                         timeout=60, check=False)
    problems = [line for line in (res.stdout + res.stderr).splitlines()
                if "hai-slurm.service" in line]
    assert problems == [], res.stdout + res.stderr
