"""Content digests: SHA-256 of bytes, files, canonical JSON and directory trees.

Canonical JSON (sorted keys, no whitespace, UTF-8, no NaN) is what the protocol
hash and job ids are computed over, so the same controls give the same hash on
every machine and Python version.
"""

from __future__ import annotations

import hashlib
import json
import os
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


def dir_digest(root: Path) -> str:
    """Digest of a directory tree: every relative path, its executable bit and its bytes.

    Symbolic links are refused rather than followed, so the digest means exactly
    the bytes that will be copied into a sandbox.
    """
    entries: list[list[str]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                raise ValueError(f"{full}: symbolic links are not allowed in an agent directory")
            if full.is_dir():
                entries.append([rel, "dir", ""])
            elif full.is_file():
                executable = "x" if os.access(full, os.X_OK) else "-"
                entries.append([rel, executable, sha256_file(full)])
            else:
                raise ValueError(f"{full}: only regular files and directories are allowed")
    return sha256_json(entries)
