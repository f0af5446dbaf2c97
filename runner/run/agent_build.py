"""``deltarun build CONTROLS`` for installed agents: every (installed arm, task image) layer
fetched and built (or reused), then each arm's ``artifacts_sha256`` pinned in the controls,
as ``seal`` pins the suite digest (comments, order and style kept; written atomically)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from runner.atomic import write_atomic
from runner.bounded_input import read_capped
from runner.config.loader import CONTROLS_MAX_BYTES
from runner.errors import DigestMismatch, UserError
from runner.paths import writable
from runner.run.agent_images import Layered
from runner.run.service import RunService

if TYPE_CHECKING:
    from runner.sandbox.image_build import DockerImageBuilder


def build_agents(
    controls: Path, say: Callable[[str], None], builder: DockerImageBuilder | None = None
) -> list[str]:
    """Layer the controls' installed agents (with ``builder``, whose limits each layer's
    build keeps; default ones without) and pin their artifacts; the lines to print."""
    layered = RunService().layer_agents(controls, say, builder)
    if not layered:
        return []
    digests: dict[int, str] = {}
    for layer in layered:
        if digests.setdefault(layer.index, layer.artifacts_sha256) != layer.artifacts_sha256:
            raise DigestMismatch(
                f"{controls}: arms[{layer.index}] ({layer.arm}): the artifacts differ between "
                "task images; use images with the same Python"
            )
    changed = pin_artifacts(controls, digests)
    lines = [f"agent {x.arm}: {x.tag} {x.image_id[:19]}" for x in layered]
    lines.append(f"pinned artifacts_sha256 of {changed} arm(s) in {controls}" if changed else
                 f"artifacts_sha256 already pinned in {controls}")  # fmt: skip
    return lines


def pin_artifacts(controls: Path, digests: dict[int, str]) -> int:
    """Write each ``arms[i].agent.artifacts_sha256``; how many changed."""
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = sys.maxsize
    try:  # loaded within bounds before (RunService.layer_agents): read again, capped
        text = read_capped(controls, CONTROLS_MAX_BYTES, "a controls file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{controls}: cannot read the controls file ({exc})") from exc
    data = rt.load(text)
    arms = data.get("arms") if isinstance(data, CommentedMap) else None
    changed = 0
    for index, digest in sorted(digests.items()):
        agent = arms[index].get("agent") if isinstance(arms, list) else None
        if not isinstance(agent, CommentedMap):
            raise UserError(f"{controls}: arms[{index}].agent: cannot write artifacts_sha256")
        if agent.get("artifacts_sha256") != digest:
            agent["artifacts_sha256"] = digest
            changed += 1
    if changed:
        buffer = io.StringIO()
        rt.dump(data, buffer)
        where = writable(controls.parent, controls.name, what="deltarun pins the artifacts")
        write_atomic(where, buffer.getvalue().encode("utf-8"))
    return changed


__all__ = ["Layered", "build_agents", "pin_artifacts"]
