"""The Docker Engine API client: connecting to the engine, image IDs, and its errors.

One definition of what a failing engine call raises (``API_ERRORS``), shared by
the sandbox adapter and the model gateway; translated at each boundary into
``SandboxError`` (infrastructure during a trial) or ``UserError`` (a setup the
user fixes), ``from exc``. ``exit_code`` reads an ended command's exit status,
``oom_kills`` a container's count of processes the OOM killer ended, ``path_stat`` a
file's size and modification time without copying it out.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Mapping
from urllib.parse import quote

import docker
import docker.errors
import requests.exceptions
from docker.utils import kwargs_from_env

from runner.errors import SandboxError, UserError

API_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)
EXIT_WAIT_S = 5.0
log = logging.getLogger("deltarun.engine")


def exit_code(client: docker.APIClient, exec_id: str, within_s: float = EXIT_WAIT_S) -> int | None:
    """The exit status of a command whose output stream has ended; None if the engine still
    has none after ``within_s``. The engine can close the stream before it records the exit
    (under load, a few milliseconds later): read at once, a command that exited 0 came back
    as None, which a harness step took for a failure (``realpath`` of a tool call refused as
    "cannot resolve", an agent's patch never applied). Raises ``API_ERRORS``."""
    deadline = time.monotonic() + within_s
    pause = 0.005
    while True:
        found = client.exec_inspect(exec_id)
        code = found.get("ExitCode")
        if code is not None and not found.get("Running"):
            return int(code)
        if time.monotonic() >= deadline:
            return None if code is None else int(code)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def connect(api_timeout_s: int = 60) -> docker.APIClient:
    """A low-level Engine API client; raises ``UserError`` with a fix when Docker is absent."""
    try:
        # DOCKER_HOST / DOCKER_TLS_VERIFY / DOCKER_CERT_PATH are honoured like the docker CLI.
        kwargs = kwargs_from_env()
        client = docker.APIClient(version="auto", timeout=int(api_timeout_s), **kwargs)
        client.ping()
    except API_ERRORS as exc:
        raise UserError(
            "Docker engine not reachable (is dockerd running and DOCKER_HOST right?); "
            "start it, or run `make setup` which installs and starts it"
        ) from exc
    return client


def image_id(client: docker.APIClient, image: str) -> str:
    """The local ID (sha256:...) of an image, or a ``UserError`` naming how to build it."""
    try:
        return str(client.inspect_image(image)["Id"])  # type: ignore[no-untyped-call]
    except docker.errors.ImageNotFound as exc:
        raise UserError(
            f"sandbox image {image!r} is not present on this machine; build it with `make images`"
        ) from exc
    except API_ERRORS as exc:
        raise SandboxError(f"Docker failed to inspect image {image!r}: {exc}") from exc


# Names under which an engine lists containerd's own shims beside runc (Docker 20.10 after a
# cold start lists io.containerd.runc.v2 and io.containerd.runtime.v1.linux; after a reload
# it does not). They are aliases of runc, not runtimes a protocol can ask for.
_CONTAINERD_SHIM_PREFIX = "io.containerd."


def engine_runtimes(client: docker.APIClient) -> tuple[str, ...]:
    """The OCI runtimes the Docker engine has registered (``docker info``), e.g. runc, runsc.

    containerd's shim aliases are left out, so the list is the same whether the engine was
    started cold or reloaded after ``make gvisor``; an engine that will not say has only its
    default runtime (an empty tuple)."""
    try:
        names = (client.info().get("Runtimes") or {}).keys()
        return tuple(sorted(n for n in names if not n.startswith(_CONTAINERD_SHIM_PREFIX)))
    except Exception as exc:  # an engine that will not say: the default runtime only
        log.warning("docker info failed (%s): the default runtime only", exc)
        return ()


def oom_kills(
    client: docker.APIClient, container: str, environment: Mapping[str, str] | None = None
) -> int:
    """How many processes the kernel's OOM killer ended in ``container`` (cgroup v1 or v2);
    0 when the engine cannot say. Run as root from ``/`` with ``environment`` (the image's
    variables blanked, ``runner.sandbox.image_env.root_env``)."""
    script = (
        "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control "
        "2>/dev/null | awk '$1 == \"oom_kill\" {n += $2} END {print n + 0}'"
    )
    try:
        exec_id = client.exec_create(
            container,
            ["sh", "-c", script],
            user="0:0",
            workdir="/",
            environment=dict(environment or {}),
        )
        out = client.exec_start(exec_id["Id"])
    except API_ERRORS:
        return 0
    text = out.decode("ascii", "replace").strip() if isinstance(out, bytes) else ""
    return int(text) if text.isdigit() else 0


def path_stat(client: docker.APIClient, container: str, path: str) -> tuple[int, str] | None:
    """(size, modification time) of ``path`` in ``container``, from the engine's stat of it
    (``HEAD /containers/{id}/archive``); None when it is absent or the engine cannot say.

    Why not read it: a copy out of a container (``get_archive``) starts one of the engine's
    tar processes, about 50 ms of CPU on this project's machines, where a stat costs under
    2 ms; a reader polling a file that seldom changes reads it only when its stat did.
    """
    try:
        answer = client.head(
            f"{client.base_url}/v{client.api_version}/containers/{quote(container, safe='')}"
            "/archive",
            params={"path": path},
            timeout=client.timeout,
        )
        header = answer.headers.get("X-Docker-Container-Path-Stat")
        if answer.status_code != 200 or header is None:
            return None
        stat = json.loads(base64.b64decode(header))
        return int(stat["size"]), str(stat["mtime"])
    except (*API_ERRORS, binascii.Error, ValueError, KeyError, TypeError):
        return None
