"""File names in git patches: C-style quoting and the a/ b/ prefixes, as git reads them. Pure."""

from __future__ import annotations

from runner.gitpatch.errors import PatchError

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


def decode_path(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def unquote(raw: bytes) -> bytes:
    """Undo git's C-style quoting of a name (``"a/t\\303\\251st"``); raises ``PatchError``."""
    if len(raw) < 2 or raw[:1] != b'"' or raw[-1:] != b'"':
        raise PatchError(f"not a quoted name: {raw[:60]!r}")
    out = bytearray()
    index, end = 1, len(raw) - 1
    while index < end:
        byte = raw[index]
        if byte == 0x22:  # an unescaped quote inside
            raise PatchError(f"malformed quoted name: {raw[:60]!r}")
        if byte != 0x5C:
            out.append(byte)
            index += 1
            continue
        index += 1
        if index >= end:
            raise PatchError(f"malformed quoted name: {raw[:60]!r}")
        code = raw[index]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            index += 1
        elif 0x30 <= code <= 0x33 and index + 2 < end + 1:
            digits = raw[index : index + 3]
            if len(digits) != 3 or any(not 0x30 <= d <= 0x37 for d in digits):
                raise PatchError(f"malformed octal escape in {raw[:60]!r}")
            out.append(int(digits, 8))
            index += 3
        else:
            raise PatchError(f"unknown escape in quoted name {raw[:60]!r}")
    return bytes(out)


def unquote_maybe(raw: bytes) -> bytes:
    return unquote(raw) if raw.startswith(b'"') else raw


def _strip_component(name: bytes) -> bytes | None:
    """Drop the first path component (``-p1``): ``a/x/y`` → ``x/y``."""
    slash = name.find(b"/")
    if slash <= 0 or slash == len(name) - 1:
        return None
    return name[slash + 1 :]


def side_name(value: bytes, _prefix: bytes) -> str | None:
    """The name of a ``---``/``+++`` line of a git section (``/dev/null`` is None)."""
    value = value.split(b"\t", 1)[0] if not value.startswith(b'"') else value
    if value == b"/dev/null":
        return None
    name = _strip_component(unquote_maybe(value))
    if name is None:
        raise PatchError(f"a file name without a leading directory: {value[:60]!r}")
    return decode_path(name)


def traditional_name(line: bytes) -> str | None:
    """The name of a traditional ``--- name<TAB>date`` line, ``-p1``."""
    value = line.rstrip(b"\n")
    if value.startswith(b'"'):
        closing = _closing_quote(value)
        value = unquote(value[: closing + 1])
    else:
        value = value.split(b"\t", 1)[0].rstrip(b" ")
    if value == b"/dev/null":
        return None
    name = _strip_component(value)
    return decode_path(name if name is not None else value)


def _closing_quote(value: bytes) -> int:
    index = 1
    while index < len(value):
        if value[index] == 0x5C:
            index += 2
            continue
        if value[index] == 0x22:
            return index
        index += 1
    raise PatchError(f"unterminated quoted name: {value[:60]!r}")


def git_header_name(rest: bytes) -> str | None:
    """The name in ``diff --git a/NAME b/NAME`` when both sides agree (git's rule), else None.

    Unquoted names may contain spaces; the split is the one where both sides,
    without their first component, are equal.
    """
    if rest.startswith(b'"'):
        closing = _closing_quote(rest)
        first = _strip_component(unquote(rest[: closing + 1]))
        second_raw = rest[closing + 1 :]
        if not second_raw.startswith(b" "):
            raise PatchError(f"malformed diff --git line: {rest[:60]!r}")
        second = _strip_component(unquote_maybe(second_raw[1:]))
        return decode_path(first) if first is not None and first == second else None
    if rest.endswith(b'"'):
        space = rest.find(b' "')
        if space < 0:
            raise PatchError(f"malformed diff --git line: {rest[:60]!r}")
        first = _strip_component(rest[:space])
        second = _strip_component(unquote(rest[space + 1 :]))
        return decode_path(first) if first is not None and first == second else None
    # Both unquoted: "a/N b/N" has length 2*len(N) + 5 when both prefixes are one byte.
    if len(rest) % 2 == 1:
        half = (len(rest) - 1) // 2
        left, right = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] == b" ":
            a, b = _strip_component(left), _strip_component(right)
            if a is not None and a == b:
                return decode_path(a)
    index = rest.find(b" ")
    while index >= 0:
        a, b = _strip_component(rest[:index]), _strip_component(rest[index + 1 :])
        if a is not None and a == b:
            return decode_path(a)
        index = rest.find(b" ", index + 1)
    return None
