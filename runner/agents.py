"""Agents: what acts in sandbox A. Three kinds, one interface.

- ``scripted``: the frozen control; ``noop`` changes nothing, ``abstain`` abstains.
- ``patch``: replays a directory of ``<task_id>.diff`` / ``.abstain`` / ``.answer.json``
  (a recorded agent, or the gold solution).
- ``command``: a program from the arm's directory, copied read-only to
  ``/opt/agent`` and run in ``/workspace`` as the agent user.

Arms are blind: nothing an agent can read names the run, the arm or whether it
is the control. The environment holds only the three file paths of the
contract, ``HOME``, ``PATH`` and ``LANG``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from runner.archives import Member, build_tar, is_forbidden, members_from_dir, single_file_tar
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.controls import (
    AgentSpec,
    CommandAgent,
    Controls,
    OpenAIAgent,
    PatchAgent,
    Route,
    ScriptedAgent,
    Toggles,
)
from runner.gitpatch import PatchError, touched_paths
from runner.models import Task
from runner.sandbox.base import (
    AGENT_DIR,
    AGENT_UID,
    IO_DIR,
    ExecRequest,
    ModelCall,
    Sandbox,
)

PROMPT_FILE = f"{IO_DIR}/prompt.txt"
# The harness's guard (runner/sandbox_scripts/guard.py), root-owned and read-only.
GUARD_FILE = f"{IO_DIR}/.deltarun-guard.py"
GUARD_REPORT = re.compile(rb"deltarun-guard: mode=(\w+) (exit|signal|terminated|error)=(\w+)")
ANSWER_BOUNDS = JsonBounds(max_bytes=1 << 20, max_depth=32, max_number_chars=64)
ABSTAIN_FILE = f"{IO_DIR}/abstain.txt"
ANSWER_FILE = f"{IO_DIR}/answer.json"
AGENT_ENV = {
    "DELTARUN_PROMPT_FILE": PROMPT_FILE,
    "DELTARUN_ABSTAIN_FILE": ABSTAIN_FILE,
    "DELTARUN_ANSWER_FILE": ANSWER_FILE,
    "HOME": "/home/agent",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_NO_ANSWER = object()


@dataclass(frozen=True)
class AgentContext:
    """What an agent gets: a started sandbox with the fixture in /workspace.

    ``prompt`` is the task's prompt as this leg shows it; ``repeat`` varies the
    model's sampling seed between repeats; ``hidden_test`` grades the current
    changes in a separate fresh sandbox (pass or fail only), for repository
    tasks with a hidden test.
    """

    sandbox: Sandbox
    task: Task
    timeout_s: float
    forbidden_paths: tuple[str, ...]
    output_cap: int
    prompt: str = ""
    repeat: int = 0
    hidden_test: Callable[[], bool] | None = None


@dataclass(frozen=True)
class AgentResult:
    """What the agent phase produced, before grading."""

    exit_code: int | None = 0
    timed_out: bool = False
    oom_killed: bool = False
    abstain_reason: str | None = None
    answer: Any = None
    answer_present: bool = False
    answer_invalid: bool = False
    tool_calls: int = 0
    tool_violation: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    log: str = ""
    log_truncated: bool = False
    stop_reason: str | None = None
    error: str | None = None  # infrastructure (the endpoint): the trial is an error, not a miss
    route_mismatch: bool = False
    transcript: list[dict[str, Any]] | None = None
    transcript_truncated: bool = False
    guard_broken: bool = False  # the agent killed the harness's guard: a miss, with a violation
    reason: str | None = None  # why the phase ended as it did, for the record

    @property
    def abstained(self) -> bool:
        return self.abstain_reason is not None


class Agent(Protocol):
    """Acts on a task inside sandbox A."""

    needs_agent_dir: bool
    # Runs programs in the sandbox that may leave processes behind (swept after the phase).
    runs_programs: bool
    toggles: Toggles | None

    def run(self, ctx: AgentContext) -> AgentResult: ...


class Scripted:
    """The frozen control: does nothing, or abstains."""

    needs_agent_dir = False
    runs_programs = False
    toggles: Toggles | None = None

    def __init__(self, action: str) -> None:
        self.action = action

    def run(self, ctx: AgentContext) -> AgentResult:
        if self.action == "abstain":
            return AgentResult(abstain_reason="scripted abstention")
        return AgentResult()


class Replay:
    """Replays recorded outputs: a diff applied with ``git apply`` as the agent user.

    ``files`` is the arm's directory as read (locally, or from the archive a
    remote worker fetched): ``<task_id>.abstain``, ``.answer.json`` or ``.diff``.
    """

    needs_agent_dir = False
    runs_programs = False  # git apply, run by the harness, leaves nothing behind
    toggles: Toggles | None = None

    def __init__(self, members: list[Member]) -> None:
        self.files = {m.path: m.data for m in members if not m.is_dir}

    def run(self, ctx: AgentContext) -> AgentResult:
        task_id = ctx.task.id
        abstain = self.files.get(f"{task_id}.abstain")
        answer = self.files.get(f"{task_id}.answer.json")
        diff = self.files.get(f"{task_id}.diff")
        if abstain is not None:
            reason = abstain.decode("utf-8", "replace").strip()
            return AgentResult(abstain_reason=reason or "abstained")
        if answer is not None:
            return _parse_answer(answer, truncated=False)
        if diff is None:
            return AgentResult(log="no recorded output for this task")
        try:
            dropped = [p for p in touched_paths(diff) if is_forbidden(p, ctx.forbidden_paths)]
        except PatchError as exc:
            return AgentResult(exit_code=1, tool_calls=1, log=f"patch unreadable: {exc}")
        if dropped:
            # A recorded patch that writes a forbidden path is refused whole.
            return AgentResult(
                exit_code=1,
                tool_calls=1,
                tool_violation=True,
                log=f"patch refused: touches forbidden paths {dropped}",
            )
        ctx.sandbox.put_archive(
            IO_DIR,
            single_file_tar("agent.diff", diff, uid=AGENT_UID, gid=AGENT_UID),
        )
        result = ctx.sandbox.run(
            ExecRequest(
                argv=["git", "apply", "--whitespace=nowarn", f"{IO_DIR}/agent.diff"],
                env=AGENT_ENV,
                timeout_s=ctx.timeout_s,
                output_cap=ctx.output_cap,
            )
        )
        return AgentResult(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            tool_calls=1,
            log=result.output.decode("utf-8", "replace"),
        )


class Command:
    """A program from the arm's directory, run as the agent user under the task's limit.

    With ``route`` (``network: model-only``) the program reaches the model at
    ``$DELTARUN_MODEL_BASE_URL`` through the trial's gateway; its requests'
    token usage is summed and every reply must name the pinned model.
    """

    needs_agent_dir = True
    runs_programs = True

    def __init__(
        self,
        members: list[Member],
        argv: list[str],
        toggles: Toggles | None = None,
        route: Route | None = None,
    ) -> None:
        self.argv = argv
        self.toggles = toggles
        self.route = route
        self.env = {**AGENT_ENV, **(toggles.env if toggles else {})}
        # Root-owned and read-only: the agent can run its program, not change it.
        self._tar = build_tar(members, uid=0, gid=0, writable=False)

    def run(self, ctx: AgentContext) -> AgentResult:
        ctx.sandbox.put_archive(AGENT_DIR, self._tar)
        env = dict(self.env)
        base_url = ctx.sandbox.model_base_url
        if base_url is not None and self.route is not None:
            # The gateway adds the real key; SDKs that insist on one get a placeholder.
            env |= {
                "DELTARUN_MODEL_BASE_URL": base_url,
                "DELTARUN_MODEL": self.route.model,
                "OPENAI_BASE_URL": base_url,
                "OPENAI_API_KEY": "sk-deltarun-gateway",
            }
        # Under the guard: when the program exits, every other process of the agent's
        # uid is killed before the exit can be seen; the guard alone writes to stderr.
        guarded = ["python3", "-I", "-S", GUARD_FILE, "run", "--", *self.argv]
        result = ctx.sandbox.run(
            ExecRequest(
                argv=guarded,
                env=env,
                timeout_s=ctx.timeout_s,
                output_cap=ctx.output_cap,
                separate_stderr=True,
                stderr_cap=4096,
            )
        )
        log = result.output.decode("utf-8", "replace")
        report = GUARD_REPORT.search(result.stderr)
        exit_code = result.exit_code
        if report is not None and report.group(2) == b"exit":
            exit_code = int(report.group(3))
        if report is not None and report.group(2) == b"error":
            failure = report.group(3).decode("ascii", "replace")
            return AgentResult(
                exit_code=exit_code, log=log, error=f"deltarun's guard failed: {failure}"
            )
        broken = report is None and not result.timed_out and not result.oom_killed
        base = AgentResult(
            exit_code=exit_code,
            timed_out=result.timed_out,
            oom_killed=result.oom_killed,
            log=log,
            log_truncated=result.output_truncated,
            guard_broken=broken,
        )
        if base_url is not None and self.route is not None:
            base = _model_usage(base, ctx.sandbox.model_calls(), self.route)
        if result.timed_out:
            return base
        return collect_outputs(ctx.sandbox, base, ctx.output_cap)


def _model_usage(base: AgentResult, calls: list[ModelCall], route: Route) -> AgentResult:
    """Tokens summed from the gateway's log, and the route lock on every answered request."""
    tokens = replace(
        base,
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
    )
    answered = sorted({c.model for c in calls if c.model is not None})
    error = next((e for model in answered if (e := route.mismatch(model))), None)
    if error is None:
        return tokens
    return replace(tokens, route_mismatch=True, stop_reason="route_mismatch", error=error)


def collect_outputs(sandbox: Sandbox, base: AgentResult, cap: int) -> AgentResult:
    """Read the abstain and answer files an agent may have written into /io."""
    reason, _ = sandbox.read_file(ABSTAIN_FILE, 4096)
    if reason is not None:
        text = reason.decode("utf-8", "replace").strip() or "abstained"
        return replace(base, abstain_reason=text)
    answer, truncated = sandbox.read_file(ANSWER_FILE, cap)
    if answer is not None:
        parsed = _parse_answer(answer, truncated)
        return replace(
            base,
            answer=parsed.answer,
            answer_present=True,
            answer_invalid=parsed.answer_invalid,
            reason=parsed.reason,
        )
    return base


def _parse_answer(data: bytes, truncated: bool) -> AgentResult:
    """An answer file read within bounds (size, nesting, number length): anything else is
    an invalid answer with its reason, never an exception."""
    if truncated:
        return invalid_answer("the answer is over the output cap")
    try:
        value = loads_bounded(data, ANSWER_BOUNDS)
    except BoundsError as exc:
        return invalid_answer(f"the answer is not acceptable JSON: {exc}")
    return AgentResult(answer=value, answer_present=True)


def invalid_answer(reason: str) -> AgentResult:
    return AgentResult(answer_present=True, answer_invalid=True, log=reason, reason=reason)


def make_agent(
    spec: AgentSpec,
    members: list[Member] | None,
    toggles: Toggles | None = None,
    controls: Controls | None = None,
) -> Agent:
    """The agent for an arm's spec; ``members`` is the content of its directory, if any;
    ``toggles`` turn a capability off (the ``-off`` leg of a ``baseline: both`` arm);
    ``controls`` give a model-driven agent its route and tool policy."""
    if isinstance(spec, ScriptedAgent):
        return Scripted(spec.action)
    if isinstance(spec, PatchAgent):
        return Replay(members or [])
    if isinstance(spec, CommandAgent):
        model_only = controls is not None and controls.runtime.network == "model-only"
        route = controls.route if controls is not None and model_only else None
        return Command(members or [], spec.argv, toggles, route)
    if isinstance(spec, OpenAIAgent):
        # Imported here: the model agent builds on this module's interface.
        from runner.openai_agent import ModelAgent
        from runner.toolbox import ToolPolicy

        if controls is None:
            raise TypeError("an openai agent needs the controls")
        route = controls.route_for(spec)
        if route is None:
            raise TypeError("an openai agent needs a route")
        tools = controls.tools
        policy = ToolPolicy(
            allowlist=tuple(tools.allowlist),
            forbidden=tuple(tools.forbidden_paths),
            call_timeout_s=tools.call_timeout_s,
            output_cap=tools.call_output_bytes,
            test_command=tools.test_command,
        )
        return ModelAgent(
            spec,
            route,
            policy,
            seed=route.seed if route.seed is not None else controls.runtime.seed,
            transcript_cap=controls.runtime.caps.transcript_bytes,
            toggles=toggles,
        )
    raise TypeError(f"unknown agent spec {spec!r}")


def agent_members(spec: AgentSpec, base_dir: Path) -> list[Member] | None:
    """Read an arm's agent directory (relative to controls.yaml) on this machine."""
    if isinstance(spec, PatchAgent | CommandAgent):
        return members_from_dir((base_dir / spec.dir).resolve())
    return None
