"""Sandbox images shipped to workers through an image registry, trusted by image ID alone.

The coordinator (``deltarun run --broker URL --registry HOST:PORT``) pushes every
image the run uses, once (``push``: skipped when the registry already holds a
manifest for the tag whose config is that very image), and publishes in Redis
(``publish``) each tag with its pinned image ID and the registry reference by
manifest digest. A worker that lacks an image pulls it by that digest and keeps
it only when its image ID equals the pin (``ensure``); the registry, the tag and
the network are never trusted, only the ID the run pinned.

Transport: Docker talks plain HTTP to a registry on a loopback address
(127.0.0.0/8 is an insecure registry by default), so a registry on this host, or
reached through an SSH tunnel (``-L 5000:127.0.0.1:5000``), needs no TLS. A
registry on another address needs TLS, or that address in the daemon's
``/etc/docker/daemon.json`` ``"insecure-registries"`` on every machine.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import redis
import requests
from docker.utils import parse_repository_tag

from runner.distributed import keys
from runner.distributed.signing import sign_image
from runner.errors import DeltarunError, DigestMismatch, InfraError, UserError
from runner.sandbox.engine import API_ERRORS

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)
HTTP_TIMEOUT_S = 10
_HOST_PORT = re.compile(
    r"\A(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\]):\d{1,5}\Z"
)
_DIGEST = re.compile(r"\Asha256:[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Published:
    """What the coordinator publishes for one sandbox image tag: the pinned image ID and,
    with ``--registry``, the reference to pull it by (``HOST:PORT/repo@sha256:...``)."""

    id: str
    ref: str | None = None


def check_address(registry: str) -> str:
    """``registry`` when it is ``HOST:PORT`` (no scheme, no path); ``UserError`` otherwise."""
    if not _HOST_PORT.match(registry) or not 0 < int(registry.rsplit(":", 1)[1]) < 65536:
        raise UserError(
            f"--registry {registry!r}: not HOST:PORT; write it like 127.0.0.1:5000 "
            "(no scheme: Docker chooses HTTP for loopback, HTTPS otherwise)"
        )
    return registry


def is_loopback(registry: str) -> bool:
    """A registry Docker reaches without TLS by default (127.0.0.0/8, ::1, localhost)."""
    host = registry.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "network is unreachable")


def _down(registry: str, exc: BaseException, pulling: bool = False) -> UserError:
    """One line naming the registry and the fix; a worker's engine may need a tunnel."""
    fix = (
        "start it (`docker-compose up -d registry` on the coordinator's server) or make it "
        f"reachable here (ssh -N -L {registry.rsplit(':', 1)[1]}:127.0.0.1:"
        f"{registry.rsplit(':', 1)[1]} coordinator-host)"
        if pulling
        else "start it (`docker-compose up -d registry`) or fix --registry HOST:PORT"
    )
    return UserError(f"registry {registry} is unreachable ({type(exc).__name__}); {fix}")


def _get(
    registry: str, path: str, accept: str | None = None, scheme: str | None = None
) -> requests.Response:
    """GET ``path`` of the registry's HTTP API v2: plain HTTP for loopback, HTTPS otherwise
    (falling back to HTTP, as Docker does for an insecure registry)."""
    scheme = scheme or ("http" if is_loopback(registry) else "https")
    headers = {"Accept": accept} if accept else {}
    try:
        return requests.get(f"{scheme}://{registry}{path}", headers=headers, timeout=HTTP_TIMEOUT_S)
    except requests.exceptions.SSLError as exc:
        if scheme == "https":
            return _get(registry, path, accept, "http")
        raise _down(registry, exc) from exc
    except requests.exceptions.RequestException as exc:
        raise _down(registry, exc) from exc


def check(registry: str) -> None:
    """The registry answers its API root (``/v2/``); one line naming it and the fix if not."""
    response = _get(check_address(registry), "/v2/")
    if response.status_code not in (200, 401):  # 401: it asks for `docker login` credentials
        raise UserError(
            f"registry {registry}: /v2/ answered HTTP {response.status_code}; "
            "is this an OCI registry (Docker Registry HTTP API v2)?"
        )


def remote_name(image: str, registry: str) -> tuple[str, str]:
    """The repository in the registry and the tag of a local image tag:
    ``deltarun/sandbox-python:bookworm`` → ``(HOST:PORT/deltarun/sandbox-python, bookworm)``."""
    if "@" in image:
        raise UserError(f"image {image!r}: a run's images are tags (name:tag), not digests")
    repository, tag = parse_repository_tag(image)
    return f"{registry}/{repository}", tag or "latest"


def held_digest(registry: str, image: str, image_id: str) -> str | None:
    """The manifest digest the registry serves for ``image``'s tag when that manifest's
    config is ``image_id`` (the image ID is the config's digest); None otherwise."""
    repository, tag = remote_name(image, registry)
    path = repository.split("/", 1)[1]
    response = _get(registry, f"/v2/{path}/manifests/{tag}", accept=", ".join(MANIFEST_TYPES))
    if response.status_code != 200:
        return None  # 404: not there; 401: credentials docker has and we do not; push anyway
    try:
        config = response.json()["config"]["digest"]
    except (ValueError, KeyError, TypeError):
        return None  # a manifest list or an older schema: not the pinned config
    digest = response.headers.get("Docker-Content-Digest", "")
    if config != image_id or not _DIGEST.match(digest):
        return None
    return digest


def push(
    client: docker.APIClient,
    image: str,
    image_id: str,
    registry: str,
    say: Callable[[str], None] = lambda line: None,
) -> str:
    """Push the local image ``image_id`` as ``image``'s tag in ``registry``; return
    ``HOST:PORT/repo@sha256:<manifest digest>``. Skipped when the registry already serves
    that tag with that very image."""
    repository, tag = remote_name(image, registry)
    digest = held_digest(registry, image, image_id)
    if digest is None:
        say(f"pushing {image} ({image_id[:19]}) to {registry}...")
        try:
            client.tag(image_id, repository, tag, force=True)
            _stream(client.push(repository, tag=tag, stream=True, decode=True), registry)
        except docker.errors.ImageNotFound as exc:
            raise UserError(
                f"image {image} ({image_id}) is not present on this machine: the run pins that "
                "ID; rebuild it, or resume on the machine that has it"
            ) from exc
        except docker.errors.APIError as exc:
            raise _engine_error(registry, str(exc.explanation or exc), False) from exc
        except API_ERRORS as exc:
            raise InfraError(f"docker push {repository}:{tag} failed: {_one_line(exc)}") from exc
        digest = held_digest(registry, image, image_id)
        if digest is None:
            raise InfraError(
                f"registry {registry}: after the push, {repository}:{tag} does not serve "
                f"image {image_id}; another push to the same tag raced this one?"
            )
    else:
        say(f"{image} ({image_id[:19]}) already in {registry}")
    return f"{repository}@{digest}"


def push_all(
    client: docker.APIClient,
    digests: Mapping[str, str],
    registry: str,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Published]:
    """Push every image of a run (tag → pinned image ID), each once; what to publish."""
    return {
        tag: Published(image_id, push(client, tag, image_id, registry, say))
        for tag, image_id in sorted(digests.items())
    }


def ensure(client: docker.APIClient, reference: str | None, pinned_id: str, tag: str) -> str:
    """Make the pinned image present as ``tag``: present locally with that ID → tagged and
    done; otherwise pulled by ``reference`` (a digest) and kept only when its image ID is
    the pin. Returns ``"present"`` or ``"pulled"``; ``DigestMismatch`` names both IDs."""
    have = _local_id(client, tag)
    if have != pinned_id and _local_id(client, pinned_id) == pinned_id:
        _tag(client, pinned_id, tag)  # present under another name (a pull by digest, say)
        have = pinned_id
    if have == pinned_id:
        return "present"
    if reference is None:
        raise UserError(
            f"{tag}: this machine has {have or 'no such image'}, the run pins {pinned_id}, and "
            "there is no registry reference to pull it by (a run started with --registry "
            "publishes one; a worker with --no-registry-pull never pulls); build the pinned "
            "image here or use a registry"
        )
    before = _local_ids(client)
    _pull(client, reference)
    got = _local_id(client, reference)
    if got != pinned_id:
        if got is not None and got not in before:
            _remove(client, got)
        raise DigestMismatch(
            f"{tag}: {reference} is image {got}, the run pins {pinned_id}; refused "
            "(the worker trusts the pinned image ID, never the registry)"
        )
    _tag(client, pinned_id, tag)
    return "pulled"


def publish(
    client: redis.Redis, images: Mapping[str, Published], key: bytes, run_id: str | None = None
) -> None:
    """Publish each tag's pin and reference in ``deltarun:images`` (tag → JSON), signed with
    the job key: a worker pulls and serves only entries its own key signed. With ``run_id``,
    also the run's own list of pins (``keys.run_images``): what a worker with a disk budget
    pulls before the run's first job and keeps while the run is live."""
    if run_id is not None:
        pins = json.dumps({tag: p.id for tag, p in sorted(images.items())})
        client.set(keys.run_images(run_id), pins, ex=keys.RUN_KEY_TTL_S)
    if images:
        client.hset(
            keys.images(),
            mapping={
                tag: json.dumps(
                    {"id": p.id, "ref": p.ref, "sig": sign_image(key, tag, p.id, p.ref)}
                )
                for tag, p in images.items()
            },
        )


def published(client: redis.Redis, key: bytes) -> dict[str, Published]:
    """Every tag a coordinator published, with its pin and reference; entries not signed
    with ``key`` (not written by this fleet's coordinators) and malformed ones are left out."""
    found: dict[str, Published] = {}
    raw: dict[bytes, bytes] = client.hgetall(keys.images())  # type: ignore[assignment]
    for tag, value in raw.items():
        try:
            entry = json.loads(value)
            pin, ref, sig = entry["id"], entry.get("ref"), entry.get("sig")
        except (ValueError, KeyError, TypeError):
            continue
        name = tag.decode("utf-8", "replace")
        if not (
            isinstance(pin, str) and _DIGEST.match(pin) and (ref is None or isinstance(ref, str))
        ):
            continue
        if isinstance(sig, str) and hmac.compare_digest(sig, sign_image(key, name, pin, ref)):
            found[name] = Published(pin, ref)
    return found


def _stream(lines: Iterable[dict[str, Any]], registry: str, pulling: bool = False) -> None:
    """Drain a push or pull progress stream; the Engine reports failures inside it."""
    for line in lines:
        error = line.get("error") or (line.get("errorDetail") or {}).get("message")
        if error:
            raise _engine_error(registry, str(error), pulling)


def _engine_error(registry: str, text: str, pulling: bool) -> DeltarunError:
    """The Engine's failure to reach or use ``registry``, as one line with its fix."""
    if any(needle in text for needle in _UNREACHABLE):
        return _down(registry, ConnectionError(text), pulling)
    if "server gave HTTP response to HTTPS client" in text:
        return UserError(
            f"registry {registry} speaks plain HTTP and is not on loopback: give it TLS, "
            f'add "{registry}" to "insecure-registries" in /etc/docker/daemon.json, '
            "or reach it through an SSH tunnel on 127.0.0.1"
        )
    return InfraError(f"registry {registry}: {_one_line(text)}")


def _pull(client: docker.APIClient, reference: str) -> None:
    registry = reference.split("/", 1)[0]
    try:
        _stream(client.pull(reference, stream=True, decode=True), registry, pulling=True)
    except docker.errors.APIError as exc:  # the Engine refused before streaming
        raise _engine_error(registry, str(exc.explanation or exc), True) from exc
    except API_ERRORS as exc:
        raise InfraError(f"docker pull {reference} failed: {_one_line(exc)}") from exc


def _local_id(client: docker.APIClient, name: str) -> str | None:
    try:
        return str(client.inspect_image(name)["Id"])  # type: ignore[no-untyped-call]
    except docker.errors.ImageNotFound:
        return None
    except API_ERRORS as exc:
        raise InfraError(f"Docker failed to inspect image {name!r}: {_one_line(exc)}") from exc


def _local_ids(client: docker.APIClient) -> set[str]:
    try:
        return {str(i) for i in client.images(all=True, quiet=True)}
    except API_ERRORS as exc:
        raise InfraError(f"Docker failed to list images: {_one_line(exc)}") from exc


def _tag(client: docker.APIClient, image_id: str, tag: str) -> None:
    repository, name = parse_repository_tag(tag)
    try:
        client.tag(image_id, repository, name or "latest", force=True)
    except API_ERRORS as exc:
        raise InfraError(f"Docker failed to tag {image_id} as {tag}: {_one_line(exc)}") from exc


def _remove(client: docker.APIClient, image_id: str) -> None:
    try:
        client.remove_image(image_id, force=True)
    except API_ERRORS:
        pass  # refused either way; a dangling image is `docker image prune`'s


def _one_line(value: object) -> str:
    return " ".join(str(value).split())[:300]
