#!/usr/bin/env bash
# Make sure Debian's docker-registry (the reference OCI registry) is installed:
# the registry tests start their own registry processes on free loopback ports
# with temporary storage. Installs the package when missing.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
if command -v docker-registry >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing docker-registry from Debian packages..."
    "$APT_GET" update -qq
    DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq --no-install-recommends docker-registry >/dev/null
    # The tests run their own registries; the packaged service is not needed.
    (service docker-registry stop || true) >/dev/null 2>&1
    exit 0
fi
echo "deltarun: docker-registry is missing; install it (Debian: 'apt-get install docker-registry')" >&2
exit 1
