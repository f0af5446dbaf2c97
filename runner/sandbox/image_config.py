"""What an image's own configuration may not bring into deltarun. Pure: it reads the
``Config`` of an engine's image inspection and says why, in one line, or nothing.

- A ``VOLUME``: the engine gives every container of the image an anonymous volume there, a
  writable place on the engine's own disk beside a sandbox's read-only root, outside every
  cap (workspace, ``/tmp``, memory). An agent, or the code under test, could fill the host's
  disk through it. No layer can undo a ``VOLUME``, so such an image is refused wherever a
  sandbox would be made of it.
- ``ONBUILD`` triggers: instructions the image's author wrote that run in the next build
  ``FROM`` it, which is deltarun's own (an environment on ``runtime.image``, an installed
  agent's layer, an instance image's layer). A triggered ``ADD <url>`` is fetched by the
  engine itself, from the host's network, whatever the build's network; a triggered ``RUN``
  runs in deltarun's build. Such an image is refused as a base.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHOWN = 3  # volumes or triggers named in a refusal


def volumes(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The paths the image declares as volumes, sorted."""
    declared = (config or {}).get("Volumes") or {}
    return tuple(sorted(str(path) for path in declared)) if isinstance(declared, Mapping) else ()


def triggers(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The image's ``ONBUILD`` instructions, in order."""
    found = (config or {}).get("OnBuild") or []
    return tuple(str(trigger) for trigger in found) if isinstance(found, list) else ()


def volume_refusal(image: str, declared: Sequence[str]) -> str | None:
    """One line when ``image`` declares a volume; None when it declares none."""
    if not declared:
        return None
    return (
        f"image {image} declares VOLUME {', '.join(declared[:SHOWN])}: every sandbox of it would "
        "get a writable place on the engine's disk, outside the read-only root and every cap; "
        "build the image without VOLUME"
    )


def trigger_refusal(image: str, found: Sequence[str]) -> str | None:
    """One line when ``image`` carries ``ONBUILD`` triggers; None when it carries none."""
    if not found:
        return None
    shown = "; ".join(" ".join(t.split())[:80] for t in found[:SHOWN])
    return (
        f"image {image} carries {len(found)} ONBUILD trigger(s) ({shown}): they would run in "
        "deltarun's own build over it; build the image without ONBUILD"
    )
