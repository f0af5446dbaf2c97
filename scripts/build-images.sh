#!/usr/bin/env bash
# Build the sandbox images; fast and silent when they exist and are up to date.
# The python image is labelled with the SHA-256 of its Dockerfile, the model
# proxy image with the SHA-256 of its Dockerfile and the modules of runner/gateway
# (the proxy's code, copied into the image as /opt/proxy/gateway); each is rebuilt
# only when that changes.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
cd "$(dirname "$0")/.."

BASE_TAG="${DELTARUN_BASE:-deltarun/base:bookworm}"
PY_TAG="deltarun/sandbox-python:bookworm"
PROXY_TAG="deltarun/model-proxy:bookworm"

if [[ "$BASE_TAG" == deltarun/base:* ]] || ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    if [[ "$BASE_TAG" == deltarun/base:* ]]; then  # ours: rebuilt when its package list changed
        if ! command -v debootstrap >/dev/null 2>&1; then
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
                "$APT_GET" update -qq
                DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq debootstrap >/dev/null
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

want="$( (sha256sum worker_images/python/Dockerfile; docker image inspect -f '{{.Id}}' "$BASE_TAG") | sha256sum | cut -c1-64)"
have="$(docker image inspect -f '{{ index .Config.Labels "deltarun.dockerfile" }}' "$PY_TAG" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    echo "building $PY_TAG..."
    docker build -q --network none --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$want" -t "$PY_TAG" worker_images/python >/dev/null
fi

want="$(export LC_ALL=C; cat worker_images/proxy/Dockerfile runner/gateway/*.py | sha256sum | cut -c1-64)"
have="$(docker image inspect -f '{{ index .Config.Labels "deltarun.dockerfile" }}' "$PROXY_TAG" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    echo "building $PROXY_TAG..."
    context="$(mktemp -d)"
    trap 'rm -rf "$context"' EXIT
    mkdir "$context/gateway"
    cp worker_images/proxy/Dockerfile "$context/"
    cp runner/gateway/*.py "$context/gateway/"
    docker build -q --network none --build-arg "BASE=$PY_TAG" \
        --label "deltarun.dockerfile=$want" -t "$PROXY_TAG" "$context" >/dev/null
fi
short() { docker image inspect -f '{{.Id}}' "$1" | cut -c1-19; }
echo "images ready: $PY_TAG $(short "$PY_TAG") $PROXY_TAG $(short "$PROXY_TAG")"
