"""Choosing the bump."""

from __future__ import annotations

from typing import Iterable

from relbump.commits import parse_commit

ORDER = ("none", "patch", "minor", "major")


def suggest_bump(messages: Iterable[str]) -> str:
    """``major``, ``minor``, ``patch`` or ``none`` for a set of commit messages."""
    best = "none"
    for message in messages:
        commit = parse_commit(message)
        if commit.bang or "BREAKING CHANGE:" in commit.body:
            bump = "major"
        elif commit.type == "feat":
            bump = "minor"
        elif commit.type in ("fix", "perf"):
            bump = "patch"
        else:
            bump = "none"
        best = max(best, bump, key=ORDER.index)
    return best


def next_version(version: str, bump: str) -> str:
    major, minor, patch = (int(part) for part in version.split("."))
    if bump == "major":
        return f"{major + 1}.0.0"
    if bump == "minor":
        return f"{major}.{minor + 1}.0"
    if bump == "patch":
        return f"{major}.{minor}.{patch + 1}"
    return version
