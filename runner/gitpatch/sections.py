"""File sections of a git patch and their hunks, found as ``git apply`` finds them. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from runner.gitpatch.header import GIT_HEADER, read_git_header
from runner.gitpatch.names import decode_path, traditional_name
from runner.gitpatch.patch_error import PatchError

_HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# The first line of a hunk body that is no hunk line (' ', '+', '-', '\\' or an empty context line).
_NOT_HUNK_LINE = re.compile(rb"\n[^ +\-\\\n]")
_BINARY_HUNK = re.compile(rb"(literal|delta) (\d+)\n")


@dataclass(frozen=True)
class FileDiff:
    """One file's section of a patch: its byte range and what it does to which paths.

    Paths are repository-relative, decoded from bytes with ``surrogateescape``
    (so any byte survives a round trip); ``None`` is ``/dev/null`` (a created
    file has no old path, a deleted one no new path).
    """

    start: int
    end: int
    old_path: str | None
    new_path: str | None
    old_mode: str | None = None
    new_mode: str | None = None
    binary: bool = False
    copy: bool = False  # "copy from/to": the old file stays

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the section touches (old and new, once each)."""
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p is not None))

    @property
    def is_symlink(self) -> bool:
        return "120000" in (self.old_mode, self.new_mode)

    @property
    def deletes(self) -> bool:
        return self.new_path is None


def parse(patch: bytes) -> list[FileDiff]:
    """Every file section of a ``git diff`` patch, covering it from end to end.

    Raises ``PatchError`` for anything ``git diff --binary`` does not write:
    text between sections, a hunk whose counts do not match its lines, a
    header without names, a truncated binary block.
    """
    files: list[FileDiff] = []
    offset = 0
    size = len(patch)
    while offset < size:
        if not patch.startswith(GIT_HEADER, offset):
            raise PatchError(f"byte {offset}: expected 'diff --git', found {_peek(patch, offset)}")
        section = _section(patch, offset, recount=False, strict=True)
        files.append(section)
        offset = section.end
    return files


def touched_paths(patch: bytes, *, recount: bool = False) -> list[str]:
    """Every path ``git apply [--recount]`` would touch, in order; lenient like git.

    Text between sections is skipped as git skips it. Raises ``PatchError``
    where git would refuse the patch (a hunk without a header, bad counts).
    """
    paths: list[str] = []
    offset = 0
    while True:
        start = _find_header(patch, offset)
        if start is None:
            break
        section = _section(patch, start, recount=recount, strict=False)
        paths.extend(section.paths)
        if section.end <= start:  # cannot happen; guards the loop
            raise PatchError(f"byte {start}: no progress")
        offset = section.end
    return list(dict.fromkeys(paths))


def keep(patch: bytes, files: Iterable[FileDiff], wanted: Callable[[FileDiff], bool]) -> bytes:
    """The patch with only the sections ``wanted`` accepts, byte for byte as they were
    (the patch itself, not a copy, when every section is kept)."""
    sections = list(files)
    chosen = [f for f in sections if wanted(f)]
    if len(chosen) == len(sections) and sum(f.end - f.start for f in chosen) == len(patch):
        return patch
    return b"".join(patch[f.start : f.end] for f in chosen)


# --- sections -----------------------------------------------------------------------------


def _line_end(data: bytes, offset: int) -> int:
    """Offset just past the line starting at ``offset`` (its ``\\n`` included, if any)."""
    end = data.find(b"\n", offset)
    return len(data) if end < 0 else end + 1


def _peek(data: bytes, offset: int) -> str:
    line = data[offset : min(_line_end(data, offset), offset + 60)]
    return repr(line.decode("utf-8", "replace"))


def _find_header(data: bytes, offset: int) -> int | None:
    """Where the next file section starts at or after ``offset``, as git's ``find_header``."""
    size = len(data)
    while offset < size:
        end = _line_end(data, offset)
        line = data[offset:end]
        if line.startswith(b"@@ -"):
            raise PatchError(f"byte {offset}: a hunk without a file header")
        if line.startswith(GIT_HEADER):
            return offset
        if line.startswith(b"--- ") and data.startswith(b"+++ ", end):
            after = _line_end(data, end)
            if data.startswith(b"@@ -", after):
                return offset
        offset = end
    return None


def _section(data: bytes, start: int, *, recount: bool, strict: bool) -> FileDiff:
    """Parse one file section that starts at ``start`` (a git or a traditional header);
    ``strict``: only as ``git diff`` writes it."""
    if data.startswith(GIT_HEADER, start):
        header = read_git_header(data, start, strict=strict)
        offset = header.end
        old = None if header.old is None else decode_path(header.old)
        new = None if header.new is None else decode_path(header.new)
        modes, copy = (header.old_mode, header.new_mode), header.copy
    else:  # traditional: "--- old" / "+++ new"
        end = _line_end(data, start)
        old = traditional_name(data[start + 4 : end])
        offset = _line_end(data, end)
        new = traditional_name(data[end + 4 : offset])
        if old is None and new is None:
            raise PatchError(f"byte {start}: a file section without a file name")
        modes, copy = (None, None), False
    binary = False
    if data.startswith(b"GIT binary patch\n", offset):
        offset = _binary_body(data, offset + len(b"GIT binary patch\n"))
        binary = True
    elif data.startswith(b"Binary files ", offset):
        end = _line_end(data, offset)
        if not data[offset:end].endswith(b" differ\n"):
            raise PatchError(f"byte {offset}: malformed 'Binary files' line")
        offset = end
        binary = True
    else:
        while data.startswith(b"@@ -", offset):
            offset = _hunk(data, offset, recount=recount)
    return FileDiff(start, offset, old, new, modes[0], modes[1], binary, copy)


def _hunk(data: bytes, offset: int, *, recount: bool) -> int:
    """One ``@@`` hunk at ``offset``; returns the offset past it (git's ``parse_fragment``)."""
    end = _line_end(data, offset)
    match = _HUNK.match(data, offset)
    if match is None or match.end() > end:
        raise PatchError(f"byte {offset}: malformed hunk header {_peek(data, offset)}")
    old = 1 if match.group(2) is None else int(match.group(2))
    new = 1 if match.group(4) is None else int(match.group(4))
    body = end
    if recount:
        return _recount_body(data, body)
    fast = _counted_body_fast(data, body, old, new)
    if fast is not None:
        return fast
    return _counted_body(data, body, old, new)


def _counted_body_fast(data: bytes, body: int, old: int, new: int) -> int | None:
    """The end of a hunk body when its lines run up to the next non-hunk line (what git diff
    writes): counted with C-speed searches. None when the counts say otherwise."""
    found = _NOT_HUNK_LINE.search(data, body - 1)
    region_end = len(data) if found is None else found.start() + 1
    if region_end < len(data) and data[region_end - 1 : region_end] != b"\n":
        return None
    if region_end == len(data) and not data.endswith(b"\n"):
        return None
    context = data.count(b"\n ", body - 1, region_end - 1) + data.count(
        b"\n\n", body - 1, region_end - 1
    )
    minus = data.count(b"\n-", body - 1, region_end - 1)
    plus = data.count(b"\n+", body - 1, region_end - 1)
    if context + minus != old or context + plus != new:
        return None
    if not (minus or plus):
        return None  # git refuses a hunk that changes nothing; the slow path says so
    # A trailing "\ No newline at end of file" is part of the region already.
    return region_end


def _counted_body(data: bytes, offset: int, old: int, new: int) -> int:
    """Git's line-by-line count, for hunks the fast path cannot place."""
    size = len(data)
    changed = 0
    while offset < size and (old or new):
        end = _line_end(data, offset)
        line = data[offset:end]
        if not line.endswith(b"\n"):
            raise PatchError(f"byte {offset}: a hunk line without a newline")
        first = line[:1]
        if first in (b" ", b"\n"):
            old, new = old - 1, new - 1
        elif first == b"-":
            old, changed = old - 1, changed + 1
        elif first == b"+":
            new, changed = new - 1, changed + 1
        elif first == b"\\":
            if len(line) < 12 or not line.startswith(b"\\ "):
                raise PatchError(f"byte {offset}: malformed hunk line {_peek(data, offset)}")
        else:
            raise PatchError(f"byte {offset}: hunk line counts do not match the @@ header")
        offset = end
    if old or new or old < 0 or new < 0:
        raise PatchError(f"byte {offset}: the hunk ends before its @@ header's line counts")
    if not changed:
        raise PatchError(f"byte {offset}: a hunk that changes nothing")
    if data.startswith(b"\\ ", offset) and _line_end(data, offset) - offset > 12:
        offset = _line_end(data, offset)
    return offset


def _recount_body(data: bytes, offset: int) -> int:
    """``git apply --recount``: the hunk runs while lines look like hunk lines."""
    found = _NOT_HUNK_LINE.search(data, offset - 1)
    return len(data) if found is None else found.start() + 1


def _binary_body(data: bytes, offset: int) -> int:
    """A ``GIT binary patch`` body: a forward block and an optional reverse block."""
    offset = _binary_block(data, offset, required=True)
    if _BINARY_HUNK.match(data, offset):
        offset = _binary_block(data, offset, required=True)
    return offset


def _binary_block(data: bytes, offset: int, *, required: bool) -> int:
    match = _BINARY_HUNK.match(data, offset)
    if match is None:
        raise PatchError(f"byte {offset}: a binary patch without a literal or delta block")
    offset = match.end()
    size = len(data)
    while offset < size:
        end = _line_end(data, offset)
        line = data[offset:end]
        if line == b"\n":
            return end
        if not line.endswith(b"\n"):
            break
        first = line[0]
        if ord("A") <= first <= ord("Z"):
            length = first - ord("A") + 1
        elif ord("a") <= first <= ord("z"):
            length = first - ord("a") + 27
        else:
            raise PatchError(f"byte {offset}: a malformed binary patch line")
        if len(line) - 2 != (length + 3) // 4 * 5:
            raise PatchError(f"byte {offset}: a binary patch line of the wrong length")
        offset = end
    raise PatchError(f"byte {offset}: a binary patch block without its closing empty line")
