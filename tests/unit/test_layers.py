"""The layers hold: every import statement of the package (lazy ones inside functions included)
is read from the source, and the rules below are checked on the transitive closure.

- the pure policy and planner reach no database, Slurm command, Redis, CLI or I/O module;
- conf (the generators) does not import the daemon side (``hai_slurm.priority``);
- the job side (``hai_slurm.checkpoint``) imports only the standard library;
- production code never imports the in-memory fake Slurm, except the simulator, whose cluster is
  that fake by design.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The namespace as setup.cfg's package_dir assembles it.
PACKAGES = {"hai_slurm": "hai_slurm", "hai_slurm.priority": "priority",
            "hai_slurm.checkpoint": "checkpoint", "hai_slurm.conf": "conf",
            "hai_slurm.slurm_plugins": "slurm_plugins", "hai_slurm.testbed": "docker-slurm-testbed"}

PURE = ("hai_slurm.priority.policy", "hai_slurm.priority.planner")
NOT_IN_PURE = (
    "hai_slurm.priority.store", "hai_slurm.priority.daemon", "hai_slurm.priority.executor",
    "hai_slurm.priority.config", "hai_slurm.priority.cli", "hai_slurm.priority.sim",
    "hai_slurm.priority.demo", "hai_slurm.slurm_plugins.runner", "hai_slurm.slurm_plugins.adapter",
    "hai_slurm.slurm_plugins.cli_backend", "hai_slurm.slurm_plugins.fake", "hai_slurm.testbed",
    "hai_slurm.checkpoint", "hai_slurm.cli",
    # third-party and standard-library I/O
    "sqlalchemy", "alembic", "pymysql", "redis", "prometheus_client", "click", "docker",
    "subprocess", "socket", "sqlite3", "shutil", "tempfile", "pathlib", "urllib", "http",
    "signal", "threading", "multiprocessing", "logging",
)
FAKE = "hai_slurm.slurm_plugins.fake"
MAY_USE_FAKE = ("hai_slurm.priority.sim", FAKE)


def _module_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("")
            if "migrations" in rel.parts:
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if any(name.startswith(p + ".") for p in PACKAGES if p != package and
                   p.startswith(package + ".")):
                continue  # belongs to a more specific mapping
            out[name] = path
    return out


MODULES = _module_files()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def direct_imports(module: str) -> frozenset[str]:
    """Every module named by an import statement of ``module`` (submodules resolved)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target == "__future__":
                continue
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names
                         if f"{target}.{a.name}" in MODULES)
    return frozenset(found)


def closure(start: Iterable[str]) -> dict[str, str]:
    """Every module reachable from ``start``, with the first-party module that imported it."""
    seen: dict[str, str] = {}
    todo = [(m, "") for m in start]
    while todo:
        module, parent = todo.pop()
        if module in seen:
            continue
        seen[module] = parent
        if module in MODULES:
            for name in direct_imports(module):
                # importing a.b.c runs a/__init__ and a/b/__init__ first
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    prefix = ".".join(parts[:i])
                    if prefix in MODULES or i == len(parts):
                        todo.append((prefix, module))
    return seen


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _chain(seen: dict[str, str], name: str) -> str:
    steps = [name]
    while seen.get(steps[-1]):
        steps.append(seen[steps[-1]])
    return " <- ".join(steps)


def test_the_module_map_finds_the_package() -> None:
    """The reader sees the layers it checks (guards against a map that finds nothing)."""
    for name in ("hai_slurm.priority.policy.priorities", "hai_slurm.priority.planner.search",
                 "hai_slurm.conf.generate", "hai_slurm.checkpoint.checkpointer", FAKE):
        assert name in MODULES
    assert "hai_slurm.priority.store" in closure(["hai_slurm.priority.daemon.loop"])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, PURE)))
def test_pure_core_reaches_no_io(module: str) -> None:
    """Policy and planner modules reach no store, Slurm command, CLI or I/O module."""
    seen = closure([module])
    bad = sorted(n for n in seen if _under(n, NOT_IN_PURE))
    assert not bad, "\n".join(_chain(seen, n) for n in bad)


def test_conf_does_not_import_priority() -> None:
    """The generators stand alone: conf never imports the daemon side."""
    seen = closure(m for m in MODULES if _under(m, ["hai_slurm.conf"]))
    bad = sorted(n for n in seen if _under(n, ["hai_slurm.priority"]))
    assert not bad, "\n".join(_chain(seen, n) for n in bad)


def test_job_side_imports_only_the_standard_library() -> None:
    """hai_slurm.checkpoint runs in training images with nothing else installed."""
    seen = closure(m for m in MODULES if _under(m, ["hai_slurm.checkpoint"]))
    bad = sorted(n for n in seen if n not in MODULES and n.split(".")[0] != "hai_slurm"
                 and n.split(".")[0] not in sys.stdlib_module_names)
    allowed = ("hai_slurm", "hai_slurm.errors")  # the namespace root and the one hierarchy
    first_party = sorted(n for n in seen if n in MODULES and n not in allowed
                         and not _under(n, ["hai_slurm.checkpoint"]))
    assert not bad and not first_party, "\n".join(_chain(seen, n) for n in bad + first_party)


def test_production_code_never_imports_the_fake() -> None:
    """Only tests and the simulator use the in-memory Slurm."""
    for module in MODULES:
        if _under(module, MAY_USE_FAKE):
            continue
        imported = direct_imports(module)
        assert not _under_any(imported, [FAKE]), f"{module} imports {FAKE}"


def _under_any(names: Iterable[str], prefixes: Iterable[str]) -> bool:
    return any(_under(n, prefixes) for n in names)
