"""The agent layer a fleet trial runs from is named, with its pinned image ID, in the signed
job message (``LayerPins.images`` on the coordinator, ``trial_task._pins`` on the worker):
a worker makes sandbox A from that ID, never from whatever its engine calls the layer's tag
(a layer built there, a stale pull, a worker whose ``-Q`` left the layer out), and a message
whose pin was changed in Redis is refused like any changed job."""

from __future__ import annotations

from typing import Any

import pytest

from runner.agents.installed.catalogue import KINDS
from runner.agents.installed.layer import LayerPins, agent_tag
from runner.config.controls import Controls
from runner.distributed import registry
from runner.distributed.served_images import ServedImages
from runner.distributed.signing import job_refusal, sign_job
from runner.distributed.trial_task import _pins
from tests.test_registry import (  # noqa: F401  (registry_server, images: fixtures)
    Images,
    RegistryServer,
    images,
    registry_server,
    unique,
)

TASK_IMAGE = "deltarun/sandbox-python:bookworm"
BASE_ID = "sha256:" + "ab" * 32
LAYER_ID = "sha256:" + "cd" * 32
KEY = b"k" * 32


def controls() -> Controls:
    codex = {"type": "installed", "name": "codex", "version": "0.171.0"}
    return Controls.model_validate(
        {
            "protocol_id": "t",
            "channel": "exploratory",
            "suite": {"file": "suite/tasks.jsonl", "sha256": "a" * 64},
            "runtime": {"network": "model-only"},
            "route": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "arms": [
                {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
                {"name": "cli", "agent": codex},
                {
                    "name": "both",
                    "agent": codex,
                    "baseline": "both",
                    "toggles": {"env": {"X": "1"}},
                },
            ],
        }
    )


def test_each_installed_leg_names_its_pinned_layer_and_other_legs_none() -> None:
    layer = agent_tag(KINDS["codex"], "0.171.0", BASE_ID)
    pins = LayerPins(controls(), {TASK_IMAGE: BASE_ID, layer: LAYER_ID})
    expected = {
        "image": TASK_IMAGE,
        "image_id": BASE_ID,
        "agent_image": layer,
        "agent_image_id": LAYER_ID,
    }
    for leg in ("cli", "both-on", "both-off"):
        assert pins.images(leg, TASK_IMAGE) == expected
    assert pins.images("ctrl", TASK_IMAGE) == {"image": TASK_IMAGE, "image_id": BASE_ID}
    # A layer the run did not pin (or a task image it did not) is not named.
    assert LayerPins(controls(), {TASK_IMAGE: BASE_ID}).images("cli", TASK_IMAGE) == {
        "image": TASK_IMAGE,
        "image_id": BASE_ID,
    }
    assert LayerPins(controls(), {}).images("cli", "other:1") == {"image": "other:1"}


def test_the_worker_makes_its_sandboxes_from_both_pins_of_the_signed_message() -> None:
    layer = agent_tag(KINDS["codex"], "0.171.0", BASE_ID)
    message: dict[str, Any] = {
        "job": {"job_id": "j"},
        **LayerPins(controls(), {TASK_IMAGE: BASE_ID, layer: LAYER_ID}).images("cli", TASK_IMAGE),
    }
    message["sig"] = sign_job(KEY, message)
    assert job_refusal(KEY, message) is None
    assert _pins(message) == {TASK_IMAGE: BASE_ID, layer: LAYER_ID}
    # Whoever can write to Redis cannot swap the layer a worker runs: the signature covers it.
    for field, value in (("agent_image_id", "sha256:" + "ee" * 32), ("agent_image", "evil:1")):
        changed = {**message, field: value}
        assert job_refusal(KEY, changed) == "signature does not match this worker's job key"
    # A message from a coordinator that names no layer: the task image's pin alone.
    assert _pins({"image": TASK_IMAGE, "image_id": BASE_ID}) == {TASK_IMAGE: BASE_ID}
    assert _pins({"image": TASK_IMAGE, "agent_image": layer, "agent_image_id": 3}) == {}


@pytest.mark.docker
def test_a_worker_with_q_pulls_the_agent_layers_on_its_images(
    request: pytest.FixtureRequest, docker_api: Any
) -> None:
    server: RegistryServer = request.getfixturevalue("registry_server")  # the session's
    made: Images = request.getfixturevalue("images")
    # A task image and an agent layer on it, pushed and published as a run does; the layer
    # is then gone from the engine, and a worker started with -Q naming the task image only.
    task = unique("q-task")
    task_id = made.build(task)
    layer = agent_tag(KINDS["codex"], "0.171.0", task_id)
    other = agent_tag(KINDS["codex"], "0.171.0", "sha256:" + "0" * 64)  # on another image
    layer_id = made.build(layer)
    published = {
        tag: registry.Published(pin, registry.push(docker_api, tag, pin, server.address))
        for tag, pin in ((task, task_id), (layer, layer_id))
    }
    published[other] = published[layer]
    made.remove(layer_id)
    said: list[str] = []
    served = ServedImages(docker_api, "w-q", only=[task], pull=True, say=said.append)
    served.start(published)
    assert served.served == {task: task_id, layer: layer_id}  # not the layer on another image
    assert made.present(layer) == layer_id
    assert any(line.startswith(f"pulled {layer} ({layer_id[:19]})") for line in said), said
    assert served.changes(published) == []  # nothing left to take on
