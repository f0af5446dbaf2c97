"""The arms of an imported seed: the ones the seed names, and those given on the command
line (``--arm NAME=DIR`` a patch arm replaying ``DIR``'s ``<task_id>.diff`` /
``.abstain`` / ``.answer.json``; with ``--command NAME=ARGV`` the same arm is a command
arm whose program is ``DIR``, run as ``ARGV``). A given arm's directory is copied into
the imported suite's ``arms/<NAME>/``, so the suite directory is whole."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ArchiveError, UsageError, UserError
from runner.trees.archives import members_from_dir

ARM_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,59}\Z")
ARM_CLEAN_RE = re.compile(r"[^A-Za-z0-9._-]+")
NOOP = {"type": "scripted", "action": "noop"}


@dataclass(frozen=True)
class GivenArm:
    """An arm from the command line: its name, its directory and, for a command arm, argv."""

    name: str
    source: Path
    argv: tuple[str, ...] | None = None

    @property
    def agent(self) -> dict[str, Any]:
        if self.argv is None:
            return {"type": "patch", "dir": f"arms/{self.name}"}
        return {"type": "command", "dir": f"arms/{self.name}", "argv": list(self.argv)}


def arm_name(raw: str) -> str:
    """A deltarun arm name made of ``raw`` (a model name, a seed's control name)."""
    return ARM_CLEAN_RE.sub("-", raw).strip("-._")[:60] or "arm"


def given_arms(arms: Sequence[str], commands: Sequence[str]) -> list[GivenArm]:
    """``--arm NAME=DIR`` and ``--command NAME=ARGV``, checked: one line per problem."""
    found: dict[str, GivenArm] = {}
    for spec in arms:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise UsageError(f"--arm {spec!r}: write it as NAME=DIR")
        if not ARM_NAME_RE.match(name):
            raise UsageError(f"--arm {spec!r}: an arm name is letters, digits, '.', '_' or '-'")
        if name in found:
            raise UsageError(f"--arm {name}: given twice; give each arm once")
        if not Path(folder).is_dir():
            raise UsageError(f"--arm {spec!r}: {folder} is not a directory")
        found[name] = GivenArm(name, Path(folder))
    for spec in commands:
        name, sep, argv = spec.partition("=")
        if not sep or name not in found:
            raise UsageError(
                f"--command {spec!r}: write it as NAME=ARGV for an arm given with --arm NAME=DIR"
            )
        try:
            words = tuple(shlex.split(argv))
        except ValueError as exc:
            raise UsageError(f"--command {name}: not a command line ({exc})") from exc
        if not words:
            raise UsageError(f"--command {name}: the command is empty")
        found[name] = GivenArm(name, found[name].source, words)
    return list(found.values())


def arm_list(
    seed_arms: Sequence[dict[str, Any]], given: Sequence[GivenArm], control: str
) -> list[dict[str, Any]]:
    """The controls' ``arms``: the seed's, then the given ones (a given arm replaces the
    seed's arm of its name); ``control`` is the one marked ``control: true``."""
    entries: dict[str, dict[str, Any]] = {str(a["name"]): dict(a) for a in seed_arms}
    for arm in given:
        entries[arm.name] = {"name": arm.name, "agent": arm.agent}
    if control not in entries:
        raise UsageError(f"--control {control!r} is not an arm; choose one of {', '.join(entries)}")
    listed: list[dict[str, Any]] = []
    for name, entry in entries.items():
        entry.pop("control", None)
        listed.append({"name": name, **({"control": True} if name == control else {}), **entry})
    return listed


def copy_arms(given: Sequence[GivenArm], out: Path) -> None:
    """Each given arm's directory into ``out/arms/<name>/`` (files and folders only)."""
    for arm in given:
        target = out / "arms" / arm.name
        target.mkdir(parents=True)
        try:
            members = members_from_dir(arm.source)
        except ArchiveError as exc:
            raise UserError(f"--arm {arm.name}: {exc}") from exc
        for member in members:
            path = target / member.path
            if member.is_dir:
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(member.data)
            path.chmod(0o755 if member.executable else 0o644)
