#!/usr/bin/env bash
# Make sure a Docker engine answers. Installs Debian's docker.io when dockerd is
# missing and starts dockerd when it is not running. Idempotent; quiet when all is well.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time

if docker info >/dev/null 2>&1; then
    exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing the Docker engine from Debian packages (docker.io)..."
        "$APT_GET" update -qq
        DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq docker.io >/dev/null
    else
        echo "deltarun: no Docker engine; install Docker (Debian: 'apt-get install docker.io') and start it" >&2
        exit 1
    fi
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "deltarun: dockerd is not running; start it (for example 'sudo systemctl start docker')" >&2
        exit 1
    fi
    echo "starting dockerd (log: /var/log/deltarun-dockerd.log)..."
    nohup dockerd >/var/log/deltarun-dockerd.log 2>&1 &
fi
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.5
done
echo "deltarun: dockerd did not come up in 30 s; see /var/log/deltarun-dockerd.log" >&2
exit 1
