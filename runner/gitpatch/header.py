"""The extended header of a ``diff --git`` section: which paths and modes it names. Pure.

Follows ``parse_git_diff_header`` in git's ``apply.c`` line by line, so the
paths are the ones ``git apply`` would use:

- the ``diff --git`` line gives a default path, read only when its two names
  are one path (``names.git_header_name``);
- each following line is matched against git's table; the first line it does
  not know (or ``@@ -``) ends the header;
- ``---``/``+++`` name the old and the new file, except for a created
  (``new file mode``) or deleted (``deleted file mode``) file, where that side
  must be ``/dev/null``; a name given twice for one side must agree;
- ``new file mode``/``deleted file mode`` take the default path for their side,
  ``rename``/``copy`` ``from``/``to`` replace a side's name;
- a header naming no file takes the default path for both sides (a mode change,
  an empty file, a binary file), and one missing a side it needs is refused.

``strict`` reads what ``git diff`` writes and nothing else (``parse``): nothing
follows a name but git's TAB, ``/dev/null`` only where a file is created or
deleted, and outside a rename or copy the ``diff --git`` line names the same
path as the lines below it. ``git apply`` checks none of that; the reader does,
so a name it misread is an error instead of a section kept or dropped wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.gitpatch.names import (
    DEV_NULL,
    git_header_name,
    is_dev_null,
    read_name,
)
from runner.gitpatch.patch_error import PatchError

GIT_HEADER = b"diff --git "
# git's table of header lines, in its order; "@@ -" ends the header.
_LINES = (
    b"@@ -",
    b"--- ",
    b"+++ ",
    b"old mode ",
    b"new mode ",
    b"deleted file mode ",
    b"new file mode ",
    b"copy from ",
    b"copy to ",
    b"rename old ",
    b"rename new ",
    b"rename from ",
    b"rename to ",
    b"similarity index ",
    b"dissimilarity index ",
    b"index ",
)
_SOURCES = (b"copy from ", b"rename old ", b"rename from ")
_TARGETS = (b"copy to ", b"rename new ", b"rename to ")


@dataclass(frozen=True)
class GitHeader:
    """What a section's header says: its paths as bytes (None is ``/dev/null``) and modes."""

    end: int  # offset just past the header's last line
    old: bytes | None
    new: bytes | None
    old_mode: str | None
    new_mode: str | None
    copy: bool


def read_git_header(data: bytes, start: int, *, strict: bool) -> GitHeader:
    """The header of the ``diff --git`` section at ``start``; raises ``PatchError`` where
    ``git apply`` would (and, ``strict``, where ``git diff`` would not have written it)."""
    end = _line_end(data, start)
    reading = _Reading(default=git_header_name(data[start + len(GIT_HEADER) : end].rstrip(b"\n")))
    offset = end
    while offset < len(data):
        end = _line_end(data, offset)
        if data[end - 1] != 0x0A:  # git reads only whole lines as header lines
            break
        prefix = next((p for p in _LINES if data.startswith(p, offset)), None)
        if prefix is None or prefix == b"@@ -":
            break
        reading.line(prefix, data[offset + len(prefix) : end - 1], offset, strict=strict)
        offset = end
    old, new = reading.paths(start, strict=strict)
    return GitHeader(offset, old, new, reading.old_mode, reading.new_mode, reading.copied)


def _line_end(data: bytes, offset: int) -> int:
    """Offset just past the line starting at ``offset`` (its ``\\n`` included, if any)."""
    end = data.find(b"\n", offset)
    return len(data) if end < 0 else end + 1


@dataclass
class _Reading:
    """git's ``struct patch`` while the header is read."""

    default: bytes | None
    old: bytes | None = None
    new: bytes | None = None
    created: bool = False
    deleted: bool = False
    renamed: bool = False
    copied: bool = False
    old_mode: str | None = None
    new_mode: str | None = None

    def line(self, prefix: bytes, value: bytes, where: int, *, strict: bool) -> None:
        """One header line: ``prefix`` is its entry in git's table, ``value`` the rest."""
        if prefix == b"--- ":
            self.old = _side(self.old, value, self.created, where, strict=strict)
        elif prefix == b"+++ ":
            self.new = _side(self.new, value, self.deleted, where, strict=strict)
        elif prefix == b"old mode ":
            self.old_mode = _mode(value)
        elif prefix == b"new mode ":
            self.new_mode = _mode(value)
        elif prefix == b"deleted file mode ":
            self.deleted, self.old, self.old_mode = True, self.default, _mode(value)
        elif prefix == b"new file mode ":
            self.created, self.new, self.new_mode = True, self.default, _mode(value)
        elif prefix in _SOURCES or prefix in _TARGETS:
            name = _moved_name(value, where, strict=strict)
            self.copied = self.copied or prefix.startswith(b"copy")
            self.renamed = self.renamed or prefix.startswith(b"rename")
            if prefix in _SOURCES:
                self.old = name
            else:
                self.new = name
        elif prefix == b"index ":
            # "index a..b MODE" when the mode stays: both sides have it.
            mode = value.rsplit(b" ", 1)
            if len(mode) == 2 and self.old_mode is None and self.new_mode is None:
                self.old_mode = self.new_mode = _mode(mode[1])
        if self.created + self.deleted + self.renamed + self.copied > 1:
            raise PatchError(f"byte {where}: header lines of two kinds (git: inconsistent)")

    def paths(self, start: int, *, strict: bool) -> tuple[bytes | None, bytes | None]:
        """(old, new) once the header is read, as git settles them."""
        if self.old is None and self.new is None:
            if self.default is None:
                raise PatchError(f"byte {start}: a file section without a file name")
            self.old = self.new = self.default
        if (self.new is None and not self.deleted) or (self.old is None and not self.created):
            raise PatchError(f"byte {start}: a file section that lacks one of its names")
        old = None if self.created else self.old
        new = None if self.deleted else self.new
        if strict and not (self.renamed or self.copied):
            named = {n for n in (old, new) if n is not None}
            if named != {self.default}:
                raise PatchError(f"byte {start}: the diff --git line names another file")
        return old, new


def _side(
    name: bytes | None, value: bytes, null: bool, where: int, *, strict: bool
) -> bytes | None:
    """A ``---``/``+++`` line for a side now named ``name`` (git's ``gitdiff_verify_name``);
    ``null``: the section creates (``---``) or deletes (``+++``) the file."""
    if name is None and null:
        if not (value == DEV_NULL if strict else is_dev_null(value)):
            raise PatchError(f"byte {where}: expected /dev/null for a created or deleted file")
        return None
    if strict and value == DEV_NULL:
        raise PatchError(f"byte {where}: /dev/null for a file neither created nor deleted")
    if name is not None and null:
        raise PatchError(f"byte {where}: a name where a created or deleted file has /dev/null")
    found, rest = read_name(value, 1, tab_ends=True)
    # git diff puts a TAB after a name that holds a space; nothing else follows a name.
    if strict and rest not in (b"", b"\t"):
        raise PatchError(f"byte {where}: text after the file name: {value[:60]!r}")
    if name is not None and found != name:
        raise PatchError(f"byte {where}: a file name that disagrees with the header's")
    return found


def _moved_name(value: bytes, where: int, *, strict: bool) -> bytes:
    """The path of a ``rename``/``copy`` ``from``/``to`` line (no prefix to drop)."""
    name, rest = read_name(value, 0, tab_ends=False)
    if strict and rest:
        raise PatchError(f"byte {where}: text after the file name: {value[:60]!r}")
    return name


def _mode(value: bytes) -> str:
    """A mode as written (``100644``); kept as text, compared as text."""
    return value.decode("ascii", "replace")
