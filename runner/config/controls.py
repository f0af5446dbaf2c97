"""The controls of a run as strict models: what ``controls.yaml`` may say. Pure.

Every model forbids unknown keys (a misspelt key is an error naming its path)
and documents each field; ``deltarun schema controls`` prints them. Nothing here
reads files, YAML or archives: ``runner.config.loader`` does that and computes
the protocol hash.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runner.config.arms import (
    AgentSpec,
    Arm,
    CommandAgent,
    InstalledAgent,
    Leg,
    OpenAIAgent,
    PatchAgent,
    Route,
    ScriptedAgent,
)
from runner.config.gate_spec import GateSpec
from runner.config.runtime import TOOL_NAMES, Runtime, Tools
from runner.records import Strict


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

    def usage_dollars(
        self, prompt: int, completion: int, cache_read: int = 0, cache_write: int = 0
    ) -> float:
        """Dollars of a usage as records and gateways count it: the cached tokens are part
        of ``prompt``, so only the rest is priced as fresh input."""
        fresh = max(prompt - cache_read - cache_write, 0)
        return self.dollars(fresh, completion, cache_read, cache_write)


class Budget(Strict):
    """Spending limits the model gateway enforces (installed agents under model-only)."""

    trial_tokens: int | None = Field(
        default=None, ge=1, description="Input plus output tokens of one trial at most."
    )
    trial_usd: float | None = Field(default=None, gt=0, description="Dollars of one trial.")
    run_usd: float | None = Field(
        default=None,
        gt=0,
        description="Dollars of the whole run on every machine: each trial's model gateway "
        "debits its spend to the run's account as answers arrive (Redis on a fleet, this "
        "process locally); once it is spent every gateway refuses further requests (the "
        "agent's miss) and no trial starts. Needs the route model's price.",
    )


class RateLimit(Strict):
    """One route model's limits on every machine together (the provider's limits of one key):
    each trial's gateway forwards a request only with a permit from the route's shared
    limiter, and a 429 makes every gateway of the route wait its Retry-After."""

    concurrent: int | None = Field(
        default=None, ge=1, description="Requests in flight at once, fleet-wide."
    )
    requests_per_minute: int | None = Field(
        default=None, ge=1, description="Requests started per minute, fleet-wide."
    )
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Input plus output tokens per minute, fleet-wide (taken as answers "
        "arrive: a request waits while the minute's tokens are spent).",
    )

    @model_validator(mode="after")
    def _some(self) -> RateLimit:
        if not (self.concurrent or self.requests_per_minute or self.tokens_per_minute):
            raise ValueError(
                "give at least one of concurrent, requests_per_minute, tokens_per_minute"
            )
        return self

    def triple(self) -> tuple[int, int, int]:
        return (self.concurrent or 0, self.requests_per_minute or 0, self.tokens_per_minute or 0)


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
    rate_limits: dict[str, RateLimit] = Field(
        default_factory=dict,
        description="Shared rate limits per route model, model name -> limits, enforced by "
        "every trial's model gateway together (docs/many-machines.md, shared rate limits).",
    )
    gate: GateSpec | None = Field(
        default=None,
        description="Criteria `deltarun gate` decides (docs/ci.md); part of the protocol hash.",
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
        run_usd = self.budget.run_usd if self.budget else None
        command = any(isinstance(arm.agent, CommandAgent) for arm in self.arms)
        gated = command and self.runtime.network == "model-only" and self.route is not None
        own_loop = [arm.name for arm in self.arms if isinstance(arm.agent, OpenAIAgent)]
        if run_usd is not None and own_loop:
            raise ValueError(
                f"budget.run_usd cannot bound arm {own_loop[0]!r}: type openai (deltarun's own "
                "model loop) is not priced, so no dollars of it would count; remove "
                "budget.run_usd, or run the loop as a command agent under runtime.network: "
                "model-only, whose gateway counts the run's dollars"
            )
        if run_usd is not None and gated and self.route and self.route.model not in self.prices:
            raise ValueError(
                f"budget.run_usd needs prices.{self.route.model} (input and output dollars "
                "per million tokens): the gateways count the run's dollars at that price"
            )
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
        if self.gate is not None and self.gate.arms is not None:
            candidates = [leg.name for leg in self.legs() if leg.name not in controls]
            for name in self.gate.arms:
                if name not in candidates:
                    raise ValueError(
                        f"gate.arms: {name!r} is not a candidate arm; choose from "
                        f"{', '.join(candidates) or '(none)'}"
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
