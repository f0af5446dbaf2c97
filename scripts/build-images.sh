#!/usr/bin/env bash
# Build the sandbox images; fast and silent when they exist and are up to date.
# The python image is labelled with the SHA-256 of its Dockerfile and rebuilt
# only when that changes.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_TAG="${DELTARUN_BASE:-deltarun/base:bookworm}"
PY_TAG="deltarun/sandbox-python:bookworm"

if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    if [[ "$BASE_TAG" == deltarun/base:* ]]; then
        if ! command -v debootstrap >/dev/null 2>&1; then
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
                apt-get update -qq
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
            else
                echo "deltarun: debootstrap is needed to build the base image; install it" >&2
                exit 1
            fi
        fi
        bash worker_images/base/build-base.sh "$BASE_TAG"
    else
        echo "deltarun: base image $BASE_TAG is not present; pull or build it" >&2
        exit 1
    fi
fi

want="$(sha256sum worker_images/python/Dockerfile | cut -c1-64)"
have="$(docker image inspect -f '{{ index .Config.Labels "deltarun.dockerfile" }}' "$PY_TAG" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    echo "building $PY_TAG..."
    docker build -q --network none --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$want" -t "$PY_TAG" worker_images/python >/dev/null
fi
echo "images ready: $PY_TAG $(docker image inspect -f '{{.Id}}' "$PY_TAG" | cut -c1-19)"
