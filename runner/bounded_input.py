"""Bounds on reading suite input: files, YAML and messages that quote them. Pure but for
``read_capped``, which reads one file.

A suite, its controls, a SWE-bench instances or specs file and a metrics module are
downloaded and shared (DESIGN.md, rule 6): whatever they claim, a read of them is bounded in
bytes, nesting depth and time *before* anything is allocated from what they claim, and a
refusal is one short line. JSON has ``runner.bounded_json``; this module holds the rest:

``read_capped``, ``open_regular`` and ``sha256_capped``
    The bytes (an open handle, a digest) of a regular file of at most ``cap`` bytes. The
    size is taken from the open file (``fstat``), so nothing over the cap is read and a
    FIFO or a device named as a file is refused instead of waited on or read forever (a
    FIFO is opened without blocking; a sparse file of terabytes is refused by its size).
``load_yaml``
    ``yaml.safe_load`` behind a scan of the parser's events, which PyYAML produces
    iteratively: nesting deeper than ``max_depth`` (the composer and the constructor
    recurse once per level, and libyaml's in C) and more than ``max_nodes`` nodes are
    refused before anything is built, each alias (``*name``) counted as the whole node
    it repeats, and an alias inside the node it names (a value containing itself) refused:
    a "billion laughs" document is a few lines of aliases whose expansion,
    shared when loaded, is walked in full by every validator and hash that reads it,
    while an anchor shared a few times stays usable. After construction,
    integers over ``MAX_INT_DIGITS`` digits and non-finite floats (``.nan``, ``.inf``,
    which canonical JSON cannot hold) are refused too; an integer too long for ``int``
    (Python's 4,300-digit limit) is refused instead of escaping as a ``ValueError``.
``excerpt`` and ``one_line``
    Messages that quote input quote a bounded prefix; the command line prints every
    message through ``one_line``, so no input can make an error longer than
    ``MAX_MESSAGE`` characters, or more than one line, or a terminal escape.
``without_escapes``
    Foreign output (a Docker build's log, a subprocess's) without its terminal escape
    sequences (colours, titles, cursor moves): ``one_line`` drops them whole rather than
    showing their bytes escaped, so a quoted log reads as its text.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from runner.bounded_json import BoundsError
from runner.errors import DeltarunError, UserError

TASKS_MAX_BYTES = 128 << 20
"""The largest tasks.jsonl read, in bytes (``runner.suite.lines``; the viewer reads an old
run's suite lines within it too)."""

MAX_MESSAGE = 800
"""The longest line the command line prints for an error, in characters: a safety net
(room for two paths and two digests), since messages quote input through ``excerpt``."""

MAX_QUOTE = 60
"""How much of a quoted input value ``excerpt`` shows, in characters."""

MAX_INT_DIGITS = 64
"""The most decimal digits of an integer in a YAML file (as ``JsonBounds.max_number_chars``)."""

# libyaml's parser when PyYAML was built with it (C speed); the same events otherwise.
_SAFE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping of YAML input names a key twice (``load_yaml`` refuses it)."""


def yaml_refusal(source: str, exc: yaml.YAMLError) -> str:
    """The one line for YAML input ``load_yaml`` could not read: where, and what to do."""
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}" if mark is not None else ""
    if isinstance(exc, DuplicateKey):
        return f"{source}:{where}: {exc.problem}"
    return f"{source}:{where}: not valid YAML; fix the syntax"


class _UniqueKeys(_SAFE):  # type: ignore[misc,valid-type]
    """The safe loader, refusing a mapping that names a key twice: YAML loaders keep the last
    value, so a reviewer reading the first would read another file than the one that runs."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base constructor says so
                continue
            if duplicate:
                raise DuplicateKey(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {excerpt(str(key))} is given twice (YAML would keep the last "
                    "one without a word); keep one",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


_LOADER: type[yaml.SafeLoader] = _UniqueKeys
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


@dataclass(frozen=True)
class YamlBounds:
    """The limits one YAML document must stay within; see the module docstring for why."""

    max_chars: int = 1 << 20
    max_depth: int = 32
    max_nodes: int = 100_000


@contextmanager
def open_regular(
    path: Path, cap: int, what: str, error: type[DeltarunError] = UserError
) -> Iterator[BinaryIO]:
    """``path`` open for reading when it is a regular file of at most ``cap`` bytes.

    Raises ``error`` (one line naming the file, its size and the cap) for a larger file or
    for anything but a regular file (a FIFO is opened without waiting for a writer);
    ``OSError`` (``FileNotFoundError`` among them) is the caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb", closefd=True) as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file; {what} must be one")
        if info.st_size > cap:
            raise error(f"{path}: {info.st_size} bytes, over the cap of {cap} for {what}")
        yield handle


def read_capped(path: Path, cap: int, what: str, error: type[DeltarunError] = UserError) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them (``open_regular``)."""
    with open_regular(path, cap, what, error) as handle:
        data = handle.read(cap + 1)  # a file that grew meanwhile shows here
    if len(data) > cap:
        raise error(f"{path}: over the cap of {cap} bytes for {what}")
    return data


def sha256_capped(path: Path, cap: int, what: str, error: type[DeltarunError] = UserError) -> str:
    """The hex SHA-256 of the regular file ``path`` of at most ``cap`` bytes, read in chunks
    (``open_regular``): a suite's archive is hashed before it is read."""
    digest = hashlib.sha256()
    total = 0
    with open_regular(path, cap, what, error) as handle:
        while chunk := handle.read(1 << 20):
            total += len(chunk)
            if total > cap:
                raise error(f"{path}: over the cap of {cap} bytes for {what}")
            digest.update(chunk)
    return digest.hexdigest()


def load_yaml(text: str, bounds: YamlBounds = YamlBounds()) -> Any:
    """``yaml.safe_load(text)`` within ``bounds``; raises ``BoundsError`` (a short reason)
    past a bound, ``yaml.YAMLError`` for a syntax error (its mark names the line)."""
    if len(text) > bounds.max_chars:
        raise BoundsError(f"over {bounds.max_chars} characters of YAML")
    _scan_events(text, bounds)
    try:
        value = yaml.load(text, Loader=_LOADER)  # a safe loader, as safe_load
    except (ValueError, OverflowError) as exc:  # int(): more than Python's 4,300 digits
        raise BoundsError(f"a value too large to read ({type(exc).__name__})") from None
    _check_numbers(value)
    return value


def _scan_events(text: str, bounds: YamlBounds) -> None:
    """Count nodes and nesting over the parser's events, each alias as the node it repeats:
    what the loaded value holds once every reference to shared data is walked."""
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, levels) of its node
    frames: list[list[Any]] = []  # open collections: [anchor, nodes before it, its levels]
    nodes = 0
    for event in yaml.parse(text, Loader=_LOADER):
        depth = 0
        if isinstance(event, yaml.AliasEvent):
            if any(frame[0] == event.anchor for frame in frames):
                raise BoundsError(
                    f"an alias inside the node it names (*{event.anchor}) at line "
                    f"{_line(event)}: a value that contains itself"
                )
            size, levels = anchors.get(event.anchor or "", (1, 0))
            nodes += size
            depth = len(frames) + levels
            if frames:
                frames[-1][2] = max(frames[-1][2], 1 + levels)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            _check_number_scalar(event)
            if event.anchor:
                anchors[event.anchor] = (1, 0)
        elif isinstance(event, _OPEN):
            nodes += 1
            frames.append([event.anchor, nodes - 1, 1])
            depth = len(frames)
        elif isinstance(event, _CLOSE):
            anchor, before, levels = frames.pop()
            if anchor:
                anchors[anchor] = (nodes - before, levels)
            if frames:
                frames[-1][2] = max(frames[-1][2], 1 + levels)
        if depth > bounds.max_depth:
            raise BoundsError(
                f"nested deeper than {bounds.max_depth} levels at line {_line(event)}"
            )
        if nodes > bounds.max_nodes:
            raise BoundsError(
                f"more than {bounds.max_nodes} values (an alias counts as what it repeats) "
                f"by line {_line(event)}"
            )


# What a YAML 1.1 int or float may be written with (decimal, 0x, 0o, 0b, sexagesimal 1:30).
_NUMBER_CHARS = re.compile(r"[-+]?[0-9.][-+0-9_:.xXoObBa-fA-F]*")
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
MAX_NUMBER_SCALAR = 256
"""The longest scalar read as a number, in characters: the constructor turns a sexagesimal
integer (``1:59:59:...``) into an int one multiplication by 60 at a time, quadratic in its
length (a 1 MiB scalar, a minute), before any check of the value can run."""


def _check_number_scalar(event: yaml.ScalarEvent) -> None:
    """Refuse a plain (or ``!!int``/``!!float``) scalar over ``MAX_NUMBER_SCALAR`` characters
    that could be read as a number."""
    value = event.value
    if len(value) <= MAX_NUMBER_SCALAR:
        return
    plain = bool(event.implicit and event.implicit[0])  # resolved by its look, as 12 or 1:30
    if (plain or event.tag in _NUMBER_TAGS) and _NUMBER_CHARS.fullmatch(value):
        raise BoundsError(
            f"a number of {len(value)} characters at line {_line(event)} (the cap is "
            f"{MAX_NUMBER_SCALAR}); quote it if it is text"
        )


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return mark.line + 1 if mark is not None else 0


def _check_numbers(value: Any) -> None:
    """Refuse integers over ``MAX_INT_DIGITS`` digits and non-finite floats anywhere in a
    loaded document (iterative; the depth was bounded before loading)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if item.bit_length() > MAX_INT_DIGITS * math.log2(10):
                raise BoundsError(f"an integer of more than {MAX_INT_DIGITS} digits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise BoundsError(f"a number that is not finite ({item}); write a finite one")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)


def excerpt(value: object, limit: int = MAX_QUOTE) -> str:
    """A quotation of ``value`` for a message: the ``repr`` of at most ``limit`` characters
    of a string (or bytes), with its full length when cut; a short description otherwise."""
    if isinstance(value, str | bytes):
        if len(value) <= limit:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}… ({len(value)} {unit})"
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > limit * 3:
            return f"an integer of {value.bit_length()} bits"
        return repr(value)
    if isinstance(value, dict | list | tuple | set | frozenset):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


# ECMA-48's sequences: CSI (ESC [ or the 8-bit 0x9b, parameters, intermediates, a final
# byte), OSC, DCS, SOS, PM and APC strings (ended by BEL or ST, or unended), and the
# two-byte escapes (ESC and one byte 0x20-0x7e).
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
)


def without_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (a lone ESC goes too); other control
    characters stay, for ``one_line`` to show escaped."""
    if "\x1b" not in text and not any("\x90" <= ch <= "\x9f" for ch in text):
        return text
    return _ESCAPES.sub("", text)


def terminal_text(text: str) -> str:
    """``text`` as deltarun prints it: terminal escape sequences dropped, every other
    character that is not printable but a line break or a tab shown escaped (``\\r``,
    ``\\x07``), so foreign output quoted in a line cannot move the cursor or rewrite it."""
    text = without_escapes(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in "\n\t" else repr(ch)[1:-1] for ch in text)


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` as one printable line of at most ``limit`` characters: terminal escape
    sequences dropped (``without_escapes``), every other character that is not printable
    (line breaks, lone surrogates) shown escaped, and a long message cut in the middle,
    keeping its start (what and where) and its end (the fix)."""
    message = without_escapes(message)
    if len(message) <= limit:
        text = _printable(message)
        if len(text) <= limit:
            return text
    keep_end, cut = limit // 4, " … "
    split = max(0, min(limit, len(message) - keep_end))
    tail = _printable(message[split:][-keep_end:])[-keep_end:]
    head = _printable(message[:split])[: limit - len(cut) - len(tail)]
    return head + cut + tail


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
