"""Normalising request paths."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Union

from staticpaths.errors import UnsafePath


def normalize(request_path: str) -> str:
    """*request_path* as a clean path relative to the files root.

    ``/docs//guide/./intro.html`` -> ``docs/guide/intro.html``; a trailing
    slash is kept (``docs/`` asks for a directory index); the root is ``""``.
    """
    trailing = request_path.endswith("/")
    clean = posixpath.normpath("/" + request_path).lstrip("/")
    if clean in ("", "."):
        return ""
    return clean + "/" if trailing else clean


def to_filesystem(root: Union[str, Path], request_path: str) -> Path:
    """The file or directory below *root* that *request_path* names."""
    relative = normalize(request_path)
    if Path(relative).is_absolute():
        raise UnsafePath(request_path)
    return Path(root) / relative
