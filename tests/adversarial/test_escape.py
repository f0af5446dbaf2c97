"""Egress and privilege probes from inside the agent sandbox. Only loopback is ever a target."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.support import REPORT_PY, hostile
from tests.helpers import gvisor_residual

pytestmark = pytest.mark.docker


def test_no_way_out(tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    script = (
        REPORT_PY
        + f"""
import os, socket
out = {{"interfaces": sorted(os.listdir("/sys/class/net")),
        "routes": open("/proc/net/route").read().splitlines()[1:],
        "resolv": open("/etc/resolv.conf").read() if os.path.exists("/etc/resolv.conf") else ""}}
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    out["host_listener"] = "connected"
except OSError as exc:
    out["host_listener"] = type(exc).__name__
try:
    socket.getaddrinfo("deltarun-probe.invalid", 80)
    out["resolve"] = "resolved"
except OSError as exc:
    out["resolve"] = type(exc).__name__
report(out)
"""
    )
    trial = hostile(tmp_path, docker_api, f"python3 - <<'EOF'\n{script}\nEOF\n")
    try:
        listener.accept()
        reached = True
    except TimeoutError:
        reached = False
    finally:
        listener.close()
    seen = trial.answer or {}
    held(
        "egress",
        "list interfaces and routes; connect to a host listener on 127.0.0.1; resolve",
        f"interfaces {seen.get('interfaces')}, {len(seen.get('routes', []))} routes, "
        f"listener: {seen.get('host_listener')}, resolve: {seen.get('resolve')}",
    )
    assert seen.get("interfaces") == ["lo"]
    assert seen.get("routes") == []
    assert "nameserver" not in seen.get("resolv", "")
    assert seen.get("host_listener") == "ConnectionRefusedError"
    assert seen.get("resolve") == "gaierror"
    assert not reached


@gvisor_residual(
    "/proc/1/environ is readable and unshare succeeds inside gVisor's own kernel "
    "(pid 1 holds no secret: sandboxes start with an empty environment)"
)
def test_privilege_probes_fail(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    script = (
        REPORT_PY
        + r"""
import ctypes, os, subprocess
def run(cmd):
    proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    return proc.returncode
status = open("/proc/self/status").read()
out = {
    "cap_eff": [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0],
    "uid": os.getuid(),
    "docker_sock": any(os.path.exists(p) for p in ["/var/run/docker.sock", "/run/docker.sock"]),
    "env": dict(os.environ),
    "proc1_environ": run("cat /proc/1/environ"),
    "setuid_files": subprocess.run(["sh", "-c", "find / -xdev -perm /6000 -type f 2>/dev/null"],
                                   capture_output=True, text=True).stdout.split(),
    "su": run("echo | su -c id root"),
    "proc_sys": run("echo 1 > /proc/sys/kernel/sysrq"),
    "sysrq_trigger": run("echo h > /proc/sysrq-trigger"),
    "sys": run("echo 1 > /sys/kernel/profiling"),
    "mount": run("mount -t tmpfs none /tmp"),
    "unshare": run("unshare -U -r true"),
    "ptrace": ctypes.CDLL(None, use_errno=True).ptrace(16, 1, 0, 0),
}
report(out)
"""
    )
    trial = hostile(tmp_path, docker_api, f"python3 - <<'EOF'\n{script}\nEOF\n")
    seen = trial.answer or {}
    failed = [
        k
        for k in ("proc1_environ", "su", "proc_sys", "sysrq_trigger", "sys", "mount", "unshare")
        if seen.get(k) != 0
    ]
    held(
        "privilege probes",
        "CapEff, docker.sock, env, /proc/1/environ, setuid, su, /proc/sys, sysrq, /sys, "
        "mount, unshare, ptrace",
        f"CapEff {seen.get('cap_eff')}, uid {seen.get('uid')}, socket "
        f"{seen.get('docker_sock')}, setuid files {len(seen.get('setuid_files', []))}, "
        f"failed: {', '.join(failed)}, ptrace {seen.get('ptrace')}",
    )
    assert seen.get("cap_eff") == "0000000000000000" and seen.get("uid") == 1000
    assert seen.get("docker_sock") is False
    assert seen.get("setuid_files") == []
    assert len(failed) == 7, seen
    assert seen.get("ptrace") == -1
    env = seen.get("env", {})
    assert sorted(k for k in env if k.startswith("DELTARUN")) == [
        "DELTARUN_ABSTAIN_FILE",
        "DELTARUN_ANSWER_FILE",
        "DELTARUN_PROMPT_FILE",
    ]
    blob = " ".join(f"{k}={v}" for k, v in env.items())
    for secret in ("run-under-test", "job-", "hostile", "ctrl", "control"):
        assert secret not in blob
