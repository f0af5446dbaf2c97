"""notefmt: re-flow release notes."""

from notefmt.clean import collapse_whitespace
from notefmt.wrap import wrap_text

__all__ = ["collapse_whitespace", "wrap_text"]
