"""An installed agent layered onto a task's image: ``FROM <base image ID>`` plus the install
tree copied root-owned and read-only to ``INSTALL_DIR``, built with no network and no RUN
step (so it works on any base and nothing in the build reaches a registry).

One image per (base image ID, agent, version, artifacts digest), reused while its labels say
so; its tag is ``deltarun-agent/<name>:<version>-<base ID[:12]>``. Before anything is
fetched, the base is asked what it has: an agent its image cannot run (no glibc for a
dynamically linked binary, no Python ≥ 3.10 for a Python CLI) is one line naming the
image, the agent and why.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runner.agents.installed.catalogue import KINDS
from runner.agents.installed.fetch import Fetched, Target, UnknownVersion, check_pin, fetch
from runner.agents.installed.kind import INSTALL_DIR, Kind
from runner.config.arms import InstalledAgent
from runner.config.controls import Controls
from runner.errors import UsageError, UserError
from runner.sandbox.image_config import trigger_refusal
from runner.sandbox.images import BuildRequest, ImageBuilder

AGENT_LABEL = "deltarun.agent"
ARTIFACTS_LABEL = "deltarun.agent.artifacts"
BASE_LABEL = "deltarun.base"
DOCKERFILE = f"ARG BASE\nFROM ${{BASE}}\nCOPY --chown=0:0 tree/ {INSTALL_DIR}/\n"
# Asked of the base image: glibc's version and python3's, one per line when present.
PROBE = (
    "getconf GNU_LIBC_VERSION 2>/dev/null; "
    "python3 -c \"import sys; print('python', *sys.version_info[:2])\" 2>/dev/null; true"
)


class Prober(Protocol):
    def probe(self, image: str, script: str) -> str:
        """What ``sh -c script`` prints in a throwaway sandbox of ``image``."""
        ...


@dataclass(frozen=True)
class AgentImage:
    tag: str
    image_id: str
    artifacts_sha256: str
    reused: bool


def target_of(text: str) -> Target:
    """The probe's output read as the image's Python and glibc versions."""
    python = glibc = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "glibc":
            glibc = _version(words[1])
        if len(words) == 3 and words[0] == "python" and words[1].isdigit():
            python = (int(words[1]), int(words[2])) if words[2].isdigit() else None
    return Target(python, glibc)


def _version(text: str) -> tuple[int, int] | None:
    parts = text.split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def unsupported(kind: Kind, target: Target) -> str | None:
    """Why ``kind`` cannot run on an image with ``target``, or None."""
    if kind.needs_glibc and target.glibc is None:
        return "it is a glibc program and the image has no glibc (musl or static image)"
    if kind.needs_python and (target.python is None or target.python < (3, 10)):
        found = "no python3" if target.python is None else "Python {}.{}".format(*target.python)
        return f"it needs Python ≥ 3.10 in the image, which has {found}"
    return None


AGENT_REPOSITORY = "deltarun-agent/"


def agent_tag(kind: Kind, version: str, base_id: str) -> str:
    return f"{AGENT_REPOSITORY}{kind.name}:{version}-{base_id.removeprefix('sha256:')[:12]}"


def is_layer_on(tag: str, base_id: str) -> bool:
    """Whether ``tag`` names an agent layer (``agent_tag``) on the image ``base_id``."""
    short = base_id.removeprefix("sha256:")[:12]
    return tag.startswith(AGENT_REPOSITORY) and len(short) == 12 and tag.endswith(f"-{short}")


class AgentImages:
    """Builds (or reuses) the agent images of a run, on one engine."""

    def __init__(
        self,
        builder: ImageBuilder,
        prober: Prober,
        say: Callable[[str], None],
        cache: Path | None = None,
    ) -> None:
        self.builder = builder
        self.prober = prober
        self.say = say
        self.cache = cache

    def ensure(
        self, kind: Kind, version: str, base: str, pinned: str = "", where: str = ""
    ) -> AgentImage:
        """The image of ``kind`` at ``version`` on ``base`` (a tag or ID), built if missing."""
        info = self.builder.inspect(base)
        if info is None:
            raise UserError(f"{where}: image {base} is not on this engine; build or pull it")
        refused = trigger_refusal(base, info.triggers)
        if refused is not None:
            raise UserError(f"{where}: {refused}")
        target = target_of(self.prober.probe(info.id, PROBE))
        why = unsupported(kind, target)
        if why is not None:
            raise UserError(f"{where}: {kind.name} cannot run on image {base}: {why}")
        try:
            fetched = fetch(kind, version, target, self.say, self.cache)
        except UnknownVersion as exc:
            raise UsageError(
                f"{where}: agent.version: {kind.name} {version} is not released ({exc}); "
                "pick a version the registry has"
            ) from exc
        check_pin(fetched, pinned, where)
        tag = agent_tag(kind, version, info.id)
        labels = {
            AGENT_LABEL: f"{kind.name}@{version}",
            ARTIFACTS_LABEL: fetched.sha256,
            BASE_LABEL: info.id,
        }
        have = self.builder.inspect(tag)
        if have is not None and all(have.labels.get(k) == v for k, v in labels.items()):
            return AgentImage(tag, have.id, fetched.sha256, reused=True)
        self.say(f"layering {kind.name} {version} onto {base}")
        with tempfile.TemporaryFile() as context:
            write_context(fetched, context)
            context.seek(0)
            request = BuildRequest({"BASE": info.id}, labels, network="none")
            image_id = self.builder.build(context, request, lambda line: None)
        self.builder.tag(image_id, tag)
        return AgentImage(tag, image_id, fetched.sha256, reused=False)


def write_context(fetched: Fetched, out: io.BufferedIOBase | object) -> None:
    """The build context: the Dockerfile and the install tree, every file root-owned with
    fixed modes and times (directories and programs 0755, other files 0644), links refused."""
    with tarfile.open(fileobj=out, mode="w|") as archive:  # type: ignore[call-overload]
        _add_bytes(archive, "Dockerfile", DOCKERFILE.encode(), 0o644)
        for path in sorted(_walk(fetched.tree)):
            rel = path.relative_to(fetched.tree).as_posix()
            info = tarfile.TarInfo(f"tree/{rel}")
            info.uid = info.gid = 0
            info.mtime = 0
            if path.is_symlink():
                raise UserError(f"{fetched.name}: {rel} is a symlink in the install tree")
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
                continue
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            with path.open("rb") as handle:
                archive.addfile(info, handle)


def _walk(root: Path) -> list[Path]:
    found = []
    for directory, names, files in os.walk(root):
        base = Path(directory)
        found += [base / name for name in names] + [base / name for name in files]
    return found


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    archive.addfile(info, io.BytesIO(data))


class LayerPins:
    """Which pinned agent layer each leg's sandbox A runs from, for the coordinator's job
    messages: a worker makes that sandbox from the pinned ID the signed job names, never
    from whatever its engine calls the tag (a layer built there, a stale pull)."""

    def __init__(self, controls: Controls, digests: Mapping[str, str]) -> None:
        self.agents = {
            leg.name: leg.arm.agent
            for leg in controls.legs()
            if isinstance(leg.arm.agent, InstalledAgent)
        }
        self.digests = digests

    def of(self, leg: str, image: str) -> tuple[str, str] | None:
        """(tag, pinned ID) of ``leg``'s layer on the task image ``image``; None for a leg
        that is not an installed agent, or a layer the run did not pin."""
        agent = self.agents.get(leg)
        base = self.digests.get(image)
        kind = KINDS.get(agent.name) if agent is not None else None
        if agent is None or kind is None or base is None:
            return None
        tag = agent_tag(kind, agent.version, base)
        pin = self.digests.get(tag)
        return (tag, pin) if pin else None

    def images(self, leg: str, image: str) -> dict[str, str]:
        """The images a job message of ``leg`` on the task image ``image`` names, signed
        with it: ``image`` and its pin ``image_id``, and for an installed agent its layer,
        ``agent_image`` and ``agent_image_id``."""
        pins = {"image": image}
        if image in self.digests:
            pins["image_id"] = self.digests[image]
        layer = self.of(leg, image)
        if layer is not None:
            pins["agent_image"], pins["agent_image_id"] = layer
        return pins
