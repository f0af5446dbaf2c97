"""How many bytes a cached value takes."""

from __future__ import annotations

from typing import Union

Blob = Union[bytes, bytearray, memoryview, str]


def sizeof(value: Blob) -> int:
    """The size of *value* in bytes (``str`` counts its UTF-8 encoding)."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, memoryview):
        return value.nbytes
    return len(value)
