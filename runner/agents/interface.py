"""The ``Agent`` interface: what acts in sandbox A, what it gets and what it returns.

Every agent kind (``scripted``, ``replay``, ``command``, ``model``) implements
``Agent``; ``execute_trial`` sees nothing else. Arms are blind: nothing an
agent can read names the run, the arm or whether it is the control. A command
agent's environment holds only the three file paths of the contract, ``HOME``,
``PATH``, ``LANG`` and ``PYTHONDONTWRITEBYTECODE``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.config.arms import Toggles
from runner.records import Task
from runner.sandbox.base import IO_DIR, Sandbox

PROMPT_FILE = f"{IO_DIR}/prompt.txt"
# The harness's guard (runner/sandbox_scripts/guard.py), root-owned and read-only.
GUARD_FILE = f"{IO_DIR}/.deltarun-guard.py"
ANSWER_BOUNDS = JsonBounds(max_bytes=1 << 20, max_depth=32, max_number_chars=64)
ABSTAIN_FILE = f"{IO_DIR}/abstain.txt"
ANSWER_FILE = f"{IO_DIR}/answer.json"
# What every process an agent runs sees; nothing names the run, the arm or the control.
BASE_ENV = {
    "HOME": "/home/agent",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# A command agent's environment: the base plus the three file paths of the contract.
AGENT_ENV = {
    "DELTARUN_PROMPT_FILE": PROMPT_FILE,
    "DELTARUN_ABSTAIN_FILE": ABSTAIN_FILE,
    "DELTARUN_ANSWER_FILE": ANSWER_FILE,
    **BASE_ENV,
}


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
    cache_read_tokens: int = 0  # of prompt_tokens
    cache_write_tokens: int = 0  # of prompt_tokens
    cost_usd: float | None = None  # at the pinned price; None: not priced
    log: str = ""
    log_truncated: bool = False
    stop_reason: str | None = None
    error: str | None = None  # infrastructure (the endpoint): the trial is an error, not a miss
    route_mismatch: bool = False
    transcript: list[dict[str, Any]] | None = None
    transcript_truncated: bool = False
    guard_broken: bool = False  # the agent killed the harness's guard: a miss, with a violation
    reason: str | None = None  # why the phase ended as it did, for the record
    session: bytes | None = None  # gzip'd tar of what the agent did (installed agents)

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


def collect_outputs(sandbox: Sandbox, base: AgentResult, cap: int) -> AgentResult:
    """Read the abstain and answer files an agent may have written into /io.

    Both are read even after an abstention: an arm that abstains *and* answers has
    not abstained cleanly (``runner.grading.outcomes``), and the record keeps the answer."""
    reason, _ = sandbox.read_file(ABSTAIN_FILE, 4096)
    if reason is not None:
        base = replace(
            base, abstain_reason=reason.decode("utf-8", "replace").strip() or "abstained"
        )
    answer, truncated = sandbox.read_file(ANSWER_FILE, cap)
    if answer is not None:
        parsed = parse_answer(answer, truncated)
        return replace(
            base,
            answer=parsed.answer,
            answer_present=True,
            answer_invalid=parsed.answer_invalid,
            reason=parsed.reason,
        )
    return base


def parse_answer(data: bytes, truncated: bool) -> AgentResult:
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
