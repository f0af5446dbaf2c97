"""safeserve: resolve request paths below a files root."""

from safeserve.policy import NotAllowed
from safeserve.resolve import resolve

__all__ = ["NotAllowed", "resolve"]
