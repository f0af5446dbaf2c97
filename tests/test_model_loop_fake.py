"""The ``openai`` agent's tool loop on the scripted in-memory sandbox, against a real HTTP model.

The endpoint (tests/fake_openai.py) listens on 127.0.0.1 and speaks the real
chat-completions protocol; the sandbox is ``runner.sandbox.fake``. These tests
are about the loop's logic (turns, stops, retries, tokens, caps, the route lock,
the policy's refusals). What needs a kernel (symlinks, paths resolved in the
sandbox, real reads and writes, timeouts of commands) stays on the real engine
in tests/test_openai_agent.py.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path
from typing import Any

from runner.agents.factory import make_agent
from runner.config.loader import load_controls
from runner.records import Job, Outcome, Trial
from runner.sandbox.base import ExecRequest, ExecResult
from runner.sandbox.fake import FakeSandbox, FakeSandboxFactory, Verdict, exec_result
from runner.suite.load import load_suite
from runner.trees.inputs import LocalInputs
from runner.trial.env import trial_env
from runner.trial.execute import execute_trial
from tests.fake_openai import FakeModel, Step, call, error, reply
from tests.helpers import ADD_GOLD, repo_task
from tests.test_openai_agent import MODEL, suite_for

# Every tool but the grading oracle and the two that are always offered.
RESOLVED_READ = 'realpath -m -- "$1" || exit 120; printf "\\000"; shift; exec "$@"'


def toolbox_in_memory(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
    """The toolbox commands these tests need, over the fake's files: ``realpath`` (the
    identity: no symlinks here), a resolved read (``head`` reads, ``find`` lists) and
    ``git apply -`` (the patch on stdin becomes the workspace's diff)."""
    argv = list(request.argv)
    if argv[:3] == ["realpath", "-m", "--"]:
        return exec_result(0, "".join(f"{path}\n" for path in argv[3:]).encode())
    if argv[:3] == ["sh", "-c", RESOLVED_READ]:
        path, command = argv[4], argv[5]
        resolved = path.encode() + b"\n\0"
        if command == "head":
            data = sandbox.files.get(path)
            return exec_result(1) if data is None else exec_result(0, resolved + data)
        if command == "find":
            inside = [p for p in [*sandbox.files, *sandbox.dirs] if posix_parent(p) == path]
            lines = [
                f"{'d' if p in sandbox.dirs else 'f'} {len(sandbox.files.get(p, b''))} "
                f"{p.rsplit('/', 1)[1]}\n"
                for p in sorted(inside)
            ]
            return exec_result(0, resolved + "".join(lines).encode())
    if argv[:2] == ["git", "apply"] and argv[-1] == "-" and request.stdin is not None:
        sandbox.patch += request.stdin
        return exec_result(0, b"Applied patch cleanly.\n")
    return None


def posix_parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


def sandboxes(verdict: Verdict = "fail") -> FakeSandboxFactory:
    """A fake with an image ID new to this process, so the module probe runs every time
    (``runner.grading.image_facts`` caches per ID): opened = agent, probe, verify."""
    return FakeSandboxFactory(toolbox_in_memory, f"sha256:{uuid.uuid4().hex}", verdict=verdict)


def run_model(controls_path: Path, fakes: FakeSandboxFactory, task_id: str = "t1") -> Trial:
    loaded = load_controls(controls_path)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    arm = next(a for a in loaded.controls.arms if a.name == "model")
    env = trial_env(loaded.controls, LocalInputs(suite), fakes, "test")
    job = Job(
        job_id=f"job-{task_id}",
        run_id="openai-under-test",
        protocol_sha256="p" * 64,
        task_id=task_id,
        arm="model",
        repeat=0,
    )
    agent = make_agent(arm.agent, None, None, loaded.controls)
    trial = execute_trial(job, suite.task(task_id), agent, env)
    assert fakes.opened and all(s.closed for s in fakes.opened)
    return trial


def tool_results(fake: FakeModel) -> list[dict[str, Any]]:
    """The tool messages the model received, from the last request it saw."""
    return [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]


def verified_patch(fakes: FakeSandboxFactory) -> bytes | None:
    """The patch the verify sandbox applied (None: no verify sandbox, or no patch)."""
    last = fakes.opened[-1]
    found = [d for p, d in last.files.items() if p.endswith("/agent.patch")]
    return found[0] if last.ran("run_pytest.py") and found else None


def test_another_model_name_is_a_route_mismatch(tmp_path: Path) -> None:
    script = [reply(call("run_command", {"command": "touch pwned"}), model="gpt-4o-mini")]
    fakes = sandboxes()
    with FakeModel(script) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    assert trial.route_mismatch and trial.outcome is Outcome.ERROR
    assert trial.stop_reason == "route_mismatch"
    assert "gpt-4o-mini" in (trial.error or "") and MODEL in (trial.error or "")
    assert trial.tool_calls == 0  # nothing the other model asked for was carried out
    assert not fakes.opened[0].ran("touch pwned") and len(fakes.opened) == 1


def test_accept_models_admits_a_named_snapshot(tmp_path: Path) -> None:
    script = [reply(call("submit", {}), model="qwen-test-2026-11")]
    with FakeModel(script) as fake:
        controls = suite_for(
            tmp_path, fake.base_url, route={"accept_models": ["qwen-test-2026-11"]}
        )
        trial = run_model(controls, sandboxes(verdict="fail"))
    assert not trial.route_mismatch and trial.outcome is Outcome.MISS
    assert trial.stop_reason == "submit" and trial.error is None


def test_rate_limit_and_5xx_are_retried_as_infrastructure(tmp_path: Path) -> None:
    script = [
        error(429, "slow down", retry_after="0"),
        error(503, "overloaded", retry_after="0"),
        reply(call("apply_patch", {"patch": ADD_GOLD}), usage=(40, 30)),
        reply(call("submit", {}), usage=(50, 2)),
    ]
    fakes = sandboxes(verdict="pass")
    with FakeModel(script) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    assert trial.outcome is Outcome.SUCCESS, trial.error
    assert trial.retries_used == 0  # endpoint retries are not agent retries
    assert (trial.prompt_tokens, trial.completion_tokens) == (90, 32)
    assert len(fake.requests) == 4
    assert trial.transcript is not None
    assert [e.get("attempts") for e in trial.transcript if e["role"] == "assistant"] == [3, 1]
    assert verified_patch(fakes) == ADD_GOLD.encode()


def test_endpoint_that_keeps_failing_is_an_error_not_a_miss(tmp_path: Path) -> None:
    fakes = sandboxes()
    with FakeModel(lambda body, index: error(500, "boom", retry_after="0")) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    assert trial.outcome is Outcome.ERROR and trial.stop_reason == "endpoint_error"
    assert "failed 3 attempts" in (trial.error or "") and "HTTP 500" in (trial.error or "")
    assert len(fake.requests) == 3
    assert len(fakes.opened) == 1  # no patch taken, nothing verified


def test_whole_trial_retries_are_counted_in_retries_used(tmp_path: Path) -> None:
    def flaky(body: dict[str, Any], index: int) -> Step:
        if index < 2:  # the first attempt of the trial spends both of its request attempts
            return error(500, "boom", retry_after="0")
        if index == 2:
            return reply(call("apply_patch", {"patch": ADD_GOLD}))
        return reply(call("submit", {}))

    fakes = sandboxes(verdict="pass")
    with FakeModel(flaky) as fake:
        controls = suite_for(
            tmp_path, fake.base_url, route={"max_attempts": 2}, runtime={"max_retries": 1}
        )
        trial = run_model(controls, fakes)
    assert trial.outcome is Outcome.SUCCESS and trial.retries_used == 1 and trial.attempt == 2
    assert len(fakes.opened) == 4  # the failed attempt's sandbox, then agent, probe, verify
    assert verified_patch(fakes) == ADD_GOLD.encode()


def test_malformed_arguments_get_an_error_then_end_the_trial(tmp_path: Path) -> None:
    script = [
        reply(call("read_file", '{"path": "calc/__init__.py"')),  # cut off
        reply(call("read_file", "not json at all")),
        reply(call("read_file", {"path": "calc/__init__.py"})),  # corrected
        reply(call("write_file", "{")),
        reply(call("write_file", "[1, 2]")),
        reply(call("write_file", '{"path": 3, "content": "x"}')),
    ]
    fakes = sandboxes()
    with FakeModel(script) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    results = [m["content"] for m in tool_results(fake)]
    assert results[0].startswith("error: arguments are not acceptable JSON")
    assert "return a - b" in results[2]
    assert trial.stop_reason == "malformed_tool_calls" and len(fake.requests) == 6
    assert not trial.tool_violation  # malformed is not hostile
    assert trial.outcome is Outcome.MISS and trial.error is None
    agent = fakes.opened[0]
    assert len(agent.ran("head -c")) == 1 and not agent.ran("cat >")  # only the good call ran


def test_a_model_that_loops_stops_at_the_turn_limit(tmp_path: Path) -> None:
    loop = lambda body, index: reply(call("list_dir", {}), usage=(10, 1))  # noqa: E731
    fakes = sandboxes()
    with FakeModel(loop) as fake:
        controls = suite_for(tmp_path, fake.base_url, agent={"type": "openai", "max_turns": 4})
        trial = run_model(controls, fakes)
    assert trial.stop_reason == "turn_limit" and len(fake.requests) == 4
    assert (trial.prompt_tokens, trial.completion_tokens, trial.tool_calls) == (40, 4, 4)
    assert trial.outcome is Outcome.MISS
    assert len(fakes.opened[0].ran("find -H /workspace")) == 4
    assert "file         5 README.md" in tool_results(fake)[0]["content"]


def test_a_model_that_never_calls_a_tool(tmp_path: Path) -> None:
    fakes = sandboxes()
    with FakeModel([reply(content="I would change add() to return a + b.")]) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    assert trial.stop_reason == "no_tool_call" and trial.outcome is Outcome.MISS
    assert trial.tool_calls == 0 and len(fake.requests) == 1
    assert len(fakes.opened) == 3 and verified_patch(fakes) is None  # graded, on no patch


def test_a_model_that_answers_too_slowly_times_out_at_the_limit(tmp_path: Path) -> None:
    def stalls(body: dict[str, Any], index: int) -> Step:
        time.sleep(8)
        return reply(call("submit", {}))

    fakes = sandboxes(verdict="pass")
    with FakeModel(stalls) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url, timeout_s=2), fakes)
    assert trial.outcome is Outcome.TIMEOUT and trial.stop_reason == "deadline"
    assert trial.wall_s < 8  # the trial did not wait for the reply
    assert len(fakes.opened) == 1  # a timeout is not graded


def test_a_flood_of_calls_in_one_reply_is_capped(tmp_path: Path) -> None:
    flood = [call("list_dir", {}) for _ in range(40)]
    fakes = sandboxes()
    with FakeModel([reply(*flood), reply(call("submit", {}))]) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    results = [m["content"] for m in tool_results(fake)]
    assert len(results) == 40 and results[-1].startswith("error: not run")
    assert sum(r.startswith("error: not run") for r in results) == 8
    assert trial.stop_reason == "submit" and trial.tool_calls == 41
    assert len(fakes.opened[0].ran("find -H /workspace")) == 32  # the rest never ran


def test_run_hidden_test_does_not_give_a_negative_control_away(tmp_path: Path) -> None:
    tasks = [repo_task("neg", kind="negative", hidden=False, prompt="Fix add() per the spec.")]
    script = [reply(call("run_hidden_test", {})), reply(call("submit", {}))]
    fakes = sandboxes(verdict="pass")
    with FakeModel(script) as fake:
        controls = suite_for(tmp_path, fake.base_url, allowlist=["run_hidden_test"], tasks=tasks)
        trial = run_model(controls, fakes, "neg")
    assert tool_results(fake)[0]["content"] == "fail"  # as for any unsolved task
    assert trial.outcome is Outcome.INVALID_COMPLETION
    assert not [s for s in fakes.opened if s.ran("run_pytest.py")]  # no test exists to run


def test_run_hidden_test_is_refused_unless_listed(tmp_path: Path) -> None:
    fakes = sandboxes()
    with FakeModel([reply(call("run_hidden_test", {})), reply(call("submit", {}))]) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url), fakes)
    assert tool_results(fake)[0]["content"].startswith("refused: ")
    assert trial.tool_violation and trial.tool_calls == 2
    assert trial.transcript is not None
    assert [e["refused"] for e in trial.transcript if e.get("refused")] == ["allowlist"]
    # Only the final verdict ran the hidden tests: the refused call graded nothing.
    assert len([s for s in fakes.opened if s.ran("run_pytest.py")]) == 1


def test_answer_task_is_answered_through_submit(tmp_path: Path) -> None:
    tasks = [
        {
            "id": "a1",
            "kind": "ordinary",
            "prompt": "What is 6 times 7? Answer with a number.",
            "expect": 42,
            "metrics": ["exact_match"],
            "deadline_s": 30,
        }
    ]
    fakes = sandboxes()
    with FakeModel([reply(call("submit", {"answer": 42}))]) as fake:
        trial = run_model(suite_for(tmp_path, fake.base_url, tasks=tasks), fakes, "a1")
    assert trial.outcome is Outcome.SUCCESS and trial.answer == 42
    [agent] = fakes.opened  # no verify sandbox
    assert list(agent.files) == ["/io/.deltarun-guard.py"]  # and no fixture


def test_unreachable_endpoint_is_an_error_with_the_reason(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controls = suite_for(tmp_path, f"http://127.0.0.1:{port}/v1", route={"max_attempts": 2})
    trial = run_model(controls, sandboxes())
    assert trial.outcome is Outcome.ERROR and "unreachable" in (trial.error or "")
    assert trial.stop_reason == "endpoint_error"
