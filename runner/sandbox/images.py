"""The engine's images as a build needs them: what an image is, one build request, and the
``ImageBuilder`` protocol (Docker: ``runner.sandbox.image_build``). No I/O here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from runner.config.runtime import Runtime
from runner.errors import UserError


@dataclass(frozen=True)
class ImageInfo:
    """What a build needs to know of a local image."""

    id: str
    layers: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    triggers: tuple[str, ...] = ()  # its ONBUILD instructions (runner.sandbox.image_config)
    volumes: tuple[str, ...] = ()  # the paths it declares as VOLUME


@dataclass(frozen=True)
class BuildRequest:
    """One image build: build args, labels, the build's network, and whether to use cache."""

    buildargs: Mapping[str, str]
    labels: Mapping[str, str]
    network: str = "none"  # "none" or "default" (the engine's bridge)
    nocache: bool = False


class ImageBuildFailed(UserError):
    """The engine could not build an image; ``tail`` holds the last lines of its log, and
    ``at_limit`` says a limit of the build may have ended it (a step's memory or processes,
    the build's deadline), which the last line names."""

    def __init__(self, tail: Sequence[str], at_limit: bool = False) -> None:
        super().__init__(" | ".join(tail) or "no output")
        self.tail = list(tail)
        self.at_limit = at_limit


class ImageBuilder(Protocol):
    """The engine as ``build`` needs it (Docker: ``runner.sandbox.image_build``)."""

    def inspect(self, image: str) -> ImageInfo | None:
        """The image, or None when it is not present."""
        ...

    def build(self, context: IO[bytes], request: BuildRequest, log: Callable[[str], None]) -> str:
        """Build the tar ``context``; return the image ID or raise ``ImageBuildFailed``."""
        ...

    def preflight(self, image: str, runtime: Runtime) -> None:
        """Run the sandbox preflight on ``image``; a one-line ``UserError`` when it fails."""
        ...

    def tag(self, image: str, tag: str) -> None: ...

    def remove(self, image: str) -> None:
        """Remove an image this build made (best effort)."""
        ...
