"""Repository-relative paths the harness reasons about, and the agent's uid the sandbox
contract fixes (fixtures are built owned by it). Pure."""

from __future__ import annotations

from collections.abc import Iterable

# The uid (and gid) an agent runs as in every sandbox; its workspace files are owned by it.
AGENT_UID = 1000


def is_forbidden(rel: str, forbidden: Iterable[str]) -> bool:
    """True when ``rel`` is a forbidden path or lies under one (``.git/`` matches ``.git``)."""
    for entry in forbidden:
        base = entry.strip("/")
        if not base:
            continue
        if rel == base or rel.startswith(base + "/"):
            return True
    return False
