#!/usr/bin/env bash
# Make a fresh Debian 12 machine (as root) ready for hai-slurm: Debian packages for the testbed,
# and a virtual environment in .venv with the project installed in editable mode.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "error: run as root (the testbed starts munged, slurmctld and slurmd): sudo bash $0" >&2
  exit 1
fi

DEBS=(slurm-wlm slurmdbd munge libslurm-dev mariadb-server mariadb-client redis-server
      docker.io debootstrap lua5.1 python3-venv python3-dev procps iproute2 git)
missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import hai_slurm.testbed, click, sqlalchemy, pytest" 2>/dev/null \
   || [ setup.cfg -nt .venv/.hai-installed ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e '.[all]' 2> >(grep -v "is ignored: it is neither" >&2)
  touch .venv/.hai-installed
fi
# torch and lightning are test-only dependencies (tests/unit/test_checkpoint_torch.py,
# test_checkpoint_recipes.py and the testbed's tests/integration/test_torch_preemption.py): CPU
# build, pinned (about 30 s and 9 s to install); the job side never needs them.
TORCH_PIN=torch==2.13.0
LIGHTNING_PIN=lightning==2.6.6
if ! .venv/bin/python -c "import torch, lightning, sys; sys.exit(torch.__version__.split('+')[0] != '${TORCH_PIN#torch==}' or lightning.__version__ != '${LIGHTNING_PIN#lightning==}')" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "$TORCH_PIN" "$LIGHTNING_PIN" 2> >(grep -v "is ignored: it is neither" >&2)
fi
