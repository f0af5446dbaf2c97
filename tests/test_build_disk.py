"""What a build writes to the engine's disk (``runner.sandbox.build_disk``): the layers its
steps committed (``runner.sandbox.build_log``, ``tests/test_build_log.py``) and the step
running now, asked of the engine; past the cap the running step is killed, and so is each
step started after. A client scripted in memory: the watch is under test (a real build
stopped at its cap is ``tests/adversarial/test_hostile_builds.py``)."""

from __future__ import annotations

import threading
from typing import Any

import docker.errors

from runner.sandbox.build_disk import BuildDisk
from runner.sandbox.build_log import BuildLog

MiB = 1 << 20
A, B = "a" * 12, "b" * 12
STEP = "fedcba987654"


class Engine:
    """Two images (A the base, B its child of ``grown`` bytes more), one step container on
    B whose writable layer holds ``step_size`` bytes, and the kills asked for."""

    def __init__(self, grown: int, step_size: int = 0) -> None:
        self.sizes = {A: 10 * MiB, B: 10 * MiB + grown}
        self.step_size = step_size
        self.killed: list[str] = []
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.kill_seen = threading.Event()

    def inspect_image(self, image: str) -> dict[str, Any]:
        parent = f"sha256:{A}" if image == B else ""
        made = "2026-12-07T12:00:01Z"  # after the build began
        return {
            "Id": f"sha256:{image}",
            "Size": self.sizes[image],
            "Parent": parent,
            "Created": made,
        }

    def info(self) -> dict[str, Any]:
        return {"SystemTime": "2026-12-07T12:00:00Z"}

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"Id": container, "Image": f"sha256:{B}", "Created": "2026-12-07T12:00:01Z"}

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


def built(engine: Engine, disk: BuildDisk, log: BuildLog) -> None:
    """The base, one committed layer (B), then a step running on B, as the builder feeds
    them."""
    for text in (" ---> " + A + "\n", " ---> " + B + "\n", " ---> Running in " + STEP + "\n"):
        step = log.read({"stream": text})
        if step is not None:
            disk.running(step)


def test_a_build_within_the_cap_is_left_alone() -> None:
    engine = Engine(grown=20 * MiB, step_size=43 * MiB)
    log = BuildLog(engine)
    with BuildDisk(engine, 64 * MiB, log, every_s=0.01) as disk:
        built(engine, disk, log)
        while len(engine.asked) < 3:
            threading.Event().wait(0.01)
        disk.running("gone-step")  # ended and removed: the engine knows it no more
        while engine.asked[-1][0] != "/containers/gone-step/json":
            threading.Event().wait(0.01)
    assert not disk.over and engine.killed == []
    assert engine.asked[0] == (f"/containers/{STEP}/json", {"size": 1})


def test_the_running_step_past_the_cap_is_killed() -> None:
    # 20 MiB committed and 50 MiB in the step: 70 MiB, past 64.
    engine = Engine(grown=20 * MiB, step_size=50 * MiB)
    log = BuildLog(engine)
    with BuildDisk(engine, 64 * MiB, log, every_s=0.01) as disk:
        built(engine, disk, log)
        assert engine.kill_seen.wait(10)
    assert disk.over and set(engine.killed) == {STEP}


def test_layers_past_the_cap_kill_the_next_step_at_once() -> None:
    engine = Engine(grown=80 * MiB)
    log = BuildLog(engine)
    with BuildDisk(engine, 64 * MiB, log, every_s=60) as disk:
        built(engine, disk, log)
    assert disk.over and log.written == 80 * MiB and engine.killed == [STEP]
