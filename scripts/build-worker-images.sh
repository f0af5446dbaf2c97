#!/usr/bin/env bash
# Build the deltarun worker, Redis and registry images; fast and quiet when they are current.
#
# Each image carries a label `deltarun.inputs`: the SHA-256 of what it was built
# from (its Dockerfile, the base image id and, for the worker, this script,
# pyproject.toml and every file under runner/). An image is rebuilt only when
# that changes, so editing the package rebuilds the worker and nothing else.
#
# Python packages are never fetched inside a build: a wheelhouse of deltarun,
# its runtime dependencies and flower is built on the host (which has PyPI and
# the pip configuration) into a temporary build context, and the Dockerfile
# installs from it with --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_TAG="${DELTARUN_BASE:-deltarun/base:bookworm}"
WORKER_TAG="deltarun/worker:latest"
REDIS_TAG="deltarun/redis:bookworm"
REGISTRY_TAG="deltarun/registry:bookworm"
PROMETHEUS_TAG="deltarun/prometheus:bookworm"

die() { echo "build-worker-images: $*" >&2; exit 1; }
sha() { sha256sum | cut -c1-64; }
have_label() { docker image inspect -f '{{ index .Config.Labels "deltarun.inputs" }}' "$1" 2>/dev/null || true; }

# One build at a time (parallel test sessions may all call this): the prune at
# the end must not meet another build's intermediate images.
exec 9>"${TMPDIR:-/tmp}/deltarun-worker-images.lock"
flock 9

command -v docker >/dev/null || die "docker is not installed; run 'make docker'"
docker info >/dev/null 2>&1 || die "the Docker engine is not reachable; run 'make docker'"

# Base and sandbox images first: every image here starts from the base.
bash scripts/build-images.sh >/dev/null || die "scripts/build-images.sh failed (base image $BASE_TAG)"
base_id="$(docker image inspect -f '{{.Id}}' "$BASE_TAG" 2>/dev/null)" \
    || die "base image $BASE_TAG is missing after scripts/build-images.sh"

if [ -x .venv/bin/python ]; then PY="$PWD/.venv/bin/python"; else PY=python3; fi

CTX="$(mktemp -d "${TMPDIR:-/tmp}/deltarun-worker-ctx.XXXXXX")"
trap 'rm -rf "$CTX"' EXIT

# A snapshot of the package sources: the hash and the wheel come from the same
# files even while someone edits runner/, and setuptools' build/ directory (which
# can keep modules deleted since) never appears in the work tree.
mkdir -p "$CTX/src"
tar -c --exclude=__pycache__ --exclude='*.pyc' pyproject.toml constraints.txt README.md runner | tar -x -C "$CTX/src"

# --- redis -------------------------------------------------------------------
redis_want="$( { sha <worker_images/redis/Dockerfile; echo "$base_id"; } | sha)"
if [ "$redis_want" != "$(have_label "$REDIS_TAG")" ]; then
    echo "building $REDIS_TAG..."
    docker build -q --force-rm --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$(sha <worker_images/redis/Dockerfile)" \
        --label "deltarun.inputs=$redis_want" \
        -t "$REDIS_TAG" worker_images/redis >"$CTX/redis-build.log" 2>&1 || {
        tail -20 "$CTX/redis-build.log" >&2
        die "docker build of $REDIS_TAG failed (apt-get needs Debian's mirrors at build time)"
    }
fi

# --- registry ----------------------------------------------------------------
registry_want="$( { sha <worker_images/registry/Dockerfile; sha <worker_images/registry/config.yml; echo "$base_id"; } | sha)"
if [ "$registry_want" != "$(have_label "$REGISTRY_TAG")" ]; then
    echo "building $REGISTRY_TAG..."
    docker build -q --force-rm --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$(sha <worker_images/registry/Dockerfile)" \
        --label "deltarun.inputs=$registry_want" \
        -t "$REGISTRY_TAG" worker_images/registry >"$CTX/registry-build.log" 2>&1 || {
        tail -20 "$CTX/registry-build.log" >&2
        die "docker build of $REGISTRY_TAG failed (apt-get needs Debian's mirrors at build time)"
    }
fi

# --- prometheus (compose's monitoring profile) -------------------------------
prometheus_want="$( { sha <worker_images/prometheus/Dockerfile; sha <worker_images/prometheus/prometheus.yml; echo "$base_id"; } | sha)"
if [ "$prometheus_want" != "$(have_label "$PROMETHEUS_TAG")" ]; then
    echo "building $PROMETHEUS_TAG..."
    docker build -q --force-rm --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$(sha <worker_images/prometheus/Dockerfile)" \
        --label "deltarun.inputs=$prometheus_want" \
        -t "$PROMETHEUS_TAG" worker_images/prometheus >"$CTX/prometheus-build.log" 2>&1 || {
        tail -20 "$CTX/prometheus-build.log" >&2
        die "docker build of $PROMETHEUS_TAG failed (apt-get needs Debian's mirrors at build time)"
    }
fi

# --- worker ------------------------------------------------------------------
src_sha="$( cd "$CTX/src" && find pyproject.toml constraints.txt runner -type f | LC_ALL=C sort | xargs -d '\n' sha256sum | sha)"
worker_want="$( { sha <worker_images/worker/Dockerfile; sha <scripts/build-worker-images.sh; echo "$src_sha"; echo "$base_id"; } | sha)"
if [ "$worker_want" != "$(have_label "$WORKER_TAG")" ]; then
    echo "building $WORKER_TAG..."
    mkdir -p "$CTX/image"
    cp worker_images/worker/Dockerfile "$CTX/image/"
    # pip resolves environment markers for the interpreter it runs on, and
    # `--python-version` does not change that: a dependency such as redis's
    # `async-timeout; python_full_version < "3.11.3"` is needed by the base's
    # python3 (Debian's 3.11.2) but not by the host's. So pip runs here with the
    # base's full version in place of the host's (same minor version, platform
    # and ABI, so the same wheels install).
    img_py="$(docker run --rm --network none "$BASE_TAG" python3 -c \
        'import platform; print(platform.python_version())')" \
        || die "cannot run python3 in $BASE_TAG"
    # flower is an extra of the image (for compose's monitoring profile), not a
    # dependency of deltarun, so it is added here rather than in pyproject.toml.
    (cd "$CTX/src" && "$PY" - "$img_py" wheel -q --disable-pip-version-check \
        --wheel-dir "$CTX/image/wheels" -c constraints.txt . flower <<'PYEOF'
import platform, sys
version = sys.argv[1]
platform.python_version = lambda: version  # read by pip's marker evaluation
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
PYEOF
    ) >"$CTX/wheel.log" 2>&1 || {
        tail -20 "$CTX/wheel.log" >&2
        die "building the wheelhouse failed (pip wheel needs PyPI on the host)"
    }
    docker build -q --force-rm --build-arg "BASE=$BASE_TAG" \
        --label "deltarun.dockerfile=$(sha <worker_images/worker/Dockerfile)" \
        --label "deltarun.inputs=$worker_want" \
        -t "$WORKER_TAG" "$CTX/image" >"$CTX/worker-build.log" 2>&1 || {
        tail -20 "$CTX/worker-build.log" >&2
        die "docker build of $WORKER_TAG failed"
    }
fi

# A rebuild leaves the previous image and the worker's build stage (which holds
# the wheelhouse) untagged; remove those, and only those, so that rebuilding on
# every change to runner/ does not fill the disk. Images a container still uses
# are kept by Docker.
docker image prune -f --filter label=deltarun.stage=worker-build >/dev/null 2>&1 || true
docker image prune -f --filter label=deltarun.inputs >/dev/null 2>&1 || true

short() { docker image inspect -f '{{.Id}}' "$1" | cut -c1-19; }
echo "worker images ready: $WORKER_TAG $(short "$WORKER_TAG") $REDIS_TAG $(short "$REDIS_TAG")" \
    "$REGISTRY_TAG $(short "$REGISTRY_TAG") $PROMETHEUS_TAG $(short "$PROMETHEUS_TAG")"
