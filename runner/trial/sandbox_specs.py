"""The sandboxes a trial opens, as specs: the image (a task's environment, its own, the
runtime's; an installed CLI's layer on it), the limits, the lifetime, and the one way to the
model sandbox A may have. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runner.agents.installed.agent import Installed
from runner.agents.interface import Agent, AgentResult
from runner.config.controls import Controls, Price
from runner.errors import UserError
from runner.records import (
    Job,
    RepoTask,
    Task,
)
from runner.sandbox.base import (
    Limits,
    ModelAccess,
    ModelCall,
    SandboxSpec,
)
from runner.sandbox.gateway_rates import route_key
from runner.sizes import parse_size
from runner.trial.env import TrialEnv

SANDBOX_LIFETIME_MARGIN_S = 120.0
RUN_BUDGET_STOP = "run_budget_exhausted"  # a stop reason: the run's dollars ran out mid-trial
RUN_FLAG = "run_budget"  # the gateway's flag of a request refused for the run's budget


def limits_of(controls: Controls) -> Limits:
    spec = controls.runtime.limits
    return Limits(
        memory_bytes=parse_size(spec.memory),
        nano_cpus=int(spec.cpus * 1e9),
        pids=spec.pids,
        workspace_bytes=parse_size(spec.workspace),
    )


def image_of(task: Task, controls: Controls) -> str:
    """The sandbox image of a task: its environment's, its own, or the runtime's default."""
    if isinstance(task, RepoTask):
        if task.environment is not None:
            if task.environment_tag is None:
                raise UserError(
                    f"task {task.id!r}: environment {task.environment!r} is not built; run "
                    "`deltarun build` on the suite (it pins the image), then seal the controls"
                )
            return task.environment_tag
        if task.image:
            return task.image
    return controls.runtime.image


def model_access(controls: Controls) -> ModelAccess | None:
    """The agent sandbox's one way out under ``network: model-only``; None otherwise."""
    route = controls.route
    if controls.runtime.network != "model-only" or route is None:
        return None
    price = controls.prices.get(route.model)
    return ModelAccess(
        route.base_url,
        route.api_key_env,
        controls.runtime.model_network,
        price=price.model_dump() if price is not None else None,
        run_usd=controls.budget.run_usd if controls.budget else None,
        **rated(controls, route.base_url, route.model),
    )


def rated(controls: Controls, upstream: str, model: str) -> dict[str, Any]:
    """A route's shared rate limits and its limiter's key, when the controls give them."""
    limits = controls.rate_limits.get(model)
    if limits is None:
        return {}
    return {"rate_limits": limits.triple(), "rate_route": route_key(upstream, model)}


def preflight_spec(controls: Controls, image: str) -> SandboxSpec:
    """The spec of the start-up check: the run's limits, runtime and network (gateway too)."""
    return SandboxSpec(
        image=image,
        limits=limits_of(controls),
        lifetime_s=60,
        labels={"run": "preflight", "job": "preflight"},
        oci_runtime=controls.runtime.oci_runtime,
        model_access=model_access(controls),
    )


def agent_access(agent: Agent, controls: Controls) -> ModelAccess | None:
    """Sandbox A's way to the model: an installed CLI's own route with the trial's budget;
    under ``model-only`` a command agent's top-level route; no other agent calls the model
    from inside the sandbox."""
    if isinstance(agent, Installed):
        budget = controls.budget
        price = controls.prices.get(agent.route.model)
        return ModelAccess(
            agent.route.base_url,
            agent.route.api_key_env,
            controls.runtime.model_network,
            budget_tokens=budget.trial_tokens if budget else None,
            budget_usd=budget.trial_usd if budget else None,
            price=price.model_dump() if price is not None else None,
            max_output_tokens=agent.route.max_output_tokens,
            run_usd=budget.run_usd if budget else None,
            **rated(controls, agent.route.base_url, agent.route.model),
        )
    return model_access(controls) if agent.needs_agent_dir else None


def agent_image(task: Task, agent: Agent, env: TrialEnv) -> str:
    """Sandbox A's image: the task's, or for an installed CLI its layer on the task's pinned
    image (``runner.agents.installed.layer``)."""
    image = image_of(task, env.controls)
    if isinstance(agent, Installed):
        return agent.image_on(env.pins.get(image) or image)
    return image


def sandbox_spec(
    job: Job,
    image: str,
    env: TrialEnv,
    lifetime: float,
    agent_dir: bool,
    io: bool = True,
    access: ModelAccess | None = None,
) -> SandboxSpec:
    """Sandbox A reaches the model through ``access`` (``agent_access``); sandbox B (verify)
    never does."""
    return SandboxSpec(
        image=image,
        image_id=env.pins.get(image),
        limits=limits_of(env.controls),
        lifetime_s=lifetime + SANDBOX_LIFETIME_MARGIN_S,
        labels={"run": job.run_id, "job": job.job_id},
        with_agent_dir=agent_dir,
        with_io=io,
        workspace_root_owned=not io,
        oci_runtime=env.controls.runtime.oci_runtime,
        model_access=charged(access, job) if io else None,
    )


def charged(access: ModelAccess | None, job: Job) -> ModelAccess | None:
    """``access`` with the run and arm its spend is debited to (``budget.run_usd``)."""
    if access is None or access.run_usd is None:
        return access
    return replace(access, run_id=job.run_id, arm=job.arm)


def priced(result: AgentResult, access: ModelAccess | None, calls: list[ModelCall]) -> AgentResult:
    """The agent phase's result with its cost at the gateway's price (an installed agent
    prices itself; a command agent's gateway tokens are priced here, as the run's account
    debits them) and, when the run's budget refused one of its requests, the stop reason
    ``RUN_BUDGET_STOP``: the agent's own miss, like a spent trial budget."""
    if access is None or access.price is None:
        return result
    if result.cost_usd is None and (result.prompt_tokens or result.completion_tokens):
        dollars = Price.model_validate(access.price).usage_dollars(
            result.prompt_tokens,
            result.completion_tokens,
            result.cache_read_tokens,
            result.cache_write_tokens,
        )
        result = replace(result, cost_usd=round(dollars, 6))
    if result.error is None and any(RUN_FLAG in call.flags for call in calls):
        result = replace(
            result, stop_reason=RUN_BUDGET_STOP, reason="the run's budget is spent (budget.run_usd)"
        )
    return result
