"""``execute_trial``'s orchestration on the scripted in-memory sandbox (no Docker).

Real controls, suites, agents and grading code; only the sandbox is the fake of
``runner.sandbox.fake``. What a container does (isolation, limits, processes)
is tested on the real engine in tests/test_trial_docker.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from runner.agents.factory import agent_members, make_agent
from runner.config.loader import load_controls
from runner.errors import SandboxError
from runner.hashing import sha256_bytes
from runner.records import Job, Outcome, Trial
from runner.sandbox.base import ExecRequest, ExecResult
from runner.sandbox.fake import FakeSandbox, FakeSandboxFactory, Script, Verdict, exec_result
from runner.sandbox.guard_run import LOST_LINE
from runner.suite.load import load_suite
from runner.trees.inputs import LocalInputs
from runner.trial.env import trial_env
from runner.trial.execute import execute_trial
from tests.helpers import ADD_GOLD, HIDDEN_TEST, make_suite, repo_task, write_agent

CONTROL = {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}
GOLD = {"name": "gold", "agent": {"type": "patch", "dir": "gold"}}
CONFTEST = (
    "diff --git a/conftest.py b/conftest.py\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/conftest.py\n"
    "@@ -0,0 +1 @@\n"
    "+import os\n"
)


def factory(script: Script | None = None, verdict: Verdict = "fail") -> FakeSandboxFactory:
    """A fake whose image ID is new to this process: the image's module list is cached per
    ID (``runner.grading.image_facts``), so every trial opens agent, module probe, verify."""
    return FakeSandboxFactory(script, f"sha256:{uuid.uuid4().hex}", verdict=verdict)


def applies_diff(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
    """The patch arm's ``git apply /io/agent.diff`` makes that diff the workspace's diff."""
    argv = list(request.argv)
    if argv[:2] == ["git", "apply"] and argv[-1] in sandbox.files:
        sandbox.patch += sandbox.files[argv[-1]]
    return None  # the table answers: exit 0


def suite(
    root: Path,
    arms: list[dict[str, Any]],
    *,
    diff: str = ADD_GOLD,
    tasks: list[dict[str, Any]] | None = None,
    runtime: dict[str, Any] | None = None,
) -> Path:
    (root / "gold").mkdir(exist_ok=True)
    (root / "gold" / "t1.diff").write_text(diff)
    return make_suite(root, tasks or [repo_task("t1")], [CONTROL, *arms], runtime=runtime)


def run_one(controls_path: Path, arm: str, sandboxes: FakeSandboxFactory) -> Trial:
    loaded = load_controls(controls_path)
    tasks = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    spec = next(a for a in loaded.controls.arms if a.name == arm)
    agent = make_agent(spec.agent, agent_members(spec.agent, loaded.base), None, loaded.controls)
    job = Job(
        job_id=f"job-t1-{arm}",
        run_id="fake-run",
        protocol_sha256="p" * 64,
        task_id="t1",
        arm=arm,
        repeat=0,
    )
    env = trial_env(loaded.controls, LocalInputs(tasks), sandboxes, "test")
    trial = execute_trial(job, tasks.task("t1"), agent, env)
    assert sandboxes.opened and all(s.closed for s in sandboxes.opened)  # removed, every path
    return trial


def agent_patch(sandbox: FakeSandbox) -> bytes | None:
    """The patch the verify phase copied in for ``git apply`` (None: none copied)."""
    found = [data for path, data in sandbox.files.items() if path.endswith("/agent.patch")]
    return found[0] if found else None


def test_gold_patch_passes_with_the_patch_stored_byte_for_byte(tmp_path: Path) -> None:
    sandboxes = factory(applies_diff, verdict="pass")
    trial = run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    assert trial.outcome is Outcome.SUCCESS and trial.passed, trial
    assert trial.patch == ADD_GOLD and trial.patch_encoding == "utf-8"
    assert trial.patch_sha256 == sha256_bytes(ADD_GOLD.encode())
    assert trial.applied_sha256 == trial.patch_sha256 and trial.dropped == []
    assert trial.verify_exit_code == 0 and trial.reason is None and trial.error is None
    assert trial.image_digest == sandboxes.image_digest
    agent, probe, verify = sandboxes.opened
    assert agent.files["/io/agent.diff"] == ADD_GOLD.encode()
    assert probe.ran("image_modules.py") and not probe.spec.with_io
    # The verdict came from a second fresh sandbox, on the fixture plus the patch.
    assert verify.spec.workspace_root_owned and not verify.spec.with_io
    assert agent_patch(verify) == ADD_GOLD.encode()
    assert "/workspace/tests/test_hidden.py" in verify.files
    assert verify.ran("git -c") and verify.ran("run_pytest.py")


def test_the_hidden_test_never_enters_the_agent_sandbox(tmp_path: Path) -> None:
    sandboxes = factory(applies_diff, verdict="pass")
    run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    agent = sandboxes.opened[0]
    assert "/workspace/calc/__init__.py" in agent.files  # the fixture is there
    assert not [p for p in agent.files if "test_hidden" in p]
    for request in agent.requests:
        text = " ".join(request.argv) + repr(request.env) + repr(request.stdin)
        assert "test_hidden" not in text and "run_pytest" not in text, request


def test_noop_is_a_miss_with_the_failed_test_named(tmp_path: Path) -> None:
    sandboxes = factory(verdict="fail")
    trial = run_one(suite(tmp_path, [GOLD]), "ctrl", sandboxes)
    assert trial.outcome is Outcome.MISS and not trial.passed and trial.error is None
    assert trial.patch == "" and trial.patch_sha256 == ""
    assert trial.reason == "1 test(s) failed or errored, first tests/test_hidden.py::test_fake"
    assert trial.verify_exit_code == 1
    verify = sandboxes.opened[-1]
    assert agent_patch(verify) is None and not verify.ran("apply")  # nothing to apply


def test_a_timed_out_agent_is_a_timeout_and_nothing_is_verified(tmp_path: Path) -> None:
    sleeper = write_agent(tmp_path, "sleeper", "sleep 600\n")

    def times_out(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if "run" in request.argv and "--" in request.argv:  # the guarded agent program
            return exec_result(None, timed_out=True)
        return None

    sandboxes = factory(times_out, verdict="pass")
    trial = run_one(suite(tmp_path, [{"name": "sleeper", "agent": sleeper}]), "sleeper", sandboxes)
    assert trial.outcome is Outcome.TIMEOUT and trial.timeout and not trial.passed
    assert trial.reason == "the agent ran past its limit of 60s" and trial.error is None
    [agent] = sandboxes.opened  # no probe, no verify sandbox
    assert agent.ran("guard.py sweep")  # what the agent left running is still killed
    assert not agent.ran("diff --cached")


def test_a_patch_git_cannot_produce_is_a_miss_with_gits_reason(tmp_path: Path) -> None:
    def diff_fails(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if " diff --cached " in " ".join(request.argv):
            return exec_result(128, stderr=b"fatal: unable to index file 'calc/x'\n")
        return None

    sandboxes = factory(diff_fails, verdict="pass")
    trial = run_one(suite(tmp_path, [GOLD]), "ctrl", sandboxes)
    assert trial.outcome is Outcome.MISS and trial.error is None
    assert trial.reason == (
        "git could not diff the workspace the agent left: fatal: unable to index file 'calc/x'"
    )
    [agent] = sandboxes.opened
    assert len(agent.ran("diff --cached")) == 2 and agent.ran("chmod -R")  # made readable, retried


def test_an_engine_failure_is_an_error(tmp_path: Path) -> None:
    def engine_fails(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        raise SandboxError("Docker failed while a command ran: connection reset")

    sandboxes = factory(engine_fails, verdict="pass")
    trial = run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    assert trial.outcome is Outcome.ERROR and not trial.passed
    assert trial.error == "SandboxError: Docker failed while a command ran: connection reset"
    assert trial.retries_used == 0 and trial.attempt == 1 and len(sandboxes.opened) == 1


def test_max_retries_retries_once_after_an_error(tmp_path: Path) -> None:
    failures = [SandboxError("the engine stalled")]

    def fails_once(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if failures:
            raise failures.pop()
        return applies_diff(request, sandbox)

    controls = suite(tmp_path, [GOLD], runtime={"max_retries": 1})
    sandboxes = factory(fails_once, verdict="pass")
    trial = run_one(controls, "gold", sandboxes)
    assert trial.outcome is Outcome.SUCCESS and trial.error is None
    assert trial.retries_used == 1 and trial.attempt == 2
    assert len(sandboxes.opened) == 4  # failed agent sandbox, agent, probe, verify
    assert sandboxes.opened[0].requests[0].argv[:2] == ["tar", "-x"]  # failed at the copy-in

    def always_fails(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        raise SandboxError("the engine is gone")

    again = factory(always_fails)
    trial = run_one(controls, "gold", again)
    assert trial.outcome is Outcome.ERROR and trial.error == "SandboxError: the engine is gone"
    assert trial.retries_used == 1 and len(again.opened) == 2  # one retry, no more


def test_a_dropped_conftest_section_is_a_tool_violation(tmp_path: Path) -> None:
    sandboxes = factory(applies_diff, verdict="pass")
    trial = run_one(suite(tmp_path, [GOLD], diff=CONFTEST + ADD_GOLD), "gold", sandboxes)
    assert trial.tool_violation
    assert trial.dropped == ["conftest.py (harness file beside the hidden tests)"]
    assert trial.patch == CONFTEST + ADD_GOLD  # the record keeps what the agent wrote
    assert trial.applied_sha256 == sha256_bytes(ADD_GOLD.encode())
    assert agent_patch(sandboxes.opened[-1]) == ADD_GOLD.encode()  # verify never saw it
    assert trial.outcome is Outcome.SUCCESS  # the rest of the patch is graded as usual


def test_a_guarded_agent_runs_under_the_guard_and_is_graded(tmp_path: Path) -> None:
    fixer = write_agent(tmp_path, "fixer", "sed -i 's/a - b/a + b/' calc/__init__.py\n")
    sandboxes = factory(verdict="fail")
    trial = run_one(suite(tmp_path, [{"name": "fixer", "agent": fixer}]), "fixer", sandboxes)
    assert trial.outcome is Outcome.MISS and not trial.tool_violation and trial.error is None
    assert trial.agent_exit_code == 0 and trial.reason is not None and "failed" in trial.reason
    agent = sandboxes.opened[0]
    [guarded] = agent.ran("guard.py run --")
    assert list(guarded.argv) == [
        *("python3", "-I", "-S", "/io/.deltarun-guard.py", "run", "--"),
        *("sh", "/opt/agent/run.sh"),
    ]
    assert guarded.separate_stderr and "/opt/agent/run.sh" in agent.files
    assert "/io/.deltarun-guard.py" in agent.files  # copied in with the baseline
    assert len(sandboxes.opened) == 3


def test_a_guarded_agent_without_the_guard_report_is_a_miss(tmp_path: Path) -> None:
    fixer = write_agent(tmp_path, "fixer", "kill -9 $PPID\n")

    def no_report(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if "run" in request.argv and "--" in request.argv:
            return exec_result(137, b"", stderr=b"")
        return None

    sandboxes = factory(no_report, verdict="pass")
    trial = run_one(suite(tmp_path, [{"name": "fixer", "agent": fixer}]), "fixer", sandboxes)
    assert trial.outcome is Outcome.MISS and trial.tool_violation and trial.error is None
    assert trial.reason is not None and "guard" in trial.reason
    assert len(sandboxes.opened) == 1  # nothing taken, nothing verified


def test_a_crash_before_pytest_reported_is_a_miss(tmp_path: Path) -> None:
    sandboxes = factory(applies_diff, verdict="crash")
    trial = run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    assert trial.outcome is Outcome.MISS and trial.error is None
    assert trial.reason == "the test process ended (exit 1) before pytest reported"
    assert trial.verify_exit_code == 1


def test_hidden_tests_that_time_out_are_a_timeout(tmp_path: Path) -> None:
    sandboxes = factory(applies_diff, verdict="timeout")
    trial = run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    assert trial.outcome is Outcome.TIMEOUT and trial.reason == "the hidden tests timed out"
    assert trial.verify_exit_code is None


def test_an_exit_status_task_is_graded_by_the_commands_exit(tmp_path: Path) -> None:
    controls = suite(tmp_path, [GOLD], tasks=[repo_task("t1", exit_status=True)])
    failing = factory(applies_diff, verdict="fail")
    trial = run_one(controls, "gold", failing)
    assert trial.outcome is Outcome.MISS and trial.reason == "the hidden test exited 1"
    [command] = failing.opened[-1].ran("DELTARUN_HIDDEN_TEST")
    assert command.env["DELTARUN_HIDDEN_TEST"] == HIDDEN_TEST
    passing = factory(applies_diff, verdict="pass")
    assert run_one(controls, "gold", passing).outcome is Outcome.SUCCESS


def test_abstaining_with_a_change_is_an_invalid_completion(tmp_path: Path) -> None:
    """A negative task counts abstain_ok only for a clean abstention: no patch, no answer."""
    hedger = write_agent(tmp_path, "hedger", "echo no > /io/abstain.txt\n")

    def abstain_and(edit: bytes, answer: bytes | None) -> Script:
        def script(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
            if "run" in request.argv and "--" in request.argv:  # the agent's program
                sandbox.files["/io/abstain.txt"] = b"the input is missing"
                sandbox.patch += edit
                if answer is not None:
                    sandbox.files["/io/answer.json"] = answer
            return None

        return script

    controls = suite(
        tmp_path,
        [{"name": "hedger", "agent": hedger}],
        tasks=[repo_task("t1", kind="negative", hidden=False)],
    )
    clean = run_one(controls, "hedger", factory(abstain_and(b"", None)))
    assert clean.outcome is Outcome.ABSTAIN_OK and clean.reason is None
    edited = run_one(controls, "hedger", factory(abstain_and(ADD_GOLD.encode(), None)))
    assert edited.outcome is Outcome.INVALID_COMPLETION and edited.patch == ADD_GOLD
    assert edited.reason == "abstained but left a change (a patch or an answer)"
    answered = run_one(controls, "hedger", factory(abstain_and(b"", b'{"x": 1}')))
    assert answered.outcome is Outcome.INVALID_COMPLETION and answered.answer == {"x": 1}


def test_an_answer_tasks_metrics_are_kept_one_by_one(tmp_path: Path) -> None:
    task = {
        "id": "t1",
        "kind": "ordinary",
        "prompt": 'Answer 42 as {"n": 42}.',
        "expect": {"n": 42},
        "schema": {"type": "object", "required": ["n"]},
        "metrics": ["exact_match", "json_schema_ok", "within_deadline"],
        "deadline_s": 5,
        "timeout_s": 30,
    }
    answerer = write_agent(tmp_path, "answerer", "echo '{\"n\": 41}' > /io/answer.json\n")

    def answers(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if "run" in request.argv and "--" in request.argv:
            sandbox.files["/io/answer.json"] = b'{"n": 41}'
        return None

    controls = suite(tmp_path, [{"name": "answerer", "agent": answerer}], tasks=[task])
    trial = run_one(controls, "answerer", factory(answers))
    assert trial.outcome is Outcome.MISS and trial.answer == {"n": 41}
    assert trial.metrics == {"exact_match": False, "json_schema_ok": True, "within_deadline": True}
    silent = run_one(controls, "ctrl", factory())
    assert silent.outcome is Outcome.MISS and silent.metrics is None  # nothing was scored


def test_a_guard_report_the_engine_lost_is_read_from_its_copy(tmp_path: Path) -> None:
    """moby/moby#27289: the guard's line, the exec's last output, lost on the way. The
    guard's copy (at the secret path the harness gave it) says how the agent ended: no
    tool violation for a correct agent."""
    fixer = write_agent(tmp_path, "fixer", "sed -i 's/a - b/a + b/' calc/__init__.py\n")

    def line_lost(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if "run" in request.argv and "--" in request.argv and request.stdin:
            sandbox.files[request.stdin.decode().strip()] = b"deltarun-guard: mode=ptrace exit=3\n"
            return exec_result(0, b"fixed\n", stderr=b"")
        return None

    sandboxes = factory(line_lost, verdict="pass")
    trial = run_one(suite(tmp_path, [{"name": "fixer", "agent": fixer}]), "fixer", sandboxes)
    assert not trial.tool_violation and trial.error is None and trial.agent_exit_code == 3
    assert trial.agent_log.endswith(f"deltarun: {LOST_LINE}\n")
    [guarded] = sandboxes.opened[0].ran("guard.py run --")
    assert guarded.stdin is not None and guarded.stdin.startswith(b"/io/.deltarun-guard-report-")


def test_the_guards_copy_path_is_new_for_every_run(tmp_path: Path) -> None:
    fixer = write_agent(tmp_path, "fixer", "true\n")
    controls = suite(tmp_path, [{"name": "fixer", "agent": fixer}])
    paths = set()
    for _ in range(2):
        sandboxes = factory()
        run_one(controls, "fixer", sandboxes)
        [guarded] = sandboxes.opened[0].ran("guard.py run --")
        paths.add(guarded.stdin)
    assert len(paths) == 2
