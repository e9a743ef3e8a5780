#!/usr/bin/env bash
# Builds a Debian base image without any container registry: debootstrap from this machine's
# own apt mirror (the one its sources name), then `docker import`. CI uses it; so can any
# machine that reaches Debian's packages but no registry.
#
#   docker/build-base-image.sh [TAG]        (default agent-harness/base:bookworm)
#   SUITE=bookworm MIRROR=<url> docker/build-base-image.sh
set -euo pipefail

tag="${1:-agent-harness/base:bookworm}"
suite="${SUITE:-bookworm}"
mirror="${MIRROR:-}"
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources | head -1)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
  echo "no Debian mirror found in the apt sources; set MIRROR" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

# What the sandbox needs: a shell and coreutils, git and python3 for agent work, curl for the
# health check, procps for people debugging inside.
packages="bash,coreutils,git,python3,ca-certificates,curl,procps"
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "debootstrap $suite from $mirror into $rootfs"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" --numeric-owner -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag"
echo "built $tag"
