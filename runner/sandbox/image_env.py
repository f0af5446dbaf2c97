"""The environment an image names for its sandboxes' commands: its ``deltarun.path``
label (``runner.sandbox.instance_layer``), read once per image ID per factory."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import docker

from runner.errors import SandboxError
from runner.sandbox.base import ExecRequest
from runner.sandbox.engine import API_ERRORS
from runner.sandbox.instance_layer import PATH_LABEL, REPO_LABEL, path_of_label, with_path


class ImagePaths:
    """Image ID -> the directories its label puts first on PATH (none without a label)."""

    def __init__(self, client: docker.APIClient) -> None:
        self.client = client
        self._known: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def of(self, image_id: str) -> tuple[str, ...]:
        with self._lock:
            if image_id in self._known:
                return self._known[image_id]
        try:
            data: dict[str, Any] = self.client.inspect_image(image_id)  # type: ignore[no-untyped-call]
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to inspect image {image_id[:19]}: {exc}") from exc
        labels = (data.get("Config") or {}).get("Labels") or {}
        found = path_of_label(labels.get(PATH_LABEL), labels.get(REPO_LABEL))
        with self._lock:
            self._known[image_id] = found
        return found


def in_environment(request: ExecRequest, path: tuple[str, ...]) -> ExecRequest:
    """``request`` with the image's environment first on its PATH: the agent, the install
    step, the tests and the harness's scripts all run with it. Its directories are the
    image's own, on the read-only root, never where a sandbox writes (checked when the
    label is read, and by the preflight inside the image)."""
    if not path or "PATH" not in request.env:
        return request
    return replace(request, env={**request.env, "PATH": with_path(request.env["PATH"], path)})
