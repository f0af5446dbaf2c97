"""A sandbox's own filesystems: size-capped tmpfs volumes, or copy-free views of staged trees.

``/workspace`` always, ``/io`` and the root-only ``/baseline`` for the agent phase, the agent
directory for agents that bring one. Each is a tmpfs volume of the engine's local driver,
labelled for the reaper, sized and owned as the harness needs: a volume because
``put_archive`` cannot write into a read-only root or a plain tmpfs mount. ``/workspace``
and ``/baseline`` are instead overlay views of their staged trees where views work here
(``runner.sandbox.overlay``, probed by ``runner.sandbox.view_probe``): the same owner, mode,
cap and room, no file's data copied. ``SandboxMounts.remove`` undoes all of it and never raises.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import docker.errors
from docker.types import Mount

from runner.sandbox import overlay
from runner.sandbox.base import (
    AGENT_DIR,
    AGENT_UID,
    BASELINE_DIR,
    IO_DIR,
    WORKSPACE,
    SandboxSpec,
    StagedTree,
)
from runner.sandbox.engine import API_ERRORS

log = logging.getLogger(__name__)

AGENT_DIR_BYTES = 256 << 20
ViewsWork = Callable[[str, str | None, dict[str, str]], bool]  # (image ID, runtime, labels)


class SandboxMounts:
    """The mounts of one sandbox, made by ``create`` and removed by ``remove``."""

    def __init__(self, client: Any, spec: SandboxSpec, views_work: ViewsWork) -> None:
        self.client = client
        self.spec = spec
        self.views_work = views_work
        self.volumes: list[str] = []
        self.views: dict[str, overlay.View] = {}  # mount point -> its copy-free view

    def create(self, labels: dict[str, str], digest: str) -> list[Mount]:
        """The workspace always, ``/io`` and ``/baseline`` with ``with_io``, the agent
        directory with ``with_agent_dir``; ``digest`` is the image a view probe runs."""
        spec, limits = self.spec, self.spec.limits
        owner, mode = (0, 0o1777) if spec.workspace_root_owned else (AGENT_UID, 0o755)
        mounts = [
            self._view(WORKSPACE, owner, mode, labels, digest)
            or self._volume(WORKSPACE, limits.workspace_bytes, labels, "0755")
        ]
        if spec.with_io:
            # Sticky and world-writable: root writes the prompt, the agent its answer.
            mounts.append(self._volume(IO_DIR, limits.io_bytes, labels, "1777"))
            mounts.append(
                self._view(BASELINE_DIR, 0, 0o700, labels, digest)
                or self._volume(BASELINE_DIR, limits.workspace_bytes, labels, "0700")
            )
        if spec.with_agent_dir:
            mounts.append(self._volume(AGENT_DIR, AGENT_DIR_BYTES, labels, "0755"))
        return mounts

    def remove(self) -> None:
        """Unmount the views, then remove the volumes (after the container is gone); what
        fails is left to ``deltarun gc``."""
        for view in self.views.values():
            overlay.unmount(view)
        self.views = {}
        for name in self.volumes:
            for _ in range(3):
                try:
                    self.client.remove_volume(name, force=True)
                    break
                except docker.errors.NotFound:
                    break
                except API_ERRORS:
                    time.sleep(0.2)
        self.volumes = []

    def _volume(self, target: str, size: int, labels: dict[str, str], mode: str) -> Mount:
        name = f"deltarun-{uuid.uuid4().hex[:16]}"
        options = f"size={size},uid={AGENT_UID},gid={AGENT_UID},mode={mode}"
        if target == AGENT_DIR:
            options = f"size={size},mode=0755"
        elif target == BASELINE_DIR:
            options = f"size={size},uid=0,gid=0,mode=0700"
        elif target == WORKSPACE and self.spec.workspace_root_owned:
            options = f"size={size},uid=0,gid=0,mode=1777"
        self.client.create_volume(
            name=name,
            driver="local",
            driver_opts={"type": "tmpfs", "device": "tmpfs", "o": options},
            labels=labels,
        )
        self.volumes.append(name)
        return Mount(target, name, type="volume")

    def _view(
        self, target: str, uid: int, mode: int, labels: dict[str, str], digest: str
    ) -> Mount | None:
        """``target`` as a view of its staged tree with the room of a copy in a volume of the
        workspace cap (the tree's pages are charged to the view's own tmpfs of that cap,
        ``runner.sandbox.overlay``), its top owned by ``uid`` with ``mode`` as the volume it
        replaces; None (a volume to copy into, then) without a staged tree, where views do
        not work, or for a tree larger than the cap."""
        size = self.spec.limits.workspace_bytes
        staged = self._staged_tree(target, labels, digest)
        if staged is None or staged.footprint >= size:
            return None
        try:
            view = overlay.mount_view(staged.path, size, uid, mode)
        except OSError as exc:
            log.warning("copy-free %s of %s failed, copying: %s", target, staged.path, exc)
            return None
        self.views[target] = view
        return Mount(target, str(view.merged), type="bind")

    def _staged_tree(self, target: str, labels: dict[str, str], digest: str) -> StagedTree | None:
        spec = self.spec
        tree = spec.staged_trees.get(target)
        if tree is None or not self.views_work(digest, spec.oci_runtime, labels):
            return None
        try:
            return tree()
        except OSError as exc:  # a cache that cannot be written: copy instead
            log.warning("the staged tree could not be made, copying: %s", exc)
            return None
