"""The sandbox side of the controls: the runtime (image, limits, caps, network, timeouts,
retries) and the tools an agent is given. Strict models, pure; ``runner.config.controls``
puts them together."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from runner.records import Strict
from runner.sizes import parse_size
from runner.trees.archives import DEFAULT_CAPS, ArchiveCaps

# The tools a model-driven agent can be given (``runner.agents.loop.tool_policy`` defines each
# one's schema and checks, in this order; a test keeps the two in step).
TOOL_NAMES = (
    "read_file",
    "list_dir",
    "search",
    "write_file",
    "apply_patch",
    "run_command",
    "run_tests",
    "run_hidden_test",
    "submit",
    "abstain",
)


Size = Annotated[str | int, Field(description="A size like 512m or 1g, or bytes.")]


class LimitsSpec(Strict):
    memory: Size = Field(default="1g", description="Memory limit, swap disabled.")
    cpus: float = Field(default=1.0, gt=0, description="CPU quota in cores.")
    pids: int = Field(
        default=256,
        ge=16,
        le=32768,  # beyond it a fork bomb in one sandbox reaches the machine's own process table
        description="Maximum processes and threads (at most 32768).",
    )
    workspace: Size = Field(default="512m", description="Size cap of /workspace.")

    @field_validator("memory", "workspace")
    @classmethod
    def _size(cls, value: str | int) -> str | int:
        parse_size(value)
        return value


class Caps(Strict):
    patch_bytes: int = Field(default=1 << 20, ge=1024, description="Cap of a stored patch.")
    output_bytes: int = Field(default=64 << 10, ge=1024, description="Cap of stored output.")
    transcript_bytes: int = Field(
        default=256 << 10, ge=1024, description="Cap of a stored model transcript."
    )


class ArchiveLimits(Strict):
    """Caps on every fixture and hidden-test archive (and git tree) of the suite."""

    max_members: int = Field(default=20_000, ge=1, description="Files and folders at most.")
    max_member_bytes: Size = Field(default="64m", description="Size cap of one file.")
    max_total_bytes: Size = Field(default="512m", description="Size cap of all files together.")

    @field_validator("max_member_bytes", "max_total_bytes")
    @classmethod
    def _size(cls, value: str | int) -> str | int:
        parse_size(value)
        return value

    def caps(self) -> ArchiveCaps:
        return ArchiveCaps(
            self.max_members, parse_size(self.max_member_bytes), parse_size(self.max_total_bytes)
        )


class RetryPolicy(Strict):
    """What ``deltarun run --retry-errors`` may run again: jobs whose record is an
    infrastructure ``error`` (never a miss or a timeout), each at most ``max_per_job`` times.
    Declared in the controls, so the protocol hash covers it: a scored run may be retried
    only under a policy fixed before it started."""

    max_per_job: int = Field(
        ge=1,
        le=100,
        description="Times one job may be run again after an infrastructure error "
        "(by `run --retry-errors`, and within a trial by runtime.max_retries, which may "
        "not exceed it in the scored channel).",
    )


class Runtime(Strict):
    repeats: int = Field(default=1, ge=1, description="Runs of each (task, arm).")
    max_retries: int = Field(default=0, ge=0, description="Whole-trial retries after an error.")
    retry_errors: RetryPolicy | None = Field(
        default=None,
        description=(
            "The run's policy for running again the trials an infrastructure error left "
            "unscored (`deltarun run --retry-errors`). Unset: a scored run keeps max_retries 0 "
            "and refuses --retry-errors. Part of the protocol hash when set."
        ),
    )
    seed: int = Field(default=0, description="Seed of every random choice (job order).")
    timeout_s: float = Field(default=120, gt=0, description="Agent phase limit; tasks override.")
    verify_timeout_s: float = Field(default=300, gt=0, description="Hidden-test phase limit.")
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    network: Literal["none", "model-only"] = Field(
        default="none",
        description=(
            "Sandbox network. 'none': no network at all. 'model-only': a command agent reaches "
            "the route's endpoint through a per-trial gateway (DELTARUN_MODEL_BASE_URL) and "
            "nothing else; the API key stays in the gateway."
        ),
    )
    model_network: str = Field(
        default="bridge",
        description="Docker network the model gateway uses to reach route.base_url.",
    )
    image: str = Field(
        default="deltarun/sandbox-python:bookworm",
        description="Sandbox image of tasks that name none (answer tasks).",
    )
    caps: Caps = Field(default_factory=Caps)
    python: str | None = Field(
        default=None,
        pattern=r"^3\.\d{1,2}(\.\d{1,3})?$",
        description=(
            "The Python version every sandbox image of the run must have (3.11 pins any 3.11.x; "
            "3.11.2 exactly), asked of each image's python3 before the run (exit 3 otherwise). "
            "Part of the protocol hash when set."
        ),
    )
    archive: ArchiveLimits | None = Field(
        default=None,
        description=(
            "Caps on fixture archives and git trees (unset: 20000 members, 64m per file, "
            "512m in total). Part of the protocol hash when set."
        ),
    )
    oci_runtime: str | None = Field(
        default=None,
        description=(
            "OCI runtime of the sandboxes: unset uses the engine's default (runc); "
            "'runsc' selects gVisor where it is installed, for a kernel boundary per sandbox."
        ),
    )

    @property
    def archive_caps(self) -> ArchiveCaps:
        return self.archive.caps() if self.archive is not None else DEFAULT_CAPS


class Tools(Strict):
    allowlist: list[str] = Field(
        default_factory=list,
        description=(
            "Tools a model-driven (openai) agent may call, from: " + ", ".join(TOOL_NAMES) + ". "
            "submit and abstain are always allowed; any other call is refused and counted."
        ),
    )
    call_timeout_s: float = Field(
        default=60, gt=0, description="Limit of one tool call (the trial's limit still holds)."
    )
    call_output_bytes: int = Field(
        default=16 << 10, ge=256, description="Cap of one tool result returned to the model."
    )
    test_command: str = Field(
        default="python3 -m pytest -q -p no:cacheprovider",
        description="What run_tests runs in /workspace: the visible tests only.",
    )
    forbidden_paths: list[str] = Field(
        default_factory=lambda: [".git/"], description="Paths absent from the agent's workspace."
    )
    grading_paths: list[str] = Field(
        default_factory=list,
        description=(
            "Extra patterns of files the agent may not change for grading, beyond the built-in "
            "policy (runner configuration, package metadata, bytecode, modules shadowing the "
            "image's own, files beside the hidden tests). The agent's changes to them are "
            "dropped before the hidden tests run and counted as tool violations. A pattern "
            "without '/' matches any file of that name; one with '/' matches the path from "
            "the repository root."
        ),
    )
