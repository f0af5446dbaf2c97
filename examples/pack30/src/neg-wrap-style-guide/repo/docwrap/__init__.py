"""docwrap: line breaking for release notes."""

from docwrap.wrap import WIDTH, wrap_note

__all__ = ["WIDTH", "wrap_note"]
