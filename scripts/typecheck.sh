#!/usr/bin/env bash
# mypy --strict on the whole hai_slurm namespace.
# The namespace is assembled from root folders by setup.cfg's package_dir, which mypy cannot follow
# through setuptools' editable finder; so we lay out the same mapping as a tree of symlinks under
# build/typecheck (rebuilt every run) and check that.
set -euo pipefail
cd "$(dirname "$0")/.."
root=build/typecheck
rm -rf "$root"; mkdir -p "$root/hai_slurm"
for f in hai_slurm/*.py hai_slurm/py.typed; do ln -s "$PWD/$f" "$root/hai_slurm/"; done
for pair in priority:priority checkpoint:checkpoint conf:conf slurm_plugins:slurm_plugins \
            testbed:docker-slurm-testbed; do
  ln -s "$PWD/${pair#*:}" "$root/hai_slurm/${pair%%:*}"
done
cd "$root" && exec "${MYPY:-mypy}" --config-file ../../pyproject.toml -p hai_slurm "$@"
