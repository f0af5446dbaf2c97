"""Resolving request paths."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Union

from safeserve.policy import NotAllowed


def resolve(root: Union[str, Path], request_path: str) -> Path:
    """The path below *root* for *request_path*; ``NotAllowed`` if it would leave *root*."""
    parts = []
    for segment in request_path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                raise NotAllowed(request_path)
            parts.pop()
        else:
            parts.append(segment)
    return Path(root) / posixpath.join(*parts) if parts else Path(root)
