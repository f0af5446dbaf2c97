#!/usr/bin/env bash
# Make sure a Compose implementation is installed (the compose test brings
# compose.yaml up and down) and openssl (`make certs`, the TLS tests). Installs
# Debian's docker-compose and openssl when missing.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
missing=()
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} from Debian packages..."
    "$APT_GET" update -qq
    DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    exit 0
fi
echo "deltarun: ${missing[*]} missing; install (Debian: 'apt-get install ${missing[*]}')" >&2
exit 1
