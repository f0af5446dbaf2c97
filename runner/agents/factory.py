"""``make_agent``: the agent of an arm, built from its spec (and its directory's files)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from runner.agents.command import Command
from runner.agents.installed.agent import Installed
from runner.agents.installed.catalogue import kind_of
from runner.agents.interface import Agent
from runner.agents.loop.tool_loop import ModelAgent
from runner.agents.loop.toolbox import ToolPolicy
from runner.agents.replay import Replay
from runner.agents.scripted import Scripted
from runner.bounded_input import read_capped
from runner.config.arms import (
    AgentSpec,
    Arm,
    CommandAgent,
    InstalledAgent,
    OpenAIAgent,
    PatchAgent,
    ScriptedAgent,
    Toggles,
)
from runner.config.controls import Controls
from runner.paths import inside
from runner.trees.archives import DIRECTORY_CAPS, Member, members_from_dir


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
    if isinstance(spec, InstalledAgent):
        if controls is None:
            raise TypeError("an installed agent needs the controls")
        return installed_agent(spec, members, toggles, controls)
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


def installed_agent(
    spec: InstalledAgent, members: list[Member] | None, toggles: Toggles | None, controls: Controls
) -> Installed:
    """A catalogue CLI; ``members`` are its -on leg's toggle files (None on the -off leg and
    for an arm without legs). ``prepare`` has checked the name, version, route and targets."""
    kind = kind_of(spec.name)
    route = controls.route_for(spec)
    if kind is None or route is None:
        raise TypeError(f"installed agent {spec.name!r} is not in the catalogue or has no route")
    return Installed(
        kind,
        spec,
        route,
        tuple(controls.tools.allowlist),
        toggles,
        on_files=members if toggles is None else None,
        transcript_cap=controls.runtime.caps.transcript_bytes,
        price=controls.prices.get(route.model),
    )


def agent_members(spec: AgentSpec, base_dir: Path, root: Path | None = None) -> list[Member] | None:
    """Read an arm's agent directory (relative to controls.yaml, held inside ``root``,
    default ``base_dir``: ``runner.paths.inside``) on this machine."""
    if isinstance(spec, PatchAgent | CommandAgent):
        where = base_dir / "controls.yaml"
        return members_from_dir(
            inside(base_dir, spec.dir, file=where, field="agent.dir", root=root)
        )
    return None


def arm_members(arm: Arm, base_dir: Path, root: Path | None = None) -> list[Member] | None:
    """What of an arm travels with the protocol: its agent directory, or an installed
    agent's -on leg files (``toggles.on_files``, each placed at its target)."""
    if isinstance(arm.agent, InstalledAgent):
        return toggle_members(arm.toggles, base_dir, root)
    return agent_members(arm.agent, base_dir, root)


def toggle_members(
    toggles: Toggles | None, base_dir: Path, root: Path | None = None
) -> list[Member] | None:
    """``on_files`` read from disk: a file at its target, a directory's files under it."""
    if toggles is None or not toggles.on_files:
        return None
    found: list[Member] = []
    for target, source in sorted(toggles.on_files.items()):
        field = f"toggles.on_files.{target}"
        path = inside(base_dir, source, file=base_dir / "controls.yaml", field=field, root=root)
        target = target.strip("/")
        if path.is_dir():
            found += [
                Member(f"{target}/{m.path}", m.is_dir, m.data, m.executable)
                for m in members_from_dir(path)
            ]
        else:
            data = read_capped(path, DIRECTORY_CAPS.max_member_bytes, f"{field}'s source")
            found.append(Member(target, False, data, False))
    return found


def agents_for(controls: Controls, members: Mapping[str, list[Member] | None]) -> dict[str, Agent]:
    """The agent of every leg of a run (``members``: each arm's directory, by arm name)."""
    return {
        leg.name: make_agent(leg.arm.agent, members.get(leg.arm.name), leg.toggles, controls)
        for leg in controls.legs()
    }
