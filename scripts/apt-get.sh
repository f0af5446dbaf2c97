#!/usr/bin/env bash
# apt-get, one at a time. `make test` sets up its parts side by side (make -j) and dpkg
# takes one installer at a time: the others wait here for their turn instead of failing
# on dpkg's lock (and wait on that lock too, for an apt-get run outside deltarun).
set -euo pipefail
lock_dir=/run/lock
[ -d "$lock_dir" ] || lock_dir=/var/lib/apt  # a machine without /run/lock (a container)
exec flock "$lock_dir/deltarun-apt.lock" apt-get -o DPkg::Lock::Timeout=600 "$@"
