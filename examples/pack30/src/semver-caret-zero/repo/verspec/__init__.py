"""verspec: semantic versions and ranges."""

from verspec.ranges import max_satisfying, satisfies
from verspec.version import Version

__all__ = ["Version", "max_satisfying", "satisfies"]
