"""File names in git patches: how git writes them and how ``git apply`` reads them. Pure.

git writes a name bare unless it holds a byte ``core.quotePath`` quotes (a
double quote, a backslash, a control byte, a byte over 0x7f); then the name,
prefix included, is C-quoted: ``"b/new \\303\\251.py"``. A bare name may hold
spaces, start with a dash, end in spaces, contain `` b/`` or look like
``a/x b/y``, so no line may be split at a space. Each kind of line ends a name
its own way; this module reads each as ``apply.c`` does:

- ``---``/``+++`` (git's ``find_name`` with ``TERM_TAB``): the ``a/``/``b/``
  component is dropped; a bare name ends at a TAB or a CR, a quoted one at its
  closing quote. git writes a TAB after every name that holds a space, quoted
  or not (``+++ "b/x \\303\\251"<TAB>``), so a quoted name does not end the line.
- ``rename``/``copy`` ``from``/``to`` (``find_name``, no terminator): no prefix,
  and a bare name runs to a CR or the end of the line.
- ``diff --git a/X b/Y`` (``git_header_name``): read only as one path named
  twice, which is what git writes without a rename or copy; then the split is
  unique (see ``git_header_name``). Sections that are renames or copies name
  their paths on the lines above.

Where git's reading could differ from this module's (a quoting error, which git
would retry as a bare name; a NUL, where git's C string ends; a line without a
name), the readers raise ``PatchError``: a caller never acts on a name git
would not use.
"""

from __future__ import annotations

import re

from runner.gitpatch.patch_error import PatchError

_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("f"): 12,
    ord("n"): 10,
    ord("r"): 13,
    ord("t"): 9,
    ord("v"): 11,
    ord("\\"): 92,
    ord('"'): 34,
}
# git's isspace() (its own ctype table): a vertical tab or a form feed is no space to git.
_SPACE = b" \t\n\r"
# The bytes that stop the plain run inside a quoted name (git's strcspn, whose C string
# also stops at NUL).
_QUOTED_STOP = re.compile(rb'["\\\x00]')
_OCTAL = re.compile(rb"[0-3][0-7][0-7]")
# Where a bare name ends: ``name_terminate`` stops at a CR always and at a TAB on ---/+++.
_BARE_END = re.compile(rb"[\r\n]")
_BARE_END_AT_TAB = re.compile(rb"[\t\r\n]")
_SEPARATOR = re.compile(rb"[ \t]")
_SLASHES = re.compile(rb"//+")
DEV_NULL = b"/dev/null"


def decode_path(raw: bytes) -> str:
    """A name as text; bytes that are not UTF-8 survive as surrogates (``surrogateescape``)."""
    return raw.decode("utf-8", "surrogateescape")


def unquote(raw: bytes) -> bytes:
    """Undo git's C-style quoting of a whole name (``"a/t\\303\\251st"``); raises ``PatchError``."""
    name, end = unquote_prefix(raw)
    if end != len(raw):
        raise PatchError(f"text after a quoted name: {raw[:60]!r}")
    return name


def unquote_prefix(value: bytes) -> tuple[bytes, int]:
    """The quoted name that opens ``value`` and the offset just past its closing quote,
    as git's ``unquote_c_style``; raises ``PatchError`` where git fails."""
    if not value.startswith(b'"'):
        raise PatchError(f"not a quoted name: {value[:60]!r}")
    out = bytearray()
    index = 1
    while True:
        stop = _QUOTED_STOP.search(value, index)
        if stop is None:
            raise PatchError(f"unterminated quoted name: {value[:60]!r}")
        out += value[index : stop.start()]
        index = stop.start()
        byte = value[index]
        if byte == 0x22:
            return bytes(out), index + 1
        if byte == 0:
            raise PatchError(f"a NUL in a quoted name: {value[:60]!r}")
        code = value[index + 1] if index + 1 < len(value) else -1
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            index += 2
        elif _OCTAL.match(value, index + 1):
            out.append(int(value[index + 1 : index + 4], 8))
            index += 4
        else:
            raise PatchError(f"malformed escape in quoted name: {value[:60]!r}")


def is_dev_null(value: bytes) -> bool:
    """``/dev/null`` followed by whitespace or the end of the line, as git's ``is_dev_null``."""
    return value.startswith(DEV_NULL) and (
        len(value) == len(DEV_NULL) or value[len(DEV_NULL)] in _SPACE
    )


def read_name(value: bytes, strip: int, *, tab_ends: bool) -> tuple[bytes, bytes]:
    """(name, what follows it) for the value of a name line, as git's ``find_name``.

    ``strip`` leading components are dropped (1 on ``---``/``+++``, 0 on rename and
    copy lines); ``tab_ends``: a bare name ends at a TAB (``---``/``+++``). Repeated
    slashes are squashed as git squashes them. Raises ``PatchError`` where git would
    find no name or another one than this reading.
    """
    if value.startswith(b'"'):
        name, end = unquote_prefix(value)
        rest = value[end:]
    else:
        found = (_BARE_END_AT_TAB if tab_ends else _BARE_END).search(value)
        end = len(value) if found is None else found.start()
        name, rest = value[:end], value[end:]
    for _ in range(strip):
        slash = name.find(b"/")
        if slash < 0:
            raise PatchError(f"a file name without a leading directory: {value[:60]!r}")
        name = name[slash + 1 :]
    if not name:
        raise PatchError(f"a name line without a name: {value[:60]!r}")
    if b"\0" in name:
        raise PatchError(f"a NUL in a file name: {value[:60]!r}")
    return _SLASHES.sub(b"/", name), rest


def _skip_tree_prefix(name: bytes) -> bytes | None:
    """``name`` without its first component (git's ``skip_tree_prefix``, ``-p1``): None
    when it has no slash or starts with one."""
    slash = name.find(b"/")
    return None if slash <= 0 else name[slash + 1 :]


def git_header_name(rest: bytes) -> bytes | None:
    """The path a ``diff --git`` line names twice (``rest`` follows ``diff --git ``), else None.

    git's ``git_header_name``, except that a bare candidate split git cannot strip
    (the second half starting with ``/``, as in ``a/d /f b/d /f``) is passed over where
    git gives up, so every header git writes is read. That only adds names where git
    has none, which ``git apply`` then refuses itself.

    Two bare names split unambiguously: if ``rest`` is ``P/N Q/N`` (``P`` its first
    component, ``Q`` without a slash), a split further left leaves a first name shorter
    than ``N`` against a second at least as long, and one further right the reverse;
    hence at most one split makes the two equal, whatever spaces ``N`` holds.
    """
    if b"\0" in rest:
        return None  # git's C string would end at the NUL: no name this reading would give
    if rest.startswith(b'"'):
        return _quoted_header_name(rest)
    name = _skip_tree_prefix(rest)
    if name is None:
        return None
    quote = name.find(b'"')
    if quote >= 0:  # a bare first name cannot hold a quote: the second name starts there
        try:
            second, _ = unquote_prefix(name[quote:])
        except PatchError:
            return None
        other = _skip_tree_prefix(second)
        if other is None or len(other) >= quote or name[: len(other)] != other:
            return None
        return other if name[len(other)] in _SPACE else None
    return _bare_header_name(name)


def _quoted_header_name(rest: bytes) -> bytes | None:
    """The header's path when its first name is quoted (the second may be either)."""
    try:
        first, end = unquote_prefix(rest)
    except PatchError:
        return None
    name = _skip_tree_prefix(first)
    second = rest[end:].lstrip(_SPACE)
    if name is None or not second:
        return None
    if second.startswith(b'"'):
        try:
            second, _ = unquote_prefix(second)
        except PatchError:
            return None
    return name if _skip_tree_prefix(second) == name else None


def _bare_header_name(name: bytes) -> bytes | None:
    """``name`` is ``N<sep>Q/N`` for one space or TAB ``<sep>``: that ``N``, else None.

    For a separator at ``index`` the second name, ``Q/`` dropped, has ``index`` bytes
    only if its first slash is at ``len(name) - 1 - index``; the next slash is tracked
    as the separators advance, so a long line costs linear time, not quadratic.
    """
    size = len(name)
    slash = -1
    for found in _SEPARATOR.finditer(name):
        index = found.start()
        target = size - 1 - index  # where Q's slash must be
        if target <= index + 1:
            return None  # further separators only leave a shorter second name
        if slash <= index:
            slash = name.find(b"/", index + 1)
            if slash < 0:
                return None
        if slash == target and name[:index] == name[target + 1 :]:
            return name[:index]
    return None


def _strip_component(name: bytes) -> bytes | None:
    """Drop the first path component (``-p1``): ``a/x/y`` → ``x/y``."""
    slash = name.find(b"/")
    if slash <= 0 or slash == len(name) - 1:
        return None
    return name[slash + 1 :]


def traditional_name(line: bytes) -> str | None:
    """The name of a traditional ``--- name<TAB>date`` line, ``-p1`` (``touched_paths`` only:
    ``git diff`` never writes these)."""
    value = line.rstrip(b"\n")
    if value.startswith(b'"'):
        value, _ = unquote_prefix(value)
    else:
        value = value.split(b"\t", 1)[0].rstrip(b" ")
    if value == DEV_NULL:
        return None
    name = _strip_component(value)
    return decode_path(name if name is not None else value)
