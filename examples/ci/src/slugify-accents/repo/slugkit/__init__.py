"""slugkit: turn arbitrary titles into URL-safe slugs."""

from slugkit.core import slugify, unique_slug

__all__ = ["slugify", "unique_slug"]
__version__ = "0.4.0"
