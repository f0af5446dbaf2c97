#!/usr/bin/env bash
# Build a sandbox image on another Debian release, for specs that pin its Python:
# bullseye (Python 3.9) or trixie (3.13); bookworm (3.11) is `make images`' own.
#   deltarun/base:SUITE            debootstrap of SUITE (worker_images/base/build-base.sh)
#   deltarun/sandbox-python:SUITE  worker_images/python/Dockerfile on it
# Fast and silent when both exist and are up to date (the labels, as in build-images.sh).
#
# Usage: build-python-base.sh SUITE
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
cd "$(dirname "$0")/.."

SUITE="${1:?usage: build-python-base.sh SUITE (bullseye or trixie)}"
case "$SUITE" in
    bullseye|bookworm|trixie) ;;
    *) echo "build-python-base.sh: $SUITE: choose bullseye (3.9), bookworm (3.11) or trixie (3.13)" >&2; exit 2 ;;
esac
BASE_TAG="deltarun/base:$SUITE"
PY_TAG="deltarun/sandbox-python:$SUITE"

if ! command -v debootstrap >/dev/null 2>&1 && ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        "$APT_GET" update -qq
        DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq debootstrap >/dev/null
    else
        echo "build-python-base.sh: debootstrap is needed to build $BASE_TAG; install it" >&2
        exit 1
    fi
fi
DEBIAN_SUITE="$SUITE" bash worker_images/base/build-base.sh "$BASE_TAG" >/dev/null
want="$( (sha256sum worker_images/python/Dockerfile; docker image inspect -f '{{.Id}}' "$BASE_TAG") | sha256sum | cut -c1-64)"
have="$(docker image inspect -f '{{ index .Config.Labels "deltarun.dockerfile" }}' "$PY_TAG" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    echo "building $PY_TAG..."
    docker build -q --network none --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$want" -t "$PY_TAG" worker_images/python >/dev/null
fi
echo "image ready: $PY_TAG $(docker image inspect -f '{{.Id}}' "$PY_TAG" | cut -c1-19)"
