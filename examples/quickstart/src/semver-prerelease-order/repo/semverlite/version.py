"""Parsing and ordering of Semantic Versioning 2.0.0 version strings."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional, Tuple

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


@functools.total_ordering
@dataclass(frozen=True)
class Version:
    """A parsed semantic version.

    Versions are ordered by precedence as defined in section 11 of the
    specification. Build metadata is kept for display but ignored when
    comparing, so ``1.0.0+a == 1.0.0+b``.
    """

    major: int
    minor: int
    patch: int
    prerelease: Tuple[str, ...] = ()
    build: Tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, text: str) -> "Version":
        """Parse *text*, raising ``ValueError`` if it is not a valid version."""
        match = _SEMVER.match(text.strip())
        if match is None:
            raise ValueError(f"not a semantic version: {text!r}")
        major, minor, patch, pre, build = match.groups()
        return cls(
            int(major),
            int(minor),
            int(patch),
            tuple(pre.split(".")) if pre else (),
            tuple(build.split(".")) if build else (),
        )

    @property
    def is_prerelease(self) -> bool:
        """True for versions such as ``1.0.0-rc.1``."""
        return bool(self.prerelease)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def _precedence_key(self) -> tuple:
        return (self.major, self.minor, self.patch, self.prerelease)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence_key() < other._precedence_key()


def latest(versions: Iterable[str], include_prerelease: bool = False) -> Optional[str]:
    """Return the highest version string in *versions*, or ``None`` if empty.

    Pre-releases are skipped unless *include_prerelease* is true.
    """
    parsed = [Version.parse(v) for v in versions]
    if not include_prerelease:
        parsed = [v for v in parsed if not v.is_prerelease]
    return str(max(parsed)) if parsed else None
