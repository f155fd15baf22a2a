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
      docker.io debootstrap lua5.1 lua5.4 python3-venv python3-dev procps iproute2 git)
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

# pyslurm, the optional backend (GPL-2.0-only: installed separately, never part of hai-slurm),
# built from pyslurm's own source archive for the Slurm series installed here. CI cannot reach
# pyslurm's repository, so the archives sit in ../shared/third_party (relative to this repository;
# PYSLURM_ARCHIVES overrides). Its build pins old setuptools and Cython: it runs in a throwaway
# venv under build/pyslurm that makes a wheel, and only that wheel goes into .venv, so the
# project venv's setuptools (and `pip install -e`) stay as they are. Skipped, saying why, without
# an archive; nothing to do when the matching pyslurm is already installed in .venv.
ARCHIVES=${PYSLURM_ARCHIVES:-$(cd .. && pwd)/shared/third_party}
SLURM_PKG=$(dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null || true)
SLURM_SERIES=$(sed -nE 's/^([0-9]+)\.([0-9]+).*/\1 \2/p' <<<"$SLURM_PKG")
if [ -z "$SLURM_SERIES" ]; then
  echo "pyslurm: skipped (libslurm-dev is not installed, so there is no Slurm to build against)"
else
  read -r S_MAJOR S_MINOR <<<"$SLURM_SERIES"
  BRANCH="$S_MAJOR.$((10#$S_MINOR)).x"           # Slurm 22.05 -> pyslurm branch 22.5.x
  if .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(not m.version('pyslurm').startswith('${BRANCH%x}'))" 2>/dev/null; then
    :                                             # the matching pyslurm is installed already
  else
    ARCHIVE=$(ls "$ARCHIVES"/pyslurm-"$BRANCH"-*.tar.gz 2>/dev/null | head -n 1 || true)
    if [ -z "$ARCHIVE" ]; then
      echo "pyslurm: skipped (no pyslurm-$BRANCH-*.tar.gz in $ARCHIVES for Slurm $S_MAJOR.$S_MINOR; the pyslurm backend's tests will skip too)"
    else
      if [ -f "$ARCHIVES/SHA256SUMS" ]; then
        (cd "$ARCHIVES" && grep " $(basename "$ARCHIVE")\$" SHA256SUMS | sha256sum -c --quiet -) \
          || { echo "error: $ARCHIVE does not match $ARCHIVES/SHA256SUMS" >&2; exit 1; }
      fi
      WHEELS=build/pyslurm/wheels
      WHEEL=$(ls "$WHEELS"/pyslurm-"${BRANCH%.x}".*.whl 2>/dev/null | head -n 1 || true)
      # The wheel is kept per user, like pip's cache, under the archive (its name and the start
      # of its SHA-256: the same archive copied again, newer on disk, still matches), the exact
      # Slurm and the Python it was built for: a fresh clone on this machine takes it instead
      # of building again (about 5 minutes of 2 cores). HAI_CACHE_DIR moves the cache; a
      # missing or unwritable one only means a build.
      KEY="$(basename "$ARCHIVE" .tar.gz)-$(sha256sum "$ARCHIVE" | cut -c1-16)-slurm$SLURM_PKG-$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
      CACHED=${HAI_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hai-slurm}/pyslurm/$KEY
      if { [ -z "$WHEEL" ] || [ "$ARCHIVE" -nt "$WHEEL" ]; } && ls "$CACHED"/pyslurm-*.whl >/dev/null 2>&1; then
        rm -rf "$WHEELS"; mkdir -p "$WHEELS"; cp "$CACHED"/pyslurm-*.whl "$WHEELS"/
        WHEEL=$(ls "$WHEELS"/pyslurm-*.whl | head -n 1)
        echo "pyslurm: taking $(basename "$WHEEL") built before from $CACHED"
      fi
      if [ -z "$WHEEL" ] || [ "$ARCHIVE" -nt "$WHEEL" ]; then
        echo "pyslurm: building $BRANCH from $(basename "$ARCHIVE") (a few minutes)"
        rm -rf build/pyslurm/venv "$WHEELS"; mkdir -p "$WHEELS"
        "$PY" -m venv build/pyslurm/venv
        build/pyslurm/venv/bin/pip install -q --disable-pip-version-check \
          'Cython>=0.29.30,<3' 'setuptools==59.2.0' 'wheel==0.37.0' 2> >(grep -v "is ignored: it is neither" >&2)
        SLURM_INCLUDE_DIR=/usr/include SLURM_LIB_DIR=/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu) \
          build/pyslurm/venv/bin/pip wheel -q --disable-pip-version-check --no-build-isolation \
          --no-deps -w "$WHEELS" "$ARCHIVE" 2> >(grep -v "is ignored: it is neither" >&2)
        rm -rf build/pyslurm/venv
        WHEEL=$(ls "$WHEELS"/pyslurm-*.whl | head -n 1)
        { mkdir -p "$CACHED" && cp "$WHEEL" "$CACHED"/; } 2>/dev/null \
          || echo "pyslurm: could not keep the wheel in $CACHED (it will be built again next time)"
      fi
      .venv/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall "$WHEEL"
      echo "pyslurm: installed $(basename "$WHEEL") into .venv"
    fi
  fi
fi
