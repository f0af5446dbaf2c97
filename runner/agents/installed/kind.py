"""What a catalogue entry provides: where the CLI comes from, how it is laid out in the
image, how it runs headless, which files are its extension points, and how its session log
reads as steps. Pure: no I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

Registry = Literal["npm", "pypi"]
Api = Literal["anthropic", "openai-chat", "openai-responses"]

# Where an installed agent lives in its image: root-owned, read-only to the agent.
INSTALL_DIR = "/opt/deltarun-agent"
# The agent's configuration home (HOME); written by the harness before the CLI starts.
HOME = "/home/agent"
# What the sandbox holds instead of an API key: the gateway adds the real one.
PLACEHOLDER_KEY = "sk-deltarun-placeholder"


@dataclass(frozen=True)
class Artifact:
    """One package the CLI is installed from: npm tarballs are unpacked member by member
    (``members``: path in the tarball -> path under ``INSTALL_DIR``); PyPI requirements are
    resolved to wheels for the image's Python and installed under ``INSTALL_DIR/site``."""

    registry: Registry
    package: str
    version: str
    members: Mapping[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        return (
            f"{self.package}@{self.version}"
            if self.registry == "npm"
            else (f"{self.package}=={self.version}")
        )


@dataclass(frozen=True)
class Launch:
    """What the harness knows when it starts the CLI in sandbox A."""

    prompt: str
    model: str
    base_url: str  # the gateway's URL for this API, e.g. http://model-gateway:8080/v1
    settings: Mapping[str, str | int | float | bool]
    allowlist: tuple[str, ...]  # deltarun tool names; empty: the agent's own defaults
    timeout_s: float
    max_output_tokens: int = 8192  # the route's: one reply's output at most


@dataclass(frozen=True)
class Invocation:
    """How the CLI runs: argv (in /workspace, as the agent's uid), its environment, and the
    files written for it before it starts (absolute paths under HOME or /tmp)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One step of what the agent did, in one shape for every CLI (``deltarun schema
    trajectory``). Text is bounded by the reader, never executed."""

    role: Literal["user", "assistant", "tool", "system"]
    text: str = ""
    tool: str | None = None
    arguments: str | None = None
    result: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


class Kind(Protocol):
    """One catalogue entry (a module under ``runner.agents.installed``)."""

    name: str
    api: Api
    needs_python: bool  # a Python >= 3.10 in the image (the wheels are built for it)
    needs_glibc: bool  # a dynamically linked binary (musl-static ones run anywhere)
    settings: Mapping[str, str]  # the settings it takes, each with one line of help
    # The values a setting may take, when they are words (others are whole numbers >= 1):
    # every value reaches the CLI's command line or configuration, so none is taken unread
    setting_choices: Mapping[str, tuple[str, ...]]
    config_dir: str  # its extension points live under HOME/<config_dir>
    toggle_targets: tuple[str, ...]  # paths under config_dir an -on leg may place
    session_logs: tuple[str, ...]  # files or directories (under HOME) holding its log
    tool_names: Mapping[str, tuple[str, ...]]  # deltarun tool -> this CLI's tool names
    always_allowed: tuple[str, ...]  # its bookkeeping tools (plans, to-do lists)

    def artifacts(self, version: str) -> list[Artifact]: ...

    def invocation(self, launch: Launch) -> Invocation: ...

    def steps(self, logs: Mapping[str, bytes]) -> list[Step]: ...


def denied_tools(
    tool_names: Mapping[str, tuple[str, ...]], allowlist: tuple[str, ...]
) -> list[str]:
    """The CLI's own tool names that no allowlisted tool grants (none for an empty list:
    the agent keeps its own defaults)."""
    if not allowlist:
        return []
    granted = {name for tool in allowlist for name in tool_names.get(tool, ())}
    every = {name for names in tool_names.values() for name in names}
    return sorted(every - granted)


def violations(kind: Kind, allowlist: tuple[str, ...], called: list[str]) -> list[str]:
    """The tool calls the model asked for that a non-empty allowlist does not allow: a name
    the catalogue maps only to tools outside it, or a name it does not know at all."""
    if not allowlist:
        return []
    allowed = {name for tool in allowlist for name in kind.tool_names.get(tool, ())}
    allowed |= set(kind.always_allowed)
    return [name for name in called if name not in allowed]
