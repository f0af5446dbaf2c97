"""Copying a fixture into a sandbox: a tar deltarun built, unpacked as the agent's uid.

The mirror of ``runner.sandbox.copy_out``; used by the agent phase and the verify phase.
"""

from __future__ import annotations

from pathlib import Path

from runner.errors import InfraError
from runner.sandbox.base import ExecRequest, Sandbox

UNPACK_TIMEOUT_S = 300.0


def unpack_as_agent(sandbox: Sandbox, dest: str, tar: Path | bytes) -> None:
    """Unpack a tar deltarun built (regular files and directories, normalised names and
    modes, owner the agent's uid) at ``dest``, by the image's ``tar`` running as the
    agent's uid: for many files about three times faster than the engine's copy, which
    unpacks as root and sets each owner. The engine's copy when the image has no tar."""
    result = sandbox.run(
        ExecRequest(
            argv=["tar", "-x", "-p", "-f", "-", "-C", dest],
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            timeout_s=UNPACK_TIMEOUT_S,
            output_cap=1 << 14,
            stdin=tar.read_bytes() if isinstance(tar, Path) else tar,
        )
    )
    if result.exit_code == 127:
        sandbox.put_archive(dest, tar)
        return
    if result.exit_code != 0 or result.timed_out:
        tail = result.output[-400:].decode("utf-8", "replace").strip()
        raise InfraError(
            f"copying the fixture into {dest} failed (exit {result.exit_code}): {tail}; "
            "a fixture larger than runtime.limits.workspace does not fit"
        )
