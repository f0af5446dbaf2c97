"""Slug generation.

A slug is the lowercase, ASCII-only, separator-joined form of a title that
is safe to put in a URL path segment.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

_UNSAFE = re.compile(r"[^a-z0-9]+")


def slugify(text: str, separator: str = "-", max_length: Optional[int] = None) -> str:
    """Return a URL-safe slug for *text*.

    Runs of characters other than ASCII letters and digits become a single
    *separator*; leading and trailing separators are removed. When
    *max_length* is given, the slug is cut at a word boundary so that it is
    at most *max_length* characters long.

    >>> slugify("Hello, World!")
    'hello-world'
    """
    slug = _UNSAFE.sub(separator, text.lower()).strip(separator)
    if max_length is not None and len(slug) > max_length:
        head = slug[: max_length + 1]
        boundary = head.rfind(separator)
        slug = head[:boundary] if boundary > 0 else slug[:max_length]
    return slug


def unique_slug(text: str, existing: Iterable[str], separator: str = "-") -> str:
    """Return a slug for *text* that is not already in *existing*.

    Collisions get a numeric suffix: ``post``, ``post-2``, ``post-3``, ...
    """
    taken = set(existing)
    base = slugify(text, separator)
    candidate, n = base, 2
    while candidate in taken:
        candidate = f"{base}{separator}{n}"
        n += 1
    return candidate
