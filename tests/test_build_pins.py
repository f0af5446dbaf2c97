"""Pins without hand edits (issue 38, item 5): `deltarun build CONTROLS` on the scored
channel pins every image the run uses under ``images:`` (the runtime's image, a task's own
image such as an instance image's tag), leaving out environments, which the suite pins;
the controls keep their comments and layout, and the scored run then starts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import UserError
from runner.suite.sealing import pin_images
from tests.conftest import run_cli
from tests.helpers import PY_IMAGE, make_suite, pin_validation, repo_task
from tests.test_environments import CONTROL, env_name, env_task, write_env

__all__ = ["env_name"]  # the fixture, shared with test_environments

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
CONTROLS = """\
# the team's own notes
protocol_id: p   # why p
channel: scored
suite: {file: suite/tasks.jsonl, sha256: abc}
arms:
  - name: control   # the frozen one
    control: true
    agent: {type: scripted, action: noop}
"""


def test_pins_are_added_at_the_end_keeping_comments_and_layout() -> None:
    pinned = pin_images(CONTROLS, {"img:b": ID_B, "img:a": ID_A}, "c.yaml")
    assert pinned == CONTROLS + f"images:\n  img:a: {ID_A}\n  img:b: {ID_B}\n"
    assert pin_images(pinned, {"img:a": ID_A}, "c.yaml") is pinned  # already right: untouched


def test_a_pin_is_replaced_and_the_other_pins_kept() -> None:
    text = CONTROLS + f"images:\n  other:1: {ID_A}   # kept\n  'img:a': {ID_B}\n"
    pinned = pin_images(text, {"img:a": ID_A}, "c.yaml")
    # The key keeps its quotes; the new value is written plain.
    assert pinned == CONTROLS + f"images:\n  other:1: {ID_A}   # kept\n  'img:a': {ID_A}\n"
    flow = pin_images(CONTROLS + "images: {}\n", {"img:a": ID_A}, "c.yaml")
    assert yaml.safe_load(flow)["images"] == {"img:a": ID_A}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (CONTROLS + "images: [x]\n", "c.yaml: images: must map each image reference"),
        ("- a\n", "c.yaml: must be a YAML mapping"),
        ("a: [\n", "c.yaml: line 2: not valid YAML"),
    ],
)
def test_what_cannot_be_pinned_is_one_line(text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        pin_images(text, {"img:a": ID_A}, "c.yaml")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.fixture
def instance_tag(docker_api: Any) -> Iterator[str]:
    """A second image reference (an instance image's tag stands for any task image)."""
    repository = f"deltarun-test/instance-{uuid.uuid4().hex[:10]}"
    docker_api.tag(PY_IMAGE, repository, "v1")
    yield f"{repository}:v1"
    docker_api.remove_image(f"{repository}:v1")


@pytest.mark.docker
def test_build_pins_what_a_scored_run_uses_and_the_run_starts(
    tmp_path: Path, docker_api: Any, env_name: str, instance_tag: str
) -> None:
    tasks = [
        repo_task("t1"),  # the sandbox image, named by the task
        {**repo_task("t2"), "image": instance_tag},
        env_task("t3", env_name),  # its environment is pinned by the suite
    ]
    controls = make_suite(tmp_path, tasks, [CONTROL], seal=False, channel="scored")
    write_env(tmp_path / "suite", env_name, "ARG BASE\nFROM ${BASE}\nRUN true\n")
    text = controls.read_text()
    controls.write_text("# pinned by deltarun build, kept by it\n" + text)
    built = run_cli("build", str(controls), "--network", "none")
    assert built.returncode == 0, built.stderr
    base_id = docker_api.inspect_image(PY_IMAGE)["Id"]
    instance_id = docker_api.inspect_image(instance_tag)["Id"]
    assert f"images.{PY_IMAGE}: pinned {base_id}" in built.stdout
    assert f"images.{instance_tag}: pinned {instance_id}" in built.stdout
    assert f"wrote {controls}" in built.stdout
    written = controls.read_text()
    assert written.startswith("# pinned by deltarun build, kept by it\n")
    document = yaml.safe_load(written)
    assert document["images"] == {PY_IMAGE: base_id, instance_tag: instance_id}
    # A second build changes nothing and says nothing of the images.
    again = run_cli("build", str(controls), "--network", "none")
    assert again.returncode == 0, again.stderr
    assert "images." not in again.stdout and controls.read_text() == written
    # The scored run starts: no pin is missing (its validation pinned as validate would).
    pin_validation(controls)
    run = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    assert "refuses to start" not in run.stderr


@pytest.mark.docker
def test_without_build_the_scored_run_is_refused_and_exploratory_is_not_pinned(
    tmp_path: Path, docker_api: Any
) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], [CONTROL], channel="scored")
    pin_validation(controls)
    refused = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert refused.returncode == 1
    assert f"images.'{PY_IMAGE}' is not pinned" in refused.stderr
    explore = tmp_path / "e"
    controls = make_suite(explore, [repo_task("t1")], [CONTROL], seal=False)
    built = run_cli("build", str(controls))
    assert built.returncode == 0, built.stderr
    assert "images" not in yaml.safe_load(controls.read_text())
