"""What a trial needs to know of a fixture once its tars are staged: no file contents.

A trial with staged tars (``runner.trees.staging``) copies the fixture into its sandboxes
from those tars, so of the fixture itself it needs only:

- the paths of its files (the grading policy judges a patch against them);
- its footprint in a tmpfs (the verify phase tells ahead whether the patched tree fits);
- the few files the verify phase copies from the *pristine* fixture: pytest's
  settings files at the root, every ``__init__.py`` and ``conftest.py``, and the
  files that hold the task's declared tests (``runner.trees.declared.holds_declared``).

Reading every member of a 100 MB fixture to learn that cost more than a second per
trial; the view is a few hundred kilobytes, made once from the members and kept
beside the staged tars. Pure: no I/O.
"""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runner.trees.archives import Member
from runner.trees.declared import CONFIG_FILES, holds_declared

# The tmpfs block a file costs at least, to tell ahead whether a tree fits.
BLOCK = 4096
PRISTINE_NAMES = frozenset({"__init__.py", "conftest.py"})
VERSION = 1


def footprint(member: Member) -> int:
    """Bytes ``member`` takes in a tmpfs: its data rounded up to blocks, plus one."""
    return size_in_tmpfs(len(member.data))


def size_in_tmpfs(size: int) -> int:
    """Bytes a file of ``size`` bytes (0 for a directory) takes in a tmpfs."""
    return -(-size // BLOCK) * BLOCK + BLOCK


def is_pristine(path: str, declared: Sequence[str] = ()) -> bool:
    """Whether the verify phase may copy this fixture file from the pristine fixture
    (``declared``: the task's ``hidden_tests``, whose files the harness writes)."""
    if "/" not in path and path in CONFIG_FILES:
        return True
    return posixpath.basename(path) in PRISTINE_NAMES or holds_declared(path, declared)


@dataclass(frozen=True)
class FixtureView:
    """A fixture's file paths, tmpfs footprint and pristine harness files."""

    files: frozenset[str]
    footprint: int
    pristine: Mapping[str, Member]

    @classmethod
    def of(cls, members: Iterable[Member], declared: Sequence[str] = ()) -> FixtureView:
        files: list[str] = []
        pristine: dict[str, Member] = {}
        size = 0
        for member in members:
            size += footprint(member)
            if member.is_dir:
                continue
            files.append(member.path)
            if is_pristine(member.path, declared):
                pristine[member.path] = member
        return cls(frozenset(files), size, pristine)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "version": VERSION,
                "files": sorted(self.files),
                "footprint": self.footprint,
                "pristine": [
                    [m.path, base64.b64encode(m.data).decode("ascii"), m.executable]
                    for m in sorted(self.pristine.values(), key=lambda m: m.path)
                ],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> FixtureView | None:
        """The view ``to_bytes`` wrote; None for anything else (then it is made again)."""
        try:
            raw = json.loads(data)
            if raw.get("version") != VERSION:
                return None
            pristine = {
                path: Member(path, False, base64.b64decode(blob, validate=True), bool(executable))
                for path, blob, executable in raw["pristine"]
            }
            return cls(frozenset(raw["files"]), int(raw["footprint"]), pristine)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
