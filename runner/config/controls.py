"""The controls of a run as strict models: what ``controls.yaml`` may say. Pure.

Every model forbids unknown keys (a misspelt key is an error naming its path)
and documents each field; ``deltarun schema controls`` prints them. Nothing here
reads files, YAML or archives: ``runner.config.loader`` does that and computes
the protocol hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

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


class SuiteRef(Strict):
    file: str = Field(description="Path of tasks.jsonl, relative to controls.yaml.")
    sha256: str = Field(default="", description="SHA-256 of tasks.jsonl, written by `seal`.")
    validation: str | None = Field(
        default=None,
        description="SHA-256 of the validation.json (`deltarun validate`) of this suite digest, "
        "written by `seal`; channel scored requires it.",
    )
    exclude: list[str] | None = Field(
        default=None,
        description="Task ids left out of the run (tasks `deltarun validate` did not find "
        "valid); part of the protocol hash.",
    )


class LimitsSpec(Strict):
    memory: Size = Field(default="1g", description="Memory limit, swap disabled.")
    cpus: float = Field(default=1.0, gt=0, description="CPU quota in cores.")
    pids: int = Field(default=256, ge=16, description="Maximum processes and threads.")
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


class Runtime(Strict):
    repeats: int = Field(default=1, ge=1, description="Runs of each (task, arm).")
    max_retries: int = Field(default=0, ge=0, description="Whole-trial retries after an error.")
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


class Price(Strict):
    """US dollars per million tokens of one model, as pinned in the controls."""

    input: float = Field(ge=0, description="Per million input (prompt) tokens, not cached.")
    output: float = Field(ge=0, description="Per million output (completion) tokens.")
    cache_read: float = Field(default=0, ge=0, description="Per million cache-read tokens.")
    cache_write: float = Field(default=0, ge=0, description="Per million cache-write tokens.")

    def dollars(self, fresh: int, output: int, cache_read: int = 0, cache_write: int = 0) -> float:
        return (
            fresh * self.input
            + output * self.output
            + cache_read * self.cache_read
            + cache_write * self.cache_write
        ) / 1e6


class Budget(Strict):
    """Spending limits the model gateway enforces (installed agents under model-only)."""

    trial_tokens: int | None = Field(
        default=None, ge=1, description="Input plus output tokens of one trial at most."
    )
    trial_usd: float | None = Field(default=None, gt=0, description="Dollars of one trial.")
    run_usd: float | None = Field(
        default=None, gt=0, description="Dollars of the whole run; past it no trial starts."
    )


class MetricsSpec(Strict):
    module: str
    sha256: str = ""
    functions: list[str] = Field(default_factory=list)


class Analysis(Strict):
    bootstrap_resamples: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Resamples of a paired bootstrap interval of each delta (0: off); "
        "seeded from runtime.seed, so replay reproduces it.",
    )


class Controls(Strict):
    protocol_id: str = Field(min_length=1)
    channel: Literal["scored", "exploratory"] = "exploratory"
    suite: SuiteRef
    runtime: Runtime = Field(default_factory=Runtime)
    tools: Tools = Field(default_factory=Tools)
    route: Route | None = None
    arms: list[Arm] = Field(min_length=1)
    metrics: MetricsSpec | None = None
    analysis: Analysis = Field(default_factory=Analysis)
    images: dict[str, str] = Field(
        default_factory=dict, description="Pinned image digests: reference → sha256:..."
    )
    prices: dict[str, Price] = Field(
        default_factory=dict,
        description="Pinned price table, model name -> dollars per million tokens; a model "
        "without a price is reported as not priced.",
    )
    budget: Budget | None = Field(
        default=None, description="Token and dollar budgets per trial and per run."
    )

    @model_validator(mode="after")
    def _arms(self) -> Controls:
        names = [leg.name for leg in self.legs()]
        if len(set(names)) != len(names):
            raise ValueError("arm names (and <name>-on / <name>-off legs) must be unique")
        for index, arm in enumerate(self.arms):
            if isinstance(arm.agent, OpenAIAgent) and arm.agent.route is None and not self.route:
                raise ValueError(
                    f"arms[{index}] ({arm.name}) is an openai agent without a route; add "
                    "route: {base_url, model} at the top level or under its agent"
                )
        for index, arm in enumerate(self.arms):
            # An installed agent's route, network and toggles are checked with the catalogue
            # (runner.agents.installed.arm_checks), one line each with exit 2.
            others = not isinstance(arm.agent, InstalledAgent)
            if others and arm.toggles is not None and (arm.toggles.on_files or arm.toggles.on_env):
                raise ValueError(
                    f"arms[{index}].toggles: on_files and on_env are for installed agents; "
                    "use env or the prompt texts"
                )
        if self.runtime.network == "model-only" and self.route is None and not self._own_routes():
            raise ValueError("runtime.network 'model-only' needs a top-level route to reach")
        for name in self.tools.allowlist:
            if name not in TOOL_NAMES:
                raise ValueError(
                    f"tools.allowlist: {name!r} is not a tool; choose from {', '.join(TOOL_NAMES)}"
                )
        controls = [arm.name for arm in self.arms if arm.control]
        if len(controls) != 1:
            raise ValueError(
                f"exactly one arm must have 'control: true' (found {len(controls)}); "
                "mark the frozen baseline as the control"
            )
        return self

    def _own_routes(self) -> bool:
        """No arm under model-only needs the top-level route: each is an installed agent
        (whose route the catalogue checks) or calls no model."""
        return all(
            isinstance(arm.agent, InstalledAgent | ScriptedAgent | PatchAgent) for arm in self.arms
        )

    def route_for(self, agent: AgentSpec) -> Route | None:
        """The model route an agent uses: its own (openai and installed agents), else the
        top-level one."""
        if isinstance(agent, OpenAIAgent | InstalledAgent) and agent.route is not None:
            return agent.route
        return self.route

    def model_route(self, agent: AgentSpec) -> Route | None:
        """The route of an agent a model drives (a live, sampled arm): an openai agent's,
        and a command agent's under ``network: model-only``; None for the rest."""
        if isinstance(agent, OpenAIAgent | InstalledAgent):
            return self.route_for(agent)
        if isinstance(agent, CommandAgent) and self.runtime.network == "model-only":
            return self.route
        return None

    @property
    def control_arm(self) -> str:
        return next(arm.name for arm in self.arms if arm.control)

    def legs(self) -> list[Leg]:
        """The arms as planned: one with toggles as itself, ``<name>-off`` or both legs."""
        legs: list[Leg] = []
        for arm in self.arms:
            off = Leg(f"{arm.name}-off", arm, arm.toggles)
            if arm.baseline == "both":
                legs += [Leg(f"{arm.name}-on", arm, None), off]
            else:
                legs.append(off if arm.baseline == "off" else Leg(arm.name, arm, None))
        return legs

    def baseline_pairs(self) -> list[tuple[str, str]]:
        """(on leg, off leg) of every ``baseline: both`` arm."""
        return [(f"{a.name}-on", f"{a.name}-off") for a in self.arms if a.baseline == "both"]
