"""globmatch: glob matching for slash-separated relative paths."""

from globmatch.pattern import match, translate
from globmatch.select import select

__all__ = ["match", "select", "translate"]
