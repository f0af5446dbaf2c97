"""Blobs in an image registry: the run's archives kept out of Redis memory.

With ``deltarun run --registry HOST:PORT`` every content-addressed input (suite
file, fixture and hidden archives, git bundles, agent directories, the metrics
module) is stored in the registry's repository ``deltarun/blobs`` through the
registry's HTTP API v2 (the OCI distribution API): a monolithic blob upload
(``POST /v2/<name>/blobs/uploads/`` then ``PUT <location>?digest=...``), skipped
when ``HEAD /v2/<name>/blobs/<digest>`` finds it, and fetched by digest
(``GET /v2/<name>/blobs/<digest>``). A worker re-hashes every byte it fetches
(``runner.distributed.blobs``): the registry and the network are trusted with
nothing but availability.

A registry keeps a blob only while a manifest refers to it (its garbage collector
removes the rest), so each protocol's blobs are listed in one OCI manifest tagged
``protocol-<sha256>`` (``keep``); ``drop`` deletes that manifest once no unfinished
run needs it (``deltarun gc --broker``), and the registry's own
``garbage-collect`` then reclaims the bytes (docs/many-machines.md).

Addresses: HTTP for a loopback registry, HTTPS otherwise, as Docker does; a worker
that reaches the registry under another name (a compose service, say) is told it
with ``DELTARUN_BLOB_REGISTRY=URL``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import requests

from runner.distributed.registry import check_address, is_loopback
from runner.errors import DigestMismatch, InfraError, UserError
from runner.hashing import sha256_bytes

REPOSITORY = "deltarun/blobs"
BLOB_MEDIA_TYPE = "application/vnd.deltarun.blob"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = b"{}"
EMPTY_CONFIG_TYPE = "application/vnd.oci.empty.v1+json"
TIMEOUT_S = (10, 300)  # connect, read: a blob may be hundreds of MB
CHUNK = 1 << 20
ENV_OVERRIDE = "DELTARUN_BLOB_REGISTRY"


def base_url(registry: str) -> str:
    """``http(s)://HOST:PORT`` of a registry named as ``HOST:PORT``, or a full URL."""
    if registry.startswith(("http://", "https://")):
        return registry.rstrip("/")
    check_address(registry)
    return f"{'http' if is_loopback(registry) else 'https'}://{registry}"


def worker_url(published: str) -> str:
    """Where this process reaches the registry the bundle names: ``DELTARUN_BLOB_REGISTRY``
    when set (the operator's own address for it), else the published address."""
    return base_url(os.environ.get(ENV_OVERRIDE) or published)


def _digest(sha256: str) -> str:
    return f"sha256:{sha256}"


class RegistryBlobs:
    """One registry's ``deltarun/blobs`` repository."""

    def __init__(self, registry: str) -> None:
        self.registry = registry
        self.url = base_url(registry)
        self.session = requests.Session()

    def _call(self, method: str, path: str, **kwargs: object) -> requests.Response:
        url = path if path.startswith(("http://", "https://")) else f"{self.url}{path}"
        try:
            return self.session.request(method, url, timeout=TIMEOUT_S, **kwargs)  # type: ignore[arg-type]
        except requests.exceptions.RequestException as exc:
            raise InfraError(
                f"blob registry {self.registry} is unreachable ({type(exc).__name__}); start "
                f"it or point {ENV_OVERRIDE} at an address this machine reaches"
            ) from exc

    def has(self, sha256: str) -> bool:
        found = self._call("HEAD", f"/v2/{REPOSITORY}/blobs/{_digest(sha256)}")
        return found.status_code == 200

    def put(self, sha256: str, data: bytes | Path) -> None:
        """Upload one blob (monolithic); the registry checks the digest too."""
        if self.has(sha256):
            return
        started = self._call("POST", f"/v2/{REPOSITORY}/blobs/uploads/")
        location = started.headers.get("Location")
        if started.status_code != 202 or not location:
            raise UserError(
                f"registry {self.registry} refused a blob upload (HTTP {started.status_code}); "
                "it must accept pushes (no read-only mode) for --registry"
            )
        if location.startswith("/"):
            location = f"{self.url}{location}"
        joiner = "&" if "?" in location else "?"
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, Path):
            headers["Content-Length"] = str(data.stat().st_size)
            with data.open("rb") as body:
                done = self._call(
                    "PUT", f"{location}{joiner}digest={_digest(sha256)}", data=body, headers=headers
                )
        else:
            done = self._call(
                "PUT", f"{location}{joiner}digest={_digest(sha256)}", data=data, headers=headers
            )
        if done.status_code != 201:
            raise InfraError(
                f"registry {self.registry}: blob {sha256[:12]} upload ended with HTTP "
                f"{done.status_code}: {done.text[:200]!r}"
            )

    def fetch_to(self, sha256: str, target: Path) -> bool:
        """Stream a blob into ``target`` (a new file), hashing as it comes: False when the
        registry has no such blob; ``DigestMismatch`` when the bytes are not the digest."""
        response = self._call("GET", f"/v2/{REPOSITORY}/blobs/{_digest(sha256)}", stream=True)
        if response.status_code == 404:
            return False
        if response.status_code != 200:
            raise InfraError(
                f"registry {self.registry}: blob {sha256[:12]} answered HTTP {response.status_code}"
            )
        digest = hashlib.sha256()
        with target.open("wb") as out:
            for chunk in response.iter_content(CHUNK):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            target.unlink(missing_ok=True)
            raise DigestMismatch(
                f"blob {sha256}: registry {self.registry} sent bytes with digest "
                f"{digest.hexdigest()}"
            )
        return True

    def keep(self, tag: str, blobs: Mapping[str, int]) -> None:
        """One manifest tagged ``tag`` that refers to every blob (digest → size), so the
        registry's garbage collector keeps them until ``drop``."""
        config = sha256_bytes(EMPTY_CONFIG)
        self.put(config, EMPTY_CONFIG)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": EMPTY_CONFIG_TYPE,
                "digest": _digest(config),
                "size": len(EMPTY_CONFIG),
            },
            "layers": [
                {"mediaType": BLOB_MEDIA_TYPE, "digest": _digest(sha), "size": size}
                for sha, size in sorted(blobs.items())
            ],
        }
        body = json.dumps(manifest, sort_keys=True).encode()
        done = self._call(
            "PUT",
            f"/v2/{REPOSITORY}/manifests/{tag}",
            data=body,
            headers={"Content-Type": MANIFEST_TYPE},
        )
        if done.status_code != 201:
            raise InfraError(
                f"registry {self.registry}: the manifest keeping {tag}'s blobs was refused "
                f"(HTTP {done.status_code}: {done.text[:200]!r})"
            )

    def drop(self, tag: str) -> bool:
        """Delete the manifest ``tag`` (its blobs become garbage to the registry's collector);
        False when there is none."""
        found = self._call(
            "HEAD", f"/v2/{REPOSITORY}/manifests/{tag}", headers={"Accept": MANIFEST_TYPE}
        )
        digest = found.headers.get("Docker-Content-Digest")
        if found.status_code != 200 or not digest:
            return False
        gone = self._call("DELETE", f"/v2/{REPOSITORY}/manifests/{digest}")
        if gone.status_code not in (202, 404):
            raise UserError(
                f"registry {self.registry} refused to delete {tag} (HTTP {gone.status_code}); "
                "turn deletion on (storage: delete: enabled: true)"
            )
        return gone.status_code == 202
