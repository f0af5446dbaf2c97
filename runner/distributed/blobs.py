"""Content-addressed archives: uploaded once, fetched and cached on a worker's disk.

A blob is keyed by the SHA-256 of its bytes and re-hashed whenever it is read,
from where it lives or from the cache, so a worker never runs a byte the protocol
did not pin. A worker never needs the coordinator's filesystem. Blobs live in
Redis (the default: nothing more to run, fine for small suites) or, with
``deltarun run --registry``, in the image registry (``registry_blobs``), which
keeps Redis to jobs, leases and records.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import redis

from runner import telemetry
from runner.atomic import write_atomic
from runner.distributed import keys
from runner.distributed.registry_blobs import RegistryBlobs
from runner.errors import DigestMismatch, InfraError
from runner.hashing import sha256_bytes, sha256_file
from runner.trees.cache import CacheDir, default_root


def default_cache_dir() -> Path:
    return default_root() / "blobs"


class BlobStore:
    """Blobs in Redis, or with ``registry`` in an image registry (``registry_blobs``), with a
    verified on-disk cache. ``client`` is the Redis the protocol bundles live in either way.
    ``sizes`` lists every blob this store was given (digest → bytes), for the bundle."""

    def __init__(
        self, client: redis.Redis, cache_dir: Path | None = None, *, registry: str | None = None
    ) -> None:
        self.client = client
        self.cache_dir = cache_dir or default_cache_dir()
        self.registry = RegistryBlobs(registry) if registry else None
        self.sizes: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def location(self) -> str | None:
        """The registry the blobs live in (as given), None for Redis."""
        return None if self.registry is None else self.registry.registry

    def at(self, registry: str | None) -> BlobStore:
        """This store's Redis and cache, reading the blobs from ``registry`` (None: Redis)."""
        if registry == self.location:
            return self
        return BlobStore(self.client, self.cache_dir, registry=registry)

    def upload(self, data: bytes) -> str:
        """Store ``data`` once; returns its SHA-256."""
        digest = sha256_bytes(data)
        self.sizes[digest] = len(data)
        if self.registry is not None:
            self.registry.put(digest, data)
            return digest
        key = keys.blob(digest)
        if not self.client.exists(key):
            self.client.set(key, data, nx=True)
        return digest

    def upload_file(self, path: Path, expected: str | None = None) -> str:
        """Store a file once (streamed to a registry, never read whole for it)."""
        data = path.read_bytes() if self.registry is None else None
        digest = sha256_file(path) if data is None else sha256_bytes(data)
        if expected and digest != expected:
            raise DigestMismatch(f"{path}: digest mismatch: pinned {expected}, file has {digest}")
        if data is not None:
            return self.upload(data)
        assert self.registry is not None
        self.sizes[digest] = path.stat().st_size
        self.registry.put(digest, path)
        return digest

    def path(self, digest: str) -> Path:
        """A verified local file holding the blob, fetched on first use."""
        target = self.cache_dir / digest[:2] / digest
        with self._lock:
            if target.is_file():
                if sha256_file(target) == digest:
                    telemetry.cache_lookup("blobs", hit=True)
                    return target
                target.unlink()  # a corrupted cache entry is fetched again
            telemetry.cache_lookup("blobs", hit=False)
            target.parent.mkdir(parents=True, exist_ok=True)
            if self.registry is not None:
                self._from_registry(digest, target)
            else:
                write_atomic(target, self._from_redis(digest))
        # The blobs share the cache's size cap with its repositories and trees.
        CacheDir(self.cache_dir.parent).evict(keep=f"blobs/{digest[:2]}/{digest}")
        return target

    def _from_redis(self, digest: str) -> bytes:
        data = self.client.get(keys.blob(digest))
        if data is None:
            raise InfraError(
                f"blob {digest[:12]} is not in Redis; the coordinator publishes it: "
                "`deltarun run --retry-errors` on the run runs this job again"
            )
        assert isinstance(data, bytes)
        actual = sha256_bytes(data)
        if actual != digest:
            raise DigestMismatch(f"blob {digest}: Redis holds bytes with digest {actual}")
        return data

    def _from_registry(self, digest: str, target: Path) -> None:
        assert self.registry is not None
        partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            if not self.registry.fetch_to(digest, partial):
                raise InfraError(
                    f"blob {digest[:12]} is not in registry {self.registry.registry}; the "
                    "coordinator publishes it: `deltarun run --retry-errors` on the run runs "
                    "this job again"
                )
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)

    def read(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()
