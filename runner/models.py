"""Records that cross module and process boundaries: task lines, jobs and trials.

Every model is strict (``extra="forbid"``): a misspelt key in a task line or a
trial record is an error, never silently ignored. Pure data, no I/O.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Strict(BaseModel):
    """Base for every deltarun model: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskKind(StrEnum):
    ORDINARY = "ordinary"
    NEGATIVE = "negative"


class Outcome(StrEnum):
    """What a trial ended as. Timeouts and infrastructure errors are never misses."""

    SUCCESS = "success"
    MISS = "miss"
    FALSE_ABSTAIN = "false_abstain"
    ABSTAIN_OK = "abstain_ok"
    INVALID_COMPLETION = "invalid_completion"
    TIMEOUT = "timeout"
    ERROR = "error"


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _TaskBase(Strict):
    id: str = Field(description="Unique task id: letters, digits, '.', '_' or '-'.")
    kind: TaskKind = Field(description="'ordinary', or 'negative': only abstention is correct.")
    prompt: str = Field(min_length=1, description="What the agent is asked to do.")
    tags: list[str] = Field(default_factory=list, description="Free labels for slicing.")

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not TASK_ID_RE.match(value):
            raise ValueError("must be 1-128 of letters, digits, '.', '_' or '-'")
        return value


class RepoTask(_TaskBase):
    """A repository task: the agent edits a fixture tree; a hidden test decides."""

    repo: str = Field(description="Fixture tar (.tar or .tar.gz), relative to tasks.jsonl.")
    repo_sha256: str = Field(default="", description="SHA-256 of the fixture; set by `seal`.")
    hidden: str | None = Field(default=None, description="Hidden-test tar, relative path.")
    hidden_sha256: str = Field(default="", description="SHA-256 of the hidden tar; set by `seal`.")
    hidden_test: str | None = Field(default=None, description="Command; exit 0 means pass.")
    image: str | None = Field(default=None, description="Sandbox image; runtime.image if unset.")
    timeout_s: float | None = Field(default=None, gt=0, description="Overrides runtime.timeout_s.")
    size_bucket: str = Field(default="", description="Covariate for the report, e.g. s/m/l.")

    @model_validator(mode="after")
    def _hidden_needed(self) -> RepoTask:
        if self.kind is TaskKind.ORDINARY and (self.hidden is None or not self.hidden_test):
            raise ValueError("an ordinary repository task needs 'hidden' and 'hidden_test'")
        if self.hidden is None and self.hidden_sha256:
            raise ValueError("'hidden_sha256' is set but 'hidden' is not")
        for name in ("repo_sha256", "hidden_sha256"):
            value = getattr(self, name)
            if value and not SHA256_RE.match(value):
                raise ValueError(f"'{name}' must be 64 lowercase hex digits")
        return self


class AnswerTask(_TaskBase):
    """An answer task: no repository; the agent writes a JSON answer, metrics decide."""

    expect: Any = Field(description="The oracle: the expected JSON value.")
    schema_: dict[str, Any] | None = Field(
        default=None, alias="schema", description="JSON Schema the answer must satisfy."
    )
    metrics: list[str] = Field(min_length=1, description="Metric names; all must hold to pass.")
    deadline_s: float = Field(gt=0, description="Wall-clock limit of the agent phase.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


Task = RepoTask | AnswerTask


def task_timeout(task: Task, default_s: float) -> float:
    """The agent-phase wall-clock limit of a task."""
    if isinstance(task, AnswerTask):
        return task.deadline_s
    return task.timeout_s if task.timeout_s is not None else default_s


class Job(Strict):
    """One (task, arm, repeat) unit of work; ``job_id`` is deterministic."""

    job_id: str
    run_id: str
    protocol_sha256: str
    task_id: str
    arm: str
    repeat: int = Field(ge=0)


class Trial(Strict):
    """The record of one job, one JSON line in ``trials.jsonl``."""

    run_id: str
    job_id: str
    protocol_sha256: str
    task_id: str
    arm: str
    repeat: int
    task_kind: TaskKind
    outcome: Outcome
    passed: bool
    timeout: bool
    tool_violation: bool
    abstained: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float
    retries_used: int = 0
    tool_calls: int = 0
    patch: str = ""
    patch_sha256: str = ""
    patch_truncated: bool = False
    answer: Any = None
    verify_exit_code: int | None = None
    verify_log: str = ""
    verify_log_truncated: bool = False
    agent_exit_code: int | None = None
    agent_log: str = ""
    agent_log_truncated: bool = False
    oom_killed: bool = False
    error: str | None = None
    stop_reason: str | None = None
    route_mismatch: bool = False
    transcript: list[dict[str, Any]] | None = None
    transcript_truncated: bool = False
    worker: str
    image_digest: str = ""
    attempt: int = 1
    started_at: str
    finished_at: str

    schema_version: Literal[1] = 1


@dataclass(frozen=True, slots=True)
class ScoredTrial:
    """What scoring and reporting read of a record, in a tenth of a ``Trial``'s memory.

    Reports over 100,000 records hold these instead of full records (no patch,
    no logs, no per-instance pydantic bookkeeping); strings shared by many
    records are interned.
    """

    run_id: str
    job_id: str
    protocol_sha256: str
    task_id: str
    arm: str
    repeat: int
    task_kind: TaskKind
    outcome: Outcome
    passed: bool
    timeout: bool
    tool_violation: bool
    abstained: bool
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    retries_used: int
    tool_calls: int
    stop_reason: str | None = None

    @classmethod
    def of(cls, t: Trial) -> ScoredTrial:
        return cls(
            sys.intern(t.run_id),
            t.job_id,
            sys.intern(t.protocol_sha256),
            sys.intern(t.task_id),
            sys.intern(t.arm),
            t.repeat,
            t.task_kind,
            t.outcome,
            t.passed,
            t.timeout,
            t.tool_violation,
            t.abstained,
            t.prompt_tokens,
            t.completion_tokens,
            t.wall_s,
            t.retries_used,
            t.tool_calls,
            None if t.stop_reason is None else sys.intern(t.stop_reason),
        )


Record = Trial | ScoredTrial
