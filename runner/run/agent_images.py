"""The images of a run's installed agents: each (installed arm, task image) pair's layer,
built or reused before the run (``deltarun build`` does the same and pins the digests),
then pinned by ID beside the task images in run.json.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runner.agents.installed.catalogue import kind_of
from runner.agents.installed.layer import AgentImages, agent_tag
from runner.config.arms import InstalledAgent
from runner.config.controls import Controls
from runner.config.loader import LoadedControls
from runner.errors import UsageError, UserError
from runner.suite.load import Suite
from runner.trial.sandbox_specs import image_of


@dataclass(frozen=True)
class Layered:
    """One installed arm's layer on one task image."""

    arm: str
    index: int
    base: str
    tag: str
    image_id: str
    artifacts_sha256: str


def installed_arms(controls: Controls) -> list[tuple[int, str, InstalledAgent]]:
    return [
        (index, arm.name, arm.agent)
        for index, arm in enumerate(controls.arms)
        if isinstance(arm.agent, InstalledAgent)
    ]


def ensure(loaded: LoadedControls, suite: Suite, images: AgentImages) -> list[Layered]:
    """Build (or reuse) every layer the run needs, checking each arm's pinned
    ``artifacts_sha256``; one line naming the arm when an image cannot take its agent."""
    controls = loaded.controls
    bases = sorted({image_of(task, controls) for task in suite.tasks})
    done = []
    for index, arm, agent in installed_arms(controls):
        kind = kind_of(agent.name)
        if kind is None:
            raise UsageError(f"{loaded.path}: arms[{index}].agent.name: {agent.name!r} unknown")
        where = f"{loaded.path}: arms[{index}] ({arm})"
        for base in bases:
            image = images.ensure(kind, agent.version, base, agent.artifacts_sha256, where)
            done.append(
                Layered(arm, index, base, image.tag, image.image_id, image.artifacts_sha256)
            )
    return done


def artifact_pins(controls: Controls, layered: list[Layered]) -> dict[str, dict[str, str]]:
    """Each installed arm's agent and the digest of its artifacts, for run.json and the
    report's pins: what was layered in this run, else what the controls pin ("" when
    neither says: the run built nothing and the controls pin nothing)."""
    built = {layer.arm: layer.artifacts_sha256 for layer in layered}
    return {
        arm: {
            "agent": f"{agent.name}@{agent.version}",
            "artifacts_sha256": built.get(arm, agent.artifacts_sha256),
        }
        for _, arm, agent in installed_arms(controls)
    }


def agent_tags(controls: Controls, base_ids: Mapping[str, str]) -> set[str]:
    """The agent images a run uses, named from the task images' pinned IDs."""
    tags = set()
    for _, _, agent in installed_arms(controls):
        kind = kind_of(agent.name)
        if kind is not None:
            tags |= {agent_tag(kind, agent.version, base_id) for base_id in base_ids.values()}
    return tags


def pin_agent_images(
    controls: Controls, base_ids: Mapping[str, str], image_digest: Callable[[str], str]
) -> dict[str, str]:
    """Tag → image ID of every agent image, from the engine; a missing one names the fix."""
    pinned = {}
    for tag in sorted(agent_tags(controls, base_ids)):
        try:
            pinned[tag] = image_digest(tag)
        except UserError as exc:
            raise UserError(
                f"agent image {tag} is not built ({exc}); run `deltarun build` on the controls"
            ) from exc
    return pinned
