"""The ``openai`` agent on the real Docker engine against a scripted local endpoint.

The endpoint (tests/fake_openai.py) listens on 127.0.0.1 and speaks the real
chat-completions protocol over HTTP; every tool call runs in a real sandbox.
These are the tests that need a kernel: real reads, writes and commands,
symlinks resolved in the sandbox, a command's timeout, the hidden test's
absence, the CLI. The loop's logic (turns, stops, retries, tokens, caps, the
route lock, refusals) is tested on the in-memory sandbox in
tests/test_model_loop_fake.py.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.agents.factory import make_agent
from runner.config.loader import load_controls
from runner.config.runtime import TOOL_NAMES
from runner.records import Job, Outcome, Trial
from runner.sandbox.docker import DockerSandboxFactory
from runner.suite.load import load_suite
from runner.trees.inputs import LocalInputs
from runner.trial.env import TrialEnv
from runner.trial.execute import execute_trial
from tests.conftest import leftover_sandboxes, run_cli
from tests.fake_openai import FakeModel, Step, call, reply
from tests.helpers import ADD_GOLD, comparison, make_suite, owned_key, pin_validation, repo_task

pytestmark = pytest.mark.docker

MODEL = "qwen-test"
# Every tool but the grading oracle and the two that are always offered.
ALL_TOOLS = [t for t in TOOL_NAMES if t not in ("run_hidden_test", "submit", "abstain")]
CONTROL = {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}


def suite_for(
    root: Path,
    base_url: str,
    *,
    allowlist: list[str] | None = None,
    agent: dict[str, Any] | None = None,
    route: dict[str, Any] | None = None,
    tasks: list[dict[str, Any]] | None = None,
    timeout_s: float = 60,
    channel: str = "exploratory",
    runtime: dict[str, Any] | None = None,
) -> Path:
    return make_suite(
        root,
        tasks or [repo_task("t1", timeout_s=timeout_s)],
        [CONTROL, {"name": "model", "agent": agent or {"type": "openai", "max_turns": 8}}],
        tools={
            "allowlist": ALL_TOOLS if allowlist is None else allowlist,
            "forbidden_paths": [".git/", "secrets/"],
            "call_timeout_s": 20,
        },
        route={"base_url": base_url, "model": MODEL, "max_attempts": 3, **(route or {})},
        channel=channel,
        runtime=runtime,
    )


def unique_run() -> str:
    """A run id of this trial alone: the leak check never sees a parallel test's sandboxes."""
    return f"openai-under-test-{uuid.uuid4().hex[:12]}"


def run_model(docker_api: Any, controls_path: Path, task_id: str = "t1") -> Trial:
    loaded = load_controls(controls_path)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    arm = next(a for a in loaded.controls.arms if a.name == "model")
    env = TrialEnv(loaded.controls, LocalInputs(suite), DockerSandboxFactory(docker_api), "test")
    job = Job(
        job_id=f"job-{task_id}",
        run_id=unique_run(),
        protocol_sha256="p" * 64,
        task_id=task_id,
        arm="model",
        repeat=0,
    )
    agent = make_agent(arm.agent, None, None, loaded.controls)
    trial = execute_trial(job, suite.task(task_id), agent, env)
    assert leftover_sandboxes(docker_api, run=job.run_id) == ([], [])
    return trial


def tool_results(fake: FakeModel) -> list[dict[str, Any]]:
    """The tool messages the model received, from the last request it saw."""
    return [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]


def test_model_solves_the_task_through_tool_calls(tmp_path: Path, docker_api: Any) -> None:
    script = [
        reply(call("list_dir", {"path": "."}), usage=(120, 10)),
        reply(call("read_file", {"path": "calc/__init__.py"}), usage=(150, 12)),
        reply(call("search", {"pattern": "return a", "path": "calc"}), usage=(170, 9)),
        reply(call("apply_patch", {"patch": ADD_GOLD}), usage=(200, 60)),
        reply(
            call("run_tests", {}), call("run_command", {"command": "echo hi >&2"}), usage=(260, 8)
        ),
        reply(call("submit", {}), usage=(300, 5)),
    ]
    with FakeModel(script) as fake:
        trial = run_model(docker_api, suite_for(tmp_path, fake.base_url))
    assert trial.outcome is Outcome.SUCCESS, (trial.error, trial.agent_log, trial.transcript)
    assert trial.stop_reason == "submit"
    assert (trial.prompt_tokens, trial.completion_tokens) == (
        120 + 150 + 170 + 200 + 260 + 300,
        10 + 12 + 9 + 60 + 8 + 5,
    )
    assert trial.tool_calls == 7 and not trial.tool_violation
    assert "+    return a + b" in trial.patch
    results = [m["content"] for m in tool_results(fake)]
    assert "calc" in results[0] and "README.md" in results[0] and ".git" not in results[0]
    assert "return a - b" in results[1]
    assert "calc/__init__.py:2:" in results[2]
    assert results[3].startswith("patch applied")
    assert results[4].startswith("exit code 0") and "1 passed" in results[4]
    assert results[5].startswith("exit code 0") and "hi" in results[5]
    first = fake.requests[0]
    assert first["model"] == MODEL and first["temperature"] == 0.0 and first["seed"] == 0
    assert first["messages"][1] == {"role": "user", "content": "Fix add()."}
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert offered == {*ALL_TOOLS, "submit", "abstain"}
    # The transcript travels with the record: both sides of every call.
    assert trial.transcript is not None
    roles = [entry["role"] for entry in trial.transcript]
    assert roles.count("tool") == 7 and roles[:2] == ["system", "user"]


def test_hostile_calls_are_refused_and_counted(tmp_path: Path, docker_api: Any) -> None:
    fixtures = {
        "t1": {
            "calc/__init__.py": "def add(a, b):\n    return a - b\n",
            "secrets/token.txt": "s3cret-token\n",
            "README.md": "calc\n",
        }
    }
    script = [
        reply(call("read_file", {"path": "secrets/token.txt"})),
        reply(call("read_file", {"path": "/workspace/.git/config"})),
        reply(call("read_file", {"path": "../../etc/passwd"})),
        reply(call("read_file", {"path": "/etc/passwd"})),
        reply(call("run_command", {"command": "cat /etc/passwd"})),
        reply(call("delete_everything", {})),
        reply(call("write_file", {"path": "link_dir/x", "content": "x"})),
        reply(call("read_file", {"path": "link_pw"})),
        reply(call("list_dir", {"path": "link_dir"})),
        reply(call("submit", {})),
    ]
    with FakeModel(script) as fake:
        controls = make_suite(
            tmp_path,
            [repo_task("t1")],
            [CONTROL, {"name": "model", "agent": {"type": "openai", "max_turns": 12}}],
            fixtures=fixtures,
            tools={
                "allowlist": ["read_file", "write_file", "list_dir"],
                "forbidden_paths": [".git/", "secrets/"],
            },
            route={"base_url": fake.base_url, "model": MODEL},
        )
        # The symlinks exist before the model looks (as if an earlier command made them).
        trial = _run_with_symlinks(docker_api, controls)
    results = [m["content"] for m in tool_results(fake)]
    assert results[0].startswith("refused: ") and "forbidden" in results[0]
    assert results[1].startswith("refused: ") and "forbidden" in results[1]
    assert results[2].startswith("refused: ") and "leaves the workspace" in results[2]
    assert results[3].startswith("refused: ") and "outside the workspace" in results[3]
    assert results[4].startswith("refused: ") and "'run_command' is not allowed" in results[4]
    assert results[5].startswith("refused: ") and "not allowed" in results[5]
    for result in results[6:9]:
        assert result.startswith("refused: ") and "symlink" in result, result
    assert all("s3cret" not in r and "root:x:0" not in r for r in results)
    assert trial.tool_violation and trial.tool_calls == 10
    assert trial.outcome is Outcome.MISS and trial.stop_reason == "submit"
    refused = [e for e in trial.transcript or [] if e.get("refused")]
    assert {e["refused"] for e in refused} == {"forbidden", "escape", "allowlist", "symlink"}


def _run_with_symlinks(docker_api: Any, controls_path: Path) -> Trial:
    """Run the model arm with a wrapped agent that plants symlinks out of the workspace first."""
    from runner.agents.interface import AgentContext, AgentResult
    from runner.sandbox.base import ExecRequest

    loaded = load_controls(controls_path)
    inner = make_agent(loaded.controls.arms[1].agent, None, None, loaded.controls)

    class Planting:
        needs_agent_dir = False
        runs_programs = True
        toggles = None

        def run(self, ctx: AgentContext) -> AgentResult:
            ctx.sandbox.run(
                ExecRequest(argv=["sh", "-c", "ln -s /etc link_dir && ln -s /etc/passwd link_pw"])
            )
            return inner.run(ctx)

    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    env = TrialEnv(loaded.controls, LocalInputs(suite), DockerSandboxFactory(docker_api), "test")
    job = Job(
        job_id="job-sym",
        run_id=unique_run(),
        protocol_sha256="p" * 64,
        task_id="t1",
        arm="model",
        repeat=0,
    )
    trial = execute_trial(job, suite.task("t1"), Planting(), env)
    assert leftover_sandboxes(docker_api, run=job.run_id) == ([], [])
    return trial


def test_a_symlink_the_model_made_cannot_lead_a_tool_out(tmp_path: Path, docker_api: Any) -> None:
    script = [
        reply(call("run_command", {"command": "ln -s /etc/passwd pw && ln -s / root"})),
        reply(call("read_file", {"path": "pw"})),
        reply(call("list_dir", {"path": "root/etc"})),
        reply(call("write_file", {"path": "root/tmp/planted", "content": "x"})),
        reply(call("abstain", {"reason": "done probing"})),
    ]
    with FakeModel(script) as fake:
        trial = run_model(docker_api, suite_for(tmp_path, fake.base_url))
    results = [m["content"] for m in tool_results(fake)]
    assert results[0].startswith("exit code 0")
    for result in results[1:4]:
        assert result.startswith("refused: ") and "symlink" in result, result
    assert "root:x:0" not in "".join(results)
    assert trial.tool_violation and trial.abstained
    assert trial.outcome is Outcome.FALSE_ABSTAIN and trial.stop_reason == "abstain"


def test_the_wall_clock_limit_holds_against_a_slow_model(tmp_path: Path, docker_api: Any) -> None:
    def slow(body: dict[str, Any], index: int) -> Step:
        if index == 0:
            return reply(call("run_command", {"command": "sleep 30"}))
        return reply(call("submit", {}))

    with FakeModel(slow) as fake:
        trial = run_model(docker_api, suite_for(tmp_path, fake.base_url, timeout_s=3))
    assert trial.outcome is Outcome.TIMEOUT and trial.stop_reason == "deadline"
    assert trial.wall_s < 30


def test_run_hidden_test_grades_in_a_separate_sandbox(tmp_path: Path, docker_api: Any) -> None:
    script = [
        reply(call("run_hidden_test", {})),
        reply(call("run_command", {"command": "ls tests; cat tests/test_hidden.py"})),
        reply(call("apply_patch", {"patch": ADD_GOLD})),
        reply(call("run_hidden_test", {})),
        reply(call("submit", {})),
    ]
    with FakeModel(script) as fake:
        controls = suite_for(tmp_path, fake.base_url, allowlist=[*ALL_TOOLS, "run_hidden_test"])
        trial = run_model(docker_api, controls)
    results = [m["content"] for m in tool_results(fake)]
    assert results[0] == "fail" and results[3] == "pass"
    assert "No such file" in results[1] and "assert add(2, 3)" not in results[1]
    assert trial.outcome is Outcome.SUCCESS


def test_cli_run_scores_the_model_and_keeps_the_key_out(tmp_path: Path, docker_api: Any) -> None:
    """End to end: a wrong key is an error row; the right key solves; the key is nowhere."""
    key = "sk-test-7f3a9c"

    def solver(body: dict[str, Any], index: int) -> Step:
        done = any(m["role"] == "tool" for m in body["messages"])
        return reply(call("submit", {}) if done else call("apply_patch", {"patch": ADD_GOLD}))

    with FakeModel(solver, key=key) as fake:
        controls = suite_for(
            tmp_path,
            fake.base_url,
            route={"api_key_env": "DELTARUN_TEST_KEY"},
            tasks=[repo_task("t1"), repo_task("t2")],
        )
        owner = owned_key(tmp_path / "keys", "DELTARUN_TEST_KEY", fake.base_url)
        missing = run_cli(
            "run", str(controls), "--out", str(tmp_path / "nokey"), "-j", "2", env=owner
        )
        assert missing.returncode == 1
        assert "DELTARUN_TEST_KEY" in missing.stderr and "Traceback" not in missing.stderr
        wrong = run_cli(
            "run",
            str(controls),
            "--out",
            str(tmp_path / "wrong"),
            env={"DELTARUN_TEST_KEY": "sk-wrong", **owner},
        )
        right = run_cli(
            "run",
            str(controls),
            "--out",
            str(tmp_path / "right"),
            env={"DELTARUN_TEST_KEY": key, **owner},
        )
    assert wrong.returncode == 0, wrong.stderr
    wrong_trials = [
        json.loads(x) for x in (tmp_path / "wrong" / "trials.jsonl").read_text().splitlines()
    ]
    model_rows = [t for t in wrong_trials if t["arm"] == "model"]
    assert {t["outcome"] for t in model_rows} == {"error"}
    assert all("refused the API key" in t["error"] for t in model_rows)
    assert right.returncode == 0, right.stderr
    assert "report: " in right.stdout
    report = comparison(json.loads((tmp_path / "right" / "report.json").read_text()))
    model = next(a for a in report["arms"] if a["arm"] == "model")
    rows = [json.loads(x) for x in (tmp_path / "right" / "trials.jsonl").read_text().splitlines()]
    seen = [
        (t["task_id"], t["outcome"], t["stop_reason"], t["error"], t["reason"], t["verify_log"])
        for t in rows
        if t["arm"] == "model"
    ]
    assert model["passes"] == 2 and model["tokens_per_pass"] == 240.0, seen
    assert model["stop_reasons"] == {"submit": 2}
    wrong_report = comparison(json.loads((tmp_path / "wrong" / "report.json").read_text()))
    wrong_model = next(a for a in wrong_report["arms"] if a["arm"] == "model")
    assert wrong_model["stop_reasons"] == {"endpoint_error": 2}
    assert wrong_model["error_rate"]["k"] == 2
    markdown = (tmp_path / "right" / "report.md").read_text()
    assert "## How model-driven trials ended" in markdown and "| model | 2 |" in markdown
    for directory in ("wrong", "right"):
        for path in (tmp_path / directory).rglob("*"):
            if path.is_file():
                assert key.encode() not in path.read_bytes(), path
    assert "authorization" in fake.headers[-1]


def test_scored_run_stops_on_a_route_mismatch(tmp_path: Path, docker_api: Any) -> None:
    with FakeModel(lambda body, index: reply(call("submit", {}), model="other-model")) as fake:
        controls = suite_for(
            tmp_path, fake.base_url, tasks=[repo_task(f"t{i}") for i in range(4)], channel="scored"
        )
        pin_validation(controls)
        text = controls.read_text()
        image = load_controls(controls).controls.runtime.image
        digest = docker_api.inspect_image(image)["Id"]
        controls.write_text(text + f"images:\n  {image}: {digest}\n")
        result = run_cli("run", str(controls), "--out", str(tmp_path / "run"), "-j", "1")
    assert result.returncode == 3, result.stderr
    assert "route" in result.stderr and "other-model" in result.stderr
    lines = (tmp_path / "run" / "trials.jsonl").read_text().splitlines()
    mismatched = [json.loads(x) for x in lines if json.loads(x)["route_mismatch"]]
    assert len(mismatched) == 1  # the record that showed it is kept; the run stopped there
    assert len(lines) < 8
    assert "Traceback" not in result.stderr
