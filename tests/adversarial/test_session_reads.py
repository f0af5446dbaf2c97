"""An installed CLI's session files are read to their cap and no further (issue 37, item 7).

The session files are the agent's: it can leave a sparse terabyte among them, or many
files that together far exceed the cap. The read must stop at the cap at once, so
the record does not wait on the command's timeout and gigabytes never cross the
engine's socket, and the honest files beside the flood are still read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runner.agents.installed.agent import SESSION_CAP, read_session
from runner.agents.installed.kind import HOME
from runner.sandbox.base import ExecRequest
from runner.sandbox.docker import DockerSandbox, DockerSandboxFactory
from tests.test_sandbox_io import spec

pytestmark = pytest.mark.docker
# Longer than reading the cap takes, far shorter than reading a terabyte: a read that
# drains the flood times out here and loses the honest file.
READ_TIMEOUT_S = 20.0


@pytest.fixture
def sandbox(docker_api: Any) -> Iterator[DockerSandbox]:
    with DockerSandboxFactory(docker_api).open(spec("session-reads")) as opened:
        yield opened


FLOODS = {
    "a sparse terabyte": "truncate -s 1T logs/a-flood.jsonl",
    "files that add up past the cap": (
        "for i in 1 2 3 4 5 6; do head -c 4000000 /dev/zero > logs/a-flood-$i.jsonl; done"
    ),
}


@pytest.mark.parametrize("flood", list(FLOODS))
def test_session_files_are_read_to_the_cap_and_no_further(
    flood: str, sandbox: DockerSandbox, held: Callable[..., None]
) -> None:
    made = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", f"mkdir -p logs && echo honest > logs/z.jsonl && {FLOODS[flood]}"],
            workdir=HOME,
        )
    )
    assert made.exit_code == 0, made.output
    found = read_session(sandbox, ("logs",), timeout_s=READ_TIMEOUT_S)
    held(
        f"session files: {flood}",
        FLOODS[flood],
        f"{len(found)} file(s) read, {sum(map(len, found.values()))} bytes",
    )
    assert sum(map(len, found.values())) <= SESSION_CAP
    if flood == "a sparse terabyte":  # larger than the cap: never opened
        assert found == {"logs/z.jsonl": b"honest\n"}, sorted(found)
    else:  # the files that fit come in whole, in the order tar met them, up to the cap
        assert all(len(v) in (4000000, 7) for v in found.values()), sorted(found)
