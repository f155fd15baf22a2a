#!/usr/bin/env bash
# The demo: set up the host if needed, then run `hai-slurm demo` (local Slurm testbed, the daemon
# with embedded defaults, two teams' training jobs, an urgent job, checkpoint-then-requeue).
# Extra arguments go to `hai-slurm demo` (e.g. --state-dir DIR, --steps N, --down).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-host.sh
exec .venv/bin/hai-slurm demo "$@"
