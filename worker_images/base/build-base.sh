#!/usr/bin/env bash
# Build the sandbox base image from Debian packages with debootstrap and
# `docker import` it. Used when no container registry is reachable (always, on
# the project's own machines). An online user can skip this and pass any
# Debian-like image as BASE to worker_images/python/Dockerfile instead.
#
# Usage: build-base.sh [TAG]      (default tag: deltarun/base:bookworm)
# Idempotent: does nothing when TAG exists with the same package list (its label).
set -euo pipefail

TAG="${1:-deltarun/base:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Everything a Python repository task needs (pip and setuptools for a task's offline
# install step, `pip install -e . --no-deps --no-build-isolation`), baked into the base so that the
# Dockerfile needs no network at build time.
PACKAGES="python3,python3-pytest,python3-pip,python3-setuptools,python3-wheel,git,procps,passwd,ca-certificates"

WANT="$(printf '%s %s' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-64)"
HAVE="$(docker image inspect -f '{{ index .Config.Labels "deltarun.packages" }}' "$TAG" 2>/dev/null || true)"
if [ "$WANT" = "$HAVE" ]; then
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
    --change 'CMD ["/bin/bash"]' --change "LABEL deltarun.packages=$WANT" - "$TAG" >/dev/null
echo "built base image $TAG"
