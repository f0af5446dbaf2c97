"""The preflight's look inside an image is asked once per machine (``runner.trees.kept``),
on the real engine: the next preflight of the same image still opens a sandbox with the
run's limits (the engine must accept them each time) but runs nothing in it; an image with
a setuid file is refused again, with the same line, from the kept answer; another image,
other commands or a kept answer that does not read as one are asked again."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from runner.errors import UserError
from runner.sandbox.base import Limits, SandboxSpec
from runner.sandbox.docker import DockerSandboxFactory
from tests.helpers import PY_IMAGE

pytestmark = pytest.mark.docker


class Counted:
    """The engine's client, counting the containers created and the commands run in them."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.created = 0
        self.execs: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def create_container(self, *args: Any, **kwargs: Any) -> Any:
        self.created += 1
        return self.api.create_container(*args, **kwargs)

    def exec_create(self, container: str, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        self.execs.append(cmd)
        return self.api.exec_create(container, cmd, *args, **kwargs)


def _spec(image: str) -> SandboxSpec:
    return SandboxSpec(
        image=image,
        limits=Limits(
            memory_bytes=256 << 20, nano_cpus=500_000_000, pids=64, workspace_bytes=16 << 20
        ),
        lifetime_s=60,
        labels={"run": f"preflight-{uuid.uuid4().hex[:8]}", "job": "preflight"},
    )


def _preflight(api: Any, image: str, commands: list[str]) -> tuple[list[str], Counted]:
    client = Counted(api)
    missing = DockerSandboxFactory(client).preflight(_spec(image), commands)
    return missing, client


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DELTARUN_CACHE", str(root))
    return root


@pytest.fixture
def setuid_image(docker_api: Any) -> Iterator[str]:
    """The sandbox image with one setuid file added (a layer of its own)."""
    tag = f"deltarun-test/preflight-setuid-{uuid.uuid4().hex[:8]}:1"
    dockerfile = (
        f"FROM {PY_IMAGE}\n"  # COPY would drop the bit: a build step sets it
        "USER root\nRUN cp /bin/true /usr/local/bin/raise && chmod u+s /usr/local/bin/raise\n"
    )
    for step in docker_api.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, decode=True
    ):
        assert "error" not in step, step
    yield tag
    try:
        docker_api.remove_image(tag, force=True)
    except docker.errors.APIError:
        pass


def test_the_next_preflight_opens_a_sandbox_but_walks_no_file(docker_api: Any, cache: Path) -> None:
    first, asked = _preflight(docker_api, PY_IMAGE, ["git", "no-such-cli"])
    assert first == ["no-such-cli"]
    assert asked.created == 1 and len(asked.execs) == 2  # the harness check, the lookup
    assert any("find / -xdev -perm /6000" in " ".join(cmd) for cmd in asked.execs)
    again, kept = _preflight(docker_api, PY_IMAGE, ["git", "no-such-cli"])
    assert again == ["no-such-cli"]
    assert (kept.created, kept.execs) == (1, [])  # the limits go to the engine each time
    # other commands are another question
    other, asked_again = _preflight(docker_api, PY_IMAGE, ["sh"])
    assert other == [] and len(asked_again.execs) == 2


def test_an_image_with_a_setuid_file_is_refused_again_from_the_kept_answer(
    docker_api: Any, cache: Path, setuid_image: str
) -> None:
    lines = []
    for _ in range(2):
        client = Counted(docker_api)
        with pytest.raises(UserError) as refused:
            DockerSandboxFactory(client).preflight(_spec(setuid_image), ["git"])
        lines.append(str(refused.value))
        execs = len(client.execs)
    assert "has setuid/setgid files (/usr/local/bin/raise)" in lines[0]
    assert lines[1] == lines[0] and execs == 0
    # the image it was built on is another image: asked, and it passes
    missing, asked = _preflight(docker_api, PY_IMAGE, ["git"])
    assert missing == [] and len(asked.execs) == 2


@pytest.mark.parametrize(
    "kept",
    [
        b"not json",
        b'{"exit_code": 0, "output": "", "missing": ["python3"]}',  # a command not asked
        b'{"exit_code": "0", "output": "", "missing": []}',
        b'{"exit_code": 0, "output": ""}',
        b'{"exit_code": 0, "output": "", "missing": [["no-such-cli"]]}',  # not a name
    ],
)
def test_a_kept_answer_that_does_not_read_as_one_is_asked_again(
    docker_api: Any, cache: Path, kept: bytes
) -> None:
    _preflight(docker_api, PY_IMAGE, ["git", "no-such-cli"])
    (answer,) = (cache / "facts").glob("*.json")
    answer.write_bytes(kept)
    missing, asked = _preflight(docker_api, PY_IMAGE, ["git", "no-such-cli"])
    assert missing == ["no-such-cli"] and len(asked.execs) == 2
    assert b"no-such-cli" in answer.read_bytes()  # kept anew
