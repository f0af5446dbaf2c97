"""plaintable: plain-text tables."""

from plaintable.render import render
from plaintable.width import display_width, pad

__all__ = ["display_width", "pad", "render"]
