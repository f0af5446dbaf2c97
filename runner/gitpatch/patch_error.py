"""The error of the patch reader."""

from __future__ import annotations


class PatchError(ValueError):
    """The patch is not one ``git apply`` (strict: ``git diff``) would read; says where."""
