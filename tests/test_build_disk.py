"""What a build writes to the engine's disk (``runner.sandbox.build_disk``): the layers its
steps commit, counted from the build log against the images' sizes (a ``FROM`` starts a
stage from a base the build did not write), and the step running now, asked of the engine;
past the cap the running step is killed, and so is each step started after. A client
scripted in memory: the account is under test (a real build stopped at its cap is
``tests/adversarial/test_hostile_builds.py``)."""

from __future__ import annotations

import threading
from typing import Any

import docker.errors

from runner.sandbox.build_disk import BuildDisk
from runner.sandbox.build_steps import running_step

MiB = 1 << 20


class Engine:
    """Image sizes, one step's writable layer, and the kills asked for."""

    def __init__(self, images: dict[str, int], step_size: int = 0) -> None:
        self.images = images
        self.step_size = step_size
        self.killed: list[str] = []
        self.asked: list[Any] = []
        self.kill_seen = threading.Event()

    def inspect_image(self, image: str) -> dict[str, Any]:
        if image not in self.images:
            raise docker.errors.ImageNotFound(image)
        return {"Id": image, "Size": self.images[image]}

    def _url(self, template: str, name: str) -> str:
        return template.format(name)

    def _get(self, url: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.asked.append((url, params))
        return url, params

    def _result(self, response: tuple[str, dict[str, Any]], json: bool) -> dict[str, Any]:
        if "gone" in response[0]:
            raise docker.errors.NotFound("no such container")
        return {"Id": response[0], "SizeRw": self.step_size}

    def kill(self, container: str) -> None:
        self.killed.append(container)
        self.kill_seen.set()


def feed(disk: BuildDisk, *texts: str) -> None:
    """The build stream's events, as the builder passes them on."""
    for text in texts:
        event = {"stream": text}
        step = running_step(event)
        if step is not None:
            disk.running(step)
        disk.read(event)


def layer(image: str) -> str:
    return f" ---> {image}\n"


def test_the_layers_of_each_stage_count_and_its_base_does_not() -> None:
    engine = Engine(
        {"a" * 12: 100 * MiB, "b" * 12: 150 * MiB, "c" * 12: 1000 * MiB, "d" * 12: 1030 * MiB}
    )
    with BuildDisk(engine, 100 * MiB, every_s=60) as disk:
        feed(
            disk,
            "Step 1/6 : FROM base:1",
            "\n",
            layer("a" * 12),  # the base: not written by the build
            "Step 2/6 : RUN make",
            " ---> Running in 0123456789ab\n",
            "Removing intermediate container 0123456789ab\n",
            layer("b" * 12),  # 50 MiB more
            "Step 3/6 : ENV X=1",
            " ---> Using cache\n",
            layer("b" * 12),  # a step that adds nothing
            "Step 4/6 : from other:2 AS second",
            layer("c" * 12),  # the second stage's base
            "Step 5/6 : RUN make",
            layer("d" * 12),  # 30 MiB more
        )
    assert disk.written == 80 * MiB and not disk.over
    assert engine.killed == []


def test_layers_past_the_cap_kill_every_step_started_after() -> None:
    engine = Engine({"a" * 12: 10 * MiB, "b" * 12: 90 * MiB})
    with BuildDisk(engine, 64 * MiB, every_s=60) as disk:
        feed(disk, "Step 1/3 : FROM base", layer("a" * 12), "Step 2/3 : RUN x", layer("b" * 12))
        assert disk.over and disk.written == 80 * MiB and engine.killed == []
        feed(disk, "Step 3/3 : RUN y", " ---> Running in fedcba987654\n")
    assert engine.killed == ["fedcba987654"]


def test_the_running_step_past_the_cap_is_killed() -> None:
    engine = Engine({"a" * 12: 10 * MiB, "b" * 12: 30 * MiB}, step_size=50 * MiB)
    with BuildDisk(engine, 64 * MiB, every_s=0.01) as disk:
        feed(disk, "Step 1/3 : FROM base", layer("a" * 12), "Step 2/3 : RUN x", layer("b" * 12))
        assert not disk.over
        feed(disk, "Step 3/3 : RUN fallocate -l 50m /x", " ---> Running in fedcba987654\n")
        assert engine.kill_seen.wait(10)
    # 20 MiB committed and 50 MiB in the step: 70 MiB, past 64.
    assert disk.over and set(engine.killed) == {"fedcba987654"}
    assert engine.asked[-1] == ("/containers/fedcba987654/json", {"size": 1})


def test_a_step_within_the_cap_or_gone_is_left_alone() -> None:
    engine = Engine({"a" * 12: 10 * MiB}, step_size=63 * MiB)
    with BuildDisk(engine, 64 * MiB, every_s=0.01) as disk:
        feed(disk, "Step 1/2 : FROM base", layer("a" * 12), " ---> Running in fedcba987654\n")
        while len(engine.asked) < 3:
            threading.Event().wait(0.01)
        disk.running("gone-step")  # ended and removed: the engine knows it no more
        while engine.asked[-1][0] != "/containers/gone-step/json":
            threading.Event().wait(0.01)
    assert not disk.over and engine.killed == []


def test_an_image_removed_under_the_build_counts_as_no_growth() -> None:
    engine = Engine({"a" * 12: 10 * MiB})
    with BuildDisk(engine, 64 * MiB, every_s=60) as disk:
        feed(disk, "Step 1/2 : FROM base", layer("a" * 12), "Step 2/2 : RUN x", layer("e" * 12))
    assert disk.written == 0 and not disk.over
