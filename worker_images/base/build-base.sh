#!/usr/bin/env bash
# Build the sandbox base image from Debian packages with debootstrap and
# `docker import` it. Used when no container registry is reachable (always, on
# the project's own machines). An online user can skip this and pass any
# Debian-like image as BASE to worker_images/python/Dockerfile instead.
#
# Usage: build-base.sh [TAG]      (default tag: deltarun/base:bookworm)
# Idempotent: does nothing when TAG already exists.
set -euo pipefail

TAG="${1:-deltarun/base:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Everything a Python repository task needs, baked into the base so that the
# Dockerfile needs no network at build time.
PACKAGES="python3,python3-pytest,git,procps,passwd,ca-certificates"

if docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "base image $TAG exists"
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "build-base.sh: debootstrap is missing; install it with 'apt-get install debootstrap'" >&2
    exit 1
fi

ROOT="$(mktemp -d /tmp/deltarun-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT
echo "debootstrap $SUITE into $ROOT (takes a few minutes)..."
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
    echo "build-base.sh: debootstrap failed; last lines of $ROOT.log:" >&2
    tail -20 "$ROOT.log" >&2
    exit 1
}
rm -f "$ROOT.log"
# Slim the image: apt lists, caches and docs are not needed in a sandbox.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* "$ROOT"/usr/share/doc/* \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
tar -C "$ROOT" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "built base image $TAG"
