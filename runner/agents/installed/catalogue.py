"""The catalogue of installed agents: one module per CLI. Adding one is a module that
provides ``runner.agents.installed.kind.Kind`` plus its test, and one line here."""

from __future__ import annotations

from runner.agents.installed import aider, claude_code, codex, mini_swe_agent
from runner.agents.installed.kind import Kind

KINDS: dict[str, Kind] = {kind.name: kind for kind in (claude_code, codex, aider, mini_swe_agent)}


def kind_of(name: str) -> Kind | None:
    return KINDS.get(name)
