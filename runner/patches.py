"""Git patches as text: which paths a patch touches, and removing forbidden ones. Pure."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable

from runner.archives import is_forbidden

_HEADER = re.compile(r"^diff --git (?:\"?a/(.+?)\"?) (?:\"?b/(.+?)\"?)$")
_PATH_LINES = ("--- a/", "+++ b/", "rename from ", "rename to ", "copy from ", "copy to ")


def split_files(patch: str) -> list[str]:
    """Split a ``git diff`` into one chunk per file (each starting with ``diff --git``)."""
    chunks: list[str] = []
    current: list[str] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git ") and current:
            chunks.append("".join(current))
            current = []
        current.append(line)
    if current:
        chunks.append("".join(current))
    return chunks


def chunk_paths(chunk: str) -> set[str]:
    """Every repository-relative path a file chunk names (old and new)."""
    paths: set[str] = set()
    for line in chunk.splitlines():
        match = _HEADER.match(line)
        if match:
            paths.update(match.groups())
            continue
        for prefix in _PATH_LINES:
            if line.startswith(prefix):
                paths.add(line[len(prefix) :].strip().strip('"'))
        if line.startswith("@@"):
            break
    return {p for p in paths if p and p != "/dev/null"}


def patch_paths(patch: str) -> set[str]:
    """Every path a patch touches."""
    paths: set[str] = set()
    for chunk in split_files(patch):
        paths |= chunk_paths(chunk)
    return paths


def drop_chunks(patch: str, bad_path: Callable[[str], bool]) -> tuple[str, list[str]]:
    """Remove every file chunk that names a path ``bad_path`` rejects; return the rest and
    the rejected paths."""
    kept: list[str] = []
    dropped: list[str] = []
    for chunk in split_files(patch):
        bad = sorted(p for p in chunk_paths(chunk) if bad_path(p))
        if bad:
            dropped.extend(bad)
        else:
            kept.append(chunk)
    return "".join(kept), dropped


def drop_forbidden(patch: str, forbidden: Iterable[str]) -> tuple[str, list[str]]:
    """Remove the file chunks that touch a forbidden path; return the rest and what was dropped."""
    entries = list(forbidden)
    return drop_chunks(patch, lambda path: is_forbidden(path, entries))


def drop_protected(patch: str, protected: Iterable[str]) -> tuple[str, list[str]]:
    """Remove the file chunks that touch a protected file (a hidden test), its parents or
    anything under it. The hidden file then stands as written, whatever the patch did there."""
    guarded = set(protected)

    def conflicts(path: str) -> bool:
        return path in guarded or any(
            h.startswith(path + "/") or path.startswith(h + "/") for h in guarded
        )

    return drop_chunks(patch, conflicts)


def is_grading_path(path: str, patterns: Iterable[str]) -> bool:
    """True when ``path`` matches a grading pattern (see ``Tools.grading_paths``)."""
    name = path.rsplit("/", 1)[-1]
    for pattern in patterns:
        target = path if "/" in pattern else name
        if fnmatch.fnmatchcase(target, pattern):
            return True
    return False
