#!/usr/bin/env bash
# Start a Docker engine if none answers, and wait until it is ready. Idempotent: does nothing when
# `docker info` already works. For machines without systemd (CI containers, the dev VMs).
# Log: $DOCKERD_LOG (default /tmp/dockerd.log). Wait limit: $DOCKERD_WAIT seconds (default 60).
set -euo pipefail
log=${DOCKERD_LOG:-/tmp/dockerd.log}
wait_s=${DOCKERD_WAIT:-60}

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "error: dockerd not found; install it with: apt-get install -y docker.io" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "error: starting dockerd needs root; run this script as root (or start Docker yourself)" >&2
  exit 1
fi
echo "starting dockerd (log: $log)"
# setsid: the engine must outlive this script and the shell that called it.
setsid dockerd >"$log" 2>&1 </dev/null &
pid=$!
deadline=$((SECONDS + wait_s))
until docker info >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "error: dockerd exited during start; last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "error: dockerd did not answer within ${wait_s}s; last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  sleep 0.2
done
echo "dockerd ready (pid $pid)"
