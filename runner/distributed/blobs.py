"""Content-addressed archives: uploaded once to Redis, fetched and cached on a worker's disk.

A blob is keyed by the SHA-256 of its bytes and re-hashed whenever it is read,
from Redis or from the cache, so a worker never runs a byte the protocol did
not pin. A worker never needs the coordinator's filesystem.
"""

from __future__ import annotations

import threading
from pathlib import Path

import redis

from runner import telemetry
from runner.atomic import write_atomic
from runner.distributed import keys
from runner.errors import DigestMismatch, InfraError
from runner.fixtures.cache import CacheDir, default_root
from runner.hashing import sha256_bytes, sha256_file


def default_cache_dir() -> Path:
    return default_root() / "blobs"


class BlobStore:
    """Blobs in Redis with a verified on-disk cache."""

    def __init__(self, client: redis.Redis, cache_dir: Path | None = None) -> None:
        self.client = client
        self.cache_dir = cache_dir or default_cache_dir()
        self._lock = threading.Lock()

    def upload(self, data: bytes) -> str:
        """Store ``data`` once; returns its SHA-256."""
        digest = sha256_bytes(data)
        key = keys.blob(digest)
        if not self.client.exists(key):
            self.client.set(key, data, nx=True)
        return digest

    def upload_file(self, path: Path, expected: str | None = None) -> str:
        data = path.read_bytes()
        digest = sha256_bytes(data)
        if expected and digest != expected:
            raise DigestMismatch(f"{path}: digest mismatch: pinned {expected}, file has {digest}")
        return self.upload(data)

    def path(self, digest: str) -> Path:
        """A verified local file holding the blob, fetched from Redis on first use."""
        target = self.cache_dir / digest[:2] / digest
        with self._lock:
            if target.is_file():
                if sha256_file(target) == digest:
                    telemetry.cache_lookup("blobs", hit=True)
                    return target
                target.unlink()  # a corrupted cache entry is fetched again
            telemetry.cache_lookup("blobs", hit=False)
            data = self.client.get(keys.blob(digest))
            if data is None:
                raise InfraError(
                    f"blob {digest[:12]} is not in Redis; the coordinator publishes it: "
                    "re-run `deltarun run --resume` for the run"
                )
            assert isinstance(data, bytes)
            actual = sha256_bytes(data)
            if actual != digest:
                raise DigestMismatch(f"blob {digest}: Redis holds bytes with digest {actual}")
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, data)
        # The blobs share the cache's size cap with its repositories and trees.
        CacheDir(self.cache_dir.parent).evict(keep=f"blobs/{digest[:2]}/{digest}")
        return target

    def read(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()
