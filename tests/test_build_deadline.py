"""A build's deadline (``runner.sandbox.build_deadline``): the step the build log names is
killed once the deadline passed, again each second until the build ends, and nothing is
killed before it. A client scripted in memory: the watchdog is under test (a real build
ending at its deadline is ``tests/adversarial/test_hostile_builds.py``)."""

from __future__ import annotations

import threading

import docker.errors

from runner.sandbox.build_deadline import BuildDeadline
from runner.sandbox.build_steps import running_step


class Killer:
    def __init__(self) -> None:
        self.killed: list[str] = []
        self.twice = threading.Event()

    def kill(self, container: str) -> None:
        self.killed.append(container)
        if len(self.killed) >= 2:
            self.twice.set()
        raise docker.errors.NotFound("gone")  # an ended step: the watchdog goes on


def feed(deadline: BuildDeadline, *events: object) -> None:
    """The build stream's events, as the builder passes them on."""
    for event in events:
        step = running_step(event)
        if step is not None:
            deadline.running(step)


def test_nothing_is_killed_before_the_deadline() -> None:
    client = Killer()
    with BuildDeadline(client, 60) as deadline:
        feed(deadline, {"stream": " ---> Running in 44dc8eb421e6\n"})
    assert client.killed == [] and not deadline.expired


def test_the_step_running_at_the_deadline_is_killed_until_the_build_ends() -> None:
    client = Killer()
    with BuildDeadline(client, 0.05) as deadline:
        feed(
            deadline,
            {"stream": "Step 2/2 : RUN sleep 600\n"},
            {"stream": " ---> Running in 44dc8eb421e6\n"},
            {"stream": "still going\n"},  # a line of its own names no step
            ["not", "an", "event"],
        )
        assert client.twice.wait(10)
    assert deadline.expired and set(client.killed) == {"44dc8eb421e6"}
