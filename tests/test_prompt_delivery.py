"""The prompt reaches the agent whole, root-owned and read-only, on every baseline path.

A copy-free or staged baseline needs no process in the sandbox: the prompt and the guard
travel in one root-owned archive (``runner.trial.workspace.baseline``). A baseline committed
in the sandbox writes a short prompt from the environment of its one root exec. Each path is
tried with a prompt shell and ``printf`` would mangle if it were ever interpolated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.agents.interface import GUARD_FILE, PROMPT_FILE
from runner.sandbox.base import ROOT_USER, ExecRequest, Limits, SandboxSpec
from runner.sandbox.docker import DockerSandboxFactory
from runner.trees.archives import Member
from runner.trees.cache import CacheDir
from runner.trees.staging import Staging
from runner.trial.workspace import MAX_ENV_PROMPT_BYTES, baseline, copy_in
from tests.helpers import ADD_FIXTURE, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

PROMPT = 'Fix add(). It\'s "quoted", $HOME stays literal, %s and \\n too;\nline two `x`'
PROBE = "\n".join(
    [
        'stat -c "%u %a" /io/prompt.txt > owner.txt',
        'cp "$DELTARUN_PROMPT_FILE" seen-prompt.txt',
        "(echo tampered > /io/prompt.txt) 2>/dev/null && echo writable > writable.txt || true",
        "",
    ]
)


def test_the_agent_reads_its_prompt_whole_through_a_view(tmp_path: Path, docker_api: Any) -> None:
    """The path every run takes: a staged, copy-free baseline, and so no exec before the agent."""
    controls = make_suite(
        tmp_path,
        [repo_task("t1", prompt=PROMPT)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "probe", "agent": write_agent(tmp_path, "probe", PROBE)},
        ],
    )
    trial = run_one(docker_api, controls, "t1", "probe")
    added = {
        section.split(" b/", 1)[1].split("\n", 1)[0]: section
        for section in trial.patch.split("diff --git a/")[1:]
    }
    assert "+0 444" in added["owner.txt"]
    seen = "\n".join(
        line[1:] for line in added["seen-prompt.txt"].splitlines() if line.startswith("+")
    )
    assert seen.endswith(PROMPT.split("\n")[1])
    assert PROMPT.split("\n")[0] in seen
    assert "writable.txt" not in added


@pytest.mark.parametrize("size", ["short", "long"])
@pytest.mark.parametrize("staged", [True, False], ids=["staged", "committed-here"])
def test_every_baseline_path_writes_the_same_prompt(
    tmp_path: Path, docker_api: Any, staged: bool, size: str
) -> None:
    prompt = PROMPT if size == "short" else PROMPT + "x" * (MAX_ENV_PROMPT_BYTES + 1)
    staging = Staging(CacheDir(tmp_path / "cache"))
    fixture = [Member(path, False, data.encode(), False) for path, data in ADD_FIXTURE.items()]
    workspace = staging.workspace("tar:prompt", lambda: fixture, ())
    kit = staging.baseline("tar:prompt", lambda: fixture, ()) if staged else None
    spec = SandboxSpec(
        image="deltarun/sandbox-python:bookworm",
        limits=Limits(memory_bytes=512 << 20, nano_cpus=10**9, pids=128, workspace_bytes=64 << 20),
        lifetime_s=120,
        labels={"run": f"prompt-{tmp_path.name}"},
    )
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        copy_in(sandbox, workspace)
        baseline(sandbox, prompt, guard=True, staged=kit)
        read = sandbox.run(ExecRequest(argv=["cat", PROMPT_FILE], output_cap=1 << 20))
        owner = sandbox.run(
            ExecRequest(argv=["stat", "-c", "%u %a", PROMPT_FILE, GUARD_FILE], user=ROOT_USER)
        )
        write = sandbox.run(ExecRequest(argv=["sh", "-c", f"echo x > {PROMPT_FILE}"]))
    assert read.exit_code == 0 and read.output.decode() == prompt
    assert owner.output.decode().split("\n")[:2] == ["0 444", "0 444"]
    assert write.exit_code != 0
