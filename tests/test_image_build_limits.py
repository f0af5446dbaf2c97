"""Each build step's memory limit (``DockerImageBuilder.step_memory``): half the engine's
machine by default, the user's ``--memory`` at most the machine's, a fixed size when the
engine does not say its own, and a step killed at it says how to give more; so does a step
that could not fork, at its process cap. An engine
scripted in memory: what is under test is what the builder asks of it (the limit holding
in a real build is ``tests/adversarial/test_hostile_builds.py``)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from runner.errors import UserError
from runner.sandbox.image_build import FALLBACK_STEP_MEMORY, DockerImageBuilder
from runner.sandbox.images import BuildRequest, ImageBuildFailed

GIB = 1 << 30
BUILT = {"aux": {"ID": "sha256:" + "e" * 64}}
KILLED = {"errorDetail": {"message": "The command '/bin/sh -c x' returned a non-zero code: 137"}}


class ScriptedEngine:
    """An engine of ``memory`` bytes (None: it will not say) answering builds with ``stream``."""

    def __init__(self, memory: int | None, stream: list[dict[str, Any]]) -> None:
        self.memory = memory
        self.stream = stream
        self.asked: list[dict[str, Any]] = []

    def info(self) -> dict[str, Any]:
        return {} if self.memory is None else {"MemTotal": self.memory}

    def build(self, fileobj: io.BytesIO, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.asked.append(kwargs)
        return iter(self.stream)


def build(engine: ScriptedEngine, memory: int | None = None) -> str:
    builder = DockerImageBuilder(engine, memory)  # type: ignore[arg-type]
    request = BuildRequest(buildargs={}, labels={})
    return builder.build(io.BytesIO(b"context"), request, lambda line: None)


@pytest.mark.parametrize(
    ("machine", "given", "limit"),
    [
        (24 * GIB, None, 12 * GIB),  # half the machine
        (24 * GIB, 2 * GIB, 2 * GIB),  # the user's --memory
        (24 * GIB, 24 * GIB, 24 * GIB),  # all of it, when asked
        (None, None, FALLBACK_STEP_MEMORY),  # an engine that does not say its size
        (None, 64 * GIB, 64 * GIB),  # nothing to check it against
    ],
)
def test_every_build_step_has_a_memory_limit_without_swap(
    machine: int | None, given: int | None, limit: int
) -> None:
    engine = ScriptedEngine(machine, [BUILT])
    build(engine, given)
    assert engine.asked[0]["container_limits"] == {"memory": limit, "memswap": limit}


def test_more_than_the_machine_is_refused_before_the_engine_builds() -> None:
    engine = ScriptedEngine(24 * GIB, [BUILT])
    with pytest.raises(UserError, match=r"^--memory 25g is more than this machine's memory"):
        build(engine, 25 * GIB)
    assert engine.asked == []


def test_a_step_killed_at_the_limit_says_how_to_give_more() -> None:
    with pytest.raises(ImageBuildFailed) as failed:
        build(ScriptedEngine(8 * GIB, [{"stream": "Killed\n"}, KILLED]))
    assert failed.value.at_limit
    assert str(failed.value).endswith(
        "non-zero code: 137 | (a build step's memory limit is 4g; if it needs more, "
        "give deltarun build --memory SIZE)"
    )
    with pytest.raises(ImageBuildFailed) as other:  # another failure is only itself
        build(ScriptedEngine(8 * GIB, [{"errorDetail": {"message": "non-zero code: 1"}}]))
    assert not other.value.at_limit and "memory limit" not in str(other.value)


@pytest.mark.parametrize(
    "said",
    [
        "/bin/sh: 0: Cannot fork",  # dash
        "bash: fork: retry: Resource temporarily unavailable",
        "make: vfork: Resource temporarily unavailable",
        "BlockingIOError: [Errno 11] Resource temporarily unavailable",
    ],
)
def test_a_step_that_could_not_fork_says_how_to_give_more(said: str) -> None:
    failed_step = {
        "errorDetail": {"message": "The command '/bin/sh -c x' returned a non-zero code: 2"}
    }
    with pytest.raises(ImageBuildFailed) as failed:
        build(ScriptedEngine(8 * GIB, [{"stream": said + "\n"}, failed_step]))
    assert failed.value.at_limit
    assert str(failed.value).endswith(
        "(a build step may run 4096 processes at once; if it needs more, "
        "give deltarun build --pids N)"
    )
