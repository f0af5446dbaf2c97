"""Records that cross module and process boundaries: task lines, jobs and trials.

Every model is strict (``extra="forbid"``): a misspelt key in a task line or a
trial record is an error, never silently ignored. Pure data, no I/O.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from runner.bounded_json import check_storable, has_surrogate
from runner.setup_signals import signal_of

SHA256_RE = re.compile(r"\A[0-9a-f]{64}\Z")
TASK_ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


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


class _TaskBase(Strict):
    id: str = Field(description="Unique task id: letters, digits, '.', '_' or '-'.")
    kind: TaskKind = Field(description="'ordinary', or 'negative': only abstention is correct.")
    prompt: str = Field(min_length=1, description="What the agent is asked to do.")
    tags: list[str] = Field(default_factory=list, description="Free labels for slicing.")

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not TASK_ID_RE.fullmatch(value):
            raise ValueError("must be 1-128 of letters, digits, '.', '_' or '-'")
        return value


GIT_OBJECT_RE = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")
ENVIRONMENT_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,63}\Z")
IMAGE_ID_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
# What ends a line, or a C string, wherever a value lands: a shell script, an argv element.
_LINE_ENDS = re.compile(r"[\n\r\x00]")


class GitRepo(Strict):
    """A fixture named as one commit of a git repository: its tree, without ``.git``."""

    git: str = Field(
        description="Git bundle file or bare repository directory, relative to tasks.jsonl."
    )
    commit: str = Field(description="Full commit id (40 hex digits; 64 in SHA-256 repositories).")

    @field_validator("commit")
    @classmethod
    def _full_id(cls, value: str) -> str:
        if not GIT_OBJECT_RE.fullmatch(value):
            raise ValueError("must be the full commit id (40 lowercase hex digits), not a ref")
        return value


def environment_tag(name: str, context_sha256: str) -> str:
    """The local tag of an environment image: named by the SHA-256 of its build context."""
    return f"deltarun-env/{name}:{context_sha256[:16]}"


class RepoTask(_TaskBase):
    """A repository task: the agent edits a fixture tree; a hidden test decides."""

    repo: str | GitRepo = Field(
        description=(
            "Fixture: a tar (.tar or .tar.gz) relative to tasks.jsonl, or {git, commit}: "
            "a commit of a git bundle or bare repository."
        )
    )
    repo_sha256: str = Field(
        default="",
        description=(
            "SHA-256 of the fixture tar or git bundle (empty for a bare repository directory, "
            "pinned by repo_tree); set by `seal`."
        ),
    )
    repo_tree: str = Field(
        default="", description="Tree id of repo.commit (git fixtures); set by `seal`."
    )
    environment: str | None = Field(
        default=None,
        description=(
            "Environment under environments/<name>/ in the suite whose image runs this task "
            "(built by `deltarun build`); instead of 'image'."
        ),
    )
    environment_sha256: str = Field(
        default="", description="SHA-256 of the environment's build context; set by `build`."
    )
    environment_image: str = Field(
        default="", description="Image ID built from the environment; set by `deltarun build`."
    )
    hidden: str | None = Field(default=None, description="Hidden-test tar, relative path.")
    hidden_sha256: str = Field(default="", description="SHA-256 of the hidden tar; set by `seal`.")
    hidden_test: str | None = Field(
        default=None,
        description="Command whose exit status alone grades (exit 0 passes); prefer hidden_tests.",
    )
    hidden_tests: list[str] | None = Field(
        default=None,
        description=(
            "Tests that must all pass, graded by the harness's own pytest run: node ids "
            "(tests/test_x.py::test_y[1]), files or file::Class prefixes, relative to the "
            "repository root. A pass needs every one present and passed, none failed."
        ),
    )
    pytest_args: list[str] = Field(
        default_factory=list,
        description="Extra pytest options for hidden_tests (e.g. ['-p', 'asyncio']).",
    )
    test_runner: Literal["pytest", "unittest", "django", "sympy"] = Field(
        default="pytest",
        description=(
            "What runs hidden_tests (runner.grading.runners): pytest; unittest (python -m "
            "unittest); django (the project's tests/runtests.py); sympy (sympy's own test "
            "runner). Every runner's ids are written file::Class::test or file::test."
        ),
    )
    runner_args: list[str] = Field(
        default_factory=list,
        description="Options for a runner other than pytest (django: ['--settings=test_sqlite']).",
    )
    install: list[str] = Field(
        default_factory=list,
        description="Shell commands that install the project under test (e.g. 'python3 -m pip "
        "install -e . --no-deps --no-build-isolation'), run offline as the agent's uid with "
        "pip's user scheme: in the agent's sandbox before the agent, in the verify sandbox "
        "after the patch and before the hidden tests. A failing step is a miss naming it.",
    )
    image: str | None = Field(default=None, description="Sandbox image; runtime.image if unset.")
    timeout_s: float | None = Field(default=None, gt=0, description="Overrides runtime.timeout_s.")
    size_bucket: str = Field(default="", description="Covariate for the report, e.g. s/m/l.")

    @model_validator(mode="after")
    def _hidden_needed(self) -> RepoTask:
        if self.hidden_test and self.hidden_tests is not None:
            raise ValueError(
                "give 'hidden_tests' (declared tests, graded by the harness) or 'hidden_test' "
                "(a command graded by its exit status), not both"
            )
        graded = bool(self.hidden_test) or bool(self.hidden_tests)
        if self.kind is TaskKind.ORDINARY and (self.hidden is None or not graded):
            raise ValueError(
                "an ordinary repository task needs 'hidden' and 'hidden_tests' (or 'hidden_test')"
            )
        if self.hidden_tests is not None:
            for entry in self.hidden_tests:
                if not entry or entry.startswith(("-", "/")) or _LINE_ENDS.search(entry):
                    raise ValueError(
                        f"hidden_tests: {entry!r} is not a test id; write it like "
                        "tests/test_x.py::test_y, relative to the repository root"
                    )
        if any(not step.strip() or _LINE_ENDS.search(step) for step in self.install):
            raise ValueError("install: each step is a non-empty shell command on one line")
        if any(_LINE_ENDS.search(arg) for arg in self.pytest_args):
            raise ValueError("pytest_args: an option holds a line break or a NUL")
        if self.pytest_args and self.hidden_tests is None:
            raise ValueError("'pytest_args' applies only with 'hidden_tests'")
        self._runner_fields()
        if self.hidden is None and self.hidden_sha256:
            raise ValueError("'hidden_sha256' is set but 'hidden' is not")
        for name in ("repo_sha256", "hidden_sha256", "environment_sha256"):
            value = getattr(self, name)
            if value and not SHA256_RE.fullmatch(value):
                raise ValueError(f"'{name}' must be 64 lowercase hex digits")
        self._fixture_pins()
        self._environment_pins()
        return self

    def _runner_fields(self) -> None:
        if self.test_runner == "pytest":
            if self.runner_args:
                raise ValueError("'runner_args' applies to test_runner unittest, django or sympy")
            return
        if self.hidden_tests is None:
            raise ValueError(f"test_runner {self.test_runner!r} applies only with 'hidden_tests'")
        if self.pytest_args:
            raise ValueError(
                f"'pytest_args' applies to pytest; test_runner is {self.test_runner!r} "
                "(give its options as 'runner_args')"
            )
        for entry in self.hidden_tests:
            if not entry.split("::", 1)[0].endswith(".py") or entry.count("::") > 2:
                raise ValueError(
                    f"hidden_tests: {entry!r}: under test_runner {self.test_runner!r} a test "
                    "is written path/to/file.py::Class::test_x (or file.py::test_x, file.py)"
                )
        if any(_LINE_ENDS.search(arg) for arg in self.runner_args):
            raise ValueError("runner_args: an option holds a line break or a NUL")

    def _fixture_pins(self) -> None:
        if self.repo_tree and not isinstance(self.repo, GitRepo):
            raise ValueError("'repo_tree' applies only to a git fixture (repo: {git, commit})")
        if self.repo_tree and not GIT_OBJECT_RE.fullmatch(self.repo_tree):
            raise ValueError("'repo_tree' must be a full tree id (40 lowercase hex digits)")

    def _environment_pins(self) -> None:
        if self.environment is None:
            if self.environment_sha256 or self.environment_image:
                raise ValueError("'environment_sha256'/'environment_image' need 'environment'")
            return
        if self.image is not None:
            raise ValueError("give 'environment' (built from the suite) or 'image', not both")
        if not ENVIRONMENT_RE.fullmatch(self.environment):
            raise ValueError(
                "'environment' must be 1-64 of lowercase letters, digits, '.', '_' or '-' "
                "(the name of a folder under environments/)"
            )
        if self.environment_image and not IMAGE_ID_RE.fullmatch(self.environment_image):
            raise ValueError("'environment_image' must be an image ID (sha256:<64 hex digits>)")

    @property
    def environment_tag(self) -> str | None:
        """The image tag of this task's environment, once `deltarun build` pinned it."""
        if self.environment is None or not self.environment_sha256:
            return None
        return environment_tag(self.environment, self.environment_sha256)


class AnswerTask(_TaskBase):
    """An answer task: no repository; the agent writes a JSON answer, metrics decide."""

    expect: Any = Field(description="The oracle: the expected JSON value.")
    schema_: dict[str, Any] | None = Field(
        default=None, alias="schema", description="JSON Schema the answer must satisfy."
    )
    metrics: list[str] = Field(min_length=1, description="Metric names; all must hold to pass.")
    deadline_s: float = Field(
        gt=0,
        description="The within_deadline metric's limit on the agent phase; also the hard "
        "kill when timeout_s is unset.",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="The hard kill of the agent phase (a timeout), when it differs from "
        "deadline_s: an answer after deadline_s and before timeout_s is late, not a timeout.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _metrics_checkable(self) -> AnswerTask:
        if "json_schema_ok" in self.metrics and self.schema_ is None:
            raise ValueError(
                f"task {self.id!r}: metric 'json_schema_ok' needs a 'schema' (a JSON Schema "
                "object); add one or drop the metric"
            )
        if self.timeout_s is not None and self.timeout_s < self.deadline_s:
            raise ValueError(
                f"task {self.id!r}: 'timeout_s' ({self.timeout_s:g}) is the hard kill and "
                f"must be at least 'deadline_s' ({self.deadline_s:g})"
            )
        return self


Task = RepoTask | AnswerTask


class Grading(StrEnum):
    """How a task's verdict is decided; the report says it per task."""

    PYTEST = "pytest"  # declared tests, read from the harness's own results file
    EXIT_STATUS = "exit_status"  # the hidden_test command's exit status alone
    METRICS = "metrics"  # an answer task's metrics
    NONE = "none"  # a negative repository task: abstention decides, no test runs


def grading_of(task: Task) -> Grading:
    if isinstance(task, AnswerTask):
        return Grading.METRICS
    if task.hidden_tests is not None:
        return Grading.PYTEST
    return Grading.EXIT_STATUS if task.hidden_test else Grading.NONE


def task_timeout(task: Task, default_s: float) -> float:
    """The agent-phase wall-clock limit of a task."""
    if isinstance(task, AnswerTask):
        return task.timeout_s if task.timeout_s is not None else task.deadline_s
    return task.timeout_s if task.timeout_s is not None else default_s


class Job(Strict):
    """One (task, arm, repeat) unit of work; ``job_id`` is deterministic."""

    job_id: str
    run_id: str
    protocol_sha256: str
    task_id: str
    arm: str
    repeat: int = Field(ge=0)

    @classmethod
    def of(cls, record: Trial) -> Job:
        """The job a record is of (its fields of the same names)."""
        return cls(**{name: getattr(record, name) for name in cls.model_fields})


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
    cache_read_tokens: int = Field(
        default=0, ge=0, description="Of prompt_tokens: read from the model's prompt cache."
    )
    cache_write_tokens: int = Field(
        default=0, ge=0, description="Of prompt_tokens: written to the model's prompt cache."
    )
    cost_usd: float | None = Field(
        default=None,
        ge=0,
        description="Dollars of the trial's model calls at the controls' pinned prices; "
        "None when the model is not priced (never 0 for unknown).",
    )
    wall_s: float
    retries_used: int = 0
    tool_calls: int = 0
    patch: str = ""
    patch_encoding: Literal["utf-8", "base64"] = "utf-8"
    patch_sha256: str = ""
    patch_truncated: bool = False
    applied_sha256: str = ""
    dropped: list[str] = Field(default_factory=list)
    reason: str | None = None
    grading: str | None = None
    answer: Any = None
    metrics: dict[str, bool] | None = Field(
        default=None,
        description="An answer task's metrics, each one's result on the answer (absent when "
        "no answer was scored: none given, invalid, abstained, timed out).",
    )
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
    session: str | None = Field(
        default=None,
        description="In transit only: base64 of the gzip'd tar of the agent's session "
        "(runner.agents.installed.session). The run directory keeps it as "
        "sessions/<session_sha256>.tar.gz and the ledger holds null here.",
    )
    session_sha256: str | None = Field(
        default=None, description="SHA-256 of the session archive kept in sessions/."
    )
    worker: str
    image_digest: str = ""
    limits: dict[str, Any] | None = Field(
        default=None,
        description="What the trial ran under, as the worker applied it and the engine "
        "reported it (runner.trial.limits); null when no sandbox was made, and in records "
        "written before the field existed.",
    )
    attempt: int = 1
    started_at: str
    finished_at: str

    schema_version: Literal[1] = 1

    @model_validator(mode="after")
    def _storable(self, info: ValidationInfo) -> Trial:
        """Writer and reader accept the same records: a value the JSON reader would refuse
        (a lone surrogate, nesting past the reader's limit, a huge number, NaN) never
        makes it into a record (``runner.bounded_json``). Checked when a record is built,
        not when the ledger is read: what the JSON reader accepted is readable by
        definition, and a report reads every record of a run."""
        if info.mode == "json":
            return self
        for name, value in self.__dict__.items():
            if type(value) is str and not value.isascii() and has_surrogate(value):
                raise ValueError(f"{name}: a lone surrogate; record text must be UTF-8")
        for entry in self.dropped:
            if has_surrogate(entry):
                raise ValueError("dropped: a lone surrogate; record text must be UTF-8")
        if self.answer is not None:
            check_storable(self.answer)
        if self.transcript is not None:
            check_storable(self.transcript)
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredTrial:
    """What scoring and reporting read of a record, in a tenth of a ``Trial``'s memory.

    Reports over 100,000 records hold these instead of full records (no patch,
    no logs, no per-instance pydantic bookkeeping); strings shared by many
    records are interned. Every field but ``setup_signal`` is the ``Trial`` field of
    the same name (``of`` copies them by name; a test keeps the types equal).
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
    cost_usd: float | None = None  # None: not priced
    stop_reason: str | None = None
    route_mismatch: bool = False
    verify_exit_code: int | None = None  # the checklist: every pass was verified
    metrics: dict[str, bool] | None = None  # answer tasks: each metric's result
    finished_at: str = ""  # the report's generated_at is the last of these
    agent_exit_code: int | None = None  # the report's setup warnings (runner.store.setup_warnings)
    image_digest: str = ""  # the checklist: every arm ran a task on the control's image
    limits: dict[str, Any] | None = None  # the checklist: same limits (shared, one per value)
    setup_signal: str | None = None  # runner.setup_signals.signal_of

    @classmethod
    def of(cls, t: Trial) -> ScoredTrial:
        values = {name: getattr(t, name) for name in _COPIED}
        for name in _INTERNED:
            if values[name] is not None:
                values[name] = sys.intern(values[name])
        if values["limits"] is not None:  # a run has a few distinct ones: one object each
            shared = json.dumps(values["limits"], sort_keys=True)
            values["limits"] = _SHARED_LIMITS.setdefault(shared, values["limits"])
        return cls(**values, setup_signal=signal_of(t.reason, t.agent_log))


# The fields ``ScoredTrial.of`` copies from a ``Trial``, and those it interns.
_COPIED = tuple(f.name for f in fields(ScoredTrial) if f.name != "setup_signal")
_SHARED_LIMITS: dict[str, dict[str, Any]] = {}
_INTERNED = ("run_id", "protocol_sha256", "task_id", "arm", "stop_reason", "image_digest")


Record = Trial | ScoredTrial
