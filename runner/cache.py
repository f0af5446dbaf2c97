"""The on-disk cache of a coordinator or worker: blobs, git repositories and tree tars.

Entries live under ``$DELTARUN_CACHE`` (default ``~/.cache/deltarun``) at keys such
as ``blobs/ab/<sha256>``, ``git/<sha256>`` and ``trees/<tree>.tar``. Every entry is
content-addressed, so eviction can only cost a refetch, never a wrong byte:
blobs are re-hashed whenever read; repositories are filled from verified
blobs by git (which checks every object id), and tree tars are written from
them by tree id. The cache has a size cap (``DELTARUN_CACHE_MAX``, default 20g):
after each new entry the least recently used ones are removed until it fits,
except those used within the last minute (another trial may be reading them).
``deltarun gc --cache`` empties it.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from runner.config.model import parse_size
from runner.errors import UserError

DEFAULT_MAX = "20g"
KINDS = ("blobs", "git", "trees", "staged")
RECENT_S = 60.0


def default_root() -> Path:
    env = os.environ.get("DELTARUN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "deltarun"


def default_max_bytes() -> int:
    text = os.environ.get("DELTARUN_CACHE_MAX", DEFAULT_MAX)
    try:
        return parse_size(text)
    except ValueError as exc:
        raise UserError(
            f"DELTARUN_CACHE_MAX: {exc}; unset it for the default {DEFAULT_MAX}"
        ) from exc


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    size: int
    used: float


class CacheDir:
    """A size-capped directory of cache entries with least-recently-used eviction."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None) -> None:
        self.root = root or default_root()
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes

    def path(self, key: str) -> Path:
        return self.root / key

    def touch(self, key: str) -> None:
        """Mark an entry used now (its modification time is its last use)."""
        try:
            os.utime(self.path(key))
        except FileNotFoundError:
            pass

    def entries(self) -> list[Entry]:
        found: list[Entry] = []
        for kind in KINDS:
            base = self.root / kind
            if not base.is_dir():
                continue
            tops = base.glob("*/*") if kind == "blobs" else base.iterdir()
            for path in tops:
                if path.name.startswith(".part-"):
                    continue
                try:
                    found.append(
                        Entry(
                            str(path.relative_to(self.root)),
                            path,
                            _size(path),
                            path.stat().st_mtime,
                        )
                    )
                except FileNotFoundError:
                    continue
        return found

    def evict(self, keep: str = "") -> list[str]:
        """Remove least recently used entries until the cache fits; the keys removed."""
        entries = self.entries()
        total = sum(e.size for e in entries)
        removed: list[str] = []
        now = time.time()
        for entry in sorted(entries, key=lambda e: e.used):
            if total <= self.max_bytes:
                break
            if entry.key == keep or now - entry.used < RECENT_S:
                continue
            _remove(entry.path)
            total -= entry.size
            removed.append(entry.key)
        return removed

    def clear(self) -> tuple[int, int]:
        """Remove every entry; (entries, bytes) removed."""
        entries = self.entries()
        for entry in entries:
            _remove(entry.path)
        for kind in KINDS:
            base = self.root / kind
            if base.is_dir():
                for part in base.rglob(".part-*"):
                    _remove(part)
        return len(entries), sum(e.size for e in entries)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                continue
    return total


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
