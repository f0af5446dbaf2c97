"""Whether copy-free workspaces work here: this process mounts a view, the engine sees it.

Asked once per (engine, OCI runtime) by ``DockerSandboxFactory`` before the first sandbox
that could take a view (``runner.sandbox.overlay``). The answer comes from doing it: a
view of a one-file tree holding a random token is mounted, and a throw-away container of
the sandbox's own image reads the token through a bind mount of it. A worker whose
mounts the engine does not see (a container with the host's socket, another mount
namespace) reads nothing or something else, and keeps the copy path; so does a process
that may not mount at all.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import time
from typing import Any

from runner.sandbox import overlay
from runner.sandbox.engine import API_ERRORS

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0


def views_work(client: Any, image: str, runtime: str | None, labels: dict[str, str]) -> str | None:
    """None when a view mounted here is what a container of ``image`` sees at its mount
    point; else why not, in a few words (the copy path is used then). ``labels`` are a
    sandbox's, so that ``gc`` removes a probe its killed owner left."""
    if overlay.mode_requested() == "copy":
        return "DELTARUN_WORKSPACES=copy"
    base = overlay.views_root()
    token = secrets.token_hex(16)
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        tree = base / f"probe-{secrets.token_hex(6)}"
        tree.mkdir(mode=0o755)
    except OSError as exc:
        return f"{base} cannot be made ({exc.strerror or exc})"
    try:
        (tree / "token").write_text(token, encoding="ascii")
        try:
            view = overlay.mount_view(tree, 1 << 20, 0, 0o755, base)
        except OSError as exc:
            return f"this process cannot mount an overlay ({exc.strerror or exc})"
        try:
            seen = _read_through(client, image, runtime, labels, str(view.merged))
        finally:
            overlay.unmount(view)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    if seen != token:
        return "the Docker engine does not see this process's mounts"
    return None


def _read_through(
    client: Any, image: str, runtime: str | None, labels: dict[str, str], source: str
) -> str | None:
    """What a container of ``image`` reads at ``/probe/token`` with ``source`` bound there."""
    container = None
    try:
        container = client.create_container(
            image,
            command=["cat", "/probe/token"],
            entrypoint=[],  # the image's own ENTRYPOINT and HEALTHCHECK never run here
            healthcheck={"test": ["NONE"]},
            user="0:0",
            labels=labels,
            network_disabled=True,
            host_config=client.create_host_config(
                binds={source: {"bind": "/probe", "mode": "ro"}},
                network_mode="none",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                runtime=runtime,
            ),
        )["Id"]
        client.start(container)
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while time.monotonic() < deadline:
            if client.inspect_container(container)["State"]["Status"] == "exited":
                break
            time.sleep(0.05)
        out = client.logs(container, stdout=True, stderr=False)
        return bytes(out).decode("ascii", "replace").strip()
    except API_ERRORS as exc:
        log.info("the copy-free workspace probe failed: %s", exc)
        return None
    finally:
        if container is not None:
            try:
                client.remove_container(container, force=True)
            except API_ERRORS:
                pass
