"""Tool-call overhead: checked tool calls per second against raw `docker exec`, same sandbox.

A model-driven agent acts only through tool calls; each one is checked by the
policy, has its paths resolved inside the sandbox and runs as the agent user.
The baseline is the bare Engine API exec of the same command (`head -c` of the
same file) in the same sandbox, measured in this run. Also measured: whole
turns of the tool loop (a request to a scripted endpoint on 127.0.0.1, one
`read_file`) per second, against the same baseline.

    python bench/tools.py [--calls 200] [--smoke]

``--smoke`` (``bench/smoke.py``): 2 calls of each kind and one turn of the loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.agents.interface import BASE_ENV, AgentContext  # noqa: E402
from runner.agents.loop.tool_loop import ModelAgent  # noqa: E402
from runner.agents.loop.toolbox import Toolbox, ToolPolicy  # noqa: E402
from runner.config.arms import OpenAIAgent, Route  # noqa: E402
from runner.records import RepoTask, TaskKind  # noqa: E402
from runner.sandbox.base import ExecRequest, Limits, SandboxSpec  # noqa: E402
from runner.sandbox.docker import DockerSandbox, DockerSandboxFactory  # noqa: E402
from runner.sandbox.engine import connect  # noqa: E402
from tests.fake_openai import FakeModel, call, reply  # noqa: E402
from tests.helpers import PY_IMAGE  # noqa: E402

POLICY = ToolPolicy(
    allowlist=("read_file",),
    forbidden=(".git/",),
    call_timeout_s=30,
    output_cap=16 << 10,
    test_command="true",
)
TARGET = "/workspace/data.txt"


def raw_rate(sandbox: DockerSandbox, calls: int) -> float:
    client = sandbox.client
    start = time.perf_counter()
    for _ in range(calls):
        exec_id = client.exec_create(
            sandbox.container,
            ["head", "-c", "16385", "--", TARGET],
            user="1000:1000",
            environment=BASE_ENV,
        )["Id"]
        client.exec_start(exec_id)
        client.exec_inspect(exec_id)
    return calls / (time.perf_counter() - start)


def toolbox_rate(sandbox: DockerSandbox, calls: int) -> float:
    box = Toolbox(sandbox, POLICY, None, time.monotonic() + 3600)
    start = time.perf_counter()
    for _ in range(calls):
        result = box.call("read_file", '{"path": "data.txt"}')
        assert not result.refused, result.content
    return calls / (time.perf_counter() - start)


def loop_rate(sandbox: DockerSandbox, turns: int) -> float:
    script = [reply(call("read_file", {"path": "data.txt"})) for _ in range(turns)]
    with FakeModel([*script, reply(call("submit", {}))]) as fake:
        agent = ModelAgent(
            OpenAIAgent(type="openai", max_turns=turns + 1),
            Route(base_url=fake.base_url, model="qwen-test"),
            POLICY,
            seed=0,
            transcript_cap=1 << 24,
        )
        task = RepoTask(
            id="b", kind=TaskKind.NEGATIVE, prompt="bench", repo="r.tar", image=PY_IMAGE
        )
        start = time.perf_counter()
        result = agent.run(AgentContext(sandbox, task, 3600, (".git/",), 1 << 16, "bench"))
        elapsed = time.perf_counter() - start
    assert result.stop_reason == "submit" and result.tool_calls == turns + 1, result.log
    return turns / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.calls = 2
        smoke.announce("tools", "2 calls of each kind, 1 turn of the tool loop")
    factory = DockerSandboxFactory(connect())
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(1 << 30, 10**9, 256, 256 << 20),
        lifetime_s=1800,
        labels={"run": "bench-tools", "job": "bench-tools"},
    )
    with factory.open(spec) as sandbox:
        assert isinstance(sandbox, DockerSandbox)
        sandbox.run(ExecRequest(argv=["sh", "-c", f"seq 1 2000 > {TARGET}"]))
        raw_rate(sandbox, min(10, args.calls))  # warm-up
        raw = raw_rate(sandbox, args.calls)
        checked = toolbox_rate(sandbox, args.calls)
        turns = loop_rate(sandbox, max(1, args.calls // 2))
    print(f"tools: raw docker exec (head -c):     {raw:7.1f} /s")
    print(f"tools: checked read_file tool calls:  {checked:7.1f} /s  ratio {checked / raw:.2f}")
    print(f"tools: tool-loop turns (model+call):  {turns:7.1f} /s  ratio {turns / raw:.2f}")


if __name__ == "__main__":
    main()
