#!/usr/bin/env bash
# Make sure redis-server is installed (the distribution tests start their own
# servers on free loopback ports). Installs Debian's redis-server when missing.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing redis-server from Debian packages..."
    "$APT_GET" update -qq
    DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq redis-server >/dev/null
    # The tests run their own servers; the packaged service is not needed.
    (service redis-server stop || true) >/dev/null 2>&1
    exit 0
fi
echo "deltarun: redis-server is missing; install it (Debian: 'apt-get install redis-server')" >&2
exit 1
