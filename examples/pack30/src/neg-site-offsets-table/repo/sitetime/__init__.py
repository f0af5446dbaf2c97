"""sitetime: local time at our sites."""

from sitetime.local import local_time
from sitetime.sites import SITES

__all__ = ["SITES", "local_time"]
