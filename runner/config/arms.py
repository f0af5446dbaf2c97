"""The arms of a run as the controls state them: the agent each one runs (scripted, patch,
command, openai, installed), the model route it uses, and the skill toggles of its legs.
Strict models, pure; ``runner.config.controls`` puts them together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from runner.records import Strict


class Route(Strict):
    """A pinned model behind an OpenAI-compatible chat-completions endpoint."""

    base_url: str = Field(
        pattern=r"^https?://[^\s/\x00-\x1f\x7f]+(/[^\s\x00-\x1f\x7f]*)?$",
        description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1.",
    )
    model: str = Field(min_length=1, description="Pinned model name; every response must name it.")
    accept_models: list[str] = Field(
        default_factory=list,
        description="Other names the endpoint may report for the pinned model (a dated snapshot).",
    )
    temperature: float = Field(default=0.0, ge=0)
    seed: int | None = Field(
        default=None, description="Sampling seed sent to the endpoint; runtime.seed if unset."
    )
    max_output_tokens: int = Field(default=2048, ge=1)
    api_key_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the API key (never the key).",
    )
    request_timeout_s: float = Field(default=300, gt=0, description="Limit of one request.")
    max_attempts: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Attempts of one request on 429, 5xx or a lost connection (infrastructure).",
    )

    def mismatch(self, answered: str | None) -> str | None:
        """The route lock: why a reply naming ``answered`` breaks it, or None when it holds."""
        if answered == self.model or answered in self.accept_models:
            return None
        return (
            f"route_mismatch: the endpoint answered as model {answered!r}, "
            f"the route pins {self.model!r}"
        )


class ScriptedAgent(Strict):
    type: Literal["scripted"]
    action: Literal["noop", "abstain"] = Field(description="noop: change nothing; abstain.")


class PatchAgent(Strict):
    type: Literal["patch"]
    dir: str = Field(description="Directory of <task_id>.diff / .abstain / .answer.json files.")


class CommandAgent(Strict):
    type: Literal["command"]
    dir: str = Field(description="Directory copied read-only to /opt/agent.")
    argv: list[str] = Field(min_length=1, description="Command run in /workspace as the agent.")


DEFAULT_SYSTEM_PROMPT = (
    "You are a software engineer working in a repository at /workspace. Use the tools to "
    "inspect and change files. When the task is done, call submit (with the answer, if the "
    "task asks for one). If the task cannot be done as asked (for example something it needs "
    "is missing), call abstain with the reason instead of guessing."
)


class OpenAIAgent(Strict):
    type: Literal["openai"]
    route: Route | None = Field(
        default=None, description="This arm's model route; the top-level route if unset."
    )
    system_prompt: str = Field(
        default=DEFAULT_SYSTEM_PROMPT, min_length=1, description="The frozen system prompt."
    )
    max_turns: int = Field(
        default=30, ge=1, le=1000, description="Model replies before the trial ends."
    )


class InstalledAgent(Strict):
    """A released agent CLI from the catalogue (``deltarun agents``), installed into the task's
    image from its registry artifacts and run headless under the harness's rules."""

    type: Literal["installed"]
    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,39}$",
        description="Catalogue name: claude-code, codex, aider or mini-swe-agent.",
    )
    version: str = Field(
        pattern=r"^[0-9]+(\.[0-9]+)*([.+-][0-9A-Za-z.]+)?$",
        description="Exact version of the CLI (no ranges).",
    )
    route: Route | None = Field(
        default=None, description="The model route of this agent; the top-level route if unset."
    )
    settings: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Agent-specific settings (the catalogue entry lists them, e.g. edit_format).",
    )
    artifacts_sha256: str = Field(
        default="",
        description="SHA-256 over the fetched artifacts (tarballs, wheels), written by "
        "`deltarun build`; a fetch that hashes otherwise stops the run.",
    )


AgentSpec = Annotated[
    ScriptedAgent | PatchAgent | CommandAgent | OpenAIAgent | InstalledAgent,
    Field(discriminator="type"),
]


class Toggles(Strict):
    """What turns a capability off in the ``-off`` leg of an arm (``baseline: off|both``)."""

    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment of the agent in the off leg."
    )
    prompt_prefix: str = Field(default="", description="Text put before the prompt (off leg).")
    prompt_suffix: str = Field(default="", description="Text put after the prompt (off leg).")
    on_files: dict[str, str] = Field(
        default_factory=dict,
        description="Installed agents: files placed for the on leg only, target (in the agent's "
        "configuration, e.g. skills/lint/SKILL.md) -> source file or folder beside controls.yaml.",
    )
    on_env: dict[str, str] = Field(
        default_factory=dict, description="Installed agents: environment of the -on leg only."
    )

    @field_validator("env", "on_env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key.startswith("DELTARUN_") or key in ("PATH", "HOME") or not key.isidentifier():
                raise ValueError(f"{key!r} cannot be toggled; use your own variable name")
        return value

    def prompt(self, prompt: str) -> str:
        return f"{self.prompt_prefix}{prompt}{self.prompt_suffix}"


class Arm(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,59}$")
    control: bool = False
    agent: AgentSpec
    baseline: Literal["on", "off", "both"] | None = Field(
        default=None,
        description="With toggles (unset: on): on runs the arm as authored, off as <name>-off, "
        "both as <name>-on and <name>-off legs; `deltarun run --baseline-mode` overrides it.",
    )
    toggles: Toggles | None = None

    @model_validator(mode="before")
    @classmethod
    def _on_by_default(cls, data: Any) -> Any:  # toggles alone: run as authored (skill-on)
        if isinstance(data, dict):
            baseline = data.get("baseline")  # YAML 1.1 reads a bare on / off as true / false
            if isinstance(baseline, bool) or (baseline is None and data.get("toggles") is not None):
                data = {**data, "baseline": "off" if baseline is False else "on"}
        return data

    @model_validator(mode="after")
    def _legs(self) -> Arm:
        if self.baseline is not None and self.control:
            raise ValueError("the control arm cannot have toggles (baseline legs)")
        if self.baseline is not None and self.toggles is None:
            raise ValueError(f"'baseline: {self.baseline}' needs 'toggles' (env or prompt)")
        return self


@dataclass(frozen=True)
class Leg:
    """What runs as one arm of the plan: an arm, or a leg of an arm with toggles."""

    name: str
    arm: Arm
    toggles: Toggles | None  # set on the -off leg only
