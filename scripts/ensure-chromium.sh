#!/usr/bin/env bash
# Make sure Debian's chromium is installed: the report.html test renders the
# page headless and checks the screenshot and the DOM. Idempotent; quiet.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    if "$APT_GET" update -qq >/dev/null 2>&1 \
        && "$APT_GET" install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
        && command -v chromium >/dev/null 2>&1; then
        exit 0
    fi
    echo "deltarun: could not install chromium with apt-get ('apt-get install chromium')" >&2
    exit 1
fi
echo "deltarun: chromium is missing; install it (Debian: 'apt-get install chromium')" >&2
exit 1
