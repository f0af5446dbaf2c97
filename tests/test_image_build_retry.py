"""A build whose intermediate image the engine lost to a removal elsewhere (the classic
builder does not protect them, moby/moby#29011) is built again from the start of its
context; any other failure is not. An engine scripted in memory: what is under test is
the retry, not the engine (the builds themselves run on the real engine elsewhere)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from runner.sandbox.image_build import LOST_PARENT_TRIES, DockerImageBuilder
from runner.sandbox.images import BuildRequest, ImageBuildFailed

LOST = {"errorDetail": {"message": 'unable to find image "sha256:b426"'}}
BUILT = {"aux": {"ID": "sha256:" + "e" * 64}}


class ScriptedEngine:
    """``build`` answers each call with the next scripted stream, reading the whole context."""

    def __init__(self, *streams: list[dict[str, Any]]) -> None:
        self.streams = list(streams)
        self.read: list[bytes] = []

    def info(self) -> dict[str, Any]:
        return {"MemTotal": 8 << 30}

    def build(self, fileobj: io.BytesIO, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.read.append(fileobj.read())
        return iter(self.streams.pop(0))


def build(engine: ScriptedEngine) -> str:
    context = io.BytesIO(b"the context tar")
    request = BuildRequest(buildargs={}, labels={})
    return DockerImageBuilder(engine).build(context, request, lambda line: None)  # type: ignore[arg-type]


def test_a_lost_intermediate_image_is_built_again_from_the_start() -> None:
    engine = ScriptedEngine([{"stream": "Step 1/2 : FROM x\n"}, LOST], [BUILT])
    assert build(engine) == "sha256:" + "e" * 64
    assert engine.read == [b"the context tar"] * 2  # the whole context, both times


def test_a_lost_parent_every_time_ends_after_the_tries() -> None:
    engine = ScriptedEngine(*([LOST] for _ in range(LOST_PARENT_TRIES)))
    with pytest.raises(ImageBuildFailed, match="unable to find image"):
        build(engine)
    assert len(engine.read) == LOST_PARENT_TRIES


def test_any_other_failure_is_not_built_again() -> None:
    failed = {"errorDetail": {"message": "The command returned a non-zero code: 7"}}
    engine = ScriptedEngine([failed], [BUILT])
    with pytest.raises(ImageBuildFailed, match="non-zero code: 7"):
        build(engine)
    assert len(engine.read) == 1
