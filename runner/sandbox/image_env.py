"""The environment an image gives its sandboxes' commands, read once per image ID per
factory: the directories its ``deltarun.path`` label puts first on PATH
(``runner.sandbox.instance_layer``), and the names of its ``ENV`` variables, which the
engine adds to every command and which deltarun's own commands as root do without.

Why root does without: a loader variable of an ordinary image (``ENV LD_LIBRARY_PATH=
/opt/lib:$LD_LIBRARY_PATH`` leaves an empty entry, which the loader reads as the working
directory, the workspace) would make the harness's root commands (the patch's git, the
collector that reads the test results, the process census) load a library the agent or
the code under test wrote there. ``LD_PRELOAD``, ``LD_AUDIT``, ``GCONV_PATH`` and git's
own variables are the same door. An empty value is no entry; PATH stays the request's."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import docker

from runner.errors import SandboxError
from runner.sandbox.base import ExecRequest
from runner.sandbox.engine import API_ERRORS
from runner.sandbox.instance_layer import PATH_LABEL, REPO_LABEL, path_of_label, with_path


class ImagePaths:
    """Image ID -> the directories its label puts first on PATH (none without a label) and
    the names of its environment's variables."""

    def __init__(self, client: docker.APIClient) -> None:
        self.client = client
        self._known: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def of(self, image_id: str) -> tuple[str, ...]:
        return self._read(image_id)[0]

    def names(self, image_id: str) -> tuple[str, ...]:
        """The names of the variables the image's ``ENV`` sets."""
        return self._read(image_id)[1]

    def _read(self, image_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        with self._lock:
            if image_id in self._known:
                return self._known[image_id]
        try:
            data: dict[str, Any] = self.client.inspect_image(image_id)  # type: ignore[no-untyped-call]
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to inspect image {image_id[:19]}: {exc}") from exc
        config = data.get("Config") or {}
        labels = config.get("Labels") or {}
        found = path_of_label(labels.get(PATH_LABEL), labels.get(REPO_LABEL))
        names = tuple(str(e).split("=", 1)[0] for e in config.get("Env") or [])
        with self._lock:
            self._known[image_id] = (found, names)
        return found, names


def root_env(names: Sequence[str]) -> dict[str, str]:
    """Each of the image's variables but PATH, blanked: added under a root command's own."""
    return {name: "" for name in names if name and name != "PATH"}


def in_environment(
    request: ExecRequest, path: tuple[str, ...], names: Sequence[str] = ()
) -> ExecRequest:
    """``request`` with the image's environment first on its PATH: the agent, the install
    step, the tests and the harness's scripts all run with it. Its directories are the
    image's own, on the read-only root, never where a sandbox writes (checked when the
    label is read, and by the preflight inside the image). A command as root (deltarun's
    own: uid 0 however the user is written) gets the image's other variables (``names``)
    blanked."""
    if names and request.user.split(":", 1)[0] in ("0", "root"):
        request = replace(request, env={**root_env(names), **request.env})
    if not path or "PATH" not in request.env:
        return request
    return replace(request, env={**request.env, "PATH": with_path(request.env["PATH"], path)})
