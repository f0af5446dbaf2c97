#!/usr/bin/env bash
# Make sure gVisor's runsc is installed (Debian's package) and registered with
# the running Docker engine as the OCI runtime "runsc", for
# `runtime.oci_runtime: runsc` in the controls. Idempotent; quiet when all is well.
#
# The runtime is added to /etc/docker/daemon.json ("runtimes", the file's other
# settings kept) and the engine reloads it on SIGHUP: a running engine is never
# restarted, so running sandboxes and workers are not disturbed. Its arguments:
#   --network=none    gVisor's own network stack refuses to start on hosts like
#                     this one ("cannot run with network enabled in root network
#                     namespace"); sandboxes under runsc have no network at all, so
#                     deltarun refuses runsc for model-only runs and installed
#                     agents at plan time (they need the gateway's network).
#   --platform=ptrace works without KVM, in VMs and containers alike.
set -euo pipefail
APT_GET="$(cd "$(dirname "$0")" && pwd)/apt-get.sh"  # one apt-get at a time
DAEMON_JSON=${DELTARUN_DAEMON_JSON:-/etc/docker/daemon.json}
if ! command -v runsc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        if ! { "$APT_GET" update -qq >/dev/null 2>&1 \
            && "$APT_GET" install -y -qq --no-install-recommends runsc >/dev/null 2>&1; }; then
            echo "deltarun: could not install runsc with apt-get ('apt-get install runsc')" >&2
            exit 1
        fi
    else
        echo "deltarun: runsc (gVisor) is missing; install it (Debian: 'apt-get install runsc')" >&2
        exit 1
    fi
fi
RUNSC=$(command -v runsc)
changed=$(python3 - "$DAEMON_JSON" "$RUNSC" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
config = {}
if os.path.exists(path):
    with open(path) as handle:
        text = handle.read().strip()
    config = json.loads(text) if text else {}
want = {"path": runsc, "runtimeArgs": ["--network=none", "--platform=ptrace"]}
runtimes = config.setdefault("runtimes", {})
if runtimes.get("runsc") == want:
    print("no")
else:
    runtimes["runsc"] = want
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(config, handle, indent=2)
        handle.write("\n")
    os.replace(path + ".tmp", path)
    print("yes")
PY
)
if [ "$changed" = yes ]; then
    if pid=$(pgrep -x dockerd); then
        kill -HUP $pid
    fi
fi
for _ in $(seq 1 50); do
    if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
        [ "$changed" = yes ] && echo "gVisor: runsc registered with the Docker engine ($DAEMON_JSON)"
        exit 0
    fi
    sleep 0.2
done
echo "deltarun: the Docker engine does not list runsc after reloading $DAEMON_JSON; is dockerd running ('make docker')?" >&2
exit 1
