#!/usr/bin/env bash
# Make the base image debian:SUITE locally when no image registry is reachable:
# debootstrap SUITE into a temporary rootfs, then `docker import` it. Does nothing when the image
# exists already (users with a registry can simply `docker pull debian:SUITE` instead).
#
# Usage: mkimage.sh [SUITE [TAG]]  SUITE: bookworm (default), trixie, sid, ...
#                                  TAG: image to make (default debian:SUITE; the benchmark uses another)
# Env:   DEBIAN_MIRROR (default http://deb.debian.org/debian), MKIMAGE_TMP (default /var/tmp)
set -euo pipefail
suite=${1:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
image=${2:-debian:$suite}

if ! [[ $suite =~ ^[a-z][a-z0-9-]*$ ]]; then
  echo "error: SUITE must be a Debian release name such as bookworm, trixie or sid (got '$suite')" >&2
  exit 2
fi
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image exists; nothing to do"
  exit 0
fi
for tool in debootstrap docker; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    pkg=$tool; [ "$tool" = docker ] && pkg=docker.io
    echo "error: $tool not found; install it with: apt-get install -y $pkg" >&2
    exit 1
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "error: debootstrap needs root; run: sudo $0 $suite" >&2
  exit 1
fi
# A keyring that knows newer suites' keys; debootstrap picks its default otherwise.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

rootfs=$(mktemp -d "${MKIMAGE_TMP:-/var/tmp}/hai-rootfs-$suite.XXXXXX")
cleanup() { rm -rf --one-file-system "$rootfs"; }
trap cleanup EXIT

echo "debootstrap $suite into $rootfs (mirror $mirror)"
start=$SECONDS
if ! debootstrap --variant=minbase --keyring="$keyring" "$suite" "$rootfs" "$mirror" \
    >"$rootfs.log" 2>&1; then
  echo "error: debootstrap $suite failed; last lines of its log ($rootfs.log):" >&2
  tail -n 20 "$rootfs.log" >&2
  [ -f "$rootfs/debootstrap/debootstrap.log" ] && tail -n 20 "$rootfs/debootstrap/debootstrap.log" >&2
  exit 1
fi
rm -f "$rootfs.log"
# Keep the image small and reproducible-ish: no apt lists or caches baked in.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$rootfs" -c . | docker import \
  --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$image" >/dev/null
echo "$image made in $((SECONDS - start)) s"
