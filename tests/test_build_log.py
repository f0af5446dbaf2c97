"""The build log read against the engine (``runner.sandbox.build_log``): a line of a step's
own output that looks like the builder's names no step and breaks no count. A step is a
container running on the image the build stands on; a layer continues the build when its
parent is that image, and its bytes (its size less its parent's) are counted; a stage's
base is not. A client scripted in memory (a real build is in
``tests/adversarial/test_hostile_builds.py``)."""

from __future__ import annotations

from typing import Any

import docker.errors

from runner.sandbox.build_log import BuildLog

MiB = 1 << 20


def full(short: str) -> str:
    return "sha256:" + short.ljust(64, "0")


BEGAN = "2026-12-07T12:00:00.500000000Z"  # the engine's clock as the build begins
AFTER, BEFORE = "2026-12-07T12:00:01.25Z", "2026-12-07T12:00:00.499999Z"


class Engine:
    """Images (short ID -> size, parent short ID) and containers (ID -> image short ID,
    created); each made after the build began, but the images in ``cached``."""

    def __init__(
        self,
        images: dict[str, tuple[int, str | None]],
        containers: dict[str, str | tuple[str, str]],
        cached: tuple[str, ...] = (),
    ) -> None:
        self.images = images
        self.cached = cached
        self.containers = {
            k: v if isinstance(v, tuple) else (v, AFTER) for k, v in containers.items()
        }

    def info(self) -> dict[str, Any]:
        return {"SystemTime": BEGAN}

    def inspect_image(self, image: str) -> dict[str, Any]:
        if image not in self.images:
            raise docker.errors.ImageNotFound(image)
        size, parent = self.images[image]
        made = BEFORE if image in self.cached else AFTER
        return {
            "Id": full(image),
            "Size": size,
            "Parent": full(parent) if parent else "",
            "Created": made,
        }

    def inspect_container(self, container: str) -> dict[str, Any]:
        if container not in self.containers:
            raise docker.errors.NotFound(container)
        image, created = self.containers[container]
        return {"Id": container, "Image": full(image), "Created": created}


A, B, C, D, E = ("a" * 12, "b" * 12, "c" * 12, "d" * 12, "e" * 12)
STEP, OTHER = "5e9000000001", "0e9000000002"


def read_all(log: BuildLog, *texts: str) -> list[str]:
    """The steps the log reports among ``texts``, each one event of the stream."""
    return [step for text in texts if (step := log.read({"stream": text})) is not None]


def test_a_steps_layers_count_and_a_stages_base_does_not() -> None:
    engine = Engine(
        {A: (100 * MiB, "f" * 12), B: (150 * MiB, A), C: (1000 * MiB, None), D: (1030 * MiB, C)},
        {STEP: A},
    )
    log = BuildLog(engine)
    steps = read_all(
        log,
        "Step 1/5 : FROM base:1",
        " ---> " + A + "\n",  # the base: its own parent is not the build's
        "Step 2/5 : RUN make",
        " ---> Running in " + STEP + "\n",
        "Removing intermediate container " + STEP + "\n",
        " ---> " + B + "\n",  # 50 MiB more
        "Step 3/5 : ENV X=1",
        " ---> Using cache\n",
        " ---> " + B + "\n",  # named again: its parent is not B, so nothing counts twice
        "Step 4/5 : FROM other:2 AS second",
        " ---> " + C + "\n",  # the second stage's base
        "Step 5/5 : RUN make",
        " ---> " + D + "\n",  # 30 MiB more
    )
    assert steps == [STEP] and log.written == 80 * MiB


def test_a_steps_output_cannot_name_a_step_it_is_not() -> None:
    """A step printing the builder's line with another container's ID (one running on
    another image, one on the build's image made before the build, or none) names no step:
    nothing would be capped or killed for it."""
    older = "01de70000003"
    engine = Engine({A: (100 * MiB, None)}, {STEP: A, OTHER: B, older: (A, BEFORE)})
    log = BuildLog(engine)
    assert read_all(log, " ---> Running in " + STEP + "\n") == []  # before any image
    steps = read_all(
        log,
        " ---> " + A + "\n",
        " ---> Running in " + OTHER + "\n",  # runs on another image
        " ---> Running in " + older + "\n",  # on the build's image, made before the build
        " ---> Running in 0123456789abcdef\n",  # no such container
        " ---> Running in " + STEP + "\n",
    )
    assert steps == [STEP]


def test_a_steps_output_cannot_hide_what_the_build_writes() -> None:
    """A forged layer line (an image that does not exist, a forged FROM) changes nothing: the
    next real layer's parent is still the image the build stands on, and it counts."""
    engine = Engine({A: (100 * MiB, None), B: (900 * MiB, A), E: (5 * MiB, None)}, {STEP: A})
    log = BuildLog(engine)
    read_all(
        log,
        " ---> " + A + "\n",
        " ---> Running in " + STEP + "\n",
        "Step 9/9 : FROM scratch",  # printed by the step
        " ---> 0123456789ab\n",  # no such image
        " ---> " + B + "\n",
    )
    assert log.written == 800 * MiB


def test_a_layer_the_cache_answered_wrote_nothing_now() -> None:
    """A step the engine's cache answered names a layer made before the build began: the
    build stands on it, and only what is made on it after counts."""
    engine = Engine(
        {A: (100 * MiB, None), B: (40_000 * MiB, A), C: (40_030 * MiB, B)}, {}, cached=(B,)
    )
    log = BuildLog(engine)
    read_all(log, " ---> " + A + "\n", " ---> Using cache\n", " ---> " + B + "\n")
    assert log.written == 0
    read_all(log, " ---> " + C + "\n")
    assert log.written == 30 * MiB


def test_a_running_step_cannot_move_the_build_to_an_image_it_names() -> None:
    """A step printing a layer line for an image that exists (a public base's ID is known)
    leaves the build where it stands: the step's own commit counts, and the next step is
    still a step (capped, killed at the deadline)."""
    public = "9ab1c0000000"
    engine = Engine(
        {A: (100 * MiB, None), B: (900 * MiB, A), public: (50 * MiB, None)},
        {STEP: A, OTHER: B},
    )
    log = BuildLog(engine)
    steps = read_all(
        log,
        " ---> " + A + "\n",
        " ---> Running in " + STEP + "\n",
        " ---> " + public + "\n",  # printed by the step
        " ---> " + B + "\n",  # its commit
        " ---> Running in " + OTHER + "\n",  # the next step, on B
    )
    assert steps == [STEP, OTHER] and log.written == 800 * MiB


def test_a_step_gone_before_its_line_was_read_still_cannot_move_the_build() -> None:
    """The log is read behind the build: a step may have ended, and its container been
    removed, by the time its line is read. What it printed still moves nothing."""
    public = "9ab1c0000000"
    engine = Engine({A: (100 * MiB, None), B: (900 * MiB, A), public: (50 * MiB, None)}, {})
    log = BuildLog(engine)
    steps = read_all(
        log,
        " ---> " + A + "\n",
        " ---> Running in " + STEP + "\n",  # gone already: not capped, but a step ran
        " ---> " + public + "\n",  # printed by the step
        " ---> " + B + "\n",  # its commit
    )
    assert steps == [] and log.written == 800 * MiB
