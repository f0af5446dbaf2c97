"""``make_agent``: the agent of an arm, built from its spec (and its directory's files)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from runner.agents.base import Agent
from runner.agents.command import Command
from runner.agents.model.loop import ModelAgent
from runner.agents.model.toolbox import ToolPolicy
from runner.agents.replay import Replay
from runner.agents.scripted import Scripted
from runner.config.model import (
    AgentSpec,
    CommandAgent,
    Controls,
    OpenAIAgent,
    PatchAgent,
    ScriptedAgent,
    Toggles,
)
from runner.fixtures.archives import Member, members_from_dir


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


def agents_for(controls: Controls, members: Mapping[str, list[Member] | None]) -> dict[str, Agent]:
    """The agent of every leg of a run (``members``: each arm's directory, by arm name)."""
    return {
        leg.name: make_agent(leg.arm.agent, members.get(leg.arm.name), leg.toggles, controls)
        for leg in controls.legs()
    }
