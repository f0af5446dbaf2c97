"""Translation of glob patterns to regular expressions.

Paths are relative and use ``/`` as the separator on every platform. A
pattern must match the whole path.
"""

from __future__ import annotations

import functools
import re


@functools.lru_cache(maxsize=256)
def translate(pattern: str) -> "re.Pattern[str]":
    """Compile *pattern* into a regular expression matching whole paths.

    ``*`` matches within one path segment, ``?`` matches one character of a
    segment, ``[...]`` is a character class (``[!...]`` negates it) and ``**``
    matches any number of whole directories, including none.
    """
    out = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end + 1
                continue
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out) + r"\Z")


def match(pattern: str, path: str) -> bool:
    """Return True if the relative *path* matches *pattern* in full."""
    return translate(pattern).match(path) is not None
