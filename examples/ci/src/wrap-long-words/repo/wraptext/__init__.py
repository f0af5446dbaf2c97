"""wraptext: greedy word wrapping for plain-text output."""

from wraptext.wrap import fill, wrap

__all__ = ["fill", "wrap"]
