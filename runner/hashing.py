"""Content digests: SHA-256 of bytes, files, canonical JSON and directory trees.

Canonical JSON (sorted keys, no whitespace, UTF-8, no NaN) is what the protocol
hash and job ids are computed over, so the same controls give the same hash on
every machine and Python version.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """One canonical text for a JSON value: sorted keys, compact, UTF-8, finite numbers."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_json(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_bytes(canonical_json(value).encode("utf-8"))
