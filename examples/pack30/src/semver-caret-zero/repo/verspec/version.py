"""``MAJOR.MINOR.PATCH`` versions."""

from __future__ import annotations

import re
from typing import NamedTuple

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")


class Version(NamedTuple):
    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> "Version":
        match = _VERSION.match(text.strip())
        if match is None:
            raise ValueError(f"invalid version: {text!r}")
        return cls(*(int(part) for part in match.groups()))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"
