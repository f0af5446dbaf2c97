"""A classic build's step containers (``runner.sandbox.build_steps``): the step the build
log names, and its process cap asked of the engine. A client scripted in memory: the
request is under test (a real step capped is ``tests/adversarial/test_hostile_builds.py``)."""

from __future__ import annotations

from typing import Any

import docker.errors
import pytest
import requests

from runner.sandbox.build_steps import cap_pids, running_step


@pytest.mark.parametrize(
    ("event", "step"),
    [
        ({"stream": " ---> Running in 44dc8eb421e6\n"}, "44dc8eb421e6"),
        ({"stream": " ---> Running in " + "a" * 64 + "\n"}, "a" * 64),
        ({"stream": "Step 2/2 : RUN echo ok\n"}, None),
        ({"stream": "Running in 44dc8eb421e6\n"}, None),  # a step's own line, without the arrow
        ({"stream": " ---> Running in NOTHEX\n"}, None),
        ({"status": " ---> Running in 44dc8eb421e6"}, None),
        (["not", "an", "event"], None),
    ],
)
def test_the_step_a_build_log_names(event: Any, step: str | None) -> None:
    assert running_step(event) == step


class Engine:
    """The three calls docker-py's own update makes, answering ``status``, and an inspect
    of the step (``running``, or gone when None)."""

    def __init__(self, status: int, running: bool | None = True) -> None:
        self.status = status
        self.running = running
        self.asked: list[tuple[str, dict[str, int]]] = []

    def inspect_container(self, container: str) -> dict[str, Any]:
        if self.running is None:
            raise docker.errors.NotFound("no such container")
        return {"State": {"Running": self.running}}

    def _url(self, template: str, *args: str) -> str:
        return template.format(*args)

    def _post_json(self, url: str, data: dict[str, int]) -> requests.Response:
        self.asked.append((url, data))
        response = requests.Response()
        response.status_code = self.status
        response.url = url
        return response

    def _raise_for_status(self, response: requests.Response) -> None:
        if response.status_code == 404:
            raise docker.errors.NotFound("no such container")
        if response.status_code >= 400:
            raise docker.errors.APIError("refused", response=response)


def test_the_step_is_capped_by_the_engine() -> None:
    engine = Engine(200)
    cap_pids(engine, "44dc8eb421e6", 64)
    assert engine.asked == [("/containers/44dc8eb421e6/update", {"PidsLimit": 64})]


def test_a_step_that_went_already_needs_no_cap() -> None:
    cap_pids(Engine(404), "44dc8eb421e6", 64)


@pytest.mark.parametrize("running", [False, None])
def test_a_step_that_ended_needs_no_cap(running: bool | None) -> None:
    """The engine refuses to update a container it is removing: read behind the build,
    the log named a step that has ended (or gone) since."""
    cap_pids(Engine(500, running), "44dc8eb421e6", 64)


def test_a_refusal_for_a_step_still_running_fails_the_build() -> None:
    with pytest.raises(docker.errors.APIError):
        cap_pids(Engine(500, running=True), "44dc8eb421e6", 64)
