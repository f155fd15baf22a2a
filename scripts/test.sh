#!/usr/bin/env bash
# All tests: lint and types, unit tests, integration tests on the local testbed (brought up and
# torn down by the test session), and the Docker smoke test (starts dockerd if needed).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not docker"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-host.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"; ruff check .
echo "== mypy (strict)"; bash scripts/typecheck.sh
if [ "${HAI_SKIP_DOCKER:-0}" != 1 ]; then
  echo "== docker engine"; bash docker-slurm-testbed/start-dockerd.sh
  export HAI_REQUIRE_DOCKER=1
  # tests/matrix runs the contract, directive, checkpoint and config tests on each Slurm release.
  echo "== Slurm version matrix (tests/matrix): ${HAI_SLURM_SUITES:=bookworm,trixie,sid}"
  export HAI_SLURM_SUITES
fi
echo "== pytest"
set +e
pytest "$@"
rc=$?
set -e
# pytest's exit code 5 means "no tests collected": that is a failure for us, never a pass.
if [ $rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi
exit $rc
