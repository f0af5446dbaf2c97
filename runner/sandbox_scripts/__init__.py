"""Scripts deltarun copies into sandboxes and runs there with the image's own python3
(stdlib only): ``guard.py`` (ends the agent phase when the agent ends, sweeps leftover
processes), ``image_modules.py`` (lists the modules an image imports), ``run_pytest.py``
and ``deltarun_results.py`` (the verify phase's pytest run and its results channel) and
``collector.py`` (the channel's one reader)."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def source(name: str) -> bytes:
    """The bytes of one script, as shipped in the package."""
    return resources.files(__name__).joinpath(name).read_bytes()
